//! Ops replay: rebuild the projections into a keyspace from chosen log positions.
//!
//! Reads partitions with [`PartitionReader`] (manual assignment, no consumer group, nothing
//! committed) and applies them with the same [`Applier`] as the live worker, so a replay
//! writes exactly what the worker would. Progress is stored in the target keyspace after each
//! batch, so a replay that stops resumes where it was. A dry run folds without writing.

use crate::apply::{Applier, BatchStats};
use crate::{Error, ProjectionStore, Result};
use sessionlog_log::retry::{self, Retryable};
use sessionlog_log::{PartitionReader, RawRecord, Settings};
use sessionlog_schemas::EventDecoder;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where a replay starts reading.
pub use sessionlog_log::StartAt;

/// One partition's share of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PartitionRange {
    /// The partition.
    pub partition: i32,
    /// First offset to read.
    pub from: i64,
    /// Offset after the last one to read (the partition's end when the replay was planned).
    pub until: i64,
}

impl PartitionRange {
    /// Records in the range.
    pub fn len(&self) -> u64 {
        (self.until - self.from).max(0) as u64
    }

    /// Whether there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a replay does.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Where to start.
    pub start: StartAt,
    /// Only these partitions (all when `None`).
    pub partitions: Option<Vec<i32>>,
    /// Fold without writing anything.
    pub dry_run: bool,
    /// Records per batch.
    pub batch: usize,
    /// Concurrent CQL writes per batch.
    pub write_concurrency: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            start: StartAt::Beginning,
            partitions: None,
            dry_run: false,
            batch: 2_000,
            write_concurrency: 64,
        }
    }
}

/// What a replay did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplaySummary {
    /// The ranges read.
    pub ranges: Vec<PartitionRange>,
    /// Records by outcome.
    pub consumed: u64,
    /// Events accepted.
    pub accepted: u64,
    /// Events rejected by the fold (in `rejected_events`).
    pub rejected: u64,
    /// Records that could not be decoded (counted; the live worker dead-letters them).
    pub dead_lettered: u64,
    /// Records skipped because the target already had them.
    pub skipped: u64,
    /// Wall time.
    pub seconds: f64,
}

/// A planned replay of `settings.kafka.topic` into `settings.cql.keyspace`.
pub struct Replay {
    settings: Settings,
    options: ReplayOptions,
    store: Option<ProjectionStore>,
    ranges: Vec<PartitionRange>,
}

