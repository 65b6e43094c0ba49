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

use crate::reader::PartitionReader;
use crate::{Error, KafkaSettings, Result};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Epoch, Micros, SessionId};
use std::time::Duration;

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
        // A struct of plain fields always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A record's value, or why it is not a lease this build reads.
    pub fn decode(value: &[u8]) -> std::result::Result<Self, String> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let versioned: Versioned =
            serde_json::from_slice(value).map_err(|e| format!("not a lease record: {e}"))?;
        if versioned.version != LEASE_VERSION {
            return Err(format!(
                "lease record version {} is not {LEASE_VERSION}, the one this build reads \
                 (a newer sessionlog wrote it)",
                versioned.version
            ));
        }
        serde_json::from_slice(value).map_err(|e| format!("not a lease record: {e}"))
    }
}

/// The latest lease `session` has in the lease topic: `None` when it never had one or its
/// holder released it (a tombstone). Reads the session's partition of the lease topic from
/// its start: compaction keeps that to about one record per session with a lease, plus the
/// last minute's renewals (the topic rolls a segment a minute so the cleaner can reach them).
pub async fn read_lease(
    kafka: &KafkaSettings,
    session: SessionId,
    partitions: i32,
) -> Result<Option<Lease>> {
    let topic = kafka.lease_topic();
    if crate::topic::partition_count(kafka, &topic).await.is_err() {
        return Err(Error::TopicMissing {
            topic,
            setting: "kafka.topic (the lease topic is named after it)",
        });
    }
    let partition = crate::partitioner::partition_for(session, partitions);
    let key = crate::partitioner::session_key(session);
    let reader = PartitionReader::for_compacted(kafka, &topic)?;
    let mut latest = None;
    reader
        .read_to_end(partition, 0, |record| {
            if record.key.as_deref() == Some(key.as_bytes()) {
                latest = later(latest.take(), record.payload.as_deref());
            }
        })
        .await?;
    Ok(latest)
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
