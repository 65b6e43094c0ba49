//! What an operator does to a session: pause, unpause and steer it (`operate`), record the
//! outcome of an in-doubt call (`resolutions`), decide an approval; and the list of sessions
//! waiting for an operator.

use super::{Answer, DecisionProblems, RecordedEvent, projected_tenant, visible};
use crate::{OperatorAct, Recovery, Resolution, StuckSession};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Approver, Authorized, Caller, JsonBody, Operator, PathParams, Problem, ServerProblems,
    SessionBodyProblems, SessionPath,
};
use sessionlog_schemas::{CallOutcome, SessionId};
use sessionlog_session::limits::IdentifierKind;
use std::sync::Arc;
use utoipa::ToSchema;

/// Sessions waiting for an operator: `session_id`, `status`, `last_seq` each.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Vec<Object>)]
pub(crate) struct StuckSessions(Vec<StuckSession>);

/// An operator's outcome for an in-doubt tool call.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolutionRequest {
    /// The seq of the call in doubt.
    call_seq: u64,
    /// The call had its effect, or failed.
    succeeded: bool,
    /// What it returned, as far as the operator knows.
    output: String,
    /// A name for the operator. The event records the verified caller (`subject/name` when
    /// the name differs); with authentication disabled, this name as given.
    #[serde(default)]
    operator: String,
    /// Why they believe it.
    reason: String,
}

/// A decision on a pending approval.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalRequest {
    approved: bool,
    /// A name for who decides. The event records the verified caller (`subject/name` when the
    /// name differs); with authentication disabled, this name as given.
    #[serde(default)]
    decided_by: String,
    /// Why.
    reason: Option<String>,
}

/// Why a session is paused, and until when.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseRequest {
    /// Why (kept in the log, sealed like any text).
    reason: String,
    /// When the pause lapses and the session wants its harness again: an RFC 3339 time to
    /// come. Absent or null: until someone unpauses it.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-05T09:00:00Z")]
    until: Option<String>,
}

/// An unpause carries nothing but who asks (the credential).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UnpauseRequest {}

/// A message for the agent, in the verified caller's name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SteeringRequest {
    /// The message.
    text: String,
}

/// The approval a decision's path names, after its session.
#[derive(Deserialize)]
pub(crate) struct ApprovalPath {
    approval_id: String,
}

sessionlog_http::problems! {
    /// What a pause may refuse besides what any session route with a body may.
    PauseProblems {
        409 => "`session_ended`, `nothing_to_do` (already paused)",
        422 => "`invalid_request`: `until` is not an RFC 3339 time to come",
    } + SessionBodyProblems
}

sessionlog_http::problems! {
    /// What an unpause may refuse besides what any session route with a body may.
    UnpauseProblems {
        409 => "`session_ended`, `nothing_to_do` (not paused)",
    } + SessionBodyProblems
}

sessionlog_http::problems! {
    /// What steering may refuse besides what any session route with a body may.
    SteerProblems {
        409 => "`session_ended`",
    } + SessionBodyProblems
}

sessionlog_http::problems! {
    /// What a resolution may refuse besides what any decision may.
    ResolveProblems {
        422 => "`invalid_request`, `not_in_doubt`",
    } + DecisionProblems
}

sessionlog_http::problems! {
    /// What an approval's decision may refuse besides what any decision may.
    ApproveProblems {
        422 => "`invalid_request`, `no_such_approval`, `invalid_identifier` (an approval id is \
                1 to 128 characters of A-Z a-z 0-9 . _ : @ + = -)",
    } + DecisionProblems
}

/// Pauses a session: no harness takes it over or starts a tool call until it is unpaused.
/// The service takes the session over (the harness writing is fenced) and appends
/// `SessionPaused`, signed in the caller's name. With `until`, the pause records when it
/// lapses (the session view shows it as `paused_until`).
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/pause",
    tag = "operators",
    params(SessionPath),
    request_body = PauseRequest,
    responses(
        (status = 200, description = "paused", body = RecordedEvent),
        PauseProblems,
    )
)]
pub(crate) async fn pause(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(r): JsonBody<PauseRequest>,
) -> Answer<RecordedEvent> {
    let until = r
        .until
        .as_deref()
        .map(|text| crate::pause_until(text, sessionlog_schemas::now_micros()))
        .transpose()
        .map_err(|why| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", why))?;
    let act = OperatorAct::Pause {
        reason: r.reason,
        until,
    };
    operate(&recovery, &caller, session, act, "pause").await
}

/// Unpauses a session, signed in the caller's name.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/unpause",
    tag = "operators",
    params(SessionPath),
    request_body = UnpauseRequest,
    responses(
        (status = 200, description = "unpaused", body = RecordedEvent),
        UnpauseProblems,
    )
)]
pub(crate) async fn unpause(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(UnpauseRequest {}): JsonBody<UnpauseRequest>,
) -> Answer<RecordedEvent> {
    operate(&recovery, &caller, session, OperatorAct::Unpause, "unpause").await
}

