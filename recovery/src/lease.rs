//! A session's writer lease as readers show it (`GET /v1/sessions/{id}`, `sessionlog status
//! SESSION`): who holds it, at which epoch, until when, and whether it is live.

use serde::Serialize;
use sessionlog_log::Lease;
use sessionlog_schemas::Micros;

/// A writer's lease on a session: liveness, not permission to write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LeaseStatus {
    /// Who holds it (the name its claim recorded, or the agent that started the session).
    pub writer: String,
    /// The epoch it is held at.
    pub epoch: u64,
    /// When it was last renewed, RFC 3339.
    pub renewed_at: String,
    /// When it lapses unless renewed, RFC 3339.
    pub expires_at: String,
    /// Whether it is unexpired and held at the session's current epoch: a harness is running
    /// the session. (A fenced writer may renew its old epoch's lease until it learns it was
    /// fenced; that lease is not live.)
    pub live: bool,
}

impl LeaseStatus {
    /// `lease` as seen at `now` by a reader who knows the session's `current_epoch`.
    pub fn of(lease: Lease, current_epoch: u64, now: Micros) -> Self {
        Self {
            live: lease.is_live(now) && lease.epoch == current_epoch,
            writer: lease.writer,
            epoch: lease.epoch,
            renewed_at: rfc3339(lease.renewed_at),
            expires_at: rfc3339(lease.expires_at),
        }
    }
}

/// Microseconds since the Unix epoch as RFC 3339 (UTC); the number itself if out of range.
pub(crate) fn rfc3339(micros: Micros) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| micros.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::SessionId;
    use std::time::Duration;

    #[test]
    fn a_lease_is_live_before_its_expiry_and_at_the_current_epoch_only() {
        let lease =
            Lease::renewed(SessionId::new(), "h", 2, 0, Duration::from_secs(15)).expect("fits");
        let at = |epoch, now| LeaseStatus::of(lease.clone(), epoch, now);
        assert!(at(2, 14_999_999).live);
        assert!(!at(2, 15_000_000).live, "expired");
        assert!(!at(3, 0).live, "a fenced writer's");
        assert_eq!(at(2, 0).expires_at, "1970-01-01T00:00:15Z");
        assert_eq!(rfc3339(Micros::MAX), Micros::MAX.to_string());
    }
}
