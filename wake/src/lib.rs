//! The wake component (`sessionlog wake`): notices sessions that need a harness and writes a
//! wake record (`sessionlog_log::wake`) for the workers of their agent.
//!
//! An instance is a member of the consumer group `sessionlog-wake-<topic>` over two
//! co-partitioned topics: the lease topic, read from its start on every assignment (compacted,
//! so about a record per session), and the events topic, read from the group's progress. With
//! the range assignor and equal partition counts, a member owns the same partition numbers of
//! both. What it learns is a pure fold ([`watch::Watches`]); it keeps nothing else, so
//! instances can come and go. A session needs a harness when
//!
//! - its writer's lease lapsed unrenewed while the session was neither ended, paused nor
//!   waiting for a person, at the lease's epoch (a later claim means someone took it);
//! - an approval was decided, or an operator recorded a call's result;
//! - a pause's `until` passed (the group's progress stays before a pending pause, so a
//!   restarted instance reads it again);
//! - steering arrived while no live writer held the session.
//!
//! It folds the events of the sessions it watches with the fold every component uses, into a
//! state loaded from the projection when a session first matters, and reacts only to events the
//! fold accepted ([`watch`]).
//!
//! A wake is a hint: the worker's claim through the fold decides who runs the session, and a
//! worker finding the session claimed since its wake, or held by a live lease, is told
//! "already taken". A wake no harness answered (no new lease) is written again after
//! `[wake] rewake_after_ms`.
//!
//! Kafka, the registry and the store failing for a while (a broker restarting) stop nothing:
//! the consumer goes on by itself once the cluster answers, an event that cannot be decoded
//! for want of the registry is tried again with the house's backoff
//! ([`sessionlog_log::retry`]), and checks and loads that failed are tried again later.

pub mod error;
pub mod observe;
pub mod orphans;
pub mod queue;
pub mod watch;

pub use error::{Error, Result};
pub use orphans::{OrphanedSession, orphaned};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use sessionlog_log::lease::LeaseReader;
use sessionlog_log::retry::{self, BackoffBuilder};
use sessionlog_log::{PartitionReader, Settings, Wake, WakeWriter, wake::WAKE_VERSION};
use sessionlog_schemas::{EventDecoder, EventEnvelope, Micros, SessionId, now_micros};
use sessionlog_session::SessionState;
use sessionlog_store::ProjectionStore;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use watch::{Cause, ENDED, Load, Watches, claimed_by_operator, needs_no_harness};

/// How often due leases, pauses and repeats are looked at.
const TICK: Duration = Duration::from_millis(100);
/// How often the group's progress on the events topic is committed.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// How soon a cause the projection has not reached yet is looked at again, and a state it
/// could not give yet is asked for again, in microseconds.
const RETRY_MICROS: Micros = 200_000;
/// Ticks between two updates of the orphaned-sessions gauges (a scan of every session).
const ORPHANS_EVERY_TICKS: u64 = 50;
/// Causes checked and written at once: a mass expiry is a thousand store reads and writes.
const CONCURRENCY: usize = 64;

/// What checking a cause and loading a state need, shared by the checks and loads in flight.
struct Checker {
    store: ProjectionStore,
    log: Arc<WakeWriter>,
    /// The lease topic read afresh before a cause wakes anyone (see [`wake_one`]).
    leases: LeaseReader,
    /// The events topic, for its partitions' ends (see [`unprojected`]).
    events: PartitionReader,
    events_topic: String,
    /// Writes the tombstones that remove ended sessions' lease records.
    lease_producer: FutureProducer,
    lease_topic: String,
    delivery_timeout: Duration,
}

/// The causes being checked and those waiting for a turn. A check runs beside the loop that
/// reads leases and events, so a cause found while others are checked starts as soon as one
/// ends instead of after the whole batch (a mass expiry came due over a second or two, and
/// each tick's batch waited for its slowest check). One check at a time per session keeps a
/// session's outcomes in the order of its causes; the queue holds one cause per session.
#[derive(Default)]
struct Checks {
    running: FuturesUnordered<BoxFuture<'static, (Cause, Outcome)>>,
    queue: queue::CheckQueue,
}

