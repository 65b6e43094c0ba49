//! Writer leases: a writer's heartbeat on its session, kept in a compacted topic beside the
//! session-events topic (`<kafka.topic>-leases`, [`crate::KafkaSettings::lease_topic`]).
//!
//! A lease is liveness, not safety: it says "writer W at epoch E was alive at T and expects to
//! be until T + ttl". Who may write is decided by the fold's epochs and tokens alone; a lease,
//! stale or live, never lets anyone write (docs/design.md, "Writer leases").
//!
//! The topic has the events topic's partition count and partitioner and is keyed by session
//! id, so a session's leases sit on the partition number its events do. A release (the writer
//! closing, or its session ending) is a tombstone (a null value), which compaction removes.
//!
//! The value is JSON with a `version` member, not Avro: the topic is operational, not part of
//! any session's history, no other client decodes it, and a JSON heartbeat needs no schema id
//! (so no registry round trip) from a service that renews leases for HTTP harnesses.

use crate::reader::{PartitionReader, RawRecord};
use crate::{Error, KafkaSettings, Result};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Epoch, Micros, SessionId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Consumers of the lease topic this process made: see [`readers_made`].
static READERS_MADE: AtomicU64 = AtomicU64::new(0);
/// Round trips this process made to check the lease topic: see [`topic_checks`].
static TOPIC_CHECKS: AtomicU64 = AtomicU64::new(0);

/// Readers of the lease topic a [`LeaseReader`] keeps at most: reads of different partitions
/// run side by side on them, and a read takes a round trip or two, so a few serve hundreds of
/// lease reads a second; reads beyond them wait for one rather than make a consumer.
const READERS: usize = 4;

/// How many consumers of the lease topic this process has made: each costs a client, its
/// threads and a connection to every broker, so a service reading leases per request must
/// not make one per read (recovery exports it as a metric).
pub fn readers_made() -> u64 {
    READERS_MADE.load(Ordering::Relaxed)
}

/// How many times this process asked the cluster whether the lease topic exists (a metadata
/// round trip): once per [`LeaseReader`] (until an answer is yes), not once per read.
pub fn topic_checks() -> u64 {
    TOPIC_CHECKS.load(Ordering::Relaxed)
}

/// The version of the lease record's JSON this build writes and reads.
pub const LEASE_VERSION: u32 = 1;

/// One writer's lease on one session, as the lease topic holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The record's format ([`LEASE_VERSION`]).
    pub version: u32,
    /// The session.
    pub session_id: SessionId,
    /// Who holds it: the name its claim recorded, or the agent of the writer that started it.
    pub writer: String,
    /// The epoch the holder writes with.
    pub epoch: Epoch,
    /// When it was last renewed, in microseconds since the Unix epoch.
    pub renewed_at: Micros,
    /// When it lapses unless renewed, in microseconds since the Unix epoch.
    pub expires_at: Micros,
}

impl Lease {
    /// A lease renewed at `now` for `ttl`; `None` when `now + ttl` does not fit in
    /// microseconds (a TTL no clock reaches: see [`crate::settings::LeaseSettings::validate`]).
    pub fn renewed(
        session_id: SessionId,
        writer: &str,
        epoch: Epoch,
        now: Micros,
        ttl: Duration,
    ) -> Option<Self> {
        let ttl = Micros::try_from(ttl.as_micros()).ok()?;
        Some(Self {
            version: LEASE_VERSION,
            session_id,
            writer: writer.to_string(),
            epoch,
            renewed_at: now,
            expires_at: now.checked_add(ttl)?,
        })
    }

    /// Whether the holder said it would still be alive at `now`.
    pub fn is_live(&self, now: Micros) -> bool {
        now < self.expires_at
    }

    /// The record's value.
    pub fn encode(&self) -> Vec<u8> {
        crate::versioned::encode(self)
    }

    /// A record's value, or why it is not a lease this build reads.
    pub fn decode(value: &[u8]) -> std::result::Result<Self, String> {
        crate::versioned::decode(value, "lease", LEASE_VERSION)
    }
}

/// The latest lease `session` has in the lease topic (see [`LeaseReader::read`]), read with a
/// reader made for this one read: for a one-off (a test, a tool). A service that reads leases
/// per request keeps a [`LeaseReader`].
pub async fn read_lease(
    kafka: &KafkaSettings,
    session: SessionId,
    partitions: i32,
) -> Result<Option<Lease>> {
    LeaseReader::new(kafka, partitions).read(session).await
}

