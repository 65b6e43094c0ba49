//! The consumer-group worker: consume → fold → dead-letter → write → record progress → commit.

use crate::apply::{self, Applier, DeadLetter, with_retry};
use crate::observe::{self, Health};
use crate::{ProjectionStore, Result};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sessionlog_log::{
    KafkaSettings, PartitionReader, ProjectorSettings, RawRecord, Settings, dead_letters,
};
use sessionlog_schemas::EventDecoder;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

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
    /// The instance's static-membership name (`group.instance.id`); `None`: dynamic.
    pub instance_id: Option<String>,
}

impl Default for ProjectorOptions {
    fn default() -> Self {
        Self::from(&ProjectorSettings::default())
    }
}

impl From<&ProjectorSettings> for ProjectorOptions {
    fn from(s: &ProjectorSettings) -> Self {
        Self {
            group_id: s.group_id.clone(),
            batch_max: s.batch_max.max(1),
            batch_wait: Duration::from_millis(s.batch_wait_ms),
            write_concurrency: s.write_concurrency.max(1),
            cache_sessions: s.cache_sessions,
            instance_id: Some(s.instance_id.clone()).filter(|id| !id.is_empty()),
        }
    }
}

/// State the consumer's callbacks share with the worker.
#[derive(Default)]
struct Shared {
    topic: String,
    /// Set on every rebalance: cached sessions may have moved on elsewhere.
    rebalanced: AtomicBool,
    /// Partitions assigned since the worker last looked, to resume from stored progress.
    assigned: Mutex<Vec<i32>>,
    /// Next offset to commit, by partition, for everything made durable.
    applied: Mutex<BTreeMap<i32, i64>>,
    /// Partitions this instance owns, as the rebalance callbacks report them (asking the
    /// consumer instead can block while a rebalance is under way).
    owned: Mutex<HashSet<i32>>,
    /// What `/health` reports, lag included.
    health: Arc<Health>,
}

impl Shared {
    fn applied_offsets(&self, only: Option<&HashSet<i32>>) -> TopicPartitionList {
        let applied = locked(&self.applied);
        let mut list = TopicPartitionList::new();
        for (partition, next) in applied.iter() {
            if only.is_none_or(|set| set.contains(partition)) {
                // Only fails for an invalid offset, which `Offset::Offset` of ours is not.
                let _ = list.add_partition_offset(&self.topic, *partition, Offset::Offset(*next));
            }
        }
        list
    }
}

/// Commits on revoke, notes assignments, and turns librdkafka statistics into lag gauges.
struct ProjectorContext {
    shared: Arc<Shared>,
}

impl ClientContext for ProjectorContext {
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.shared.topic) else {
            return;
        };
        let mut lags = std::collections::BTreeMap::new();
        for (partition, stats) in &topic.partitions {
            // Partition -1 is librdkafka's internal "unassigned" queue; -1 lag means unknown.
            if *partition >= 0 && stats.consumer_lag >= 0 {
                observe::record_lag(*partition, stats.consumer_lag);
                lags.insert(*partition, stats.consumer_lag);
            }
        }
        // Each snapshot names the partitions owned now: revoked ones drop out.
        self.shared.health.set_lags(lags);
    }
}

impl ConsumerContext for ProjectorContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Another instance may advance these sessions while we do not own them: forget them.
        self.shared.rebalanced.store(true, Ordering::SeqCst);
        if let Rebalance::Revoke(revoked) = rebalance {
            // Commit what is durable before the partitions move, so the next owner starts
            // there. Asynchronously: a synchronous commit inside the callback (inside `recv`)
            // can wait on the rebalance it is part of until the session times out. A commit
            // that does not arrive only makes the next owner skip records by stored progress.
            let revoked: HashSet<i32> = revoked.elements().iter().map(|e| e.partition()).collect();
            let offsets = self.shared.applied_offsets(Some(&revoked));
            if offsets.count() > 0
                && let Err(e) = consumer.commit(&offsets, CommitMode::Async)
            {
                tracing::warn!(error = %e, "commit on revoke failed; the next owner re-reads");
            }
            let mut applied = locked(&self.shared.applied);
            applied.retain(|p, _| !revoked.contains(p));
            let mut owned = locked(&self.shared.owned);
            owned.retain(|p| !revoked.contains(p));
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            let mut pending = locked(&self.shared.assigned);
            pending.extend(assigned.elements().iter().map(|e| e.partition()));
            let mut owned = locked(&self.shared.owned);
            owned.extend(assigned.elements().iter().map(|e| e.partition()));
        }
    }
}

