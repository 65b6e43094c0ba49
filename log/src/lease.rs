//! Writer leases: a writer's heartbeat on its session, kept in a compacted topic beside the
//! session-events topic (`<kafka.topic>-leases`, [`crate::KafkaSettings::lease_topic`]).
//!
//! A lease is liveness, not safety: it says "writer W at epoch E was alive at T and expects to
//! be until T + ttl". Who may write is decided by the fold's epochs and tokens alone; a lease,
//! stale or live, never lets anyone write (docs/design.md, "Writer leases").
//!
//! The topic has the events topic's partition count and partitioner, so a session's leases sit
//! on the partition number its events do. A record is keyed by session id and epoch
//! ([`lease_key`]): compaction keeps the latest record of each, so it never lets one epoch's
//! record (a fenced writer renewing late, its release landing late) remove another's. A
//! release is a record naming the epoch it releases ([`Release`]), and a reader keeps, of a
//! session's records, the latest of the highest epoch ([`later_record`]): neither a late
//! renewal nor a late release of an older epoch hides a newer epoch's lease, whether read as
//! written or after compaction. A session's end removes its records with tombstones
//! ([`end_keys`]); a tombstone releases whatever a reader held (an older build's release was a
//! tombstone on a key of the session id alone, and is read so).
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

/// The version of the lease record's JSON this build writes: version 2 tells a lease
/// (`"record": "lease"`) from a release (`"record": "release"`), and is keyed by session and
/// epoch. Version 1 (a lease, keyed by session) is still read.
pub const LEASE_VERSION: u32 = 2;

/// The first version: a lease without a `record` member, keyed by session id alone.
const FIRST_VERSION: u32 = 1;

/// Epochs back from a session's last whose records its end removes ([`end_keys`]).
const ENDED_EPOCHS: u64 = 16;

/// One writer's lease on one session, as the lease topic holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The record's format ([`LEASE_VERSION`]; 1 for one an older build wrote).
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

    /// The record's key: [`lease_key`] of its session and epoch.
    pub fn key(&self) -> String {
        lease_key(self.session_id, self.epoch)
    }

    /// The record's value.
    pub fn encode(&self) -> crate::Result<Vec<u8>> {
        crate::versioned::encode(&LeaseRecordRef::Lease(self), "lease")
    }

    /// A record's value, or why it is not a lease this build reads (a release is not one).
    pub fn decode(value: &[u8]) -> std::result::Result<Self, String> {
        match LeaseRecord::decode(value)? {
            LeaseRecord::Lease(lease) => Ok(lease),
            LeaseRecord::Release(_) => Err("a lease release, not a lease".into()),
        }
    }
}

/// The record that releases one epoch's lease on a session: its writer stopped running the
/// session without ending it. Only that epoch's lease, and older ones, are released by it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// The record's format ([`LEASE_VERSION`]).
    pub version: u32,
    /// The session.
    pub session_id: SessionId,
    /// Who released it.
    pub writer: String,
    /// The epoch whose lease is released.
    pub epoch: Epoch,
    /// When, in microseconds since the Unix epoch.
    pub released_at: Micros,
}

impl Release {
    /// `writer`'s release of its lease at `epoch`, at `now`.
    pub fn new(session_id: SessionId, writer: &str, epoch: Epoch, now: Micros) -> Self {
        Self {
            version: LEASE_VERSION,
            session_id,
            writer: writer.to_string(),
            epoch,
            released_at: now,
        }
    }

    /// The record's key: [`lease_key`] of its session and epoch.
    pub fn key(&self) -> String {
        lease_key(self.session_id, self.epoch)
    }

    /// The record's value.
    pub fn encode(&self) -> crate::Result<Vec<u8>> {
        crate::versioned::encode(&LeaseRecordRef::Release(self), "lease release")
    }
}

/// A record of the lease topic, decoded; also what a reader keeps of a session: the latest
/// record of its highest epoch ([`later_record`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum LeaseRecord {
    /// A writer's lease (live or lapsed: see [`Lease::is_live`]).
    Lease(Lease),
    /// A writer released its epoch's lease.
    Release(Release),
}