/// Reads sessions' leases for a service that shows them per request (recovery's `GET
/// /v1/sessions/{id}`, `sessionlog status`): it checks the lease topic once, borrows one of a
/// few kept consumers for each read, and remembers each partition's leases as far as it read
/// them, so a read costs a watermark round trip and the records written since the last read
/// of the partition, not a consumer, a metadata round trip and a scan of the partition.
///
/// Remembering is also what makes a kept consumer safe to reuse on a compacted topic: a record
/// past the offset wanted may be a hole compaction left, so a read cannot tell it from a record
/// the consumer fetched ahead for an earlier read (as `PartitionReader::read_range` does on the
/// events topic). Each partition is read only onward from where its last read stopped, so what
/// a consumer fetched ahead for an earlier read of it is a run of the partition's records from
/// no later than there: those before the new read's start are skipped, and the rest are the
/// records the partition holds at their offsets, in order. Nothing is skipped. Memory: one
/// lease per session that holds one in the topic (what compaction keeps of it).
pub struct LeaseReader {
    kafka: KafkaSettings,
    topic: String,
    partitions: i32,
    /// Each partition's leases as read so far; a read of the partition holds its lock.
    folds: Vec<tokio::sync::Mutex<Fold>>,
    /// Idle consumers of the lease topic, kept between reads.
    idle: Mutex<Vec<PartitionReader>>,
    /// One permit per consumer that may exist ([`READERS`]).
    permits: tokio::sync::Semaphore,
    /// Set once the lease topic was found with the events topic's partition count: a topic
    /// does not disappear under a running service (`sessionlog init` creates it; nothing
    /// sessionlog runs deletes it), so asking again per read would only add a round trip.
    checked: tokio::sync::OnceCell<()>,
}

/// One partition's leases, read up to `next`.
#[derive(Default)]
struct Fold {
    /// The first offset not read yet.
    next: i64,
    /// When the last read that reached the partition's end began: every lease acknowledged
    /// before then is in the fold.
    complete_as_of: Option<std::time::Instant>,
    /// The latest lease of each key (a session id as text) that has one.
    leases: HashMap<Vec<u8>, Lease>,
}

impl Fold {
    fn apply(&mut self, record: RawRecord) {
        let Some(key) = record.key else {
            return;
        };
        let held = self.leases.remove(&key);
        if let Some(lease) = later(held, record.payload.as_deref()) {
            self.leases.insert(key, lease);
        }
    }
}

impl LeaseReader {
    /// A reader of the lease topic of `kafka` ([`KafkaSettings::lease_topic`]), whose sessions
    /// are placed on `partitions` partitions. Connects to nothing until the first read.
    pub fn new(kafka: &KafkaSettings, partitions: i32) -> Self {
        let partitions = partitions.max(1);
        Self {
            kafka: kafka.clone(),
            topic: kafka.lease_topic(),
            partitions,
            folds: (0..partitions)
                .map(|_| tokio::sync::Mutex::new(Fold::default()))
                .collect(),
            idle: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(READERS),
            checked: tokio::sync::OnceCell::new(),
        }
    }

    /// The latest lease `session` has in the lease topic: `None` when it never had one or its
    /// holder released it (a tombstone). Every lease acknowledged before the call is read.
    pub async fn read(&self, session: SessionId) -> Result<Option<Lease>> {
        self.check_topic().await?;
        let partition = crate::partitioner::partition_for(session, self.partitions);
        let fold = usize::try_from(partition)
            .ok()
            .and_then(|p| self.folds.get(p))
            .ok_or_else(|| Error::Task(format!("no partition {partition} of the lease topic")))?;
        let called = std::time::Instant::now();
        let mut fold = fold.lock().await;
        // Reads of one partition wait for each other: one that began after this call did (while
        // this one waited for the lock) read every lease acknowledged before it, so a burst of
        // reads costs a round trip or two per partition, not one each.
        if fold.complete_as_of.is_none_or(|at| at < called) {
            self.read_on(partition, &mut fold).await?;
        }
        let key = crate::partitioner::session_key(session);
        Ok(fold.leases.get(key.as_bytes()).cloned())
    }

    /// Fails unless the lease topic exists with the events topic's partition count; asks the
    /// cluster until it answers so once, then never again.
    async fn check_topic(&self) -> Result<()> {
        self.checked
            .get_or_try_init(|| async {
                TOPIC_CHECKS.fetch_add(1, Ordering::Relaxed);
                let live = match crate::topic::partition_count(&self.kafka, &self.topic).await {
                    Ok(live) => live,
                    Err(Error::TopicMismatch { .. }) => {
                        return Err(Error::TopicMissing {
                            topic: self.topic.clone(),
                            setting: "kafka.topic (the lease topic is named after it)",
                        });
                    }
                    Err(other) => return Err(other),
                };
                match crate::topic::unpinned(live, self.partitions) {
                    None => Ok(()),
                    Some(problem) => Err(Error::TopicMismatch {
                        topic: self.topic.clone(),
                        problem: format!(
                            "{problem} (the lease topic must have the events topic's \
                             partitions; `sessionlog init` creates it so)"
                        ),
                    }),
                }
            })
            .await
            .map(drop)
    }

