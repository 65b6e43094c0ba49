//! The export's consumer group: read a batch, follow each event's session, send the spans the
//! batch closed to the receiver, and only then commit the batch's offsets. A receiver that is
//! down holds the export back (retried with backoff) and loses nothing; a crash between the
//! send and the commit sends a batch twice, with the same ids, which the receiver keys on.
//!
//! A session met mid-way (after a restart, a rebalance, or a start from an offset or a time)
//! is first rebuilt from the log up to the event before, through recovery's rebuild, so its
//! spans have the same parents and names as if the export had followed it from the start.

use crate::erasure::Erasures;
use crate::genai::{LogPosition, Trail};
use crate::receiver::Receiver;
use crate::{Error, Result};
use futures::{StreamExt, TryStreamExt};
use lru::LruCache;
use opentelemetry_sdk::trace::SpanData;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sessionlog_keys::{DataKeyStore, Opener};
use sessionlog_log::{RawRecord, Settings, StartAt};
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{EventDecoder, EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::usage::LatencySketch;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How an export runs.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// The receiver's OTLP/HTTP traces endpoint, `/v1/traces` included.
    pub endpoint: String,
    /// Headers sent with every request (a receiver's API key).
    pub headers: HashMap<String, String>,
    /// The consumer group: instances with the same group share the partitions.
    pub group_id: String,
    /// Move the group here before starting (a re-export); `None`: where it left off, or the
    /// beginning for a new group.
    pub start: Option<StartAt>,
    /// Put message content on the spans (model output, tool arguments and results); never
    /// for an erased session: before each request the key store is asked whether the
    /// sessions whose texts it carries were erased, and their spans go without them.
    pub with_content: bool,
    /// Stop once every partition is read up to where it ended when the export started.
    pub until_caught_up: bool,
    /// The `service.name` and Phoenix project (`openinference.project.name`) of the spans.
    pub service_name: String,
    /// At most this many records per batch.
    pub batch_max: usize,
    /// How long a batch waits for more records once it has one.
    pub batch_wait: Duration,
    /// Sessions followed in memory; beyond it the least recent is rebuilt when met again.
    pub cache_sessions: usize,
    /// How long one request to the receiver may take.
    pub request_timeout: Duration,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            endpoint: "http://127.0.0.1:6006/v1/traces".into(),
            headers: HashMap::new(),
            group_id: "sessionlog-otlp-export".into(),
            start: None,
            with_content: false,
            until_caught_up: false,
            service_name: "sessionlog".into(),
            batch_max: 2_000,
            batch_wait: Duration::from_millis(50),
            cache_sessions: 10_000,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What an export did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExportSummary {
    /// Records read.
    pub records: u64,
    /// Spans the receiver answered for good (rejected ones included).
    pub spans: u64,
    /// Of those, spans the receiver rejected (an OTLP partial success, or a span it answered
    /// 4xx alone): its log says why; they are not sent again.
    pub rejected_spans: u64,
    /// Sessions met mid-way and rebuilt from the log first.
    pub rebuilt_sessions: u64,
    /// Sessions met mid-way whose first events are no longer in the log: none of their
    /// spans is exported.
    pub partial_sessions: u64,
    /// Records that did not decode (the projector dead-letters them; the export skips them).
    pub undecodable: u64,
    /// Spans sent without their texts: their session was erased after the export opened
    /// them (with `--with-content`).
    pub content_withheld: u64,
    /// Export lag: from a record's log timestamp to the receiver having taken its batch's
    /// spans, in milliseconds, median (within 2.5%).
    pub lag_p50_ms: Option<f64>,
    /// The lag's 99th percentile.
    pub lag_p99_ms: Option<f64>,
    /// Wall time.
    pub seconds: f64,
    #[serde(skip)]
    lag: LatencySketch,
}

impl ExportSummary {
    /// The lags behind [`Self::lag_p50_ms`] and [`Self::lag_p99_ms`], in µs.
    pub fn lag_sketch(&self) -> &LatencySketch {
        &self.lag
    }

    /// Adds the lags of `records`, whose spans the receiver took at `taken_ms` (ms since the
    /// epoch): a re-export of old records counts their age, which is what it is.
    fn add_lags(&mut self, records: &[RawRecord], taken_ms: i64) {
        for record in records {
            if let Some(at) = record.timestamp_ms {
                let lag_ms = taken_ms.saturating_sub(at);
                self.lag.insert(lag_ms.saturating_mul(1_000));
                metrics::histogram!(crate::observe::LAG_SECONDS).record(lag_ms as f64 / 1_000.0);
            }
        }
    }

    /// The summary as the export ends: its wall time and lag quantiles, derived once.
    fn finished(mut self, started: Instant) -> Self {
        self.seconds = started.elapsed().as_secs_f64();
        let ms = |q| self.lag.quantile(q).map(|us| us as f64 / 1_000.0);
        (self.lag_p50_ms, self.lag_p99_ms) = (ms(0.5), ms(0.99));
        self
    }
}

/// Runs the export until `shutdown` resolves (or, with `until_caught_up`, until it has read
/// what the log held when it started).
pub async fn export(
    settings: &Settings,
    options: ExportOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<ExportSummary> {
    let started = Instant::now();
    // The export only rebuilds sessions from the log: it needs no signing key (compose mounts
    // none into it) and should hold none.
    let recovery = Recovery::connect_reader(settings).await?;
    let decoder = EventDecoder::new(settings.registry.client()?);
    let receiver = Receiver::new(&options)?;
    let topic = settings.kafka.topic.clone();
    // Where the group starts, per partition, with where the log ends now.
    let positions = group_positions(settings, &options.group_id, options.start.clone()).await?;
    let ownership = Arc::new(Ownership::default());
    let consumer: StreamConsumer<Rebalances> = settings
        .kafka
        .client_config()
        .set("group.id", &options.group_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        // A receiver that is down holds a batch (and the poll loop) back while it retries:
        // stay in the group through an outage of up to an hour rather than rebalance.
        .set("max.poll.interval.ms", "3600000")
        .create_with_context(Rebalances(Arc::clone(&ownership)))
        .map_err(sessionlog_log::Error::kafka("create the export consumer"))?;
    // A one-off run to the end reads every partition itself (a member of a group would wait
    // forever on partitions another member holds); a long-running one shares them.
    let targets = if options.until_caught_up {
        let targets = positions;
        let mut assignment = TopicPartitionList::new();
        for (partition, (from, _)) in &targets {
            assignment
                .add_partition_offset(&topic, *partition, Offset::Offset(*from))
                .map_err(sessionlog_log::Error::kafka("build the assignment"))?;
        }
        consumer
            .assign(&assignment)
            .map_err(sessionlog_log::Error::kafka(
                "assign the topic's partitions",
            ))?;
        ownership.assigned(targets.keys().copied());
        Some(targets)
    } else {
        consumer
            .subscribe(&[&topic])
            .map_err(sessionlog_log::Error::kafka("subscribe to the topic"))?;
        None
    };

    let mut follower = Follower {
        recovery,
        with_content: options.with_content,
        trails: LruCache::new(
            NonZeroUsize::new(options.cache_sessions.max(1)).unwrap_or(NonZeroUsize::MIN),
        ),
        summary: ExportSummary::default(),
        erased: HashSet::new(),
    };
    let mut read: BTreeMap<i32, i64> = BTreeMap::new();
    let mut last_report = Instant::now();
    tokio::pin!(shutdown);
    loop {
        if let Some(targets) = &targets
            && caught_up(targets, &read)
        {
            break;
        }
        // With a target, an idle log is checked again each second; without, wait for records.
        let idle = if targets.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::MAX
        };
        let first = tokio::select! {
            () = &mut shutdown => break,
            message = tokio::time::timeout(idle, consumer.recv()) => message,
        };
        let Ok(first) = first else { continue };
        let mut records = Vec::new();
        match first {
            Ok(message) => records.push(RawRecord::of(&message)),
            // Errors on the queue are reports (a broker restarting): the client recovers.
            Err(e) => {
                tracing::warn!(error = %e, "reading the topic");
                continue;
            }
        }
        let deadline = tokio::time::Instant::now() + options.batch_wait;
        while records.len() < options.batch_max.max(1) {
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Ok(Ok(message)) => records.push(RawRecord::of(&message)),
                Ok(Err(e)) => tracing::warn!(error = %e, "reading the topic"),
                Err(_) => break,
            }
        }
        let revoked = ownership.take_revoked();
        if !revoked.is_empty() {
            // Those partitions' sessions go on elsewhere: forget them, and their progress.
            follower.forget(&revoked);
            read.retain(|partition, _| !revoked.contains(partition));
        }
        let mut spans = Vec::new();
        follower
            .follow_batch(&decoder, &records, &mut spans)
            .await?;
        // Spans are built from texts opened as their records were read, maybe long before
        // they go out: the erasures made meanwhile are asked about before each request.
        let keys = follower.with_content.then(|| {
            (
                follower.recovery.key_table() as &dyn DataKeyStore,
                follower.recovery.log().keyring().map(|keyring| &**keyring),
            )
        });
        let mut erasures = Erasures::new(keys, &mut follower.erased);
        let delivered = receiver
            .deliver(spans, &mut follower.summary, &mut shutdown, &mut erasures)
            .await;
        let erased = erasures.found();
        follower.withdraw(&erased);
        if !matches!(delivered, Ok(true)) {
            // Shut down, or refused, before the receiver took them all: nothing of this batch
            // is committed, so the next run sends it again.
            commit(&consumer, &topic, &read, &ownership, CommitMode::Sync);
            delivered?;
            return Ok(follower.summary.finished(started));
        }
        follower
            .summary
            .add_lags(&records, sessionlog_schemas::now_micros() / 1_000);
        for record in &records {
            let next = read.entry(record.partition).or_default();
            *next = (*next).max(record.offset + 1);
        }
        commit(&consumer, &topic, &read, &ownership, CommitMode::Async);
        follower.summary.records += records.len() as u64;
        metrics::counter!(crate::observe::RECORDS).increment(records.len() as u64);
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            tracing::info!(
                records = follower.summary.records,
                spans = follower.summary.spans,
                rebuilt_sessions = follower.summary.rebuilt_sessions,
                lag_p99_us = ?follower.summary.lag.quantile(0.99),
                "exporting"
            );
        }
    }
    commit(&consumer, &topic, &read, &ownership, CommitMode::Sync);
    Ok(follower.summary.finished(started))
}