/// [`LeaseRecord`] borrowed, to encode.
#[derive(Serialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum LeaseRecordRef<'a> {
    Lease(&'a Lease),
    Release(&'a Release),
}

impl LeaseRecord {
    /// The epoch the record is of.
    pub fn epoch(&self) -> Epoch {
        match self {
            Self::Lease(lease) => lease.epoch,
            Self::Release(release) => release.epoch,
        }
    }

    /// The lease, unless the record released it.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Lease(lease) => Some(lease),
            Self::Release(_) => None,
        }
    }

    /// [`Self::lease`], owned.
    pub fn into_lease(self) -> Option<Lease> {
        match self {
            Self::Lease(lease) => Some(lease),
            Self::Release(_) => None,
        }
    }

    /// A record's value: a lease or a release of this build's version, or a lease an older
    /// build wrote (version 1); otherwise why it is not one this build reads.
    pub fn decode(value: &[u8]) -> std::result::Result<Self, String> {
        crate::versioned::decode(value, "lease", LEASE_VERSION).or_else(|newer| {
            crate::versioned::decode::<Lease>(value, "lease", FIRST_VERSION)
                .map(Self::Lease)
                // The error this build's version gives says what is wrong with the record.
                .map_err(|_| newer)
        })
    }
}

/// The key of `session`'s lease records at `epoch`: `<session id>/<epoch>`. Keyed by epoch, a
/// record replaces under compaction only the same epoch's earlier ones. The partition is
/// still the session's ([`crate::partitioner::partition_for`]).
pub fn lease_key(session: SessionId, epoch: Epoch) -> String {
    format!("{}/{epoch}", crate::partitioner::session_key(session))
}

/// The session a lease record's key names: `<session id>/<epoch>`, or the session id alone (an
/// older build's key).
pub fn session_of_key(key: &[u8]) -> Option<SessionId> {
    let key = std::str::from_utf8(key).ok()?;
    let session = key.split_once('/').map_or(key, |(session, _)| session);
    session.parse().ok()
}

/// The keys a session's end writes tombstones on: its last [`ENDED_EPOCHS`] epochs' (up to
/// `epoch`, the one that ended it) and an older build's key of the session id alone. Nothing
/// follows a session's end, so none of its leases is needed again; a record left of an epoch
/// further back stays, and readers keep the highest epoch's anyway.
pub fn end_keys(session: SessionId, epoch: Epoch) -> Vec<String> {
    let first = epoch.saturating_sub(ENDED_EPOCHS - 1);
    std::iter::once(crate::partitioner::session_key(session))
        .chain((first..=epoch).map(|e| lease_key(session, e)))
        .collect()
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
/// record per session that has one in the topic (its highest epoch's).
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
    /// The leases read so far.
    leases: LeaseTable,
}

impl Fold {
    fn apply(&mut self, record: RawRecord) {
        self.leases
            .apply(record.key.as_deref(), record.payload.as_deref());
    }
}

/// Sessions' leases as a reader folds records of the lease topic: each session's latest
/// record of its highest epoch ([`later_record`]), whichever key (epoch) it came by.
#[derive(Debug, Default)]
pub struct LeaseTable {
    records: HashMap<SessionId, LeaseRecord>,
}

