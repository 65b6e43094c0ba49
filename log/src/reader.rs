//! Reading one partition between two offsets: recovery's rebuild and a writer's read-back.

use crate::retry::{self, Retryable};
use crate::{Error, KafkaSettings, Result};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far apart two offsets one read takes as one range may be: up to this many records of
/// other sessions are read and dropped rather than paying a new assignment and fetch (a round
/// trip) for the next wanted record. 256 made a fleet restart read 1.5 records per event it
/// folded, 32 reads 1.03, in the same total time (docs/performance.md, "A thousand resumes").
pub const OFFSET_GAP: i64 = 32;

/// How long a read may go without progress before it fails.
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Errors a read rides out: a broker restarting or a leader moving heals by itself within the
/// stall limit, and a consumer reports them as messages on its queue.
pub(crate) fn is_transient(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    match error {
        KafkaError::PartitionEOF(_) => true,
        KafkaError::MessageConsumption(code) | KafkaError::MetadataFetch(code) => matches!(
            code,
            C::BrokerTransportFailure
                // A request in flight to a broker that just died (the cluster soak's broker kill).
                | C::DestroyBroker
                | C::AllBrokersDown
                | C::NetworkException
                | C::RequestTimedOut
                | C::OperationTimedOut
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
                | C::NotCoordinator
                | C::UnknownTopicOrPartition
                // librdkafka's own: its metadata lacks the partition while the leader moves.
                | C::UnknownPartition
        ),
        _ => false,
    }
}

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
    /// The record's headers with a value, in order (a dead letter's origin, say).
    pub headers: Vec<(String, Vec<u8>)>,
}

impl RawRecord {
    /// The record as a consumer received it.
    pub fn of(message: &impl Message) -> Self {
        use rdkafka::message::Headers;
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .filter_map(|h| h.value.map(|v| (h.key.to_string(), v.to_vec())))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            timestamp_ms: message.timestamp().to_millis(),
            headers,
        }
    }

    /// The event the record holds, checked against its key. `Err` carries the reason the
    /// record will never decode (the projector dead-letters it with that reason); a registry
    /// outage is not the record's fault, so it is retried until the registry answers.
    pub async fn decode(
        &self,
        decoder: &sessionlog_schemas::EventDecoder,
    ) -> std::result::Result<sessionlog_schemas::EventEnvelope, String> {
        use backon::BackoffBuilder;
        // Built at the first outage only: this runs for every record the projector reads.
        let mut waits = None;
        loop {
            match self.try_decode(decoder).await {
                Ok(decoded) => return decoded,
                Err(Error::Registry(e)) => {
                    let wait = waits
                        .get_or_insert_with(|| retry::forever().build())
                        .next()
                        .unwrap_or(retry::MAX_DELAY);
                    tracing::warn!(error = %e, ?wait, "schema registry unavailable; retrying");
                    tokio::time::sleep(wait).await;
                }
                // `try_decode` fails only with a registry outage.
                Err(other) => return Err(other.to_string()),
            }
        }
    }

    /// One attempt at [`Self::decode`], for a caller that must not wait out an outage (an
    /// operator's command): `Ok` holds what `decode` answers, `Err` a registry outage
    /// ([`Error::Registry`]).
    pub async fn try_decode(
        &self,
        decoder: &sessionlog_schemas::EventDecoder,
    ) -> Result<std::result::Result<sessionlog_schemas::EventEnvelope, String>> {
        let Some(payload) = self.payload.as_deref() else {
            return Ok(Err("empty record value".into()));
        };
        let event = match decoder.decode(payload).await {
            Ok(event) => event,
            Err(e) if e.is_retriable() => return Err(Error::Registry(e)),
            Err(e) => return Ok(Err(e.to_string())),
        };
        let expected_key = event.session_id.to_string();
        if self.key.as_deref() != Some(expected_key.as_bytes()) {
            return Ok(Err(format!(
                "record key {:?} is not the event's session id {expected_key}",
                self.key.as_deref().map(String::from_utf8_lossy)
            )));
        }
        Ok(Ok(event))
    }

    /// `event` (this record's, decoded) if the record sits on the partition its key pins it
    /// to in a topic of `partitions`; else why it cannot be folded. A producer with its own
    /// partitioner could put a session's record elsewhere: folded there, it would stand
    /// outside the session's order, and a reader of the session's partition would never see it.
    pub fn on_pinned_partition(
        &self,
        event: sessionlog_schemas::EventEnvelope,
        partitions: i32,
    ) -> std::result::Result<sessionlog_schemas::EventEnvelope, String> {
        let pinned = crate::partitioner::partition_for(event.session_id, partitions.max(1));
        if pinned == self.partition {
            return Ok(event);
        }
        Err(format!(
            "wrong partition: session {} is pinned to partition {pinned} of {partitions} (murmur2 \
             of its key), and this record is on partition {}; a producer that does not use \
             Kafka's default (murmur2) partitioner wrote it, so it is not part of the session",
            event.session_id, self.partition
        ))
    }

    /// The value of header `key`, as text, if the record has it.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// Reads a partition from an offset to the end it had when the read began.