/// Commits the next offset of each partition this instance owns. A failed commit is not lost
/// work: the next one carries the same offsets, and at worst a batch is sent twice.
fn commit(
    consumer: &StreamConsumer<Rebalances>,
    topic: &str,
    read: &BTreeMap<i32, i64>,
    ownership: &Ownership,
    mode: CommitMode,
) {
    let owned = ownership.owned();
    let mut list = TopicPartitionList::new();
    for (partition, next) in read.iter().filter(|(p, _)| owned.contains(p)) {
        if let Err(e) = list.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
            tracing::warn!(error = %e, partition, "cannot commit the export's offset");
        }
    }
    if list.count() == 0 {
        return;
    }
    if let Err(e) = consumer.commit(&list, mode) {
        tracing::warn!(error = %e, "committing the export's offsets failed; the next commit carries them");
    }
}

/// Follows sessions through the records of a batch.
struct Follower {
    recovery: Recovery,
    with_content: bool,
    trails: LruCache<SessionId, Followed>,
    summary: ExportSummary,
    /// Sessions the key store said were erased since the export opened their texts: none
    /// of their texts is opened again.
    erased: HashSet<SessionId>,
}

/// A session followed: its trail, and what opens its texts when content is exported.
struct Followed {
    trail: Trail,
    opener: Option<Opener>,
}

