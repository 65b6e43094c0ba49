//! The recovery service over HTTP: rebuild, resume, fork, lineage, diff, resolutions and
//! approvals. Bad input gets a 4xx with a JSON body saying what is wrong; a server it depends
//! on being unavailable gets a 503; input never causes a 500.

use crate::{Error, ForkAt, Recovery, Resolution};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use serde_json::{Value, json};
use sessionlog_schemas::{CallOutcome, SessionId};
use std::sync::Arc;

/// Shared by every request.
struct AppState {
    recovery: Recovery,
    metrics: Option<PrometheusHandle>,
}

/// The service's routes over `recovery`; `metrics` renders `/metrics` when given.
pub fn router(recovery: Recovery, metrics: Option<PrometheusHandle>) -> Router {
    let state = Arc::new(AppState { recovery, metrics });
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(render_metrics))
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .route("/v1/sessions/{id}", get(get_session))
        .route("/v1/sessions/{id}/resume", post(resume))
        .route("/v1/sessions/{id}/fork", post(fork))
        .route("/v1/sessions/{id}/lineage", get(lineage))
        .route("/v1/sessions/{id}/diff", get(diff))
        .route("/v1/sessions/{id}/resolutions", post(resolve))
        .route("/v1/sessions/{id}/approvals/{approval_id}", post(approve))
        .route("/v1/resolutions", get(needing_resolution))
        .with_state(state)
}

/// An error response: a status and a JSON body `{"error": kind, "message": text}`.
pub struct ApiError(StatusCode, &'static str, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        metrics::counter!("sessionlog_recovery_errors_total", "kind" => self.1).increment(1);
        (self.0, Json(json!({"error": self.1, "message": self.2}))).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, kind) = match &e {
            Error::UnknownSession(_) => (StatusCode::NOT_FOUND, "unknown_session"),
            Error::Ended { .. } => (StatusCode::CONFLICT, "session_ended"),
            Error::AwaitingApproval { .. } => (StatusCode::CONFLICT, "awaiting_approval"),
            Error::NeedsResolution { .. } => (StatusCode::CONFLICT, "needs_resolution"),
            Error::NotInDoubt { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "not_in_doubt"),
            Error::NoSuchApproval { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "no_such_approval"),
            Error::BadForkPoint { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "bad_fork_point"),
            Error::Producer(sessionlog_producer::Error::Fenced { .. }) => {
                (StatusCode::CONFLICT, "fenced")
            }
            _ => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        Self(status, kind, e.to_string())
    }
}

fn session_id(text: &str) -> Result<SessionId, ApiError> {
    text.parse().map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "bad_session_id",
            format!("{text:?} is not a session id (a UUID)"),
        )
    })
}

fn body<T: serde::de::DeserializeOwned>(raw: &str) -> Result<T, ApiError> {
    serde_json::from_str(raw).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "bad_request_body",
            format!("the JSON body does not fit this endpoint: {e}"),
        )
    })
}

fn to_json(value: impl serde::Serialize) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(value).map(Json).map_err(|e| {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })
}

async fn render_metrics(State(state): State<Arc<AppState>>) -> String {
    state
        .metrics
        .as_ref()
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

async fn get_session(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let rebuilt = state.recovery.rebuild(session_id(&id)?).await?;
    let amplification = rebuilt.read_amplification();
    let status = rebuilt.state.status().as_str();
    let digest = rebuilt.state.digest();
    to_json(
        json!({"rebuilt": rebuilt, "status": status, "digest": digest,
                   "read_amplification": amplification}),
    )
}

#[derive(Deserialize)]
struct ResumeRequest {
    writer: String,
    /// Token budget of the context view in the bundle.
    #[serde(default = "default_context_tokens")]
    context_tokens: usize,
}

fn default_context_tokens() -> usize {
    8_000
}

async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    raw: String,
) -> Result<Json<Value>, ApiError> {
    let request: ResumeRequest = body(&raw)?;
    let bundle = state
        .recovery
        .resume(session_id(&id)?, &request.writer, request.context_tokens)
        .await?;
    metrics::counter!("sessionlog_recovery_resumes_total").increment(1);
    to_json(bundle)
}

#[derive(Deserialize)]
struct ForkRequest {
    /// Fork after this seq…
    at_seq: Option<u64>,
    /// …or at this checkpoint's seq.
    at_checkpoint: Option<u64>,
    agent: String,
}

async fn fork(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    raw: String,
) -> Result<Json<Value>, ApiError> {
    let request: ForkRequest = body(&raw)?;
    let at = match (request.at_seq, request.at_checkpoint) {
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(seq)) => ForkAt::Checkpoint(seq),
        _ => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                "bad_request_body",
                "give exactly one of at_seq or at_checkpoint".into(),
            ));
        }
    };
    let first = state
        .recovery
        .fork(session_id(&id)?, at, &request.agent)
        .await?;
    to_json(json!({
        "session_id": first.envelope.session_id,
        "event": first.envelope,
        "partition": first.position.partition,
        "offset": first.position.offset,
    }))
}

