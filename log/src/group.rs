//! What an operator asks of a consumer group: how far behind the log each partition is, and
//! which instances are in the group now (`sessionlog status`).

use crate::positions::{StartAt, partition_bounds};
use crate::{Error, KafkaSettings, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use std::time::Duration;

/// One partition of a topic: the offsets it holds now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionSpan {
    /// The partition.
    pub partition: i32,
    /// The first offset it still holds.
    pub start: i64,
    /// The offset the next record will get.
    pub end: i64,
}

impl PartitionSpan {
    /// How many records it holds.
    pub fn records(&self) -> i64 {
        (self.end - self.start).max(0)
    }
}

/// A topic's partitions and what each holds (no partitions: the topic does not exist).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicSpan {
    /// The topic.
    pub topic: String,
    /// Its partitions, in order.
    pub partitions: Vec<PartitionSpan>,
}

impl TopicSpan {
    /// Whether the cluster has the topic.
    pub fn exists(&self) -> bool {
        !self.partitions.is_empty()
    }

    /// Records held over all partitions: end minus start, summed.
    pub fn records(&self) -> i64 {
        self.partitions.iter().map(PartitionSpan::records).sum()
    }
}

/// One partition as a consumer group sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    /// The partition.
    pub partition: i32,
    /// The first offset it still holds.
    pub start: i64,
    /// The offset the next record will get.
    pub end: i64,
    /// The group's committed offset (the next record it will read), if it committed one.
    pub committed: Option<i64>,
    /// Records the group has not consumed: end minus the committed offset (minus the start
    /// when it committed none, or committed below what the partition still holds).
    pub lag: i64,
}

/// A member of a consumer group: one running instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// The client id it connected with.
    pub client_id: String,
    /// The host it connected from.
    pub host: String,
}

/// A consumer group's position on one topic and its live members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupStatus {
    /// The group.
    pub group: String,
    /// The coordinator's state for it (`Stable`, `Empty`, `Dead` for a group never seen, ...).
    pub state: String,
    /// Its members now.
    pub members: Vec<GroupMember>,
    /// Each partition of the topic with the group's lag on it.
    pub partitions: Vec<PartitionLag>,
}

impl GroupStatus {
    /// Lag over all partitions.
    pub fn total_lag(&self) -> i64 {
        self.partitions.iter().map(|p| p.lag).sum()
    }
}

/// The lag of a group on a partition that holds `start..end`, having committed `committed`.
pub fn lag(start: i64, end: i64, committed: Option<i64>) -> i64 {
    let from = committed.unwrap_or(start).max(start);
    (end - from).max(0)
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// The partitions of `topic` and the offsets each holds now.
pub async fn topic_span(kafka: &KafkaSettings, topic: &str) -> Result<TopicSpan> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let partitions = partition_bounds(&kafka, &topic, &StartAt::Beginning, None)?
            .into_iter()
            .map(|(partition, start, end)| PartitionSpan {
                partition,
                start,
                end,
            })
            .collect();
        Ok(TopicSpan { topic, partitions })
    })
    .await
    .unwrap_or_else(|e| Err(Error::Task(e.to_string())))
}

/// `group`'s committed offsets and lag on every partition of `topic`, and its members, as the
/// group's coordinator reports them. Reads only: the client does not join the group.
pub async fn group_status(kafka: &KafkaSettings, topic: &str, group: &str) -> Result<GroupStatus> {
    let span = topic_span(kafka, topic).await?;
    let (kafka, topic, group) = (kafka.clone(), topic.to_string(), group.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka
            .client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(Error::kafka("create a group reader"))?;
        let mut wanted = TopicPartitionList::new();
        for p in &span.partitions {
            wanted.add_partition(&topic, p.partition);
        }
        let committed = if span.partitions.is_empty() {
            TopicPartitionList::new()
        } else {
            consumer
                .committed_offsets(wanted, TIMEOUT)
                .map_err(Error::kafka("fetch committed offsets"))?
        };
        let partitions = span
            .partitions
            .iter()
            .map(|p| {
                let offset =
                    committed
                        .find_partition(&topic, p.partition)
                        .and_then(|e| match e.offset() {
                            Offset::Offset(o) => Some(o),
                            _ => None,
                        });
                PartitionLag {
                    partition: p.partition,
                    start: p.start,
                    end: p.end,
                    committed: offset,
                    lag: lag(p.start, p.end, offset),
                }
            })
            .collect();
        let groups = consumer
            .fetch_group_list(Some(&group), TIMEOUT)
            .map_err(Error::kafka("describe the consumer group"))?;
        let info = groups.groups().iter().find(|g| g.name() == group);
        let members = info
            .map(|g| {
                g.members()
                    .iter()
                    .map(|m| GroupMember {
                        member_id: m.id().to_string(),
                        client_id: m.client_id().to_string(),
                        host: m.client_host().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(GroupStatus {
            state: info.map_or_else(|| "Dead".to_string(), |g| g.state().to_string()),
            group,
            members,
            partitions,
        })
    })
    .await
    .unwrap_or_else(|e| Err(Error::Task(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_counts_from_the_commit_or_from_what_the_partition_still_holds() {
        assert_eq!(lag(0, 10, None), 10);
        assert_eq!(lag(4, 10, None), 6);
        assert_eq!(lag(0, 10, Some(7)), 3);
        assert_eq!(lag(0, 10, Some(10)), 0);
        // Committed below what retention kept: only what is still there is behind.
        assert_eq!(lag(5, 10, Some(2)), 5);
        assert_eq!(lag(0, 0, None), 0);
    }
}
