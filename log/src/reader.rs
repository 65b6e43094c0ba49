//! Reading one partition between two offsets: recovery's rebuild and a writer's read-back.

use crate::{Error, KafkaSettings, Result};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

/// One record as it sits in the log, undecoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// The record key (a session id as text).
    pub key: Option<Vec<u8>>,
    /// The Confluent-framed Avro body.
    pub payload: Option<Vec<u8>>,
    /// The broker's or producer's timestamp, in milliseconds.
    pub timestamp_ms: Option<i64>,
}

/// Reads a partition from an offset to the end it had when the read began.
///
/// Uses manual assignment and never commits: recovery must not disturb any consumer group.
pub struct PartitionReader {
    consumer: StreamConsumer,
    topic: String,
}

impl PartitionReader {
    /// A reader of `topic` on the cluster of `settings`.
    pub fn new(settings: &KafkaSettings, topic: &str) -> Result<Self> {
        let consumer: StreamConsumer = settings
            .client_config()
            // assign() needs a group id even though nothing is ever committed.
            .set("group.id", "sessionlog-reader")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(Error::kafka("create reader"))?;
        Ok(Self {
            consumer,
            topic: topic.to_string(),
        })
    }

    /// The low and high watermarks of a partition (first offset, next offset to be written).
    pub async fn watermarks(&self, partition: i32) -> Result<(i64, i64)> {
        let consumer = &self.consumer;
        let topic = self.topic.clone();
        // fetch_watermarks blocks; it is a single round trip, so block_in_place is enough.
        tokio::task::block_in_place(|| {
            consumer
                .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                .map_err(Error::kafka("fetch watermarks"))
        })
    }

    /// Calls `visit` for every record of `partition` from `from` (inclusive) up to the partition's
    /// end as of now. Returns the offset after the last record read.
    pub async fn read_to_end(
        &self,
        partition: i32,
        from: i64,
        mut visit: impl FnMut(RawRecord),
    ) -> Result<i64> {
        let (low, high) = self.watermarks(partition).await?;
        self.read_range(partition, from.max(low), high, &mut visit)
            .await
    }

    /// Calls `visit` for every record of `partition` with `from <= offset < until`.
    pub async fn read_range(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        visit: &mut impl FnMut(RawRecord),
    ) -> Result<i64> {
        if from >= until {
            return Ok(from);
        }
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, Offset::Offset(from))
            .map_err(Error::kafka("build assignment"))?;
        self.consumer
            .assign(&assignment)
            .map_err(Error::kafka("assign partition"))?;
        let mut next = from;
        while next < until {
            let message = tokio::time::timeout(Duration::from_secs(30), self.consumer.recv())
                .await
                .map_err(|_| Error::Timeout {
                    what: format!("{}[{partition}] offset {next}", self.topic),
                    seconds: 30,
                })?
                .map_err(Error::kafka("read partition"))?;
            if message.partition() != partition || message.offset() < next {
                continue;
            }
            next = message.offset() + 1;
            if message.offset() >= until {
                break;
            }
            visit(RawRecord {
                partition,
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec),
                timestamp_ms: message.timestamp().to_millis(),
            });
        }
        Ok(next)
    }
}
