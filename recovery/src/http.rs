//! The recovery service over HTTP: rebuild, resume, fork, lineage, diff, ranges of a session's
//! history, resolutions and approvals, on the shared layer of `sessionlog-http`. Bad input gets
//! a 4xx problem (`application/problem+json`); a server recovery depends on (Kafka, the
//! registry, CQL) being unavailable gets a 503; anything else is a bug and gets a 500.

use crate::history::clip;
use crate::{BranchDiff, Error, EventPage, EventRange, ForkAt, Lineage, RebuiltSession};
use crate::{ErasureStatus, ResumeBundle, SessionTrace, StuckSession, UsageBy, UsageReport};
use crate::{OperatorAct, Recovery, Resolution, Scope};
use crate::{SpanPage, SpanQuery};
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Approver, Authenticator, Authorized, BodyProblems, Caller, Harness, JsonBody, Operator,
    PathParams, Problem, ProblemDocument, QueryParams, Reader, ServerProblems, Service,
    ServiceInfo,
};
use sessionlog_producer::Appended;
use sessionlog_schemas::{CallOutcome, EventEnvelope, SessionId};
use sessionlog_session::limits::IdentifierKind;
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Requests answered, by `method`, `route` and `status`.
pub const REQUESTS_TOTAL: &str = "sessionlog_recovery_requests_total";

/// Gives the recovery service's own metric its `# HELP` line; the library's are described by
/// [`crate::describe_metrics`]. The metrics installer calls both.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "HTTP requests the recovery service answered, by method, route and status."
    );
}

const INFO: ServiceInfo = ServiceInfo {
    title: "sessionlog recovery",
    description: "Rebuild a session from the log, resume it without repeating a side effect, \
        settle in-doubt tool calls, decide approvals, and fork with lineage. Errors are RFC 9457 \
        problems whose `code` member is stable.",
    requests_metric: REQUESTS_TOTAL,
    problems_metric: Some(crate::observe::ERRORS),
};

/// The routes and their OpenAPI paths; needs no connection.
pub fn service() -> Service<Arc<Recovery>> {
    Service::new(
        INFO,
        OpenApiRouter::new()
            .routes(routes!(get_session))
            .routes(routes!(resume))
            .routes(routes!(fork))
            .routes(routes!(lineage))
            .routes(routes!(trace))
            .routes(routes!(usage))
            .routes(routes!(spans))
            .routes(routes!(diff))
            .routes(routes!(events))
            .routes(routes!(resolve))
            .routes(routes!(pause))
            .routes(routes!(unpause))
            .routes(routes!(steer))
            .routes(routes!(approve))
            .routes(routes!(erase))
            .routes(routes!(erasure))
            .routes(routes!(redact))
            .routes(routes!(needing_resolution))
            .routes(routes!(work)),
        OpenApiRouter::new(),
    )
}

/// The service's router over `recovery`, rendering `metrics` at `/metrics`, letting through
/// whom `access` lets through.
pub fn router(
    recovery: Recovery,
    metrics: PrometheusHandle,
    access: Arc<dyn Authenticator>,
) -> Router {
    let readiness = recovery.readiness().clone();
    let desk = Arc::new(crate::work::WorkDesk::new(recovery.settings()));
    service()
        .readiness(readiness)
        .router(Arc::new(recovery), metrics, access)
        .layer(axum::Extension(desk))
}

/// The service's OpenAPI 3.1 document, as `/v1/openapi.json` serves it.
pub fn openapi() -> OpenApi {
    service().openapi()
}

