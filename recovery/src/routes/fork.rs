//! A session's family: `POST /v1/sessions/{session_id}/fork`, its `lineage` and the `diff` of
//! a fork against its parent.

use super::{Answer, scope_of, visible};
use crate::{BranchDiff, ForkAt, Lineage, Recovery};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Authorized, JsonBody, Operator, Problem, Reader, ServerProblems, SessionPath, SessionProblems,
    UnknownSession,
};
use sessionlog_schemas::{EventEnvelope, SessionId};
use std::sync::Arc;
use utoipa::ToSchema;

/// A session's `ancestors` (fork points, nearest first) and `children` (`[session_id, seq]`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct LineageView(Lineage);

/// The `fork_point` and the events after it on each side (`parent_only`, `child_only`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct BranchDiffView(BranchDiff);

/// The new session a fork started, with its first event.
#[derive(Serialize, ToSchema)]
pub(crate) struct Forked {
    session_id: SessionId,
    event: EventEnvelope,
    partition: i32,
    offset: i64,
}

/// Where to fork: exactly one of `at_seq` and `at_checkpoint`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkRequest {
    /// Fork after this seq…
    at_seq: Option<u64>,
    /// …or at the checkpoint with this seq.
    at_checkpoint: Option<u64>,
    /// The agent that runs the branch.
    agent: String,
    /// The child's id (a framework's own name for the copy, such as LangGraph's
    /// `copy_thread` destination); a fresh UUIDv7 when absent. One already taken is refused
    /// with 409 `already_started`, and nothing is written.
    #[serde(default)]
    session_id: Option<SessionId>,
    /// Granted approvals of the parent the branch carries over; none unless named. Each must
    /// be granted at the fork point and not yet acted on there (else 422 `bad_fork_point`).
    #[serde(default)]
    inherit_approvals: Vec<String>,
}

sessionlog_http::problems! {
    /// What a fork may refuse.
    ForkProblems {
        400 => "`malformed_json`, `bad_session_id`, `bad_request_body` (not exactly one fork point)",
        409 => "`fork_of_waiting_session`: the parent awaits an approval or an operator at the \
                fork point; `already_started`: a session with the requested `session_id` exists \
                (nothing was written)",
        415 => "`unsupported_media_type`",
        422 => "`invalid_request`, `bad_fork_point`",
    } + UnknownSession + ServerProblems
}

sessionlog_http::problems! {
    /// What a diff may refuse besides what any session route may.
    DiffProblems {
        422 => "`bad_fork_point`: the session is not a fork",
    } + SessionProblems
}

/// Forks a session at a seq or a checkpoint into a new session that names its parent.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/fork",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the parent session")),
    request_body = ForkRequest,
    responses(
        (status = 200, description = "forked", body = Forked),
        ForkProblems,
    )
)]
pub(crate) async fn fork(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(request): JsonBody<ForkRequest>,
) -> Answer<Forked> {
    visible(&recovery, &caller, session).await?;
    let at = match (request.at_seq, request.at_checkpoint) {
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(seq)) => ForkAt::Checkpoint(seq),
        _ => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "bad_request_body",
                "give exactly one of at_seq or at_checkpoint",
            ));
        }
    };
    let by = caller.on_behalf("");
    let first = recovery
        .fork_by(
            session,
            at,
            &request.agent,
            Some(&by),
            request.session_id,
            &request.inherit_approvals,
        )
        .await?;
    caller.audit("fork", session);
    Ok(Json(Forked {
        session_id: first.envelope.session_id,
        event: first.envelope,
        partition: first.position.partition,
        offset: first.position.offset,
    }))
}

/// A session's ancestors and the sessions forked from it. For a credential narrowed to the
/// session: its own fork point only (the parent as an id), `withheld: true`.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/lineage",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "the lineage", body = LineageView),
        SessionProblems,
    )
)]
pub(crate) async fn lineage(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    SessionPath(session): SessionPath,
) -> Answer<LineageView> {
    visible(&recovery, &caller, session).await?;
    let scope = scope_of(&caller);
    Ok(Json(LineageView(
        recovery.lineage_in(session, scope).await?,
    )))
}

/// The events after the fork point on each side of a fork and its parent. For a credential
/// narrowed to the child: the child's side only, `withheld: true` (the parent's events need a
/// credential on the parent).
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/diff",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the forked (child) session")),
    responses(
        (status = 200, description = "the diff", body = BranchDiffView),
        DiffProblems,
    )
)]
pub(crate) async fn diff(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    SessionPath(session): SessionPath,
) -> Answer<BranchDiffView> {
    visible(&recovery, &caller, session).await?;
    let scope = scope_of(&caller);
    Ok(Json(BranchDiffView(
        recovery.diff_in(session, scope).await?,
    )))
}