/// Steers a session: appends a `SteeringMessage` whose author is the verified caller, signed,
/// which the next context view shows as theirs.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/steering",
    tag = "operators",
    params(SessionPath),
    request_body = SteeringRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        SteerProblems,
    )
)]
pub(crate) async fn steer(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(r): JsonBody<SteeringRequest>,
) -> Answer<RecordedEvent> {
    let act = OperatorAct::Steer { text: r.text };
    operate(&recovery, &caller, session, act, "steer").await
}

/// An operator act on a session the caller may see, in the caller's verified name.
async fn operate(
    recovery: &Recovery,
    caller: &Caller,
    session: SessionId,
    act: OperatorAct,
    audit: &'static str,
) -> Answer<RecordedEvent> {
    visible(recovery, caller, session).await?;
    let appended = recovery
        .operate(session, &caller.on_behalf(""), act)
        .await?;
    caller.audit(audit, session);
    Ok(Json(appended.into()))
}

/// Records an operator's outcome for an in-doubt tool call.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/resolutions",
    tag = "operators",
    params(SessionPath),
    request_body = ResolutionRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        ResolveProblems,
    )
)]
pub(crate) async fn resolve(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(r): JsonBody<ResolutionRequest>,
) -> Answer<RecordedEvent> {
    visible(&recovery, &caller, session).await?;
    let resolution = Resolution {
        call_seq: r.call_seq,
        outcome: if r.succeeded {
            CallOutcome::Succeeded
        } else {
            CallOutcome::Failed
        },
        output: r.output,
        operator: caller.on_behalf(&r.operator),
        reason: r.reason,
    };
    let appended = recovery.record_resolution(session, resolution).await?;
    caller.audit("resolve", session);
    Ok(Json(appended.into()))
}

/// Records a decision on a pending approval.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/approvals/{approval_id}",
    tag = "operators",
    params(
        SessionPath,
        ("approval_id" = String, Path, description = "the approval, as its ApprovalRequested event names it"),
    ),
    request_body = ApprovalRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        ApproveProblems,
    )
)]
pub(crate) async fn approve(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Approver>,
    SessionPath(session): SessionPath,
    PathParams(ApprovalPath { approval_id }): PathParams<ApprovalPath>,
    JsonBody(r): JsonBody<ApprovalRequest>,
) -> Answer<RecordedEvent> {
    // The same answer for every session: the rule, not the session, refuses it.
    sessionlog_http::identifier(IdentifierKind::ApprovalId, &approval_id)?;
    visible(&recovery, &caller, session).await?;
    let appended = recovery
        .decide_approval(
            session,
            &approval_id,
            r.approved,
            &caller.on_behalf(&r.decided_by),
            r.reason,
        )
        .await?;
    caller.audit("approve", session);
    Ok(Json(appended.into()))
}

/// Sessions waiting for an operator to record an in-doubt call's outcome.
#[utoipa::path(
    get,
    path = "/resolutions",
    tag = "operators",
    responses(
        (status = 200, description = "the list", body = StuckSessions),
        ServerProblems,
    )
)]
pub(crate) async fn needing_resolution(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
) -> Answer<StuckSessions> {
    let mut stuck = recovery.sessions_needing_resolution().await?;
    if caller.tenant.is_some() {
        // The projection's list has no tenant column: look each one up (the list is short:
        // sessions waiting for a person, all of them projected).
        let mut mine = Vec::with_capacity(stuck.len());
        for session in stuck {
            let tenant = projected_tenant(&recovery, session.session_id).await?;
            if tenant.is_some_and(|t| caller.sees_tenant(&t)) {
                mine.push(session);
            }
        }
        stuck = mine;
    }
    Ok(Json(StuckSessions(stuck)))
}