    /// Reads `partition` from where `fold` stopped to its end as of now, with a kept consumer.
    async fn read_on(&self, partition: i32, fold: &mut Fold) -> Result<()> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Task("lease reader permits closed".into()))?;
        let reader = self.idle_reader()?;
        let began = std::time::Instant::now();
        let (low, high) = reader.watermarks(partition).await?;
        if high < fold.next {
            // The partition ends before what was read of it: the topic was deleted and made
            // again. What was read of the old one says nothing of the new one.
            *fold = Fold::default();
        }
        // Folded only once the read went through: a failed read leaves the fold as it was,
        // and the next read starts again where it stopped.
        let mut records = Vec::new();
        let mut reached = reader
            .read_range(partition, fold.next.max(low), high, &mut |r| {
                records.push(r)
            })
            .await?;
        if reached < high {
            // A compacted read ends at the partition's end-of-file event, and one a consumer
            // was sent for an earlier read could end this one early. Compaction never removes
            // a partition's last record (it is in the active segment), so a read that stopped
            // short of it reads on once; whatever it leaves, the next read starts from.
            reached = reader
                .read_range(partition, reached, high, &mut |r| records.push(r))
                .await?;
        }
        for record in records {
            fold.apply(record);
        }
        // A record past `high` ends a read without being visited: the next read starts at `high`.
        fold.next = fold.next.max(reached.min(high));
        if reached >= high {
            fold.complete_as_of = Some(began);
        }
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(reader);
        Ok(())
    }

    /// An idle consumer of the lease topic, or a new one.
    fn idle_reader(&self) -> Result<PartitionReader> {
        // A push or a pop at a time: a panic cannot leave the list torn.
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(reader) => Ok(reader),
            None => {
                let reader = PartitionReader::for_compacted(&self.kafka, &self.topic)?;
                READERS_MADE.fetch_add(1, Ordering::Relaxed);
                Ok(reader)
            }
        }
    }
}

/// The lease after a record of its key: a tombstone releases it; a lease of an older epoch
/// than the one held (a fenced writer renewing before it learns it was fenced) does not
/// replace it; a record that is not a lease this build reads is skipped.
pub fn later(held: Option<Lease>, value: Option<&[u8]>) -> Option<Lease> {
    let value = value?;
    match Lease::decode(value) {
        Ok(lease) if held.as_ref().is_none_or(|h| lease.epoch >= h.epoch) => Some(lease),
        Ok(_) => held,
        Err(why) => {
            tracing::warn!(session = ?held.as_ref().map(|h| h.session_id), %why, "lease record skipped");
            held
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_round_trips_and_lapses_at_its_expiry() {
        let session = SessionId::new();
        let lease = Lease::renewed(session, "h1", 3, 1_000_000, Duration::from_millis(15_000))
            .expect("fits");
        assert_eq!(lease.expires_at, 16_000_000);
        assert_eq!(Lease::decode(&lease.encode()), Ok(lease.clone()));
        assert!(lease.is_live(15_999_999));
        assert!(!lease.is_live(16_000_000));
        let json: serde_json::Value = serde_json::from_slice(&lease.encode()).expect("json");
        assert_eq!(json["version"], 1);
        assert_eq!(json["session_id"], session.to_string());
    }

    #[test]
    fn an_expiry_past_the_clock_is_refused_not_wrapped() {
        let session = SessionId::new();
        assert_eq!(
            Lease::renewed(session, "h", 1, Micros::MAX - 10, Duration::from_micros(11)),
            None
        );
        assert_eq!(
            Lease::renewed(session, "h", 1, 0, Duration::from_secs(u64::MAX)),
            None
        );
    }

    #[test]
    fn a_fenced_writers_renewal_does_not_replace_the_newer_epochs_lease() {
        let session = SessionId::new();
        let lease = |writer: &str, epoch, at| {
            Lease::renewed(session, writer, epoch, at, Duration::from_secs(15)).expect("fits")
        };
        let new = lease("b", 2, 10);
        let held = later(None, Some(&new.encode()));
        let held = later(held, Some(&lease("a", 1, 20).encode()));
        assert_eq!(held, Some(new));
        let renewed = lease("b", 2, 30);
        let held = later(held, Some(&renewed.encode()));
        assert_eq!(held, Some(renewed));
        assert_eq!(later(held.clone(), Some(b"junk")), held);
        assert_eq!(later(held, None), None);
    }

    #[test]
    fn a_record_of_another_version_or_shape_is_not_a_lease() {
        let err = Lease::decode(br#"{"version":2,"anything":true}"#).expect_err("version 2");
        assert!(err.contains("version 2"), "{err}");
        assert!(Lease::decode(b"not json").is_err());
        assert!(Lease::decode(br#"{"version":1}"#).is_err());
    }
}
