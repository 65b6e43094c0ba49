//! Where a reader of the whole topic starts: the first offset each partition holds, given
//! offsets, or the first record at or after a time. Replay and the OTLP export both start so.

use crate::{Error, KafkaSettings, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// Where a reader starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The first offset each partition still holds.
    Beginning,
    /// Given offsets by partition; partitions not named start at the beginning.
    Offsets(BTreeMap<i32, i64>),
    /// The first record at or after this time (milliseconds since the Unix epoch).
    Timestamp(i64),
}

/// `(partition, from, until)` for each wanted partition of `topic` (all when `wanted` is
/// `None`): `from` where `start` says, clamped to what the partition holds, `until` its end
/// now. Blocking (metadata and offset look-ups): call it off the async runtime.
pub fn partition_bounds(
    kafka: &KafkaSettings,
    topic: &str,
    start: &StartAt,
    wanted: Option<&[i32]>,
) -> Result<Vec<(i32, i64, i64)>> {
    let timeout = Duration::from_secs(10);
    let consumer: BaseConsumer = kafka
        .client_config()
        .create()
        .map_err(Error::kafka("create a partition planner"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(Error::kafka("fetch topic metadata"))?;
    let mut partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .filter(|p| wanted.is_none_or(|w| w.contains(p)))
        .collect();
    partitions.sort_unstable();
    let by_time = match start {
        StartAt::Timestamp(ms) => {
            let mut query = TopicPartitionList::new();
            for p in &partitions {
                query
                    .add_partition_offset(topic, *p, Offset::Offset(*ms))
                    .map_err(Error::kafka("build time query"))?;
            }
            let found = consumer
                .offsets_for_times(query, timeout)
                .map_err(Error::kafka("find offsets for time"))?;
            found
                .elements()
                .iter()
                .map(|e| (e.partition(), e.offset()))
                .collect()
        }
        _ => BTreeMap::new(),
    };
    let mut bounds = Vec::new();
    for p in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .map_err(Error::kafka("fetch watermarks"))?;
        let from = match start {
            StartAt::Beginning => low,
            StartAt::Offsets(offsets) => offsets.get(&p).copied().unwrap_or(low),
            // No record at or after the time: nothing to read in that partition.
            StartAt::Timestamp(_) => match by_time.get(&p) {
                Some(Offset::Offset(o)) => *o,
                _ => high,
            },
        };
        bounds.push((p, from.clamp(low, high), high));
    }
    Ok(bounds)
}