/// What a load of states from the projection answered for each: the state and the offset it
/// was folded through (`None`: no row), or `None` when it is to be asked again later.
type Loaded = Vec<(Load, Option<Option<(SessionState, i64)>>)>;

/// The consumer group of the wake component on `settings`' topics.
pub fn wake_group(settings: &Settings) -> String {
    format!("sessionlog-wake-{}", settings.kafka.topic)
}

/// Partitions assigned and revoked, as the rebalance callbacks report them.
#[derive(Default)]
struct Assignment {
    revoked: HashSet<i32>,
    /// Lease-topic partitions assigned since the loop last looked: each is read from its start.
    leases_assigned: Vec<i32>,
    /// Events-topic partitions owned, with the next offset to commit.
    owned: BTreeMap<i32, i64>,
}

struct WakeContext {
    events_topic: String,
    lease_topic: String,
    assignment: Arc<Mutex<Assignment>>,
}

impl ClientContext for WakeContext {}

impl ConsumerContext for WakeContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(revoked) = rebalance {
            let mut assignment = self
                .assignment
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for e in revoked.elements() {
                assignment.revoked.insert(e.partition());
                if e.topic() == self.events_topic {
                    assignment.owned.remove(&e.partition());
                }
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            tracing::info!(partitions = assigned.count(), "wake partitions assigned");
            let mut assignment = self
                .assignment
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for e in assigned.elements() {
                if e.topic() == self.events_topic {
                    assignment.revoked.remove(&e.partition());
                    assignment.owned.entry(e.partition()).or_insert(-1);
                } else if e.topic() == self.lease_topic {
                    assignment.leases_assigned.push(e.partition());
                }
            }
        }
    }
}

/// One instance of the wake component.
pub struct WakeService {
    consumer: Arc<StreamConsumer<WakeContext>>,
    assignment: Arc<Mutex<Assignment>>,
    watches: Watches,
    decoder: EventDecoder,
    checker: Arc<Checker>,
    checks: Checks,
    /// The batch of states being loaded from the projection (at most one).
    loading: FuturesUnordered<BoxFuture<'static, Loaded>>,
    /// The waits between tries to decode an event while the registry fails.
    backoff: Option<backon::ExponentialBackoff>,
    /// Consumer errors in a row (a broker restarting reports one per lost connection).
    read_errors: u64,
    events_topic: String,
    lease_topic: String,
    rewake_after: Duration,
    /// By lease partition being read from its start, the end it had at assignment (`None`:
    /// not learnt yet).
    lease_targets: BTreeMap<i32, Option<i64>>,
}

impl WakeService {
    /// Connects to Kafka, the registry and the store and joins the group. A group new to the
    /// events topic starts at its end: history before the component ran wakes nobody.
    pub async fn new(settings: &Settings) -> Result<Self> {
        let store = ProjectionStore::open(&settings.cql).await?;
        let partitions =
            sessionlog_log::topic::partition_count(&settings.kafka, &settings.kafka.topic).await?;
        let log = Arc::new(WakeWriter::new(
            &settings.kafka,
            partitions,
            Duration::from_millis(settings.producer.delivery_timeout_ms),
        )?);
        let decoder = EventDecoder::new(settings.registry.client()?);
        let (events_topic, lease_topic) =
            (settings.kafka.topic.clone(), settings.kafka.lease_topic());
        let group = wake_group(settings);
        start_new_group_at_the_end(settings, &group).await?;
        let assignment = Arc::new(Mutex::new(Assignment::default()));
        let consumer: StreamConsumer<WakeContext> = settings
            .kafka
            .client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            // The lease topic is never committed, so each assignment reads it from its start.
            .set("auto.offset.reset", "earliest")
            // Range assigns equal partition numbers of co-partitioned topics to one member.
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", "10000")
            .create_with_context(WakeContext {
                events_topic: events_topic.clone(),
                lease_topic: lease_topic.clone(),
                assignment: Arc::clone(&assignment),
            })
            .map_err(sessionlog_log::Error::kafka("create the wake consumer"))?;
        consumer
            .subscribe(&[&events_topic, &lease_topic])
            .map_err(sessionlog_log::Error::kafka("subscribe"))?;
        let lease_producer: FutureProducer = settings
            .kafka
            .producer_config()
            .create()
            .map_err(sessionlog_log::Error::kafka("create the lease cleaner"))?;
        Ok(Self {
            checker: Arc::new(Checker {
                store,
                log,
                leases: LeaseReader::new(&settings.kafka, partitions),
                events: PartitionReader::for_short_reads(&settings.kafka, &events_topic)?,
                events_topic: events_topic.clone(),
                lease_producer,
                lease_topic: lease_topic.clone(),
                delivery_timeout: Duration::from_millis(settings.producer.delivery_timeout_ms),
            }),
            checks: Checks::default(),
            loading: FuturesUnordered::new(),
            backoff: None,
            read_errors: 0,
            consumer: Arc::new(consumer),
            assignment,
            watches: Watches::default(),
            decoder,
            events_topic,
            lease_topic,
            rewake_after: Duration::from_millis(settings.wake.rewake_after_ms),
            lease_targets: BTreeMap::new(),
        })
    }

