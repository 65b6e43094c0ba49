//! The consume → fold → write → commit loop.

use crate::{Error, ProjectedSession, ProjectionStore, Result};
use futures::stream::{self, TryStreamExt};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sessionlog_log::Settings;
use sessionlog_schemas::{EventDecoder, EventEnvelope, SchemaRegistry, SessionEvent, SessionId};
use sessionlog_session::{Rejection, Verdict};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Tuning of a projector instance.
#[derive(Clone, Debug)]
pub struct ProjectorOptions {
    /// The consumer group; instances with the same group share the partitions.
    pub group_id: String,
    /// At most this many records are folded before their writes are flushed and committed.
    pub batch_max: usize,
    /// How long a batch waits for more records once it has one.
    pub batch_wait: Duration,
    /// Concurrent CQL writes per batch.
    pub write_concurrency: usize,
    /// Sessions kept in memory between batches; beyond it the cache starts over from CQL.
    pub cache_sessions: usize,
}

impl Default for ProjectorOptions {
    fn default() -> Self {
        Self {
            group_id: "sessionlog-projector".into(),
            batch_max: 500,
            batch_wait: Duration::from_millis(20),
            write_concurrency: 32,
            cache_sessions: 10_000,
        }
    }
}

/// Notes rebalances so the worker drops cached state it may no longer own.
#[derive(Default)]
struct ProjectorContext {
    rebalanced: Arc<AtomicBool>,
}

impl ClientContext for ProjectorContext {}

impl ConsumerContext for ProjectorContext {
    fn pre_rebalance(&self, _consumer: &rdkafka::consumer::BaseConsumer<Self>, _: &Rebalance<'_>) {
        // Another instance may advance these sessions while we do not own them: forget them.
        self.rebalanced.store(true, Ordering::SeqCst);
    }
}

/// One row write a batch owes the store.
enum RowWrite {
    Accepted {
        event: EventEnvelope,
        partition: i32,
        offset: i64,
        /// The state including the event, kept only for checkpoints.
        checkpoint_state: Option<Box<sessionlog_session::SessionState>>,
    },
    Rejected {
        event: EventEnvelope,
        partition: i32,
        offset: i64,
        why: Rejection,
    },
}

/// Counts of what a batch did, for logs, metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Records read.
    pub consumed: usize,
    /// Events accepted by the fold.
    pub accepted: usize,
    /// Events the fold rejected (recorded in `rejected_events`).
    pub rejected: usize,
    /// Harmless repeats.
    pub duplicates: usize,
    /// Records already folded before (a replay after a crash or rebalance).
    pub skipped: usize,
    /// Records sent to the dead-letter topic.
    pub dead_lettered: usize,
}

/// A projector instance: a member of the consumer group over the session-events topic.
pub struct Projector {
    consumer: StreamConsumer<ProjectorContext>,
    rebalanced: Arc<AtomicBool>,
    store: ProjectionStore,
    decoder: EventDecoder,
    dead_letters: FutureProducer,
    topic: String,
    dead_letter_topic: String,
    options: ProjectorOptions,
    cache: HashMap<SessionId, ProjectedSession>,
}