impl Follower {
    /// Folds a batch of records into their sessions' trails, adding the spans they close to
    /// `spans`. The store is asked where each new session's first record is for the whole
    /// batch at once, not one session after another.
    async fn follow_batch(
        &mut self,
        decoder: &EventDecoder,
        records: &[RawRecord],
        spans: &mut Vec<SpanData>,
    ) -> Result<()> {
        let mut events = Vec::with_capacity(records.len());
        let partitions = self.recovery.settings().kafka.partitions;
        for record in records {
            let decoded = record
                .decode(decoder)
                .await
                .and_then(|event| record.on_pinned_partition(event, partitions));
            match decoded {
                Ok(event) => events.push((event, record)),
                Err(reason) => {
                    // The projector dead-letters it with the reason; recovery skips it too
                    // (it reads a session's pinned partition only).
                    tracing::warn!(
                        partition = record.partition,
                        offset = record.offset,
                        reason,
                        "skipping a record that does not decode"
                    );
                    self.summary.undecodable += 1;
                }
            }
        }
        let starting: HashSet<SessionId> = events
            .iter()
            .filter(|(event, _)| starts(event) && !self.trails.contains(&event.session_id))
            .map(|(event, _)| event.session_id)
            .collect();
        let store = self.recovery.store().clone();
        let first_records: HashMap<SessionId, Option<(i32, i64)>> = futures::stream::iter(starting)
            .map(|session| {
                let store = store.clone();
                async move {
                    Ok::<_, Error>((
                        session,
                        store
                            .locate(session, 1)
                            .await
                            .map_err(sessionlog_recovery::Error::from)?,
                    ))
                }
            })
            .buffer_unordered(32)
            .try_collect()
            .await?;
        for (event, record) in events {
            let at = LogPosition {
                partition: record.partition,
                offset: record.offset,
            };
            let first = first_records.get(&event.session_id).copied();
            self.follow(&event, at, first, spans).await?;
        }
        Ok(())
    }