    /// Runs until `shutdown` completes, then commits its progress.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u64 = 0;
        let mut commit = tokio::time::interval(COMMIT_EVERY);
        commit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                message = self.consumer.recv() => {
                    let message = match message {
                        Ok(message) => {
                            self.read_errors = 0;
                            message
                        }
                        Err(e) => {
                            self.read_failed(&e).await;
                            continue;
                        }
                    };
                    let (topic, partition, offset) =
                        (message.topic().to_string(), message.partition(), message.offset());
                    let key = message.key().map(<[u8]>::to_vec);
                    let payload = message.payload().map(<[u8]>::to_vec);
                    drop(message);
                    self.rebalanced().await;
                    if topic == self.lease_topic {
                        self.on_lease(partition, key.as_deref(), payload.as_deref());
                        self.lease_read(partition, offset);
                    } else if topic == self.events_topic {
                        self.on_event(partition, offset, payload.as_deref()).await;
                    }
                }
                Some((cause, outcome)) = self.checks.running.next(),
                    if !self.checks.running.is_empty() =>
                {
                    self.checks.queue.finished(cause.session);
                    self.settle(&cause, outcome);
                    self.start_checks();
                }
                Some(loaded) = self.loading.next(), if !self.loading.is_empty() => {
                    self.loaded(loaded);
                }
                _ = tick.tick() => {
                    self.rebalanced().await;
                    let now = now_micros();
                    let due = self.watches.due(now);
                    self.check(due);
                    self.load();
                    self.clean_leases();
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(ORPHANS_EVERY_TICKS) {
                        observe::orphaned(&self.watches.orphaned(), now);
                        observe::watched(self.watches.len());
                    }
                }
                _ = commit.tick() => self.commit(CommitMode::Async),
            }
        }
        self.commit(CommitMode::Sync);
        Ok(())
    }

    /// Applies what the rebalance callbacks reported: revoked partitions are forgotten, and
    /// lease partitions assigned are read from their start before their leases may lapse.
    async fn rebalanced(&mut self) {
        let (revoked, leases) = {
            let mut assignment = self
                .assignment
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (
                std::mem::take(&mut assignment.revoked),
                std::mem::take(&mut assignment.leases_assigned),
            )
        };
        if !revoked.is_empty() {
            self.watches.forget(&revoked);
            self.lease_targets.retain(|p, _| !revoked.contains(p));
        }
        for partition in leases {
            self.watches.catching_up(partition);
            self.lease_targets.insert(partition, None);
        }
        self.learn_lease_targets().await;
    }

    /// Learns the end each lease partition being caught up had; an empty one is caught up.
    async fn learn_lease_targets(&mut self) {
        let unknown: Vec<i32> = self
            .lease_targets
            .iter()
            .filter(|(_, end)| end.is_none())
            .map(|(p, _)| *p)
            .collect();
        for partition in unknown {
            // A round trip of a few milliseconds, once per assignment of a partition, which
            // rdkafka offers only as a blocking call.
            let (consumer, topic) = (Arc::clone(&self.consumer), self.lease_topic.clone());
            let ends = tokio::task::spawn_blocking(move || {
                consumer.fetch_watermarks(&topic, partition, Duration::from_secs(5))
            })
            .await;
            match ends
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                Ok((low, high)) if high <= low => {
                    self.lease_targets.remove(&partition);
                    self.watches.caught_up(partition);
                }
                Ok((_, high)) => {
                    self.lease_targets.insert(partition, Some(high));
                }
                // Asked again at the next tick; its leases wait meanwhile.
                Err(e) => {
                    tracing::warn!(partition, error = %e, "the lease partition's end is unknown")
                }
            }
        }
    }

    /// A lease record at `offset` was read: the partition may have caught up.
    fn lease_read(&mut self, partition: i32, offset: i64) {
        if let Some(Some(end)) = self.lease_targets.get(&partition)
            && offset + 1 >= *end
        {
            self.lease_targets.remove(&partition);
            self.watches.caught_up(partition);
        }
    }

    fn on_lease(&mut self, partition: i32, key: Option<&[u8]>, value: Option<&[u8]>) {
        // Keyed by session and epoch (an older build's by session alone).
        let session: Option<SessionId> = key.and_then(sessionlog_log::lease::session_of_key);
        match session {
            Some(session) => self
                .watches
                .on_lease(partition, session, value, now_micros()),
            None => tracing::warn!(partition, "a lease record without a session key; skipped"),
        }
    }

    async fn on_event(&mut self, partition: i32, offset: i64, payload: Option<&[u8]>) {
        let Some(payload) = payload else {
            self.mark(partition, offset + 1);
            return;
        };
        let Some(envelope) = self.decode(partition, offset, payload).await else {
            self.mark(partition, offset + 1);
            return;
        };
        let causes = self
            .watches
            .on_event(partition, offset, &envelope, now_micros());
        // Marked read only once folded: a commit meanwhile stays before it.
        self.mark(partition, offset + 1);
        self.check(causes);
    }

    /// The event `payload` holds, tried again while the registry cannot be reached (an event
    /// cannot be skipped: it may be a cause, or end a session); `None` for a record that does
    /// not decode, which is the projector's to dead-letter and wakes nobody.
    async fn decode(
        &mut self,
        partition: i32,
        offset: i64,
        payload: &[u8],
    ) -> Option<EventEnvelope> {
        loop {
            match self.decoder.decode(payload).await {
                Ok(envelope) => {
                    self.backoff = None;
                    return Some(envelope);
                }
                Err(e) if e.is_retriable() => {
                    let wait = self
                        .backoff
                        .get_or_insert_with(|| retry::forever().build())
                        .next()
                        .unwrap_or(retry::MAX_DELAY);
                    tracing::warn!(partition, offset, error = %e, ?wait, "decoding an event failed (is the registry up?); trying again");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    tracing::debug!(partition, offset, error = %e, "undecodable record skipped");
                    return None;
                }
            }
        }
    }

    /// A consumer error: a broker restarting, a leader moving. The consumer goes on by itself
    /// once the cluster answers, as the log's tail does, so the loop only pauses briefly (the
    /// house's first retry wait) rather than stop, or back off past due leases and pauses.
    async fn read_failed(&mut self, error: &rdkafka::error::KafkaError) {
        self.read_errors += 1;
        // The first of a run, and every 50th after: librdkafka repeats its own lines anyway.
        if self.read_errors % 50 == 1 {
            tracing::warn!(%error, errors = self.read_errors, "reading the topics failed; reading on");
        } else {
            tracing::debug!(%error, "reading the topics failed; reading on");
        }
        tokio::time::sleep(retry::FIRST_DELAY).await;
    }

    fn mark(&self, partition: i32, next: i64) {
        let mut assignment = self
            .assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(owned) = assignment.owned.get_mut(&partition) {
            *owned = next;
        }
    }

    /// Queues `causes` to be checked against the sessions' projected state (the wakes that
    /// stand are written) and starts as many checks as there is room for.
    fn check(&mut self, causes: Vec<Cause>) {
        for cause in causes {
            self.checks.queue.push(cause);
        }
        self.start_checks();
    }

    fn start_checks(&mut self) {
        let room = CONCURRENCY.saturating_sub(self.checks.running.len());
        for cause in self.checks.queue.start(room) {
            let checker = Arc::clone(&self.checker);
            self.checks.running.push(Box::pin(async move {
                let outcome = wake_one(&checker, &cause).await;
                (cause, outcome)
            }));
        }
    }

    /// Starts loading the states the watches want from the projection, unless a batch is
    /// being loaded (its sessions were handed out; the rest wait for the next tick).
    fn load(&mut self) {
        if !self.loading.is_empty() {
            return;
        }
        let loads = self.watches.loads(now_micros());
        if !loads.is_empty() {
            let checker = Arc::clone(&self.checker);
            self.loading
                .push(Box::pin(async move { load_states(&checker, loads).await }));
        }
    }

    /// Folds the events read meanwhile onto the states loaded; the causes among them are
    /// checked, and a state not given yet is asked for again.
    fn loaded(&mut self, loaded: Loaded) {
        let now = now_micros();
        let mut causes = Vec::new();
        for (load, answer) in loaded {
            match answer {
                Some(projected) => causes.extend(self.watches.loaded(&load, projected, now)),
                None => self
                    .watches
                    .load_later(&load, now.saturating_add(RETRY_MICROS)),
            }
        }
        self.check(causes);
        self.load();
    }

    /// Writes tombstones for the lease records an ended session's writer left behind (the keys
    /// a session's end removes, [`sessionlog_log::lease::end_keys`]), so the lease topic (and
    /// every reader of it) keeps only sessions that may run again. A failed write leaves the
    /// records, found again at the partition's next assignment.
    fn clean_leases(&mut self) {
        for cleanup in self.watches.take_cleanups() {
            let checker = Arc::clone(&self.checker);
            tokio::spawn(async move {
                let keys = sessionlog_log::lease::end_keys(cleanup.session, cleanup.epoch);
                let sent = keys.iter().map(|key| {
                    let record = FutureRecord::<str, [u8]>::to(&checker.lease_topic)
                        .partition(cleanup.partition)
                        .key(key);
                    checker
                        .lease_producer
                        .send(record, checker.delivery_timeout)
                });
                match futures::future::try_join_all(sent).await {
                    Ok(_) => observe::lease_cleaned(),
                    Err((e, _)) => tracing::warn!(
                        session = %cleanup.session,
                        error = %e,
                        "removing an ended session's lease records failed"
                    ),
                }
            });
        }
    }

    /// Records a check's outcome in the watches.
    fn settle(&mut self, cause: &Cause, outcome: Outcome) {
        match outcome {
            Outcome::Woken => self.watches.woke(cause, self.rewake_at()),
            Outcome::NotNeeded(why @ (ENDED | EXPIRED)) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.ended(cause.session, now_micros());
            }
            Outcome::NotNeeded(why) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.settled(cause);
            }
            Outcome::Later => self
                .watches
                .retry(cause, now_micros().saturating_add(RETRY_MICROS)),
            // Looked at again after the re-wake interval: the projector may be down.
            Outcome::Unprojected(end) => self.watches.unprojected(cause, end, self.rewake_at()),
            // Tried again after the re-wake interval, as a wake nobody answered is.
            Outcome::Failed => self.watches.woke(cause, self.rewake_at()),
        }
    }

    /// When a wake written now is written again if no harness took the session.
    fn rewake_at(&self) -> Micros {
        now_micros()
            .saturating_add(Micros::try_from(self.rewake_after.as_micros()).unwrap_or(Micros::MAX))
    }

    /// Commits the progress on the owned events partitions, never past a pause still waiting
    /// for its time.
    fn commit(&self, mode: CommitMode) {
        let owned = self
            .assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .owned
            .clone();
        let mut offsets = TopicPartitionList::new();
        for (partition, next) in owned {
            if next < 0 {
                continue;
            }
            let floor = self
                .watches
                .pending_floor(partition)
                .map_or(next, |f| f.min(next));
            if let Err(e) =
                offsets.add_partition_offset(&self.events_topic, partition, Offset::Offset(floor))
            {
                tracing::warn!(partition, error = %e, "progress not committed");
            }
        }
        if offsets.count() > 0
            && let Err(e) = self.consumer.commit(&offsets, mode)
        {
            tracing::warn!(error = %e, "commit failed; a restart reads a little again");
        }
    }
}

