//! `POST /v1/sessions/{session_id}/resume`: a harness takes a session over and gets what it
//! needs to continue.

use super::Answer;
use crate::{Recovery, ResumeBundle};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Authorized, Harness, InvalidRequest, JsonBody, SessionBodyProblems, SessionPath,
};
use std::sync::Arc;
use utoipa::ToSchema;

/// Everything a new harness needs to continue a session: `state`, `epoch`, `writer_token`
/// (present it to the ingest service with every append), `next_seq`, `in_doubt` (calls to
/// settle first), `context` (the working set for the next model call), `resolved` (outcomes
/// recovery recorded) and, when `[recovery.mcp]` is configured, `mcp`: the MCP server over the
/// session's history (`url`) with a reader token for this session (`token`, `expires_at`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct ResumeBundleView(ResumeBundle);

/// Takes a session over.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeRequest {
    /// A name for the writer that takes over (recorded with the caller's subject).
    writer: String,
    /// Token budget of the context view in the bundle; by default the session's context
    /// policy's (`[context]`, 8,000 unless configured).
    #[serde(default)]
    context_tokens: Option<usize>,
}

sessionlog_http::problems! {
    /// What a resume may refuse besides what any session route with a body may.
    ResumeProblems {
        409 => "`session_ended`, `session_paused` (`sessionlog unpause` first), \
                `awaiting_approval`, `needs_resolution`, `fenced`, `lost_claim`",
    } + InvalidRequest + SessionBodyProblems
}

/// Claims the next epoch, settles in-doubt calls, and answers the resume bundle. Refused while
/// an approval or an operator is awaited.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/resume",
    tag = "sessions",
    params(SessionPath),
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "resumed", body = ResumeBundleView),
        ResumeProblems,
    )
)]
pub(crate) async fn resume(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    JsonBody(request): JsonBody<ResumeRequest>,
) -> Answer<ResumeBundleView> {
    let point = recovery.prepare_resume(session).await?;
    caller.require_tenant(session, &point.rebuilt.state.tenant)?;
    let bundle = recovery
        .resume_at(
            point,
            &caller.on_behalf(&request.writer),
            request.context_tokens,
        )
        .await?;
    caller.audit("resume", session);
    Ok(Json(ResumeBundleView(bundle)))
}
