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

mod checks;
mod cleanup;
mod feed;
mod group;

pub use error::{Error, Result};
pub use orphans::{OrphanedSession, orphaned};

use checks::{Checker, Checks, Loaded};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use group::{Assignment, WakeContext, start_new_group_at_the_end};
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::FutureProducer;
use sessionlog_log::lease::LeaseReader;
use sessionlog_log::{PartitionReader, Settings, WakeWriter};
use sessionlog_schemas::{EventDecoder, now_micros};
use sessionlog_store::ProjectionStore;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use watch::Watches;

/// How often due leases, pauses and repeats are looked at.
const TICK: Duration = Duration::from_millis(100);
/// How often the group's progress on the events topic is committed.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// Ticks between two updates of the orphaned-sessions gauges (a scan of every session).
const ORPHANS_EVERY_TICKS: u64 = 50;

/// The consumer group of the wake component on `settings`' topics.
pub fn wake_group(settings: &Settings) -> String {
    format!("sessionlog-wake-{}", settings.kafka.topic)
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
}