impl LeaseTable {
    /// Folds one record (`value` `None`: a tombstone) of the session its `key` names.
    pub fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let Some(session) = key.and_then(session_of_key) else {
            tracing::warn!("a lease record without a session key; skipped");
            return;
        };
        let held = self.records.remove(&session);
        if let Some(kept) = later_record(held, value) {
            self.records.insert(session, kept);
        }
    }

    /// `session`'s lease, unless it has none or released it.
    pub fn lease(&self, session: SessionId) -> Option<&Lease> {
        self.records.get(&session).and_then(LeaseRecord::lease)
    }

    /// Every lease held (live or lapsed), of any session.
    pub fn into_leases(self) -> impl Iterator<Item = Lease> {
        self.records
            .into_values()
            .filter_map(LeaseRecord::into_lease)
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

    /// The lease `session` has in the lease topic, the latest of its highest epoch: `None` when
    /// it never had one, its holder released it, or the session ended. Every record
    /// acknowledged before the call is read.
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
        Ok(fold.leases.lease(session).cloned())
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

/// What a reader keeps of a session after one more of its records (`value`; `None`: a
/// tombstone): a record of the epoch held or a later one replaces it, one of an older epoch (a
/// fenced writer renewing, or releasing, before it learns it was fenced) does not; a
/// tombstone (the session ended, or an older build released its lease) clears it; a record
/// that is not one this build reads is skipped. Folding only each key's latest record (what
/// compaction keeps) gives what folding them all does.
pub fn later_record(held: Option<LeaseRecord>, value: Option<&[u8]>) -> Option<LeaseRecord> {
    let value = value?;
    match LeaseRecord::decode(value) {
        Ok(record) if held.as_ref().is_none_or(|h| record.epoch() >= h.epoch()) => Some(record),
        Ok(_) => held,
        Err(why) => {
            tracing::warn!(epoch = ?held.as_ref().map(LeaseRecord::epoch), %why, "lease record skipped");
            held
        }
    }
}

/// [`later_record`] for a reader that keeps only a held lease: a release of the lease's epoch
/// or a later one clears it, as a tombstone does; one of an older epoch leaves it.
pub fn later(held: Option<Lease>, value: Option<&[u8]>) -> Option<Lease> {
    later_record(held.map(LeaseRecord::Lease), value).and_then(LeaseRecord::into_lease)
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
        assert_eq!(
            Lease::decode(&lease.encode().expect("encodes")),
            Ok(lease.clone())
        );
        assert!(lease.is_live(15_999_999));
        assert!(!lease.is_live(16_000_000));
        let json: serde_json::Value =
            serde_json::from_slice(&lease.encode().expect("encodes")).expect("json");
        assert_eq!(json["version"], 2);
        assert_eq!(json["record"], "lease");
        assert_eq!(json["session_id"], session.to_string());
        assert_eq!(lease.key(), format!("{session}/3"));
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
        let held = later(None, Some(&new.encode().expect("encodes")));
        let held = later(held, Some(&lease("a", 1, 20).encode().expect("encodes")));
        assert_eq!(held, Some(new));
        let renewed = lease("b", 2, 30);
        let held = later(held, Some(&renewed.encode().expect("encodes")));
        assert_eq!(held, Some(renewed));
        assert_eq!(later(held.clone(), Some(b"junk")), held);
        assert_eq!(later(held, None), None);
    }

    #[test]
    fn a_record_of_another_version_or_shape_is_not_a_lease() {
        let err = Lease::decode(br#"{"version":3,"anything":true}"#).expect_err("version 3");
        assert!(err.contains("version 3"), "{err}");
        assert!(Lease::decode(b"not json").is_err());
        assert!(Lease::decode(br#"{"version":1}"#).is_err());
        assert!(Lease::decode(br#"{"version":2,"record":"lease"}"#).is_err());
        let release = Release::new(SessionId::new(), "h", 1, 5)
            .encode()
            .expect("encodes");
        assert!(Lease::decode(&release).is_err(), "a release is no lease");
    }

    fn lease(session: SessionId, writer: &str, epoch: Epoch, at: Micros) -> Lease {
        Lease::renewed(session, writer, epoch, at, Duration::from_secs(15)).expect("fits")
    }

    #[test]
    fn a_release_of_an_older_epoch_does_not_hide_the_newer_epochs_lease() {
        let session = SessionId::new();
        let new = lease(session, "b", 2, 10);
        // The old writer's release lands after its successor's lease (the release race).
        let held = later(
            Some(new.clone()),
            Some(&Release::new(session, "a", 1, 20).encode().expect("encodes")),
        );
        assert_eq!(held, Some(new.clone()));
        // A release of the epoch held releases it, for a reader of leases as for one of records.
        let released = Release::new(session, "b", 2, 30);
        assert_eq!(
            later(
                Some(new.clone()),
                Some(&released.encode().expect("encodes"))
            ),
            None
        );
        assert_eq!(
            later_record(
                Some(LeaseRecord::Lease(new.clone())),
                Some(&released.encode().expect("encodes"))
            ),
            Some(LeaseRecord::Release(released))
        );
        // So does a tombstone: a session's end, or an older build's release.
        assert_eq!(later(Some(new), None), None);
    }

    #[test]
    fn after_a_release_a_late_renewal_of_an_older_epoch_does_not_take_the_session_back() {
        let session = SessionId::new();
        let released = Some(LeaseRecord::Release(Release::new(session, "b", 2, 30)));
        let zombie = lease(session, "a", 1, 40);
        assert_eq!(
            later_record(released.clone(), Some(&zombie.encode().expect("encodes"))),
            released
        );
        // The releasing writer holding it again, at its epoch, holds it; so does a later epoch.
        for again in [lease(session, "b", 2, 50), lease(session, "c", 3, 50)] {
            let kept = later_record(released.clone(), Some(&again.encode().expect("encodes")));
            assert_eq!(kept, Some(LeaseRecord::Lease(again)));
        }
    }

    #[test]
    fn an_older_builds_lease_and_tombstone_are_read() {
        let session = SessionId::new();
        let old = format!(
            r#"{{"version":1,"session_id":"{session}","writer":"h","epoch":1,"renewed_at":1,"expires_at":2}}"#
        );
        let held = later(None, Some(old.as_bytes())).expect("a version 1 lease");
        assert_eq!(
            (held.version, held.epoch, held.writer.as_str()),
            (1, 1, "h")
        );
        // A newer build's lease of a later epoch replaces it; a tombstone clears either.
        let newer = later(
            Some(held.clone()),
            Some(&lease(session, "w", 2, 3).encode().expect("encodes")),
        );
        assert_eq!(newer.as_ref().map(|l| l.epoch), Some(2));
        assert_eq!(later(Some(held), None), None);
        // Both keys name the session.
        let plain = crate::partitioner::session_key(session);
        assert_eq!(session_of_key(plain.as_bytes()), Some(session));
        assert_eq!(
            session_of_key(lease_key(session, 7).as_bytes()),
            Some(session)
        );
        assert_eq!(session_of_key(b"junk/3"), None);
    }

    #[test]
    fn a_sessions_end_removes_its_last_epochs_records_and_an_older_builds() {
        let session = SessionId::new();
        let plain = crate::partitioner::session_key(session);
        assert_eq!(
            end_keys(session, 2),
            vec![
                plain,
                lease_key(session, 0),
                lease_key(session, 1),
                lease_key(session, 2)
            ]
        );
        let many = end_keys(session, 100);
        assert_eq!(many.len(), 1 + ENDED_EPOCHS as usize);
        assert_eq!(many.last(), Some(&lease_key(session, 100)));
        assert!(!many.contains(&lease_key(session, 100 - ENDED_EPOCHS)));
    }

    /// The records of one session as written, in order: `(key, value)`.
    fn folded(records: &[(String, Option<Vec<u8>>)]) -> Option<Lease> {
        let mut fold = Fold::default();
        for (offset, (key, value)) in records.iter().enumerate() {
            fold.apply(RawRecord {
                partition: 0,
                offset: offset as i64,
                key: Some(key.clone().into_bytes()),
                payload: value.clone(),
                timestamp_ms: None,
                headers: Vec::new(),
            });
        }
        assert!(fold.leases.records.len() <= 1, "records of one session");
        fold.leases.into_leases().next()
    }

    /// What compaction keeps of `records`: each key's latest, in their order.
    fn compacted(records: &[(String, Option<Vec<u8>>)]) -> Vec<(String, Option<Vec<u8>>)> {
        records
            .iter()
            .enumerate()
            .filter(|(at, (key, _))| !records[at + 1..].iter().any(|(k, _)| k == key))
            .map(|(_, record)| record.clone())
            .collect()
    }

    #[test]
    fn compaction_never_leaves_an_older_epochs_record_in_place_of_a_newer_lease() {
        let session = SessionId::new();
        let record = |lease: &Lease| (lease.key(), Some(lease.encode().expect("encodes")));
        let (a1, b2) = (lease(session, "a", 1, 10), lease(session, "b", 2, 20));
        let a1_release = Release::new(session, "a", 1, 40);
        let runs = [
            // The release race: the old writer's release lands after the successor's lease.
            vec![
                record(&a1),
                record(&b2),
                (
                    a1_release.key(),
                    Some(a1_release.encode().expect("encodes")),
                ),
            ],
            // A fenced writer renewing after its successor's lease, its last record.
            vec![
                record(&a1),
                record(&b2),
                record(&lease(session, "a", 1, 30)),
            ],
        ];
        for records in runs {
            assert_eq!(folded(&records), Some(b2.clone()));
            assert_eq!(folded(&compacted(&records)), Some(b2.clone()), "compacted");
        }
        // Released by its holder: nothing held, before compaction and after, and a fenced
        // writer's renewal after the release does not take it back.
        let b2_release = Release::new(session, "b", 2, 50);
        let records = vec![
            record(&a1),
            record(&b2),
            (
                b2_release.key(),
                Some(b2_release.encode().expect("encodes")),
            ),
            record(&lease(session, "a", 1, 60)),
        ];
        assert_eq!(folded(&records), None);
        assert_eq!(folded(&compacted(&records)), None, "compacted");
    }
}