impl Projector {
    /// Connects to Kafka, the registry and CQL (applying migrations) and joins the group.
    pub async fn new(settings: &Settings, options: ProjectorOptions) -> Result<Self> {
        let store = ProjectionStore::connect(&settings.cql).await?;
        let decoder = EventDecoder::new(SchemaRegistry::new(settings.registry.url.clone())?);
        let context = ProjectorContext::default();
        let rebalanced = Arc::clone(&context.rebalanced);
        let consumer: StreamConsumer<ProjectorContext> = settings
            .kafka
            .client_config()
            .set("group.id", &options.group_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .create_with_context(context)
            .map_err(sessionlog_log::Error::kafka("create consumer"))?;
        consumer
            .subscribe(&[&settings.kafka.topic])
            .map_err(sessionlog_log::Error::kafka("subscribe"))?;
        let dead_letters: FutureProducer = settings
            .kafka
            .producer_config()
            .create()
            .map_err(sessionlog_log::Error::kafka("create dead-letter producer"))?;
        Ok(Self {
            consumer,
            rebalanced,
            store,
            decoder,
            dead_letters,
            topic: settings.kafka.topic.clone(),
            dead_letter_topic: settings.kafka.dead_letter_topic.clone(),
            options,
            cache: HashMap::new(),
        })
    }

    /// The store this projector writes.
    pub fn store(&self) -> &ProjectionStore {
        &self.store
    }

    /// Runs batches until `shutdown` completes, then commits what it applied.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                batch = self.run_batch() => {
                    let stats = batch?;
                    if stats.consumed > 0 {
                        tracing::debug!(?stats, "batch applied");
                    }
                }
            }
        }
        // Everything applied was committed at the end of its batch; a final sync commit
        // makes sure the last asynchronous one is not lost.
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final commit (nothing to commit is fine)");
        }
        Ok(())
    }

    /// Reads one batch, folds it, makes its writes durable, then commits its offsets.
    pub async fn run_batch(&mut self) -> Result<BatchStats> {
        let records = self.next_records().await?;
        let mut stats = BatchStats {
            consumed: records.len(),
            ..BatchStats::default()
        };
        if records.is_empty() {
            return Ok(stats);
        }
        let mut writes = Vec::new();
        let mut touched: Vec<SessionId> = Vec::new();
        let mut next_offsets: BTreeMap<i32, i64> = BTreeMap::new();
        for record in &records {
            next_offsets.insert(record.partition(), record.offset() + 1);
            self.fold_record(record, &mut writes, &mut touched, &mut stats)
                .await?;
        }
        self.flush(writes, &touched).await;
        self.commit(&next_offsets)?;
        if self.cache.len() > self.options.cache_sessions {
            self.cache.clear();
        }
        Ok(stats)
    }

    async fn next_records(&mut self) -> Result<Vec<OwnedMessage>> {
        let mut records = Vec::new();
        let first = tokio::time::timeout(Duration::from_millis(500), self.consumer.recv()).await;
        match first {
            Err(_) => return Ok(records),
            Ok(message) => records.push(
                message
                    .map_err(sessionlog_log::Error::kafka("consume"))?
                    .detach(),
            ),
        }
        while records.len() < self.options.batch_max {
            match tokio::time::timeout(self.options.batch_wait, self.consumer.recv()).await {
                Ok(Ok(message)) => records.push(message.detach()),
                Ok(Err(e)) => return Err(sessionlog_log::Error::kafka("consume")(e).into()),
                Err(_) => break,
            }
        }
        if self.rebalanced.swap(false, Ordering::SeqCst) {
            self.cache.clear();
        }
        Ok(records)
    }

    async fn fold_record(
        &mut self,
        record: &OwnedMessage,
        writes: &mut Vec<RowWrite>,
        touched: &mut Vec<SessionId>,
        stats: &mut BatchStats,
    ) -> Result<()> {
        let (partition, offset) = (record.partition(), record.offset());
        let event = match self.decode(record).await {
            Ok(event) => event,
            Err(reason) => {
                self.dead_letter(record, &reason).await?;
                stats.dead_lettered += 1;
                return Ok(());
            }
        };
        let session = event.session_id;
        let entry = self.session_entry(session, partition).await?;
        if entry.applied_offset >= offset {
            stats.skipped += 1;
            return Ok(());
        }
        let verdict = entry.state.apply(&event);
        entry.applied_offset = offset;
        entry.partition = partition;
        match verdict {
            Verdict::Accepted => {
                stats.accepted += 1;
                let checkpoint_state = matches!(event.event, SessionEvent::Checkpoint { .. })
                    .then(|| Box::new(entry.state.clone()));
                writes.push(RowWrite::Accepted {
                    event,
                    partition,
                    offset,
                    checkpoint_state,
                });
            }
            Verdict::Duplicate => stats.duplicates += 1,
            Verdict::Rejected(why) => {
                stats.rejected += 1;
                writes.push(RowWrite::Rejected {
                    event,
                    partition,
                    offset,
                    why,
                });
            }
        }
        if !touched.contains(&session) {
            touched.push(session);
        }
        Ok(())
    }

    /// Decodes a record; `Err` carries the reason it belongs in the dead-letter topic.
    /// A registry outage is not the record's fault: it is retried until the registry answers.
    async fn decode(&self, record: &OwnedMessage) -> Result<EventEnvelope, String> {
        let Some(payload) = record.payload() else {
            return Err("empty record value".into());
        };
        let mut backoff = Duration::from_millis(100);
        let event = loop {
            match self.decoder.decode(payload).await {
                Ok(event) => break event,
                Err(e) if e.is_retriable() => {
                    tracing::warn!(error = %e, "schema registry unavailable; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        let expected_key = event.session_id.to_string();
        if record.key() != Some(expected_key.as_bytes()) {
            return Err(format!(
                "record key {:?} is not the event's session id {expected_key}",
                record.key().map(String::from_utf8_lossy)
            ));
        }
        Ok(event)
    }

    async fn session_entry(
        &mut self,
        session: SessionId,
        partition: i32,
    ) -> Result<&mut ProjectedSession> {
        let loaded = if self.cache.contains_key(&session) {
            None
        } else {
            with_retry("load session", || self.store.load_session(session)).await
        };
        Ok(self.cache.entry(session).or_insert_with(|| {
            loaded.unwrap_or_else(|| ProjectedSession {
                state: sessionlog_session::SessionState::empty(session),
                partition,
                applied_offset: -1,
            })
        }))
    }

    /// Makes a batch's writes durable: index and rejection rows first, then each touched
    /// session's row, which records how far it goes. Retries until the store answers, so an
    /// outage stalls the projector instead of losing anything.
    async fn flush(&self, writes: Vec<RowWrite>, touched: &[SessionId]) {
        let store = &self.store;
        let concurrency = self.options.write_concurrency;
        let writes = &writes;
        with_retry("write rows", || async move {
            stream::iter(writes.iter().map(Ok))
                .try_for_each_concurrent(concurrency, |write| async move {
                    match write {
                        RowWrite::Accepted {
                            event,
                            partition,
                            offset,
                            checkpoint_state,
                        } => {
                            store
                                .record_accepted(
                                    event,
                                    *partition,
                                    *offset,
                                    checkpoint_state.as_deref(),
                                )
                                .await
                        }
                        RowWrite::Rejected {
                            event,
                            partition,
                            offset,
                            why,
                        } => store.record_rejected(event, *partition, *offset, why).await,
                    }
                })
                .await
        })
        .await;
        let rows: Vec<&ProjectedSession> =
            touched.iter().filter_map(|s| self.cache.get(s)).collect();
        let rows = &rows;
        with_retry("write sessions", || async move {
            stream::iter(rows.iter().map(Ok))
                .try_for_each_concurrent(concurrency, |row| store.save_session(row))
                .await
        })
        .await;
    }

    fn commit(&self, next_offsets: &BTreeMap<i32, i64>) -> Result<()> {
        let mut offsets = TopicPartitionList::new();
        for (partition, next) in next_offsets {
            offsets
                .add_partition_offset(&self.topic, *partition, Offset::Offset(*next))
                .map_err(sessionlog_log::Error::kafka("build commit"))?;
        }
        // Asynchronous: losing a commit only means re-reading records whose effects are
        // already in the tables, which the applied offsets turn into no-ops.
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            tracing::warn!(error = %e, "offset commit failed; records will be re-read");
        }
        Ok(())
    }

    async fn dead_letter(&self, record: &OwnedMessage, reason: &str) -> Result<()> {
        tracing::warn!(
            partition = record.partition(),
            offset = record.offset(),
            reason,
            "dead-lettering record"
        );
        let partition = record.partition().to_string();
        let offset = record.offset().to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "sessionlog.reason",
                value: Some(reason),
            })
            .insert(Header {
                key: "sessionlog.origin.topic",
                value: Some(self.topic.as_str()),
            })
            .insert(Header {
                key: "sessionlog.origin.partition",
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: "sessionlog.origin.offset",
                value: Some(offset.as_str()),
            });
        let mut out: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.dead_letter_topic).headers(headers);
        if let Some(key) = record.key() {
            out = out.key(key);
        }
        if let Some(payload) = record.payload() {
            out = out.payload(payload);
        }
        self.dead_letters
            .send(out, Timeout::Never)
            .await
            .map_err(|(e, _)| sessionlog_log::Error::kafka("dead-letter")(e))?;
        Ok(())
    }
}

/// Retries a store operation with capped exponential backoff until it succeeds.
async fn with_retry<T, F, Fut>(what: &'static str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut backoff = Duration::from_millis(100);
    loop {
        match op().await {
            Ok(value) => return value,
            Err(e) => {
                tracing::warn!(error = %e, what, ?backoff, "store unavailable; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