impl From<Error> for Problem {
    fn from(e: Error) -> Self {
        let detail = e.to_string();
        let (status, code) = match e {
            Error::UnknownSession(_) => (StatusCode::NOT_FOUND, "unknown_session"),
            Error::Ended { .. } => (StatusCode::CONFLICT, "session_ended"),
            Error::AwaitingApproval { .. } => (StatusCode::CONFLICT, "awaiting_approval"),
            Error::NeedsResolution { .. } => (StatusCode::CONFLICT, "needs_resolution"),
            Error::Paused { .. } => (StatusCode::CONFLICT, "session_paused"),
            Error::AlreadyTaken { .. } => (StatusCode::CONFLICT, "already_taken"),
            Error::NothingToDo { .. } => (StatusCode::CONFLICT, "nothing_to_do"),
            Error::NotInDoubt { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "not_in_doubt"),
            Error::NoSuchApproval { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "no_such_approval"),
            Error::NotRedactable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "not_redactable"),
            Error::BadForkPoint { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "bad_fork_point"),
            Error::ForkOfWaitingSession { .. } => (StatusCode::CONFLICT, "fork_of_waiting_session"),
            Error::Unverified { .. } => (StatusCode::CONFLICT, "unverified_decision"),
            Error::BadRange { code, .. } => (StatusCode::BAD_REQUEST, code),
            Error::NotIndexed(_) | Error::NoSpans(_) => (StatusCode::NOT_FOUND, "unknown_session"),
            Error::IndexMismatch { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "index_mismatch"),
            Error::Attestation { .. } => INTERNAL,
            Error::Producer(e) => return e.into(),
            Error::Keys(e) => return sessionlog_http::from_keys(&e, detail),
            Error::Log(e) => sessionlog_http::log_error_status(&e),
            Error::Schema(e) => schema_status(&e),
            Error::Store(e) => sessionlog_http::store_error_status(&e),
        };
        Problem::new(status, code, detail)
    }
}

/// A server recovery depends on is down or unreachable: a retry may succeed.
const UNAVAILABLE: (StatusCode, &str) = (StatusCode::SERVICE_UNAVAILABLE, "unavailable");
/// A bug or a misconfiguration: retrying will not help.
const INTERNAL: (StatusCode, &str) = (StatusCode::INTERNAL_SERVER_ERROR, "internal");

fn schema_status(e: &sessionlog_schemas::Error) -> (StatusCode, &'static str) {
    if e.is_retriable() {
        UNAVAILABLE
    } else {
        INTERNAL
    }
}

type Answer<T> = Result<Json<T>, Problem>;

/// How long `GET /v1/sessions/{id}` waits for the session's writer lease before answering
/// without it.
const LEASE_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A session rebuilt from its partition.
#[derive(Serialize, ToSchema)]
struct SessionView {
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

/// Everything a new harness needs to continue a session: `state`, `epoch`, `writer_token`
/// (present it to the ingest service with every append), `next_seq`, `in_doubt` (calls to
/// settle first), `context` (the working set for the next model call), `resolved` (outcomes
/// recovery recorded) and, when `[recovery.mcp]` is configured, `mcp`: the MCP server over the
/// session's history (`url`) with a reader token for this session (`token`, `expires_at`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct ResumeBundleView(ResumeBundle);

/// A session's `ancestors` (fork points, nearest first) and `children` (`[session_id, seq]`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct LineageView(Lineage);

/// The `fork_point` and the events after it on each side (`parent_only`, `child_only`).
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct BranchDiffView(BranchDiff);

/// Sessions waiting for an operator: `session_id`, `status`, `last_seq` each.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Vec<Object>)]
struct StuckSessions(Vec<StuckSession>);

/// An event recovery appended, with its durable position.
#[derive(Serialize, ToSchema)]
struct RecordedEvent {
    event: EventEnvelope,
    partition: i32,
    offset: i64,
}

impl From<Appended> for RecordedEvent {
    fn from(appended: Appended) -> Self {
        Self {
            event: appended.envelope,
            partition: appended.position.partition,
            offset: appended.position.offset,
        }
    }
}

/// The new session a fork started, with its first event.
#[derive(Serialize, ToSchema)]
struct Forked {
    session_id: SessionId,
    event: EventEnvelope,
    partition: i32,
    offset: i64,
}

/// Takes a session over.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ResumeRequest {
    /// A name for the writer that takes over (recorded with the caller's subject).
    writer: String,
    /// Token budget of the context view in the bundle; by default the session's context
    /// policy's (`[context]`, 8,000 unless configured).
    #[serde(default)]
    context_tokens: Option<usize>,
}

/// Where to fork: exactly one of `at_seq` and `at_checkpoint`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ForkRequest {
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