    /// Folds one event into its session's trail, adding the span it closes to `spans`.
    /// `first` is where the store places the session's first record, when it was asked.
    async fn follow(
        &mut self,
        event: &EventEnvelope,
        at: LogPosition,
        first: Option<Option<(i32, i64)>>,
        spans: &mut Vec<SpanData>,
    ) -> Result<()> {
        let session = event.session_id;
        if !self.trails.contains(&session) {
            let opener = self.opener(session).await?;
            let trail = self.trail_before(event, at, first, opener.as_ref()).await?;
            self.trails.put(session, Followed { trail, opener });
        }
        let Some(followed) = self.trails.get_mut(&session) else {
            return Ok(());
        };
        if followed.trail.has_seen(at) {
            return Ok(());
        }
        // The key is held between batches on a lease: once the key cache's TTL is up it is
        // renewed against the key table before it opens anything, and dropped if destroyed.
        if let (Some(opener), Some(keyring)) =
            (followed.opener.as_mut(), self.recovery.log().keyring())
        {
            keyring.renew(opener).await?;
        }
        let opened = followed.opener.as_ref().map(|o| o.open_event(event).0);
        if let Some(span) = followed.trail.follow(event, at, opened.as_ref()) {
            spans.push(span);
        }
        Ok(())
    }

    /// Drops the keys of `sessions`, found erased, and the texts their trails keep: nothing
    /// of them is opened again, nor sent.
    fn withdraw(&mut self, sessions: &[SessionId]) {
        for session in sessions {
            if let Some(followed) = self.trails.peek_mut(session) {
                followed.opener = None;
                followed.trail.forget_texts();
            }
        }
    }

    /// Forgets the sessions of `partitions` (revoked: they go on elsewhere).
    fn forget(&mut self, partitions: &[i32]) {
        let gone: Vec<SessionId> = self
            .trails
            .iter()
            .filter(|(_, f)| {
                f.trail
                    .applied
                    .is_some_and(|at| partitions.contains(&at.partition))
            })
            .map(|(session, _)| *session)
            .collect();
        for session in gone {
            self.trails.pop(&session);
        }
    }

