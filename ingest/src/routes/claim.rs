//! `POST /v1/sessions/{session_id}/claim`: a harness takes a session over.

use super::{Answer, Opened, tenant_first};
use crate::Ingest;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use sessionlog_http::{
    Authorized, Harness, InvalidRequest, JsonBody, SessionBodyProblems, SessionPath,
};
use sessionlog_producer::SessionWriter;
use std::sync::Arc;
use utoipa::ToSchema;

/// Takes a session over.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimRequest {
    /// Which harness takes over.
    writer: String,
}

sessionlog_http::problems! {
    /// What a claim may refuse besides what any session route with a body may.
    ClaimProblems {
        404 => "`unknown_session`: not in the log",
        409 => "`lost_claim`, `session_ended`, `start_deleted` (retention deleted the session's \
                start: resume it through the recovery service); the session waits, so a takeover \
                would walk past the wait: `needs_resolution`, `awaiting_approval`, `paused`, \
                `call_in_doubt` (a non-idempotent call has no result: resume through the recovery \
                service, which stops it for an operator)",
    } + InvalidRequest + SessionBodyProblems
}

/// Takes a session over with the next epoch; fences every earlier writer.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/claim",
    tag = "sessions",
    params(SessionPath),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "claimed", body = Opened),
        ClaimProblems,
    )
)]
pub(crate) async fn claim(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    JsonBody(request): JsonBody<ClaimRequest>,
) -> Answer<Opened> {
    let pending = SessionWriter::prepare_takeover(
        Arc::clone(&ingest.log),
        session,
        &caller.on_behalf(&request.writer),
    )
    .await
    .map_err(|e| tenant_first(&caller, session, e))?;
    // Before the claim is written: another tenant's session is not there for this caller.
    caller.require_tenant(session, &pending.state().tenant)?;
    let (writer, claimed) = pending.commit().await?;
    caller.audit("claim", session);
    let opened = Opened::new(&writer, &claimed);
    // A writer this instance held for the session is fenced by the claim; replace it.
    ingest.replace(writer);
    Ok((StatusCode::OK, Json(opened)))
}