async fn lineage(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    to_json(state.recovery.lineage(session_id(&id)?).await?)
}

async fn diff(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    to_json(state.recovery.diff(session_id(&id)?).await?)
}

#[derive(Deserialize)]
struct ResolutionRequest {
    call_seq: u64,
    succeeded: bool,
    output: String,
    operator: String,
    reason: String,
}

async fn resolve(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    raw: String,
) -> Result<Json<Value>, ApiError> {
    let r: ResolutionRequest = body(&raw)?;
    let appended = state
        .recovery
        .record_resolution(
            session_id(&id)?,
            Resolution {
                call_seq: r.call_seq,
                outcome: if r.succeeded {
                    CallOutcome::Succeeded
                } else {
                    CallOutcome::Failed
                },
                output: r.output,
                operator: r.operator,
                reason: r.reason,
            },
        )
        .await?;
    to_json(
        json!({"event": appended.envelope, "partition": appended.position.partition,
                   "offset": appended.position.offset}),
    )
}

#[derive(Deserialize)]
struct ApprovalRequest {
    approved: bool,
    decided_by: String,
    reason: Option<String>,
}

async fn approve(
    State(state): State<Arc<AppState>>,
    Path((id, approval_id)): Path<(String, String)>,
    raw: String,
) -> Result<Json<Value>, ApiError> {
    let r: ApprovalRequest = body(&raw)?;
    let appended = state
        .recovery
        .decide_approval(
            session_id(&id)?,
            &approval_id,
            r.approved,
            &r.decided_by,
            r.reason,
        )
        .await?;
    to_json(
        json!({"event": appended.envelope, "partition": appended.position.partition,
                   "offset": appended.position.offset}),
    )
}

async fn needing_resolution(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    to_json(state.recovery.sessions_needing_resolution().await?)
}

/// The OpenAPI 3.1 description of the service.
pub fn openapi() -> Value {
    let session = json!({"name": "id", "in": "path", "required": true,
                         "schema": {"type": "string", "format": "uuid"}});
    let error = json!({"description": "what is wrong",
        "content": {"application/json": {"schema": {"type": "object",
            "properties": {"error": {"type": "string"}, "message": {"type": "string"}}}}}});
    let op = |summary: &str, body: Option<Value>| {
        let mut operation = json!({
            "summary": summary,
            "parameters": [session.clone()],
            "responses": {"200": {"description": "done"}, "400": error.clone(),
                          "404": error.clone(), "409": error.clone(), "422": error.clone(),
                          "503": error.clone()}
        });
        if let Some(schema) = body {
            operation["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": schema}}});
        }
        operation
    };
    json!({
        "openapi": "3.1.0",
        "info": {"title": "sessionlog recovery", "version": env!("CARGO_PKG_VERSION")},
        "paths": {
            "/v1/sessions/{id}": {"get": op("Rebuild a session from the log", None)},
            "/v1/sessions/{id}/resume": {"post": op("Claim the next epoch and get the resume bundle",
                Some(json!({"type": "object", "required": ["writer"],
                            "properties": {"writer": {"type": "string"},
                                           "context_tokens": {"type": "integer", "default": 8000}}})))},
            "/v1/sessions/{id}/fork": {"post": op("Fork at a seq or a checkpoint",
                Some(json!({"type": "object", "required": ["agent"], "properties": {
                    "at_seq": {"type": "integer"}, "at_checkpoint": {"type": "integer"},
                    "agent": {"type": "string"}}})))},
            "/v1/sessions/{id}/lineage": {"get": op("Ancestors and children", None)},
            "/v1/sessions/{id}/diff": {"get": op("Events after the fork point on each side", None)},
            "/v1/sessions/{id}/resolutions": {"post": op("Record an in-doubt call's outcome",
                Some(json!({"type": "object",
                    "required": ["call_seq", "succeeded", "output", "operator", "reason"],
                    "properties": {"call_seq": {"type": "integer"}, "succeeded": {"type": "boolean"},
                        "output": {"type": "string"}, "operator": {"type": "string"},
                        "reason": {"type": "string"}}})))},
            "/v1/sessions/{id}/approvals/{approval_id}": {"post": op("Record an approval decision",
                Some(json!({"type": "object", "required": ["approved", "decided_by"],
                    "properties": {"approved": {"type": "boolean"}, "decided_by": {"type": "string"},
                        "reason": {"type": "string"}}})))},
            "/v1/resolutions": {"get": {"summary": "Sessions needing an operator",
                "responses": {"200": {"description": "the list"}}}},
            "/health": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics",
                "responses": {"200": {"description": "text exposition"}}}}
        }
    })
}