/// An operator's outcome for an in-doubt tool call.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ResolutionRequest {
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
struct ApprovalRequest {
    approved: bool,
    /// A name for who decides. The event records the verified caller (`subject/name` when the
    /// name differs); with authentication disabled, this name as given.
    #[serde(default)]
    decided_by: String,
    /// Why.
    reason: Option<String>,
}

/// Rebuilds a session from the log (from its latest verified checkpoint).
#[utoipa::path(
    get,
    path = "/sessions/{session_id}",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    responses(
        (status = 200, description = "rebuilt", body = SessionView),
        (status = 400, description = "`bad_session_id`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn get_session(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    PathParams(session): PathParams<String>,
) -> Answer<SessionView> {
    let session = sessionlog_http::session_id(&session)?;
    // This route answers the rebuild itself: check its tenant rather than look it up apart.
    let mut rebuilt = recovery.rebuild(session).await?;
    caller.require_tenant(session, &rebuilt.state.tenant)?;
    // The digest covers the sealed form; the answer shows the texts opened.
    let digest = rebuilt.state.digest();
    let opener = recovery.opener(session, rebuilt.state.erased).await?;
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

/// Claims the next epoch, settles in-doubt calls, and answers the resume bundle. Refused while
/// an approval or an operator is awaited.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/resume",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "resumed", body = ResumeBundleView),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`session_ended`, `session_paused` (`sessionlog unpause` first), `awaiting_approval`, `needs_resolution`, `fenced`, `lost_claim`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn resume(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<ResumeRequest>,
) -> Answer<ResumeBundleView> {
    let session = sessionlog_http::session_id(&session)?;
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

/// The query of `GET /v1/work`, as text: [`crate::work::WorkRequest::parse`] checks it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkQuery {
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
struct AssignmentView(crate::work::Assignment);

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
        (status = 400, description = "`bad_query` (an unknown parameter)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request` (no agent, a bad wait, a `take_id` that is not a UUID)", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn work(
    State(recovery): State<Arc<Recovery>>,
    axum::Extension(desk): axum::Extension<Arc<crate::work::WorkDesk>>,
    Authorized(caller, _): Authorized<Harness>,
    QueryParams(q): QueryParams<WorkQuery>,
) -> Result<axum::response::Response, Problem> {
    use axum::response::IntoResponse;
    let request = crate::work::WorkRequest::parse(q.agent, q.wait, q.writer, q.context_tokens)?;
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

/// Forks a session at a seq or a checkpoint into a new session that names its parent.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/fork",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the parent session")),
    request_body = ForkRequest,
    responses(
        (status = 200, description = "forked", body = Forked),
        (status = 400, description = "`malformed_json`, `bad_session_id`, `bad_request_body` (not exactly one fork point)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fork_of_waiting_session`: the parent awaits an approval or an operator at the fork point; `already_started`: a session with the requested `session_id` exists (nothing was written)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `bad_fork_point`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn fork(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<ForkRequest>,
) -> Answer<Forked> {
    let session = sessionlog_http::session_id(&session)?;
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
    params(("session_id" = Uuid, Path, description = "the session")),
    responses(
        (status = 200, description = "the lineage", body = LineageView),
        (status = 400, description = "`bad_session_id`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn lineage(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    PathParams(session): PathParams<String>,
) -> Answer<LineageView> {
    let session = sessionlog_http::session_id(&session)?;
    visible(&recovery, &caller, session).await?;
    let scope = scope_of(&caller);
    Ok(Json(LineageView(
        recovery.lineage_in(session, scope).await?,
    )))
}

/// A session's trace as the projector wrote it: a tree of spans. The session's span is the
/// root; model calls, steering and approvals hang off it, and tool calls off the model call
/// that asked for them. Each span names the log offsets of the events that opened and closed
/// it. Spans the projector has not applied yet are not in the answer.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/trace",
    tag = "traces",
    params(("session_id" = Uuid, Path, description = "the session")),
    responses(
        (status = 200, description = "the span tree", body = SessionTrace),
        (status = 400, description = "`bad_session_id`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`: no span projected (unknown, or not projected yet)", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn trace(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    PathParams(session): PathParams<String>,
) -> Answer<SessionTrace> {
    let session = sessionlog_http::session_id(&session)?;
    visible(&recovery, &caller, session).await?;
    Ok(Json(
        crate::trace::session_trace(recovery.store(), session).await?,
    ))
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
        (status = 400, description = "`bad_session_id`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`bad_fork_point`: the session is not a fork", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn diff(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    PathParams(session): PathParams<String>,
) -> Answer<BranchDiffView> {
    let session = sessionlog_http::session_id(&session)?;
    visible(&recovery, &caller, session).await?;
    let scope = scope_of(&caller);
    Ok(Json(BranchDiffView(
        recovery.diff_in(session, scope).await?,
    )))
}

/// What a caller may read of a session's relatives: a credential narrowed to one session sees
/// them only as ids (its route checks made sure the session is that one).
fn scope_of(caller: &Caller) -> Scope {
    match caller.session {
        Some(_) => Scope::Session,
        None => Scope::Family,
    }
}

/// The query of `GET /sessions/{session_id}/events`. Every member is taken as text and parsed
/// here, so a value that is not a number says which parameter and what it takes. A parameter
/// it does not know is refused: `from=5` for `from_seq=5` would otherwise read from seq 1.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    from_seq: Option<String>,
    to_seq: Option<String>,
    kinds: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    inherited: Option<String>,
}

impl EventsQuery {
    /// The range asked for (not yet checked: [`EventRange::validate`] does that). An empty
    /// parameter (`limit=`) is one not given.
    fn range(self) -> Result<EventRange, Problem> {
        let given = |value: Option<String>| value.filter(|v| !v.is_empty());
        let inherited = match given(self.inherited).as_deref() {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(other) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "bad_query",
                    format!("inherited must be true or false, not {:?}", clip(other)),
                ));
            }
        };
        Ok(EventRange {
            from_seq: number("from_seq", "bad_range", SEQS, given(self.from_seq))?,
            to_seq: number("to_seq", "bad_range", SEQS, given(self.to_seq))?,
            kinds: self
                .kinds
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|kind| !kind.is_empty())
                .map(str::to_string)
                .collect(),
            limit: number("limit", "bad_limit", LIMITS, given(self.limit))?,
            cursor: given(self.cursor),
            inherited,
        })
    }
}

/// What a seq parameter takes.
const SEQS: &str = "a whole number from 1 (a session's first event)";
/// What `limit` takes.
const LIMITS: &str = "a whole number from 1 to 1000 (default 100)";

/// A query parameter that must be a whole number (a seq, a limit); `takes` says which.
fn number(
    name: &'static str,
    code: &'static str,
    takes: &str,
    text: Option<String>,
) -> Result<Option<u64>, Problem> {
    text.map(|text| {
        text.parse::<u64>().map_err(|_| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                code,
                format!("{name} must be {takes}, not {:?}", clip(&text)),
            )
        })
    })
    .transpose()
}

/// A range of a session's history: the events with `from_seq <= seq <= to_seq` (of `kinds`),
/// a page of at most `limit` at a time, located by the event index and read from the log,
/// with their texts opened (an erased session's read as erased). With `inherited=true` a
/// fork's inherited events come first: each ancestor's from seq 1 through the point the next
/// session forked at, oldest ancestor first, each tagged with its own `session_id`; `from_seq`
/// and `to_seq` apply to the session's own seqs only. Events the projector has not applied
/// yet are not in the index, so not in the answer.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/events",
    tag = "sessions",
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ("from_seq" = Option<u64>, Query, minimum = 1, description = "the first seq of the session's own events (default 1)"),
        ("to_seq" = Option<u64>, Query, description = "the last seq of the session's own events (default: its last); not before `from_seq`"),
        ("kinds" = Option<String>, Query, description = "only these kinds, comma-separated (`UserRequest,ModelResponse`); default every kind"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "events per page, 1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "the previous page's `next_cursor`, with the same other parameters"),
        ("inherited" = Option<bool>, Query, description = "a fork's inherited events first (default false)"),
    ),
    responses(
        (status = 200, description = "one page; `next_cursor` when more remain", body = EventPage),
        (status = 400, description = "`bad_session_id`, `bad_range` (`to_seq` before `from_seq`, `from_seq` 0, not a number), `bad_limit` (not 1 to 1000), `unknown_kind` (the detail lists the kinds), `bad_cursor`, `bad_query` (an unknown or repeated parameter, `inherited` not a boolean)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`: not in the event index (unknown, or not projected yet)", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn events(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    PathParams(session): PathParams<String>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Answer<EventPage> {
    let session = sessionlog_http::session_id(&session)?;
    // The request is checked whole before anything is read.
    let range = query.range()?;
    range.validate()?;
    if caller.tenant.is_some() {
        // The read goes by the projection, so the tenant does too: a session it does not have
        // is unknown here whoever asks.
        let tenant = projected_tenant(&recovery, session)
            .await?
            .ok_or_else(|| Error::NotIndexed(session.to_string()))?;
        caller.require_tenant(session, &tenant)?;
    }
    Ok(Json(recovery.events(session, range).await?))
}

/// Why a session is paused, and until when.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PauseRequest {
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
struct UnpauseRequest {}

/// A message for the agent, in the verified caller's name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SteeringRequest {
    /// The message.
    text: String,
}

/// Pauses a session: no harness takes it over or starts a tool call until it is unpaused.
/// The service takes the session over (the harness writing is fenced) and appends
/// `SessionPaused`, signed in the caller's name. With `until`, the pause records when it
/// lapses (the session view shows it as `paused_until`).
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/pause",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = PauseRequest,
    responses(
        (status = 200, description = "paused", body = RecordedEvent),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`session_ended`, `nothing_to_do` (already paused)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: `until` is not an RFC 3339 time to come", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn pause(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
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
    operate(&recovery, &caller, &session, act, "pause").await
}

/// Unpauses a session, signed in the caller's name.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/unpause",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = UnpauseRequest,
    responses(
        (status = 200, description = "unpaused", body = RecordedEvent),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`session_ended`, `nothing_to_do` (not paused)", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn unpause(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(UnpauseRequest {}): JsonBody<UnpauseRequest>,
) -> Answer<RecordedEvent> {
    operate(
        &recovery,
        &caller,
        &session,
        OperatorAct::Unpause,
        "unpause",
    )
    .await
}

/// Steers a session: appends a `SteeringMessage` whose author is the verified caller, signed,
/// which the next context view shows as theirs.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/steering",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = SteeringRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn steer(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(r): JsonBody<SteeringRequest>,
) -> Answer<RecordedEvent> {
    let act = OperatorAct::Steer { text: r.text };
    operate(&recovery, &caller, &session, act, "steer").await
}

/// An operator act on a session the caller may see, in the caller's verified name.
async fn operate(
    recovery: &Recovery,
    caller: &Caller,
    session: &str,
    act: OperatorAct,
    audit: &'static str,
) -> Answer<RecordedEvent> {
    let session = sessionlog_http::session_id(session)?;
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
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = ResolutionRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `unknown_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `not_in_doubt`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn resolve(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(r): JsonBody<ResolutionRequest>,
) -> Answer<RecordedEvent> {
    let session = sessionlog_http::session_id(&session)?;
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
        ("session_id" = Uuid, Path, description = "the session"),
        ("approval_id" = String, Path, description = "the approval, as its ApprovalRequested event names it"),
    ),
    request_body = ApprovalRequest,
    responses(
        (status = 200, description = "recorded", body = RecordedEvent),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `unknown_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `no_such_approval`, `invalid_identifier` (an approval id is 1 to 128 characters of A-Z a-z 0-9 . _ : @ + = -)", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn approve(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Approver>,
    PathParams((session, approval_id)): PathParams<(String, String)>,
    JsonBody(r): JsonBody<ApprovalRequest>,
) -> Answer<RecordedEvent> {
    let session = sessionlog_http::session_id(&session)?;
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

/// Why a session is to be erased.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct EraseRequest {
    /// Why. Kept readable in the log and the receipt: say which request or policy, not whose
    /// data.
    reason: String,
}

/// An erasure's receipt.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct ReceiptView(sessionlog_keys::ErasureReceipt);

/// Where an erasure stands.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct ErasureStatusView(ErasureStatus);

/// Erases a session: appends `SessionErased`, destroys its data key (every sealed copy of its
/// texts becomes unreadable) and answers the receipt. The projector then drops its texts,
/// context turns and stored checkpoint states. Erasing again answers the same receipt.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/erase",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = EraseRequest,
    responses(
        (status = 200, description = "erased: the receipt", body = ReceiptView),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `lost_claim`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn erase(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(r): JsonBody<EraseRequest>,
) -> Answer<ReceiptView> {
    let session = sessionlog_http::session_id(&session)?;
    if r.reason.trim().is_empty() {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "an erasure needs a reason (which request or policy asked for it)",
        ));
    }
    visible(&recovery, &caller, session).await?;
    let receipt = recovery
        .erase(session, &caller.on_behalf(""), &r.reason)
        .await?;
    caller.audit("erase", session);
    Ok(Json(ReceiptView(receipt)))
}

/// One field of one event to redact, and why.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RedactRequest {
    /// The seq of the event.
    seq: u64,
    /// The sealed field (`output`, `arguments`, `content`, ...).
    field: String,
    /// Why. Kept readable in the log and the receipt: say what and which policy, not the text.
    reason: String,
}

/// A redaction's receipt.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
struct RedactionReceiptView(crate::RedactionReceipt);

/// Redacts one field of one event: destroys the field's own key (every sealed copy of that
/// text becomes unreadable) and appends `PayloadRedacted`, signed, in the operator's name (the
/// harness writing is fenced, as by a pause, and resumes); answers the receipt. Every other
/// text of the session still opens; it resumes and forks. Redacting again answers the same.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/redactions",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = RedactRequest,
    responses(
        (status = 200, description = "redacted: the receipt", body = RedactionReceiptView),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `lost_claim`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `not_redactable`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn redact(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
    JsonBody(r): JsonBody<RedactRequest>,
) -> Answer<RedactionReceiptView> {
    let session = sessionlog_http::session_id(&session)?;
    visible(&recovery, &caller, session).await?;
    let receipt = recovery
        .redact(session, r.seq, &r.field, &caller.on_behalf(""), &r.reason)
        .await?;
    caller.audit("redact", session);
    Ok(Json(RedactionReceiptView(receipt)))
}

/// Where a session's erasure stands: in the log, in the projection, the data key, the receipt.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/erasure",
    tag = "operators",
    params(("session_id" = Uuid, Path, description = "the session")),
    responses(
        (status = 200, description = "the status", body = ErasureStatusView),
        (status = 400, description = "`bad_session_id`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn erasure(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    PathParams(session): PathParams<String>,
) -> Answer<ErasureStatusView> {
    let session = sessionlog_http::session_id(&session)?;
    visible(&recovery, &caller, session).await?;
    Ok(Json(ErasureStatusView(
        recovery.erasure_status(session).await?,
    )))
}

/// The query of `GET /v1/spans`, as text: numbers are checked by [`SpanQuery::page`] so a bad
/// one says which parameter it is. Unknown parameters are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpansQuery {
    from: Option<String>,
    to: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// Every session's spans by start time, a page at a time (from the spans by tenant and day,
/// merged across their partitions), filtered by agent, model, tool and outcome. A tenant's
/// credential sees its own tenant's spans, read from its own partitions alone. A narrow filter
/// over a long range reads more spans than it answers: narrow the range too.
#[utoipa::path(
    get,
    path = "/spans",
    tag = "traces",
    params(
        ("from" = String, Query, description = "RFC 3339: spans that began at or after it"),
        ("to" = Option<String>, Query, description = "RFC 3339: and before it (default now); at most 31 days after `from`"),
        ("agent" = Option<String>, Query, description = "only spans of this agent's sessions"),
        ("model" = Option<String>, Query, description = "only calls of this model"),
        ("tool" = Option<String>, Query, description = "only calls of this tool"),
        ("outcome" = Option<String>, Query, description = "only spans with this outcome (`failed`, `ok`, `pending`, ...)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "spans per page, 1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "the previous page's `next_cursor`, with the same other parameters"),
    ),
    responses(
        (status = 200, description = "one page; `next_cursor` when more may remain", body = SpanPage),
        (status = 400, description = "`bad_range` (a time that is not RFC 3339, `to` not after `from`, over 31 days), `bad_limit`, `bad_cursor`, `bad_query` (a missing `from`, an unknown parameter)", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn spans(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    QueryParams(query): QueryParams<SpansQuery>,
) -> Answer<SpanPage> {
    let given = |value: Option<String>| value.filter(|v| !v.is_empty());
    let from = given(query.from).ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "from (an RFC 3339 time) is required",
        )
    })?;
    let limit = number("limit", "bad_limit", LIMITS, given(query.limit))?;
    let query = SpanQuery {
        from,
        to: given(query.to),
        agent: given(query.agent),
        model: given(query.model),
        tool: given(query.tool),
        outcome: given(query.outcome),
        limit: limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
        cursor: given(query.cursor),
    };
    let page = query
        .page(recovery.store(), caller.tenant.as_deref())
        .await?;
    Ok(Json(page))
}

/// The query of `GET /v1/usage`. Unknown parameters are refused, like the events range's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    by: Option<String>,
}

/// Usage over whole UTC days, from the rollups the projector keeps (one read per day, no scan
/// of spans): calls, failed tool calls, tokens, cost and latency quantiles by model, agent,
/// tool or day. A call counts on the day its span started, once it has ended. A tenant's
/// credential sees its own sessions' usage.
#[utoipa::path(
    get,
    path = "/usage",
    tag = "traces",
    params(
        ("from" = String, Query, description = "the first day, `YYYY-MM-DD` (UTC)"),
        ("to" = Option<String>, Query, description = "the last day, included (default: `from`); at most 366 days after it"),
        ("by" = Option<String>, Query, description = "`model` (default), `agent`, `tool` or `day`"),
    ),
    responses(
        (status = 200, description = "the report", body = UsageReport),
        (status = 400, description = "`bad_range` (not a date, backwards, over 366 days), `bad_query` (a missing `from`, an unknown `by` or parameter)", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn usage(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Answer<UsageReport> {
    let bad_query = |detail: String| Problem::new(StatusCode::BAD_REQUEST, "bad_query", detail);
    let from = query
        .from
        .filter(|f| !f.is_empty())
        .ok_or_else(|| bad_query("from (a date, YYYY-MM-DD) is required".into()))?;
    let to = query
        .to
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| from.clone());
    let by = match query.by.as_deref() {
        None | Some("") => UsageBy::Model,
        Some(by) => UsageBy::parse(by).ok_or_else(|| {
            bad_query(format!(
                "by must be model, agent, tool or day, not {:?}",
                clip(by)
            ))
        })?,
    };
    let report =
        crate::usage::usage(recovery.store(), caller.tenant.as_deref(), &from, &to, by).await?;
    Ok(Json(report))
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
async fn needing_resolution(
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

/// Refuses a session the caller's tenant may not see with 404 `unknown_session`, as if it did
/// not exist. The operations behind these routes rebuild the session themselves, so the
/// tenant comes from the projection where it has the session (a tenant never changes), and
/// from the log only where it does not. The console's actions check with it too.
pub async fn visible(
    recovery: &Recovery,
    caller: &Caller,
    session: SessionId,
) -> Result<(), Problem> {
    if caller.tenant.is_none() {
        return Ok(());
    }
    let tenant = match projected_tenant(recovery, session).await? {
        Some(tenant) => tenant,
        None => recovery.rebuild(session).await?.state.tenant,
    };
    caller.require_tenant(session, &tenant)
}

/// The tenant of `session` as the projection has it, if it has the session.
async fn projected_tenant(
    recovery: &Recovery,
    session: SessionId,
) -> Result<Option<String>, Problem> {
    Ok(recovery
        .store()
        .load_session(session)
        .await
        .map_err(Error::from)?
        .map(|row| row.state.tenant))
}
