//! `GET /v1/sessions/{session_id}`: a session rebuilt from its partition, with its writer lease.

use super::Answer;
use crate::{RebuiltSession, Recovery};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use sessionlog_http::{Authorized, Reader, SessionPath, SessionProblems};
use std::sync::Arc;
use utoipa::ToSchema;

/// How long `GET /v1/sessions/{id}` waits for the session's writer lease before answering
/// without it.
const LEASE_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A session rebuilt from its partition.
#[derive(Serialize, ToSchema)]
pub(crate) struct SessionView {
    /// The folded state, where reading began and ended, and what was read.
    #[schema(value_type = Object)]
    rebuilt: RebuiltSession,
    /// The session's status (`running`, `completed`, `needs_resolution`, ...).
    status: String,
    /// The digest of the folded state, as checkpoints record it.
    digest: String,
    /// Records read per record of this session folded (1.0 is ideal).
    read_amplification: f64,
    /// The writer lease on the session (docs/design.md, "Writer leases"), or null when no
    /// writer holds one (none ever did, it was released, or leases are off).
    lease: Option<crate::LeaseStatus>,
    /// When the session's pause lapses and it wants its harness again, RFC 3339; absent
    /// unless it is paused with an end.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    paused_until: Option<String>,
}

/// Rebuilds a session from the log (from its latest verified checkpoint).
#[utoipa::path(
    get,
    path = "/sessions/{session_id}",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "rebuilt", body = SessionView),
        SessionProblems,
    )
)]
pub(crate) async fn get_session(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    SessionPath(session): SessionPath,
) -> Answer<SessionView> {
    // This route answers the rebuild itself: check its tenant rather than look it up apart.
    let mut rebuilt = recovery.rebuild(session).await?;
    caller.require_tenant(session, &rebuilt.state.tenant)?;
    // The digest covers the sealed form; the answer shows the texts opened.
    let digest = rebuilt.state.digest();
    let opener = recovery
        .opener_for(session, &rebuilt.state, rebuilt.state.erased)
        .await?;
    rebuilt.state = crate::reveal::opened_state(&opener, &rebuilt.state);
    // The session's state does not depend on its lease: a lease not read within the bound is
    // left out (null) rather than holding the answer up.
    let lease = match tokio::time::timeout(LEASE_READ_LIMIT, recovery.lease(session)).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(e)) => {
            tracing::warn!(%session, error = %e, "the writer lease could not be read");
            None
        }
        Err(_) => {
            tracing::warn!(%session, "the writer lease was not read within {LEASE_READ_LIMIT:?}");
            None
        }
    };
    let now = sessionlog_schemas::now_micros();
    Ok(Json(SessionView {
        lease: lease.map(|l| crate::LeaseStatus::of(l, rebuilt.state.epoch, now)),
        paused_until: rebuilt.state.paused_until.map(crate::lease::rfc3339),
        read_amplification: rebuilt.read_amplification(),
        status: rebuilt.state.status().as_str().to_string(),
        digest,
        rebuilt,
    }))
}
