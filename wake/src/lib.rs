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
//! A wake is a hint: the worker's claim through the fold decides who runs the session, and a
//! worker finding the session claimed since its wake is told "already taken". A wake no
//! harness answered (no new lease) is written again after `[wake] rewake_after_ms`.

pub mod error;
pub mod observe;
pub mod orphans;
pub mod watch;

pub use error::{Error, Result};
pub use orphans::{OrphanedSession, orphaned};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use sessionlog_log::lease::LeaseReader;
use sessionlog_log::{Settings, Wake, WakeWriter, wake::WAKE_VERSION};
use sessionlog_schemas::{EventDecoder, Micros, SessionId, now_micros};
use sessionlog_store::ProjectionStore;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use watch::{Cause, Watches};

/// How often due leases, pauses and repeats are looked at.
const TICK: Duration = Duration::from_millis(100);
/// How often the group's progress on the events topic is committed.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// How soon a cause the projection has not reached yet is looked at again, in microseconds.
const RETRY_MICROS: Micros = 200_000;
/// Ticks between two updates of the orphaned-sessions gauges (a scan of every session).
const ORPHANS_EVERY_TICKS: u64 = 50;
/// Causes checked and written at once: a mass expiry is a thousand store reads and writes.
const CONCURRENCY: usize = 64;

/// What checking a cause needs, shared by the checks in flight.
struct Checker {
    store: ProjectionStore,
    log: Arc<WakeWriter>,
    /// The lease topic read afresh before a lapsed lease wakes anyone (see [`wake_one`]).
    leases: LeaseReader,
}

/// The causes being checked and those waiting for a turn. A check runs beside the loop that
/// reads leases and events, so a cause found while others are checked starts as soon as one
/// ends instead of after the whole batch (a mass expiry came due over a second or two, and
/// each tick's batch waited for its slowest check). One check at a time per session keeps a
/// session's outcomes in the order of its causes.
#[derive(Default)]
struct Checks {
    running: FuturesUnordered<BoxFuture<'static, (Cause, Outcome)>>,
    sessions: HashSet<SessionId>,
    waiting: VecDeque<Cause>,
}

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
        Ok(Self {
            checker: Arc::new(Checker {
                store,
                log,
                leases: LeaseReader::new(&settings.kafka, partitions),
            }),
            checks: Checks::default(),
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
                    let message = message.map_err(sessionlog_log::Error::kafka("read"))?;
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
                        self.on_event(partition, offset, payload.as_deref()).await?;
                    }
                }
                Some((cause, outcome)) = self.checks.running.next(),
                    if !self.checks.running.is_empty() =>
                {
                    self.checks.sessions.remove(&cause.session);
                    self.settle(&cause, outcome);
                    self.start_checks();
                }
                _ = tick.tick() => {
                    self.rebalanced().await;
                    let due = self.watches.due(now_micros());
                    self.check(due);
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(ORPHANS_EVERY_TICKS) {
                        observe::orphaned(&self.watches.orphaned(), now_micros());
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
            Some(session) => self.watches.on_lease(partition, session, value),
            None => tracing::warn!(partition, "a lease record without a session key; skipped"),
        }
    }

    async fn on_event(
        &mut self,
        partition: i32,
        offset: i64,
        payload: Option<&[u8]>,
    ) -> Result<()> {
        self.mark(partition, offset + 1);
        let Some(payload) = payload else {
            return Ok(());
        };
        // A record that does not decode is the projector's to dead-letter; it wakes nobody.
        let envelope = match self.decoder.decode(payload).await {
            Ok(envelope) => envelope,
            Err(e) if e.is_retriable() => return Err(e.into()),
            Err(e) => {
                tracing::debug!(partition, offset, error = %e, "undecodable record skipped");
                return Ok(());
            }
        };
        if let Some(cause) = self
            .watches
            .on_event(partition, offset, &envelope, now_micros())
        {
            self.check(vec![cause]);
        }
        Ok(())
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
        self.checks.waiting.extend(causes);
        self.start_checks();
    }

    fn start_checks(&mut self) {
        let checks = &mut self.checks;
        // A cause of a session being checked waits for that check's outcome.
        let mut held = Vec::new();
        while checks.running.len() < CONCURRENCY
            && let Some(cause) = checks.waiting.pop_front()
        {
            if !checks.sessions.insert(cause.session) {
                held.push(cause);
                continue;
            }
            let checker = Arc::clone(&self.checker);
            checks.running.push(Box::pin(async move {
                let outcome = wake_one(&checker, &cause).await;
                (cause, outcome)
            }));
        }
        for cause in held.into_iter().rev() {
            checks.waiting.push_front(cause);
        }
    }

    /// Records a check's outcome in the watches.
    fn settle(&mut self, cause: &Cause, outcome: Outcome) {
        match outcome {
            Outcome::Woken => self.watches.woke(cause, self.rewake_at()),
            Outcome::NotNeeded(why @ ENDED) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.ended(cause.session);
            }
            Outcome::NotNeeded(why) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.settled(cause);
            }
            Outcome::Later => self
                .watches
                .retry(cause, now_micros().saturating_add(RETRY_MICROS)),
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

/// Why an ended session needs no wake (and is forgotten).
const ENDED: &str = "the session ended";

enum Outcome {
    Woken,
    Later,
    NotNeeded(&'static str),
    Failed,
}

/// Writes `cause`'s wake if the session, as projected, still needs a harness.
///
/// A lapsed lease is first read afresh from the lease topic: this instance's own reading may
/// trail it (a burst of events to judge, a partition re-read), and waking a session whose
/// harness renewed meanwhile would have a worker's claim fence a live harness.
async fn wake_one(checker: &Checker, cause: &Cause) -> Outcome {
    let Checker { store, log, leases } = checker;
    if cause.reason == sessionlog_log::WakeReason::LeaseExpired {
        match leases.read(cause.session).await {
            Ok(Some(lease)) if lease.is_live(now_micros()) && lease.epoch >= cause.epoch => {
                return Outcome::NotNeeded("its lease was renewed");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(session = %cause.session, error = %e, "reading the lease afresh failed");
                return Outcome::Failed;
            }
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
        // Not projected at all (the projector is down, or the session's rows expired): not
        // something a quick retry mends; looked at again after the re-wake interval.
        Ok(None) => return Outcome::Failed,
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "reading the session for a wake failed");
            return Outcome::Failed;
        }
    };
    let state = &projected.state;
    if state.terminal.is_some() || state.erased {
        return Outcome::NotNeeded(ENDED);
    }
    if cause.reason != sessionlog_log::WakeReason::PauseElapsed && state.paused {
        return Outcome::NotNeeded("the session is paused");
    }
    if !state.pending_approvals.is_empty() {
        return Outcome::NotNeeded("the session waits for an approval");
    }
    if state
        .pending_calls
        .values()
        .any(|c| c.resolution_required.is_some())
    {
        return Outcome::NotNeeded("the session waits for an operator");
    }
    if state.epoch > cause.epoch {
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
