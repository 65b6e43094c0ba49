//! Sessions without a live writer (`sessionlog sessions --orphaned`): each session whose latest
//! lease lapsed unrenewed and that has not ended, with what it waits for.

use crate::Result;
use serde::Serialize;
use sessionlog_log::lease::LeaseTable;
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_schemas::{Micros, SessionId, now_micros};
use sessionlog_store::ProjectionStore;

/// A session whose writer's lease lapsed.
#[derive(Clone, Debug, Serialize)]
pub struct OrphanedSession {
    /// The session.
    pub session_id: SessionId,
    /// Its agent, as projected.
    pub agent: Option<String>,
    /// The lapsed lease's holder.
    pub holder: String,
    /// The lapsed lease's epoch.
    pub epoch: u64,
    /// When it lapsed, in microseconds since the Unix epoch.
    pub expired_at: Micros,
    /// Seconds since then.
    pub age_secs: u64,
    /// What the session waits for: `a harness` (the wake component wakes one), `an approval`,
    /// `an operator`, `its pause to end`, or `a projection` (not projected yet).
    pub waits_for: &'static str,
}

/// Every session of `settings`' topics whose latest lease lapsed and that has not ended, oldest
/// first. Reads the whole lease topic (compacted: about a record per session) and each
/// candidate's projected row.
pub async fn orphaned(
    settings: &Settings,
    store: &ProjectionStore,
) -> Result<Vec<OrphanedSession>> {
    let kafka = &settings.kafka;
    let topic = kafka.lease_topic();
    let partitions = sessionlog_log::topic::partition_count(kafka, &topic).await?;
    let reader = PartitionReader::for_compacted(kafka, &topic)?;
    // A session's records are keyed by epoch: the table keeps its highest epoch's.
    let mut leases = LeaseTable::default();
    for partition in 0..partitions {
        reader
            .read_to_end(partition, 0, |record| {
                leases.apply(record.key.as_deref(), record.payload.as_deref());
            })
            .await?;
    }
    let now = now_micros();
    let mut orphans = Vec::new();
    for lease in leases.into_leases() {
        if lease.is_live(now) {
            continue;
        }
        let projected = store.load_session(lease.session_id).await?;
        let waits_for = match &projected {
            None => "a projection",
            Some(p) if p.state.terminal.is_some() || p.state.erased => continue,
            // Claimed since by a writer that holds no lease: not this lease's orphan.
            Some(p) if p.state.epoch > lease.epoch => continue,
            Some(p) if p.state.paused => "its pause to end",
            Some(p) if !p.state.pending_approvals.is_empty() => "an approval",
            Some(p)
                if p.state
                    .pending_calls
                    .values()
                    .any(|c| c.resolution_required.is_some()) =>
            {
                "an operator"
            }
            Some(_) => "a harness",
        };
        let agent = projected.and_then(|p| p.state.agent);
        orphans.push(OrphanedSession {
            session_id: lease.session_id,
            agent,
            holder: lease.writer,
            epoch: lease.epoch,
            expired_at: lease.expires_at,
            age_secs: u64::try_from(now.saturating_sub(lease.expires_at) / 1_000_000).unwrap_or(0),
            waits_for,
        });
    }
    orphans.sort_by_key(|o| o.expired_at);
    Ok(orphans)
}