impl Replay {
    /// Connects (migrating the target keyspace unless dry), then plans each partition's range:
    /// from the requested start, or from the target's stored progress if that is later
    /// (resuming), to the partition's current end.
    pub async fn plan(settings: &Settings, options: ReplayOptions) -> Result<Self> {
        let store = if options.dry_run {
            None
        } else {
            Some(
                ProjectionStore::migrate(&settings.cql)
                    .await?
                    .with_ended_session_ttl(settings.retention.ended_session_ttl_secs)
                    .await?,
            )
        };
        if let Some(store) = &store {
            store
                .fix_trace_day_buckets(settings.projector.trace_day_buckets)
                .await?;
        }
        let topic = settings.kafka.topic.clone();
        let stored = match &store {
            Some(store) => store.load_progress(&topic).await?,
            None => BTreeMap::new(),
        };
        let kafka = settings.kafka.clone();
        let start = options.start.clone();
        let wanted = options.partitions.clone();
        let bounds = retry_kafka("plan partitions", || {
            let (kafka, topic, start, wanted) =
                (kafka.clone(), topic.clone(), start.clone(), wanted.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    Ok(sessionlog_log::partition_bounds(
                        &kafka,
                        &topic,
                        &start,
                        wanted.as_deref(),
                    )?)
                })
                .await
                .map_err(|e| sessionlog_log::Error::Task(e.to_string()))?
            }
        })
        .await?;
        let ranges = bounds
            .into_iter()
            .map(|(partition, from, until)| PartitionRange {
                partition,
                from: from.max(stored.get(&partition).copied().unwrap_or(0)),
                until,
            })
            .collect();
        Ok(Self {
            settings: settings.clone(),
            options,
            store,
            ranges,
        })
    }

    /// The ranges this replay reads.
    pub fn ranges(&self) -> &[PartitionRange] {
        &self.ranges
    }

    /// Records still to read.
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(PartitionRange::len).sum()
    }

    /// Runs the replay, adding each batch's record count to `done` as it goes (for a
    /// progress bar). Partitions replay concurrently; within one, reading the next batch
    /// overlaps writing the previous.
    pub async fn run(self, done: Arc<AtomicU64>) -> Result<ReplaySummary> {
        let started = Instant::now();
        let decoder = EventDecoder::new(self.settings.registry.client()?);
        let ranges: Vec<&PartitionRange> = self.ranges.iter().filter(|r| !r.is_empty()).collect();
        // The projector's session cache, shared out among the partitions replayed at once, so
        // memory does not grow with the number of sessions in the topic.
        let cache_sessions = (self.settings.projector.cache_sessions / ranges.len().max(1)).max(1);
        let jobs = ranges.into_iter().map(|range| {
            let applier = Applier::new(
                self.store.clone(),
                decoder.clone(),
                &self.settings.kafka,
                self.options.write_concurrency,
                cache_sessions,
            )
            .with_context_policies(self.settings.context.clone())
            .with_trace_day_buckets(self.settings.projector.trace_day_buckets);
            replay_partition(
                &self.settings,
                *range,
                applier,
                self.options.batch.max(1),
                Arc::clone(&done),
            )
        });
        let mut stats = BatchStats::default();
        for partition_stats in futures::future::try_join_all(jobs).await? {
            stats += partition_stats;
        }
        Ok(ReplaySummary {
            ranges: self.ranges.clone(),
            consumed: stats.consumed as u64,
            accepted: stats.accepted as u64,
            rejected: stats.rejected as u64,
            dead_lettered: stats.dead_lettered as u64,
            skipped: stats.skipped as u64,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

async fn replay_partition(
    settings: &Settings,
    range: PartitionRange,
    mut applier: Applier,
    batch: usize,
    done: Arc<AtomicU64>,
) -> Result<BatchStats> {
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    let read = |from: i64| {
        let reader = &reader;
        async move {
            let until = (from + batch as i64).min(range.until);
            retry_kafka("read partition", || async {
                let mut records: Vec<RawRecord> = Vec::new();
                let next = reader
                    .read_range(range.partition, from, until, &mut |r| records.push(r))
                    .await?;
                Ok((records, next))
            })
            .await
        }
    };
    let mut stats = BatchStats::default();
    let (mut records, mut next) = read(range.from).await?;
    loop {
        if records.is_empty() {
            break;
        }
        let folded = applier.fold(&records).await?;
        stats += folded.stats;
        let count = records.len() as u64;
        let more = next < range.until;
        let (_, upcoming) = tokio::join!(applier.persist(&folded), async {
            if more {
                read(next).await.map(Some)
            } else {
                Ok(None)
            }
        });
        done.fetch_add(count, Ordering::Relaxed);
        if applier.cache_full() {
            // The batch above is durable, so a dropped session reloads from its stored row.
            applier.forget();
        }
        match upcoming? {
            Some((r, n)) => (records, next) = (r, n),
            None => break,
        }
    }
    Ok(stats)
}

/// How long a replay keeps retrying Kafka (a broker restarting, a leader moving) before it gives up.
const KAFKA_PATIENCE: Duration = Duration::from_secs(180);

/// Retries `op` with capped backoff while Kafka fails, for at most [`KAFKA_PATIENCE`].
async fn retry_kafka<T, F, Fut>(what: &'static str, op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    op.retry(retry::within(KAFKA_PATIENCE))
        .when(|e| matches!(e, Error::Log(_)))
        .notify(|e, wait| tracing::warn!(error = %e, what, ?wait, "kafka unavailable; retrying"))
        .await
}