///
/// Uses manual assignment and never commits: recovery must not disturb any consumer group.
pub struct PartitionReader {
    consumer: Arc<StreamConsumer>,
    topic: String,
    /// The topic is compacted: its offsets have holes, and the end of a read is where the
    /// partition ends (see [`Self::for_compacted`]).
    compacted: bool,
}

impl PartitionReader {
    /// A reader of `topic` on the cluster of `settings`, prefetching for long reads (a replay,
    /// a rebuild from a partition's start).
    pub fn new(settings: &KafkaSettings, topic: &str) -> Result<Self> {
        // librdkafka prefetches up to 100,000 records or 64 MiB per partition by default, at
        // several hundred bytes of bookkeeping per record on top of its payload: about 50 MiB
        // per partition of small events, and a replay reads every partition at once. 10,000
        // records still keep several batches ahead of the fold.
        Self::with_prefetch(settings, topic, 10_000, 8192)
    }

    /// A reader for short reads (a read-back, a catch-up, a rebuild from a checkpoint), as a
    /// process keeps dozens of: it queues at most 1 MiB of prefetched records (plus the fetch
    /// in flight, up to `max.partition.fetch.bytes`, 1 MiB by default), so a pool of 64 holds
    /// at most about 128 MiB however many sessions it serves.
    pub fn for_short_reads(settings: &KafkaSettings, topic: &str) -> Result<Self> {
        Self::with_prefetch(settings, topic, 1_000, 1024)
    }

    /// A reader of a compacted topic (the lease topic): a record past the offset wanted is
    /// taken for a hole compaction left, not a record fetched for an earlier read, so the
    /// reader may be reused only for reads of each partition that start where its last read
    /// of that partition stopped or later ([`crate::lease::LeaseReader`]); a read ends where
    /// the partition does.
    pub fn for_compacted(settings: &KafkaSettings, topic: &str) -> Result<Self> {
        let mut reader = Self::with_config(settings, topic, 1_000, 1024, true)?;
        reader.compacted = true;
        Ok(reader)
    }

    fn with_prefetch(
        settings: &KafkaSettings,
        topic: &str,
        min_messages: u32,
        max_kbytes: u32,
    ) -> Result<Self> {
        Self::with_config(settings, topic, min_messages, max_kbytes, false)
    }

    fn with_config(
        settings: &KafkaSettings,
        topic: &str,
        min_messages: u32,
        max_kbytes: u32,
        partition_eof: bool,
    ) -> Result<Self> {
        let consumer: StreamConsumer = settings
            .client_config()
            .set("enable.partition.eof", partition_eof.to_string())
            // assign() needs a group id even though nothing is ever committed.
            .set("group.id", "sessionlog-reader")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("queued.min.messages", min_messages.to_string())
            .set("queued.max.messages.kbytes", max_kbytes.to_string())
            // With thresholds this low a single fetch (1 MiB of small events) crosses them, and
            // librdkafka then postpones the partition's next fetch by this long (1 s by
            // default), also for the next read of a reused reader: one short read in fifty
            // waited a second (the MCP bench's `history_read` p99).
            .set("fetch.queue.backoff.ms", "5")
            // A fetch that finds nothing new waits this long at the broker, and a reader can
            // only fetch its next range once the last fetch came back: with librdkafka's 500 ms
            // every read-back of a reused reader (a confirmed append) waited half a second.
            .set("fetch.wait.max.ms", "10")
            .create()
            .map_err(Error::kafka("create reader"))?;
        Ok(Self {
            consumer: Arc::new(consumer),
            topic: topic.to_string(),
            compacted: false,
        })
    }