/// Why a session whose rows are gone needs no wake (and is forgotten, as an ended one is).
const EXPIRED: &str = "the projection holds no row of the session: its rows expired";

enum Outcome {
    Woken,
    Later,
    NotNeeded(&'static str),
    /// No projected row, while the session's events partition ended at this offset.
    Unprojected(i64),
    Failed,
}

/// Writes `cause`'s wake if the session, as projected, still needs a harness.
///
/// The session's lease is first read afresh from the lease topic: this instance's own reading
/// may trail it (a burst of events to judge, a partition re-read), and waking a session whose
/// harness renewed meanwhile (or paused its own session and waits) would have a worker's claim
/// fence a live harness.
async fn wake_one(checker: &Checker, cause: &Cause) -> Outcome {
    let Checker {
        store, log, leases, ..
    } = checker;
    match leases.read(cause.session).await {
        Ok(Some(lease)) if lease.is_live(now_micros()) && lease.epoch >= cause.epoch => {
            return Outcome::NotNeeded("a live lease holds it");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "reading the lease afresh failed");
            return Outcome::Failed;
        }
    }
    let projected = match store.load_session(cause.session).await {
        // The state must include the causing event (a decision clears its wait only then).
        Ok(Some(projected))
            if cause
                .cause_offset
                .is_none_or(|offset| projected.applied_offset >= offset) =>
        {
            projected
        }
        // Not projected that far yet: the projector lags by milliseconds; look again soon.
        Ok(Some(_)) => return Outcome::Later,
        // Not projected at all: the projector is behind or down, or the session's rows
        // expired; not something a quick retry mends.
        Ok(None) => return unprojected(checker, cause).await,
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "reading the session for a wake failed");
            return Outcome::Failed;
        }
    };
    let state = &projected.state;
    if let Some(why) = needs_no_harness(state, now_micros()) {
        return Outcome::NotNeeded(why);
    }
    // Someone who runs the session claimed it since (an operator's act runs nothing: its own
    // cause, or the pause it made, decides).
    if state.epoch > cause.epoch && !claimed_by_operator(state) {
        return Outcome::NotNeeded("the session was claimed since");
    }
    let Some(agent) = state.agent.clone() else {
        return Outcome::NotNeeded("the session has no agent");
    };
    let wake = Wake {
        version: WAKE_VERSION,
        session_id: cause.session,
        agent,
        tenant: state.tenant.clone(),
        reason: cause.reason,
        // The session's epoch now: a worker's take refuses a session claimed past it.
        epoch: cause.epoch.max(state.epoch),
        cause_offset: cause.cause_offset,
        caused_at: cause.caused_at,
        woken_at: now_micros(),
    };
    match log.put(&wake).await {
        Ok(()) => {
            observe::woken(&wake, cause.repeat);
            Outcome::Woken
        }
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "writing a wake failed");
            Outcome::Failed
        }
    }
}

