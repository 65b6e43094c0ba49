//! The consumer group over the events and lease topics: which partitions this instance owns,
//! reading the lease partitions assigned from their start, and the progress it commits.

use crate::{Error, Result, WakeService};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sessionlog_log::Settings;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Partitions assigned and revoked, as the rebalance callbacks report them.
#[derive(Default)]
pub(super) struct Assignment {
    pub(super) revoked: HashSet<i32>,
    /// Lease-topic partitions assigned since the loop last looked: each is read from its start.
    pub(super) leases_assigned: Vec<i32>,
    /// Events-topic partitions owned, with the next offset to commit.
    pub(super) owned: BTreeMap<i32, i64>,
}

pub(super) struct WakeContext {
    pub(super) events_topic: String,
    pub(super) lease_topic: String,
    pub(super) assignment: Arc<Mutex<Assignment>>,
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

impl WakeService {
    /// Applies what the rebalance callbacks reported: revoked partitions are forgotten, and
    /// lease partitions assigned are read from their start before their leases may lapse.
    pub(super) async fn rebalanced(&mut self) {
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
    pub(super) async fn learn_lease_targets(&mut self) {
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
    pub(super) fn lease_read(&mut self, partition: i32, offset: i64) {
        if let Some(Some(end)) = self.lease_targets.get(&partition)
            && offset + 1 >= *end
        {
            self.lease_targets.remove(&partition);
            self.watches.caught_up(partition);
        }
    }

    pub(super) fn mark(&self, partition: i32, next: i64) {
        let mut assignment = self
            .assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(owned) = assignment.owned.get_mut(&partition) {
            *owned = next;
        }
    }

    /// Commits the progress on the owned events partitions, never past a pause still waiting
    /// for its time.
    pub(super) fn commit(&self, mode: CommitMode) {
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

/// A group with no progress on the events topic (new) is given the topic's end as its
/// progress, so it starts there rather than waking every session history ever decided.
pub(super) async fn start_new_group_at_the_end(settings: &Settings, group: &str) -> Result<()> {
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