    /// The low and high watermarks of a partition (first offset, next offset to be written).
    pub async fn watermarks(&self, partition: i32) -> Result<(i64, i64)> {
        let fetch = || async {
            let consumer = Arc::clone(&self.consumer);
            let topic = self.topic.clone();
            // fetch_watermarks blocks the thread for a round trip: keep it off the runtime.
            tokio::task::spawn_blocking(move || {
                consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))
            })
            .await
            .map_err(|e| Error::Task(e.to_string()))?
            .map_err(Error::kafka("fetch watermarks"))
        };
        watermarks_retried(partition, fetch).await
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

    /// Calls `visit` for the records at the given offsets of `partition` (in ascending order),
    /// reading offsets at most [`OFFSET_GAP`] apart with one assignment: the way to skip other
    /// sessions' records when an index says where this session's are. Returns how many
    /// records it read from the log, those dropped between wanted offsets included.
    pub async fn read_offsets(
        &self,
        partition: i32,
        offsets: &[i64],
        visit: &mut impl FnMut(RawRecord),
    ) -> Result<usize> {
        let mut sorted = offsets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut read = 0;
        // Offsets at most OFFSET_GAP apart are read as one range, and the records between
        // them dropped: each new range is an assignment and a fetch, and the fetch for one
        // offset has usually brought the next already (a take's rebuild read a session's start
        // and its first turns, a few dozen records apart, as two fetches of the same data).
        for span in sorted.chunk_by(|a, b| b.saturating_sub(*a) <= OFFSET_GAP) {
            let (first, last) = (span[0], span[span.len() - 1]);
            self.read_range(partition, first, last.saturating_add(1), &mut |record| {
                read += 1;
                if span.binary_search(&record.offset).is_ok() {
                    visit(record);
                }
            })
            .await?;
        }
        Ok(read)
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
        self.assign_at(partition, from)?;
        let mut next = from;
        let mut progress = Instant::now();
        while next < until {
            let waited = progress.elapsed();
            let message = match tokio::time::timeout(
                STALL_LIMIT.saturating_sub(waited),
                self.consumer.recv(),
            )
            .await
            {
                Err(_) => {
                    return Err(Error::Timeout {
                        what: format!("{}[{partition}] offset {next}", self.topic),
                        seconds: STALL_LIMIT.as_secs(),
                    });
                }
                // A compacted partition's last offsets may be gone: its end is the end.
                Ok(Err(KafkaError::PartitionEOF(p))) if self.compacted && p == partition => break,
                Ok(Err(e)) if is_transient(&e) => {
                    tracing::debug!(error = %e, partition, next, "transient read error; waiting");
                    continue;
                }
                Ok(Err(e)) => return Err(Error::kafka("read partition")(e)),
                Ok(Ok(message)) => message,
            };
            if message.partition() != partition || message.offset() < next {
                continue;
            }
            if message.offset() > next
                && !self.compacted
                && !self.truly_missing(partition, next).await?
            {
                // Our topic's offsets have no holes (no transactions, no compaction), so a
                // record past the one wanted was fetched for something else (a consumer reused
                // across reads): read from `next` again rather than skip what lies between.
                self.assign_at(partition, next)?;
                continue;
            }
            progress = Instant::now();
            next = message.offset() + 1;
            if message.offset() >= until {
                break;
            }
            visit(RawRecord::of(&message));
        }
        // Stop fetching ahead: an idle reader (kept for the next read-back) fetches nothing.
        let _ = self.consumer.unassign();
        // What was fetched ahead for the ended assignment stays queued until the next poll,
        // which discards it: a read that stopped mid-partition would leave its reader holding
        // up to its prefetch (about 2 MiB; a pool of 64 held 130 MiB more in a fleet restart
        // whose rebuilds stopped mid-partition). Polls that never wait discard it now; each
        // stops at an event that is not a stale record (an error report), hence a few. A
        // fetch still in flight lands later and waits for this reader's next read.
        for _ in 0..4 {
            if futures::FutureExt::now_or_never(self.consumer.recv()).is_none() {
                break;
            }
        }
        Ok(next)
    }

    /// Points the consumer at `offset` of `partition` (and nothing else).
    fn assign_at(&self, partition: i32, offset: i64) -> Result<()> {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, Offset::Offset(offset))
            .map_err(Error::kafka("build assignment"))?;
        self.consumer
            .assign(&assignment)
            .map_err(Error::kafka("assign partition"))
    }

    /// Whether `partition` has no record at `offset` any more: retention removed it.
    async fn truly_missing(&self, partition: i32, offset: i64) -> Result<bool> {
        Ok(self.watermarks(partition).await?.0 > offset)
    }
}

/// Runs `fetch`, a watermark round trip of `partition`, again while its broker is restarting,
/// within the stall limit: shared by readers and the tail.
pub(crate) async fn watermarks_retried<F, Fut>(partition: i32, fetch: F) -> Result<(i64, i64)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(i64, i64)>>,
{
    fetch
        .retry(retry::within(STALL_LIMIT))
        .when(|e| matches!(e, Error::Kafka { source, .. } if is_transient(source)))
        .notify(|e, wait| {
            tracing::warn!(error = %e, partition, ?wait, "watermarks unavailable; retrying");
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::is_transient;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};

    #[test]
    fn a_broker_dying_mid_request_is_retried_and_a_refusal_is_not() {
        for code in [
            C::DestroyBroker,
            C::BrokerTransportFailure,
            C::NotLeaderForPartition,
            C::UnknownPartition,
        ] {
            assert!(is_transient(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
        assert!(!is_transient(&KafkaError::MetadataFetch(
            C::TopicAuthorizationFailed
        )));
    }
}
