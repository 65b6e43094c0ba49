//! What recovery reads from the projector's tables: verified checkpoints, the event index and
//! writer claims (through [`ProjectionStore`]). The tables are hints about where to read; the
//! log stays the authority.

use crate::Result;
use sessionlog_schemas::SessionId;
use sessionlog_store::ProjectionStore;

pub use sessionlog_store::VerifiedCheckpoint;

/// The newest checkpoint of `session` whose declared digest the projector confirmed,
/// optionally no later than `at_most_seq`, with its state (duplicate window restored from the
/// index). See [`ProjectionStore::latest_verified_checkpoint`].
pub async fn latest_verified_checkpoint(
    store: &ProjectionStore,
    session: SessionId,
    at_most_seq: Option<u64>,
) -> Result<Option<VerifiedCheckpoint>> {
    Ok(store
        .latest_verified_checkpoint(session, at_most_seq)
        .await?)
}

/// Offsets of `session`'s accepted events with `seq > after_seq` (the index) and of its
/// accepted claims, restricted to `from..=until`: everything that changed its state there.
pub async fn accepted_offsets(
    store: &ProjectionStore,
    session: SessionId,
    after_seq: u64,
    from: i64,
    until: i64,
) -> Result<Vec<i64>> {
    Ok(store
        .accepted_offsets(session, after_seq, from, until)
        .await?)
}
