//! `GET /v1/work`: a worker of an agent waits for its next wake and takes the session.

use crate::Recovery;
use crate::history::clip;
use crate::work::{Assignment, WorkDesk, WorkRequest};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use sessionlog_http::{Authorized, Harness, Problem, QueryParams, ServerProblems};
use std::sync::Arc;
use utoipa::ToSchema;

/// The query of `GET /v1/work`, as text: [`WorkRequest::parse`] checks it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkQuery {
    agent: Option<String>,
    wait: Option<String>,
    writer: Option<String>,
    context_tokens: Option<String>,
    take_id: Option<String>,
}

/// A session taken for a worker: the members of the resume bundle (`state`, `epoch`,
/// `writer_token`, `next_seq`, `in_doubt`, `context`, `resolved`, and `mcp` when configured)
/// and `wake`, the wake that led to it (`session_id`, `agent`, `reason`, `epoch`,
/// `cause_offset`, `caused_at`, `woken_at`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct AssignmentView(Assignment);

sessionlog_http::problems! {
    /// What a request for work may refuse.
    WorkProblems {
        400 => "`bad_query` (an unknown parameter)",
        422 => "`invalid_request` (no agent, a bad wait, a `take_id` that is not a UUID)",
    } + ServerProblems
}

/// Work for a worker of `agent`: waits up to `wait` for the agent's next wake (a session whose
/// harness died or whose wait is over), takes the session as the caller (the next epoch, as a
/// resume does) and answers the resume bundle with the wake; 204 when the wait ran out.
/// Wakes of sessions taken since, ended, paused or waiting for a person are skipped. One
/// session per request: hold its lease (`POST /v1/sessions/{id}/lease` on ingest) at once.
/// With `take_id` (a UUID the worker chooses per take), asking again after a lost answer is
/// answered the session that take took, not another: the answer is kept for 180 s.
/// 503 `too_many_agents` when the caller's tenant has its workers wait on its share of agents
/// at once (`[recovery] work_agents_per_tenant`), or the instance on 10,000.
#[utoipa::path(
    get,
    path = "/work",
    tag = "sessions",
    params(
        ("agent" = String, Query, description = "the agent whose sessions to run"),
        ("wait" = Option<String>, Query, description = "how long to wait for a wake: `500ms`, `30s`, `2m` or plain seconds; at most 60 s (default 30 s)"),
        ("writer" = Option<String>, Query, description = "a name for the writer that takes over (recorded with the caller's subject); the agent's name by default"),
        ("context_tokens" = Option<u64>, Query, description = "token budget of the bundle's context view"),
        ("take_id" = Option<Uuid>, Query, description = "a UUID the worker chooses for this take: a request repeating it (a retry after a lost answer, by the same caller and writer, within 180 s) is answered the session that take took, and takes no other"),
    ),
    responses(
        (status = 200, description = "a session taken: the resume bundle and the wake", body = AssignmentView),
        (status = 204, description = "no work within the wait"),
        WorkProblems,
    )
)]
pub(crate) async fn work(
    State(recovery): State<Arc<Recovery>>,
    Extension(desk): Extension<Arc<WorkDesk>>,
    Authorized(caller, _): Authorized<Harness>,
    QueryParams(q): QueryParams<WorkQuery>,
) -> Result<Response, Problem> {
    let request = WorkRequest::parse(q.agent, q.wait, q.writer, q.context_tokens)?;
    let writer = caller.on_behalf(&request.writer);
    if let Some(take_id) = q.take_id.filter(|t| !t.is_empty()) {
        let take_id = uuid::Uuid::parse_str(&take_id).map_err(|_| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!("take_id must be a UUID, not {:?}", clip(&take_id)),
            )
        })?;
        let taken = desk
            .next_once(recovery, request, writer, caller.tenant.clone(), take_id)
            .await?;
        return Ok(match taken {
            Some((session, assignment)) => {
                caller.audit("resume", session);
                Json(assignment.as_ref()).into_response()
            }
            None => StatusCode::NO_CONTENT.into_response(),
        });
    }
    let taken = desk
        .next(&recovery, &request, &writer, caller.tenant.as_deref())
        .await?;
    Ok(match taken {
        Some(assignment) => {
            caller.audit("resume", assignment.wake.session_id);
            Json(AssignmentView(assignment)).into_response()
        }
        None => StatusCode::NO_CONTENT.into_response(),
    })
}