    /// The trail of a session met at `event`: empty at its first record, else rebuilt from
    /// the log up to the record before (from its first event, not a checkpoint: a
    /// checkpoint's state does not say which model call asked for a tool call still open).
    /// Only a start event at seq 1 that the event index does not place elsewhere is taken as
    /// the first record: a seq is the client's to choose, and a second start for a session
    /// (rejected by the fold) must not begin it again.
    async fn trail_before(
        &mut self,
        event: &EventEnvelope,
        at: LogPosition,
        first: Option<Option<(i32, i64)>>,
        opener: Option<&Opener>,
    ) -> Result<Trail> {
        let session = event.session_id;
        if starts(event) {
            let first = match first {
                Some(first) => first,
                None => self
                    .recovery
                    .store()
                    .locate(session, 1)
                    .await
                    .map_err(sessionlog_recovery::Error::from)?,
            };
            if first.is_none_or(|(p, o)| (p, o) == (at.partition, at.offset)) {
                return Ok(Trail::new(session));
            }
        }
        let mut trail = Trail::new(session);
        let partition = at.partition;
        let rebuilt = self
            .recovery
            .rebuild_through(session, Some(0), Some(at.offset - 1), |logged, _| {
                let opened = opener.map(|o| o.open_event(&logged.envelope).0);
                let position = LogPosition {
                    partition,
                    offset: logged.offset,
                };
                trail.catch_up(&logged.envelope, position, opened.as_ref());
            })
            .await;
        match rebuilt {
            Ok(_) => {
                self.summary.rebuilt_sessions += 1;
                Ok(trail)
            }
            // Its first events are gone (retention): its spans cannot be rebuilt, and a trail
            // that never saw the start accepts none of its events, so none is exported.
            Err(sessionlog_recovery::Error::UnknownSession(_)) => {
                tracing::warn!(
                    %session,
                    "the session's first events are no longer in the log; its spans are not exported"
                );
                self.summary.partial_sessions += 1;
                Ok(trail)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// What opens `session`'s texts when content is exported: nothing for a session found
    /// erased, or that the projection says is erased (without encryption, its texts are
    /// still in the log). Not [`sessionlog_recovery::Recovery::opener_for`]: the export follows
    /// the log in order, so a redaction's event comes after what it redacts; the one text kept
    /// past its event, an open call's arguments, is dropped by the trail when the redaction is
    /// followed ([`Trail`]'s fold). An export behind the log opens with the key it holds until
    /// the key is `key_cache_secs` old, as after an erasure (docs/security.md, "Redaction").
    async fn opener(&self, session: SessionId) -> Result<Option<Opener>> {
        if !self.with_content || self.erased.contains(&session) {
            return Ok(None);
        }
        let status = self
            .recovery
            .store()
            .session_status(session)
            .await
            .map_err(sessionlog_recovery::Error::from)?;
        if status.as_deref() == Some("erased") {
            return Ok(None);
        }
        Ok(Some(self.recovery.opener(session, false).await?))
    }
}

/// Whether `event` claims to be its session's first: a start or a fork at seq 1.
fn starts(event: &EventEnvelope) -> bool {
    matches!(
        event.event,
        SessionEvent::SessionStarted { .. } | SessionEvent::SessionForked { .. }
    ) && event.seq == 1
}

/// Per partition: where the group starts and where the log ends now. With `start`, the
/// group is first moved there (its offsets committed: Kafka refuses while the group has
/// members); without, it starts at its committed offset, or the partition's first offset for
/// a group that has none.
async fn group_positions(
    settings: &Settings,
    group: &str,
    start: Option<StartAt>,
) -> Result<BTreeMap<i32, (i64, i64)>> {
    let (kafka, topic, group) = (
        settings.kafka.clone(),
        settings.kafka.topic.clone(),
        group.to_string(),
    );
    tokio::task::spawn_blocking(move || -> Result<BTreeMap<i32, (i64, i64)>> {
        let bounds = sessionlog_log::partition_bounds(
            &kafka,
            &topic,
            start.as_ref().unwrap_or(&StartAt::Beginning),
            None,
        )?;
        let consumer: BaseConsumer = kafka
            .client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(sessionlog_log::Error::kafka("create the export consumer"))?;
        let mut list = TopicPartitionList::new();
        if start.is_some() {
            for (partition, from, _) in &bounds {
                list.add_partition_offset(&topic, *partition, Offset::Offset(*from))
                    .map_err(sessionlog_log::Error::kafka("build the start offsets"))?;
            }
            consumer
                .commit(&list, CommitMode::Sync)
                .map_err(|source| Error::Reset { group, source })?;
            return Ok(bounds
                .into_iter()
                .map(|(p, from, high)| (p, (from, high)))
                .collect());
        }
        for (partition, _, _) in &bounds {
            list.add_partition(&topic, *partition);
        }
        let committed = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .map_err(sessionlog_log::Error::kafka("read the group's offsets"))?;
        let committed: BTreeMap<i32, i64> = committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect();
        Ok(bounds
            .into_iter()
            .map(|(p, low, high)| {
                (
                    p,
                    (committed.get(&p).copied().unwrap_or(low).max(low), high),
                )
            })
            .collect())
    })
    .await
    .map_err(|e| sessionlog_log::Error::Task(e.to_string()))?
}

/// Whether every partition has been read up to its target.
fn caught_up(targets: &BTreeMap<i32, (i64, i64)>, read: &BTreeMap<i32, i64>) -> bool {
    targets
        .iter()
        .all(|(partition, (from, until))| read.get(partition).copied().unwrap_or(*from) >= *until)
}

/// The partitions this instance owns, as the rebalance callbacks report them, and those
/// revoked since the loop last looked.
#[derive(Default)]
struct Ownership {
    owned: Mutex<HashSet<i32>>,
    revoked: Mutex<Vec<i32>>,
}

impl Ownership {
    fn assigned(&self, partitions: impl IntoIterator<Item = i32>) {
        locked(&self.owned).extend(partitions);
    }

    fn revoke(&self, partitions: Vec<i32>) {
        let mut owned = locked(&self.owned);
        for partition in &partitions {
            owned.remove(partition);
        }
        locked(&self.revoked).extend(partitions);
    }

    fn owned(&self) -> HashSet<i32> {
        locked(&self.owned).clone()
    }

    fn take_revoked(&self) -> Vec<i32> {
        std::mem::take(&mut *locked(&self.revoked))
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reports rebalances to the loop.
struct Rebalances(Arc<Ownership>);

impl ClientContext for Rebalances {}

impl ConsumerContext for Rebalances {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let partitions = |list: &TopicPartitionList| -> Vec<i32> {
            list.elements().iter().map(|e| e.partition()).collect()
        };
        match rebalance {
            Rebalance::Assign(list) => self.0.assigned(partitions(list)),
            Rebalance::Revoke(list) => self.0.revoke(partitions(list)),
            Rebalance::Error(_) => {}
        }
    }
}