/// A batch whose rows are being written while the next one is read and folded.
struct InFlight {
    task: tokio::task::JoinHandle<()>,
    /// Signalled when the writes are done (a permit is kept if nobody waits yet).
    written: Arc<Notify>,
    /// The next offset to read, by partition, once the batch is durable.
    next_offsets: BTreeMap<i32, i64>,
    /// When each of its records was appended, for the visibility-lag histogram.
    appended_ms: Vec<Option<i64>>,
    started: Instant,
}

/// A projector instance: a member of the consumer group over the session-events topic.
pub struct Projector {
    consumer: StreamConsumer<ProjectorContext>,
    shared: Arc<Shared>,
    store: ProjectionStore,
    applier: Applier,
    dead_letters: FutureProducer,
    kafka: KafkaSettings,
    topic: String,
    dead_letter_topic: String,
    options: ProjectorOptions,
    /// Per partition, the stored progress at assignment: records below it are already applied.
    floors: HashMap<i32, i64>,
    /// Partitions already moved forward to their floor since their assignment.
    sought: HashSet<i32>,
    /// Dead letters: see [`DeadLetters`].
    dead: DeadLetters,
}

/// Dead letters are sent exactly once across crashes. The dead letters of a partition's records
/// go to one partition of the dead-letter topic (`partition % its partition count`), and each
/// progress write stores, beside the next offset to apply, the dead-letter partition's end as
/// this instance knew it (`dead_letter_mark`): every dead letter of a record after the progress
/// is at or after the mark. On assignment the worker reads the dead-letter partition from the
/// mark to its end; the records it finds there, sent by an instance that stopped before storing
/// their batch's progress, are not sent again.
#[derive(Default)]
struct DeadLetters {
    /// Partitions of the dead-letter topic.
    partitions: i32,
    /// By dead-letter partition, the offset after the last dead letter known to be there.
    next: HashMap<i32, i64>,
    /// By partition of the session topic, offsets whose dead letter is already there.
    sent: HashMap<i32, HashSet<i64>>,
}

impl DeadLetters {
    /// The dead-letter partition of `partition`'s records.
    fn partition_of(&self, partition: i32) -> i32 {
        partition.rem_euclid(self.partitions.max(1))
    }

    /// The mark to store with `partition`'s progress, if this instance knows one.
    fn mark(&self, partition: i32) -> Option<i64> {
        self.next.get(&self.partition_of(partition)).copied()
    }

    fn delivered(&mut self, dead_letter_partition: i32, offset: i64) {
        let next = self.next.entry(dead_letter_partition).or_insert(0);
        *next = (*next).max(offset + 1);
    }
}

impl Projector {
    /// Connects to Kafka, the registry and CQL (applying migrations) and joins the group.
    pub async fn new(settings: &Settings, options: ProjectorOptions) -> Result<Self> {
        let store = ProjectionStore::migrate(&settings.cql)
            .await?
            .with_ended_session_ttl(settings.retention.ended_session_ttl_secs)
            .await?;
        // Progress made on a topic since deleted and created again must not skip the new one.
        store.check_topic(&settings.kafka).await?;
        store
            .fix_trace_day_buckets(settings.projector.trace_day_buckets)
            .await?;
        let decoder = EventDecoder::new(settings.registry.client()?);
        let shared = Arc::new(Shared {
            topic: settings.kafka.topic.clone(),
            ..Shared::default()
        });
        let context = ProjectorContext {
            shared: Arc::clone(&shared),
        };
        let mut config = settings.kafka.client_config();
        if let Some(instance) = &options.instance_id {
            config.set("group.instance.id", instance);
        }
        let consumer: StreamConsumer<ProjectorContext> = config
            .set("group.id", &options.group_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "cooperative-sticky")
            // A member that stops answering (killed, or stuck in a rebalance) holds its
            // partitions until its session times out: 10 s rather than librdkafka's 45 s.
            .set("session.timeout.ms", "10000")
            // Lag per partition comes from librdkafka's statistics.
            .set("statistics.interval.ms", "5000")
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
        let applier = Applier::new(
            Some(store.clone()),
            decoder,
            &settings.kafka,
            options.write_concurrency,
            options.cache_sessions,
        )
        .with_context_policies(settings.context.clone())
        .with_trace_day_buckets(settings.projector.trace_day_buckets)
        .with_health(Arc::clone(&shared.health));
        Ok(Self {
            consumer,
            shared,
            store,
            applier,
            dead_letters,
            kafka: settings.kafka.clone(),
            topic: settings.kafka.topic.clone(),
            dead_letter_topic: settings.kafka.dead_letter_topic.clone(),
            options,
            floors: HashMap::new(),
            sought: HashSet::new(),
            dead: DeadLetters {
                partitions: sessionlog_log::topic::partition_count(
                    &settings.kafka,
                    &settings.kafka.dead_letter_topic,
                )
                .await?,
                ..DeadLetters::default()
            },
        })
    }

