//! `POST /v1/sessions/{session_id}/checkpoint` and `/close`: events the service makes for the
//! writer (a checkpoint's seq and digest, the end), so both are checked against the log as it
//! is now.

use super::{Answer, EventAck, check_epoch_now, with_writer};
use crate::Ingest;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use sessionlog_http::{
    Authorized, Harness, InvalidRequest, JsonBody, SessionBodyProblems, SessionPath, WriterToken,
};
use sessionlog_schemas::{Epoch, TerminalOutcome};
use std::sync::Arc;
use utoipa::ToSchema;

/// Records a checkpoint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointRequest {
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// The workspace revision at this point, if the harness has one.
    workspace_revision: Option<String>,
}

/// Ends the session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseRequest {
    #[schema(value_type = u64)]
    epoch: Epoch,
    outcome: TerminalOutcome,
    /// Why it ended.
    reason: Option<String>,
}

sessionlog_http::problems! {
    /// What a checkpoint or a close may refuse besides what any session route with a body may.
    WriterEventProblems {
        409 => "`fenced`, `writer_token_required`, `unknown_epoch`, `session_ended`",
    } + InvalidRequest + SessionBodyProblems
}

/// Records a checkpoint: a verified position to resume or fork from.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/checkpoint",
    tag = "sessions",
    params(SessionPath, WriterToken),
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "the checkpoint is durable", body = EventAck),
        WriterEventProblems,
    )
)]
pub(crate) async fn checkpoint(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    token: WriterToken,
    JsonBody(request): JsonBody<CheckpointRequest>,
) -> Answer<EventAck> {
    let appended = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch_now(writer, request.epoch, token.as_deref()).await?;
        Ok(writer.checkpoint(request.workspace_revision).await?)
    })
    .await?;
    Ok((StatusCode::OK, Json(EventAck::new(&appended, false))))
}

/// Ends the session with its outcome.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/close",
    tag = "sessions",
    params(SessionPath, WriterToken),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "the end is durable", body = EventAck),
        WriterEventProblems,
    )
)]
pub(crate) async fn close(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    token: WriterToken,
    JsonBody(request): JsonBody<CloseRequest>,
) -> Answer<EventAck> {
    let appended = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch_now(writer, request.epoch, token.as_deref()).await?;
        Ok(writer.close(request.outcome, request.reason).await?)
    })
    .await?;
    // The end is the session's: its lease records go with it. Not removing them leaves a lease
    // that lapses after its TTL, so a failure here does not fail the close.
    if ingest.log.lease_ttl().is_some()
        && let Err(e) = ingest.log.end_leases(session, request.epoch).await
    {
        tracing::warn!(%session, error = %e, "the ended session's lease was not released");
    }
    Ok((StatusCode::OK, Json(EventAck::new(&appended, false))))
}
