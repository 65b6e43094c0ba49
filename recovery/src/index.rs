//! What recovery reads from the projector's tables: verified checkpoints, the event index and
//! writer claims. The tables are hints about where to read; the log stays the authority.

use crate::{Error, Result};
use futures::TryStreamExt;
use sessionlog_projector::ProjectionStore;
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;

/// Wraps a driver error from reading the projector's tables, naming what was being read.
pub(crate) fn store_error(action: &'static str) -> impl Fn(&dyn std::fmt::Display) -> Error {
    move |e| {
        Error::Store(sessionlog_projector::Error::Store {
            action,
            message: e.to_string(),
        })
    }
}

/// A checkpoint the projector verified, with the state it stored at that point.
#[derive(Clone, Debug)]
pub struct VerifiedCheckpoint {
    /// The checkpoint's seq.
    pub seq: u64,
    /// Its offset in the session's partition.
    pub offset: i64,
    /// The session's state including the checkpoint.
    pub state: SessionState,
}

/// The newest checkpoint of `session` whose declared digest the projector confirmed,
/// optionally no later than `at_most_seq`.
///
/// Two steps: the checkpoint rows without their states (small), then the one state needed.
/// A stored state leaves out the fold's duplicate window; it is restored from the index, so
/// the state is exactly the fold's up to the checkpoint and a writer resumed from it still
/// recognises a retry of the events just before it.
pub async fn latest_verified_checkpoint(
    store: &ProjectionStore,
    session: SessionId,
    at_most_seq: Option<u64>,
) -> Result<Option<VerifiedCheckpoint>> {
    let err = store_error("read checkpoints");
    let ks = store.keyspace();
    let limit = at_most_seq.map_or(i64::MAX, |s| s as i64);
    let mut rows = store
        .cql()
        .query_iter(
            format!(
                "SELECT seq, log_offset, verified FROM {ks}.checkpoints WHERE session_id = ? AND seq <= ?"
            ),
            (session.0, limit),
        )
        .await
        .map_err(|e| err(&e))?
        .rows_stream::<(i64, i64, Option<bool>)>()
        .map_err(|e| err(&e))?;
    // Clustering order is seq DESC: the first verified row is the latest.
    let mut latest = None;
    while let Some((seq, offset, verified)) = rows.try_next().await.map_err(|e| err(&e))? {
        if verified == Some(true) {
            latest = Some((seq, offset));
            break;
        }
    }
    let Some((seq, offset)) = latest else {
        return Ok(None);
    };
    let state_json = store
        .cql()
        .query_unpaged(
            format!("SELECT state_json FROM {ks}.checkpoints WHERE session_id = ? AND seq = ?"),
            (session.0, seq),
        )
        .await
        .map_err(|e| err(&e))?
        .into_rows_result()
        .map_err(|e| err(&e))?
        .maybe_first_row::<(Option<String>,)>()
        .map_err(|e| err(&e))?
        .and_then(|(json,)| json);
    let Some(mut state) = state_json.and_then(|j| serde_json::from_str::<SessionState>(&j).ok())
    else {
        return Ok(None);
    };
    state.remember_recent(store.accepted_through(&state, offset).await?);
    Ok(Some(VerifiedCheckpoint {
        seq: seq as u64,
        offset,
        state,
    }))
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
    let err = store_error("read event index");
    let ks = store.keyspace();
    let mut offsets = Vec::new();
    let mut events = store
        .cql()
        .query_iter(
            format!("SELECT log_offset FROM {ks}.event_index WHERE session_id = ? AND seq > ?"),
            (session.0, after_seq as i64),
        )
        .await
        .map_err(|e| err(&e))?
        .rows_stream::<(i64,)>()
        .map_err(|e| err(&e))?;
    while let Some((offset,)) = events.try_next().await.map_err(|e| err(&e))? {
        offsets.push(offset);
    }
    let mut claims = store
        .cql()
        .query_iter(
            format!("SELECT log_offset FROM {ks}.writer_claims WHERE session_id = ?"),
            (session.0,),
        )
        .await
        .map_err(|e| err(&e))?
        .rows_stream::<(i64,)>()
        .map_err(|e| err(&e))?;
    while let Some((offset,)) = claims.try_next().await.map_err(|e| err(&e))? {
        offsets.push(offset);
    }
    offsets.retain(|o| (from..=until).contains(o));
    offsets.sort_unstable();
    Ok(offsets)
}