    /// The store this projector writes.
    pub fn store(&self) -> Option<&ProjectionStore> {
        Some(&self.store)
    }

    /// The health handle `/health` reports.
    pub fn health(&self) -> Arc<Health> {
        self.applier.health()
    }

    /// Runs batches until `shutdown` completes, then commits what it applied.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        let mut in_flight = None;
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                step = self.step(&mut in_flight) => if let Err(e) = step { break Err(e) },
            }
        };
        let landed = self.land(&mut in_flight).await;
        // Batches commit asynchronously; a final synchronous commit makes sure the last
        // one is not lost, so a restart does not re-read what this instance applied.
        let offsets = self.shared.applied_offsets(None);
        if offsets.count() > 0
            && let Err(e) = self.consumer.commit(&offsets, CommitMode::Sync)
        {
            tracing::warn!(error = %e, "final commit failed; a restart re-reads a little");
        }
        result.and(landed)
    }

    /// One turn of the pipeline: reads and folds the next batch while the previous one is
    /// being written, then, once that one is durable, commits it and starts writing this one.
    /// Each batch's rows are a snapshot taken when it was folded, and a session's batches are
    /// written in order, so overlapping never lets a session row get ahead of its events.
    async fn step(&mut self, in_flight: &mut Option<InFlight>) -> Result<()> {
        let mut records = self.next_records(in_flight.as_ref()).await;
        let rebalanced = self.shared.rebalanced.swap(false, Ordering::SeqCst);
        if rebalanced || self.applier.cache_full() {
            // Sessions are about to be reloaded from their rows: the rows must be whole first.
            self.land(in_flight).await?;
            self.applier.forget();
        }
        self.resume_assigned().await;
        self.drop_applied(&mut records);
        if records.is_empty() {
            self.land(in_flight).await?;
            self.applier.health().idle();
            return Ok(());
        }
        let started = Instant::now();
        let mut folded = self.applier.fold(&records).await?;
        for DeadLetter { index, reason } in &folded.dead_letters {
            if let Some(record) = records.get(*index) {
                self.dead_letter(record, reason).await?;
            }
        }
        // Every dead letter of this batch is acknowledged: those of later records will be
        // after the marks stored with this batch's progress.
        folded.dead_letter_marks = folded
            .next_offsets
            .keys()
            .filter_map(|p| Some((*p, self.dead.mark(*p)?)))
            .collect();
        if folded.stats.consumed > 0 {
            tracing::debug!(stats = ?folded.stats, fold = ?started.elapsed(), "batch folded");
        }
        self.land(in_flight).await?;
        let store = self.store.clone();
        let (health, concurrency) = (self.applier.health(), self.applier.write_concurrency());
        let next_offsets = folded.next_offsets.clone();
        let written = Arc::new(Notify::new());
        let signal = Arc::clone(&written);
        let task = tokio::spawn(async move {
            apply::persist(&store, &folded, concurrency, &health).await;
            signal.notify_one();
        });
        *in_flight = Some(InFlight {
            task,
            written,
            next_offsets,
            appended_ms: records.iter().map(|r| r.timestamp_ms).collect(),
            started,
        });
        Ok(())
    }

    /// Waits until the batch in flight (if any) is durable, then commits its offsets.
    async fn land(&mut self, in_flight: &mut Option<InFlight>) -> Result<()> {
        let Some(batch) = in_flight.as_mut() else {
            return Ok(());
        };
        // Awaited in place: if this is cancelled (shutdown), the batch stays in flight and
        // is waited for again.
        (&mut batch.task)
            .await
            .map_err(|e| sessionlog_log::Error::Task(e.to_string()))?;
        let Some(batch) = in_flight.take() else {
            return Ok(());
        };
        observe::record_apply(batch.started.elapsed());
        for appended in batch.appended_ms {
            observe::record_visible(appended);
        }
        self.commit(&batch.next_offsets);
        Ok(())
    }

    /// The next batch: closes when it is full, or when the previous batch is written and this
    /// one's first record has waited `batch_wait`. While writes are slow, batches grow, so each
    /// session's row is written once for more of its events: the projector catches up instead
    /// of falling further behind.
    async fn next_records(&mut self, in_flight: Option<&InFlight>) -> Vec<RawRecord> {
        let mut records = Vec::new();
        let first = tokio::time::timeout(Duration::from_millis(500), self.consumer.recv()).await;
        match first {
            Err(_) => {}
            Ok(Ok(message)) => records.push(RawRecord::of(&message)),
            // Consumer errors (a broker down, a leader moving) are reports: librdkafka keeps
            // reconnecting and fetching, so the worker keeps going rather than exiting.
            Ok(Err(e)) => tracing::warn!(error = %e, "kafka consumer error; continuing"),
        }
        let opened = Instant::now();
        let mut writing = in_flight.map(|batch| &batch.written);
        while !records.is_empty() && records.len() < self.options.batch_max {
            let next = match writing {
                // While the previous batch is being written, this one keeps growing.
                Some(written) => tokio::select! {
                    message = self.consumer.recv() => Some(message),
                    () = written.notified() => {
                        writing = None;
                        None
                    }
                },
                None => {
                    let Some(wait) = self.options.batch_wait.checked_sub(opened.elapsed()) else {
                        break;
                    };
                    tokio::time::timeout(wait, self.consumer.recv()).await.ok()
                }
            };
            match next {
                Some(Ok(message)) => records.push(RawRecord::of(&message)),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "kafka consumer error; continuing");
                    break;
                }
                None => {}
            }
        }
        records
    }

    /// For newly assigned partitions, reads the stored progress: the committed offset may be
    /// behind it (commits are asynchronous), and records below it are already applied.
    async fn resume_assigned(&mut self) {
        let assigned: Vec<i32> = std::mem::take(&mut *locked(&self.shared.assigned));
        if assigned.is_empty() {
            return;
        }
        let (store, health) = (&self.store, self.applier.health());
        let topic = self.topic.as_str();
        let progress = with_retry("load partition progress", &health, || {
            store.load_progress(topic)
        })
        .await;
        let marks = with_retry("load dead-letter marks", &health, || {
            store.load_dead_letter_marks(topic)
        })
        .await;
        for partition in assigned {
            self.sought.remove(&partition);
            match progress.get(&partition) {
                Some(next) => self.floors.insert(partition, *next),
                None => self.floors.remove(&partition),
            };
            let floor = progress.get(&partition).copied().unwrap_or(0);
            let mark = marks.get(&partition).copied().unwrap_or(0);
            self.find_sent_dead_letters(partition, floor, mark).await;
        }
    }

    /// Reads `partition`'s dead-letter partition from `mark` to its end, and remembers which
    /// of its records at or after `floor` already have their dead letter there.
    async fn find_sent_dead_letters(&mut self, partition: i32, floor: i64, mark: i64) {
        use sessionlog_log::retry::{self, Retryable};
        let dead_partition = self.dead.partition_of(partition);
        let (origin_topic, origin_partition) = (self.topic.clone(), partition.to_string());
        let read = || async {
            let reader = PartitionReader::new(&self.kafka, &self.dead_letter_topic)?;
            let mut sent = HashSet::new();
            let next = reader
                .read_to_end(dead_partition, mark, &mut |r: RawRecord| {
                    let origin = r.header(dead_letters::ORIGIN_OFFSET);
                    if r.header(dead_letters::ORIGIN_TOPIC) == Some(origin_topic.as_str())
                        && r.header(dead_letters::ORIGIN_PARTITION) == Some(&origin_partition)
                        && let Some(offset) = origin.and_then(|o| o.parse::<i64>().ok())
                        && offset >= floor
                    {
                        sent.insert(offset);
                    }
                })
                .await?;
            Ok::<_, sessionlog_log::Error>((sent, next))
        };
        match read.retry(retry::tries(5)).await {
            Ok((sent, next)) => {
                if !sent.is_empty() {
                    tracing::info!(
                        partition,
                        dead_letters = sent.len(),
                        "dead letters already sent before a restart; not sending them again"
                    );
                }
                self.dead.sent.insert(partition, sent);
                self.dead.delivered(dead_partition, next - 1);
            }
            // Without the read, a dead letter sent before a crash may be sent again: a
            // duplicate in the dead-letter topic, never a lost one.
            Err(e) => tracing::warn!(
                partition,
                error = %e,
                "reading the dead-letter topic failed; dead letters sent before a crash may repeat"
            ),
        }
    }

    /// Drops records below their partition's stored progress, and moves the partition's
    /// fetch position forward to it once, so they are not fetched again.
    fn drop_applied(&mut self, records: &mut Vec<RawRecord>) {
        let mut behind: BTreeMap<i32, i64> = BTreeMap::new();
        let before = records.len();
        records.retain(|r| match self.floors.get(&r.partition) {
            Some(floor) if r.offset < *floor => {
                behind.insert(r.partition, *floor);
                false
            }
            _ => true,
        });
        metrics::counter!(observe::SKIPPED).increment((before - records.len()) as u64);
        for (partition, floor) in behind {
            if self.sought.insert(partition)
                && let Err(e) = self.consumer.seek(
                    &self.topic,
                    partition,
                    Offset::Offset(floor),
                    Duration::from_secs(5),
                )
            {
                // The filter above still drops what is below the floor.
                tracing::debug!(partition, error = %e, "seek to stored progress failed");
            }
        }
    }

    fn commit(&self, next_offsets: &BTreeMap<i32, i64>) {
        // A batch written while its partition moved to another instance is durable, but the
        // offset is the new owner's to commit now.
        let next_offsets: BTreeMap<i32, i64> = {
            let owned = locked(&self.shared.owned);
            next_offsets
                .iter()
                .filter(|(p, _)| owned.contains(p))
                .map(|(p, o)| (*p, *o))
                .collect()
        };
        {
            let mut applied = locked(&self.shared.applied);
            applied.extend(next_offsets.iter().map(|(p, o)| (*p, *o)));
        }
        let only: HashSet<i32> = next_offsets.keys().copied().collect();
        let offsets = self.shared.applied_offsets(Some(&only));
        // Asynchronous: losing a commit only means re-reading records whose effects are
        // already in the tables, which the stored progress turns into no-ops.
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            tracing::warn!(error = %e, "offset commit failed; records will be re-read");
        }
    }

    async fn dead_letter(&mut self, record: &RawRecord, reason: &str) -> Result<()> {
        if self
            .dead
            .sent
            .get_mut(&record.partition)
            .is_some_and(|sent| sent.remove(&record.offset))
        {
            metrics::counter!(observe::DEAD_LETTERS_RESENT_SKIPPED).increment(1);
            return Ok(());
        }
        let dead_partition = self.dead.partition_of(record.partition);
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: dead_letters::REASON,
                value: Some(reason),
            })
            .insert(Header {
                key: dead_letters::ORIGIN_TOPIC,
                value: Some(self.topic.as_str()),
            })
            .insert(Header {
                key: dead_letters::ORIGIN_PARTITION,
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: dead_letters::ORIGIN_OFFSET,
                value: Some(offset.as_str()),
            });
        let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.dead_letter_topic)
            .partition(dead_partition)
            .headers(headers);
        if let Some(key) = record.key.as_deref() {
            out = out.key(key);
        }
        if let Some(payload) = record.payload.as_deref() {
            out = out.payload(payload);
        }
        let delivery = self
            .dead_letters
            .send(out, Timeout::Never)
            .await
            .map_err(|(e, _)| sessionlog_log::Error::kafka("dead-letter")(e))?;
        self.dead.delivered(delivery.partition, delivery.offset);
        Ok(())
    }
}

/// Locks a mutex of the shared state. A panic while it was held cannot leave these plain maps
/// and sets half-written, so a poisoned lock is taken as it is.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