/// A cause of a session the projection holds no row of. Once the projector applied its
/// partition past where the partition ended when that was first seen, the row will never come:
/// the session's rows expired (an ended session past `[cql] ended_session_ttl`), or it never
/// started; it is forgotten and its lease record removed. Until then it is looked at again.
async fn unprojected(checker: &Checker, cause: &Cause) -> Outcome {
    let end = match cause.unprojected_end {
        Some(end) => end,
        None => match checker.events.watermarks(cause.partition).await {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::warn!(partition = cause.partition, error = %e, "reading the partition's end failed");
                return Outcome::Failed;
            }
        },
    };
    match checker.store.load_progress(&checker.events_topic).await {
        Ok(progress)
            if progress
                .get(&cause.partition)
                .is_some_and(|next| *next >= end) =>
        {
            Outcome::NotNeeded(EXPIRED)
        }
        Ok(_) => Outcome::Unprojected(end),
        Err(e) => {
            tracing::warn!(error = %e, "reading the projector's progress failed");
            Outcome::Failed
        }
    }
}

/// Loads `loads`' states from the projection: each one whose partition the projector applied
/// below its `before` (read first, so the row read after holds at least that much).
async fn load_states(checker: &Checker, loads: Vec<Load>) -> Loaded {
    let progress = match checker.store.load_progress(&checker.events_topic).await {
        Ok(progress) => progress,
        Err(e) => {
            tracing::warn!(error = %e, "reading the projector's progress failed; loads wait");
            return loads.into_iter().map(|load| (load, None)).collect();
        }
    };
    futures::stream::iter(loads)
        .map(|load| {
            let reached = progress
                .get(&load.partition)
                .is_some_and(|next| *next >= load.before);
            async move {
                if !reached {
                    return (load, None);
                }
                match checker.store.load_session(load.session).await {
                    Ok(row) => (load, Some(row.map(|p| (p.state, p.applied_offset)))),
                    Err(e) => {
                        tracing::warn!(session = %load.session, error = %e, "loading a session's state failed");
                        (load, None)
                    }
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// A group with no progress on the events topic (new) is given the topic's end as its
/// progress, so it starts there rather than waking every session history ever decided.
async fn start_new_group_at_the_end(settings: &Settings, group: &str) -> Result<()> {
    let kafka = settings.kafka.clone();
    let group = group.to_string();
    let partitions = sessionlog_log::topic::partition_count(&kafka, &kafka.topic).await?;
    // The range assignor gives a member the same partition numbers of both topics only when
    // they have as many partitions: a lease topic made otherwise would split a session's
    // events and leases between instances.
    let leases = sessionlog_log::topic::partition_count(&kafka, &kafka.lease_topic()).await?;
    if leases != partitions {
        return Err(sessionlog_log::Error::TopicMismatch {
            topic: kafka.lease_topic(),
            problem: format!(
                "it has {leases} partition(s), the events topic {partitions}: the wake component \
                 needs them equal (`sessionlog init` creates it so; `sessionlog doctor` reports it)"
            ),
        }
        .into());
    }
    tokio::task::spawn_blocking(move || -> Result<()> {
        let consumer: BaseConsumer = kafka
            .client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(sessionlog_log::Error::kafka(
                "create the wake group's first consumer",
            ))?;
        let timeout = Duration::from_secs(10);
        let mut wanted = TopicPartitionList::new();
        for partition in 0..partitions {
            wanted.add_partition(&kafka.topic, partition);
        }
        let committed =
            consumer
                .committed_offsets(wanted, timeout)
                .map_err(sessionlog_log::Error::kafka(
                    "read the wake group's progress",
                ))?;
        if committed
            .elements()
            .iter()
            .any(|e| matches!(e.offset(), Offset::Offset(_)))
        {
            return Ok(());
        }
        let mut ends = TopicPartitionList::new();
        for partition in 0..partitions {
            let (_, high) = consumer
                .fetch_watermarks(&kafka.topic, partition, timeout)
                .map_err(sessionlog_log::Error::kafka("read the events topic's end"))?;
            ends.add_partition_offset(&kafka.topic, partition, Offset::Offset(high))
                .map_err(sessionlog_log::Error::kafka("start the wake group"))?;
        }
        if let Err(e) = consumer.commit(&ends, CommitMode::Sync) {
            // Another instance starting at the same time may have joined the group first and
            // made this commit refused: its progress stands, and this instance joins it.
            let now = consumer.committed_offsets(ends.clone(), timeout).map_err(
                sessionlog_log::Error::kafka("read the wake group's progress"),
            )?;
            if now
                .elements()
                .iter()
                .any(|e| matches!(e.offset(), Offset::Offset(_)))
            {
                return Ok(());
            }
            return Err(
                sessionlog_log::Error::kafka("start the wake group at the topic's end")(e).into(),
            );
        }
        tracing::info!(
            group,
            partitions,
            "a new wake group starts at the events topic's end"
        );
        Ok(())
    })
    .await
    .map_err(|e| Error::Task(e.to_string()))?
}
