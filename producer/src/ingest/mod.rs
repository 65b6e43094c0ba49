//! HTTP ingest: the producer library over HTTP, for harnesses not written in Rust.
//!
//! The service holds a [`SessionWriter`] for every session created or claimed through it; a
//! harness appends with the epoch it was given and the seq it expects, so a retry of the same
//! request (same seq and event id) is answered from the recorded positions instead of being
//! written twice. A restarted service holds no writers: the harness claims its session again.
//! Every answer for an event carries its durable position (partition, offset). Bad input gets
//! a 4xx with a [`Problem`] body; only the servers behind the service can cause a 5xx.

mod openapi;
mod problem;

pub use openapi::openapi_document;
pub use problem::Problem;

use crate::{Appended, Error, EventLog, Position, Result, SessionWriter};
use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sessionlog_log::IngestSettings;
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Epoch, EventEnvelope, Seq, SessionEvent, SessionId, TerminalOutcome,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use uuid::Uuid;

/// Every route the service serves, as `(method, path)`; the OpenAPI document lists exactly these.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/sessions"),
    ("post", "/sessions/{session_id}/claim"),
    ("post", "/sessions/{session_id}/events"),
    ("post", "/sessions/{session_id}/checkpoint"),
    ("post", "/sessions/{session_id}/close"),
    ("get", "/health"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

/// Kinds with their own endpoint: they change who writes or what the writer declares, so
/// the service makes them rather than taking them from a batch.
const RESERVED_KINDS: &[&str] = &[
    "SessionStarted",
    "SessionForked",
    "WriterClaimed",
    "Checkpoint",
];

/// How many recent events' positions a session keeps to answer retries: the fold's duplicate
/// window, as an older retry is a conflict in the fold anyway.
const RECENT_POSITIONS: usize = sessionlog_session::DUPLICATE_WINDOW;

/// The service's state: the shared log and the sessions open here.
pub struct Ingest {
    log: Arc<EventLog>,
    settings: IngestSettings,
    sessions: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<OpenSession>>>>,
    metrics: PrometheusHandle,
}

/// A session this service writes, with the positions of its recent events so that a retried
/// request is answered with the offsets of the first write.
struct OpenSession {
    writer: SessionWriter,
    recent: VecDeque<(Seq, Uuid, Position)>,
}

impl OpenSession {
    fn new(writer: SessionWriter) -> Self {
        Self {
            writer,
            recent: VecDeque::new(),
        }
    }

    fn remember(&mut self, appended: &Appended) {
        let e = &appended.envelope;
        self.recent
            .push_back((e.seq, e.event_id, appended.position));
        // The fold recognises retries within the same window; older ones are conflicts anyway.
        if self.recent.len() > RECENT_POSITIONS {
            self.recent.pop_front();
        }
    }

    fn recorded(&self, seq: Seq) -> Option<(Uuid, Position)> {
        self.recent
            .iter()
            .rev()
            .find(|(s, _, _)| *s == seq)
            .map(|(_, id, p)| (*id, *p))
    }
}

impl Ingest {
    /// A service writing through `log`.
    pub fn new(log: Arc<EventLog>, settings: IngestSettings) -> Arc<Self> {
        Arc::new(Self {
            log,
            settings,
            sessions: Mutex::new(HashMap::new()),
            metrics: prometheus(),
        })
    }

    /// The routes, with the body limit of the settings.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/sessions", post(create))
            .route("/sessions/{session_id}/claim", post(claim))
            .route("/sessions/{session_id}/events", post(append))
            .route("/sessions/{session_id}/checkpoint", post(checkpoint))
            .route("/sessions/{session_id}/close", post(close))
            .route("/health", get(health))
            .route("/metrics", get(render_metrics))
            .route("/openapi.json", get(openapi))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(self.settings.max_body_bytes))
            .with_state(Arc::clone(self))
    }

    /// Serves on `listener` until `shutdown` completes, then flushes the producer.
    pub async fn serve(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)?;
        self.log.flush(std::time::Duration::from_secs(30)).await
    }

    fn open(&self, session: SessionId) -> Option<Arc<tokio::sync::Mutex<OpenSession>>> {
        self.sessions().get(&session).cloned()
    }

    fn sessions(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<tokio::sync::Mutex<OpenSession>>>> {
        // Inserts and removals are single operations: a panic cannot leave the map torn.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The process's Prometheus recorder, installed on first use. If another recorder was
/// installed first, ours renders empty rather than failing the service.
fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            }
            handle
        })
        .clone()
}

/// One event's durable position, as every answer reports it.
#[derive(Debug, Serialize)]
struct EventAck {
    seq: Seq,
    event_id: Uuid,
    partition: i32,
    offset: i64,
    /// True when the event had been written before (a retry): the position is the first write's.
    duplicate: bool,
}

impl EventAck {
    fn new(appended: &Appended, duplicate: bool) -> Self {
        Self {
            seq: appended.envelope.seq,
            event_id: appended.envelope.event_id,
            partition: appended.position.partition,
            offset: appended.position.offset,
            duplicate,
        }
    }
}

/// The answer to create and claim: the session and the epoch to write with.
#[derive(Debug, Serialize)]
struct Opened {
    session_id: SessionId,
    epoch: Epoch,
    next_seq: Seq,
    event: EventAck,
}

impl Opened {
    fn new(writer: &SessionWriter, event: &Appended) -> Self {
        Self {
            session_id: writer.session_id(),
            epoch: writer.state().epoch,
            next_seq: writer.next_seq(),
            event: EventAck::new(event, false),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    agent: String,
    title: Option<String>,
    session_id: Option<SessionId>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimRequest {
    writer: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendRequest {
    epoch: Epoch,
    events: Vec<IncomingEvent>,
}

/// One event of an append request: the envelope fields the harness owns, and the kind's data.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IncomingEvent {
    seq: Seq,
    event_id: Option<Uuid>,
    kind: String,
    #[serde(default)]
    data: Value,
    causation_id: Option<Uuid>,
    idempotency_key: Option<String>,
    occurred_at: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointRequest {
    epoch: Epoch,
    workspace_revision: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseRequest {
    epoch: Epoch,
    outcome: TerminalOutcome,
    reason: Option<String>,
}

type Answer<T> = std::result::Result<(StatusCode, T), Problem>;

/// Turns a handler's outcome into a response, counting it.
fn respond<T: Serialize>(route: &'static str, answer: Answer<T>) -> Response {
    let response = match answer {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(problem) => {
            tracing::debug!(route, code = problem.code, message = %problem.message, "request refused");
            problem.into_response()
        }
    };
    metrics::counter!(
        "sessionlog_ingest_requests_total",
        "route" => route,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}

fn session_of(
    path: std::result::Result<Path<String>, PathRejection>,
) -> Result<SessionId, Problem> {
    let Path(text) = path?;
    text.parse().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_session_id",
            format!("{text:?} is not a session id (a UUID)"),
        )
    })
}

fn not_open(session: SessionId) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "session_not_open",
        format!(
            "session {session} is not open on this ingest service: create it, or claim it \
             (POST /sessions/{session}/claim) to take it over"
        ),
    )
}

fn check_epoch(open: &OpenSession, epoch: Epoch) -> Result<(), Problem> {
    let current = open.writer.state().epoch;
    if epoch != current {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "stale_epoch",
            format!(
                "epoch {epoch} is not the writer's epoch {current} (claim again to get a new one)"
            ),
        )
        .with("epoch", epoch)
        .with("current_epoch", current));
    }
    Ok(())
}

async fn create(
    State(ingest): State<Arc<Ingest>>,
    body: std::result::Result<Json<CreateRequest>, JsonRejection>,
) -> Response {
    respond(
        "create",
        async {
            let Json(request) = body?;
            let session = request.session_id.unwrap_or_default();
            if ingest.open(session).is_some() {
                return Err(Problem::new(
                    StatusCode::CONFLICT,
                    "already_started",
                    format!("session {session} is already open here"),
                ));
            }
            let (writer, start) = SessionWriter::create_with_id(
                Arc::clone(&ingest.log),
                session,
                &request.agent,
                request.title.as_deref(),
            )
            .await?;
            let opened = Opened::new(&writer, &start);
            let mut open = OpenSession::new(writer);
            open.remember(&start);
            ingest
                .sessions()
                .insert(session, Arc::new(tokio::sync::Mutex::new(open)));
            Ok((StatusCode::CREATED, opened))
        }
        .await,
    )
}

async fn claim(
    State(ingest): State<Arc<Ingest>>,
    path: std::result::Result<Path<String>, PathRejection>,
    body: std::result::Result<Json<ClaimRequest>, JsonRejection>,
) -> Response {
    respond(
        "claim",
        async {
            let session = session_of(path)?;
            let Json(request) = body?;
            let (writer, claimed) =
                SessionWriter::claim(Arc::clone(&ingest.log), session, &request.writer).await?;
            let opened = Opened::new(&writer, &claimed);
            // A writer this service held for the session is fenced by the claim; drop it.
            ingest.sessions().insert(
                session,
                Arc::new(tokio::sync::Mutex::new(OpenSession::new(writer))),
            );
            Ok((StatusCode::OK, opened))
        }
        .await,
    )
}

async fn append(
    State(ingest): State<Arc<Ingest>>,
    path: std::result::Result<Path<String>, PathRejection>,
    body: std::result::Result<Json<AppendRequest>, JsonRejection>,
) -> Response {
    respond("append", async {
        let session = session_of(path)?;
        let Json(request) = body?;
        // Beyond the duplicate window a retried request would be judged a conflict.
        let limit = ingest
            .settings
            .max_batch_events
            .min(sessionlog_session::DUPLICATE_WINDOW);
        if request.events.len() > limit {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_events",
                format!("{} events in one request; at most {limit}", request.events.len()),
            ));
        }
        let open = ingest.open(session).ok_or_else(|| not_open(session))?;
        let mut open = open.lock().await;
        check_epoch(&open, request.epoch)?;
        let mut acks = Vec::with_capacity(request.events.len());
        let mut fresh = Vec::new();
        for incoming in request.events {
            let last = open.writer.state().last_seq;
            let expected = open.writer.next_seq() + fresh.len() as u64;
            if incoming.seq <= last && fresh.is_empty() {
                acks.push(retried(&open, incoming)?);
            } else if incoming.seq != expected {
                return Err(Problem::new(
                    StatusCode::CONFLICT,
                    "wrong_seq",
                    format!("expected seq {expected}, got {}", incoming.seq),
                )
                .with("expected_seq", expected)
                .with("seq", incoming.seq));
            } else {
                fresh.push(envelope(&open.writer, incoming)?);
            }
        }
        let appended = open.writer.append_envelopes(fresh).await?;
        for a in &appended {
            open.remember(a);
            acks.push(EventAck::new(a, false));
        }
        metrics::counter!("sessionlog_ingest_events_total").increment(appended.len() as u64);
        Ok((
            StatusCode::OK,
            json!({ "session_id": session, "next_seq": open.writer.next_seq(), "events": acks }),
        ))
    }
    .await)
}

/// Answers a retried event (seq already accepted) from the recorded positions.
fn retried(open: &OpenSession, incoming: IncomingEvent) -> Result<EventAck, Problem> {
    match open.recorded(incoming.seq) {
        Some((id, position)) if Some(id) == incoming.event_id => Ok(EventAck {
            seq: incoming.seq,
            event_id: id,
            partition: position.partition,
            offset: position.offset,
            duplicate: true,
        }),
        Some((id, _)) => Err(Problem::new(
            StatusCode::CONFLICT,
            "seq_conflict",
            format!(
                "seq {} is already taken by event {id}; a retry must repeat its event_id",
                incoming.seq
            ),
        )
        .with("seq", incoming.seq)
        .with("event_id", id.to_string())),
        None => Err(Problem::new(
            StatusCode::CONFLICT,
            "seq_conflict",
            format!(
                "seq {} was accepted before this service's memory of the session",
                incoming.seq
            ),
        )
        .with("seq", incoming.seq)),
    }
}

/// Builds the envelope of a new event, refusing kinds this route does not take.
fn envelope(writer: &SessionWriter, incoming: IncomingEvent) -> Result<EventEnvelope, Problem> {
    if RESERVED_KINDS.contains(&incoming.kind.as_str()) {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "reserved_kind",
            format!(
                "{} events are not appended directly: use POST /sessions, /claim or /checkpoint",
                incoming.kind
            ),
        ));
    }
    let data = match incoming.data {
        Value::Null => json!({}),
        data => data,
    };
    let event: SessionEvent = serde_json::from_value(json!({ incoming.kind.clone(): data }))
        .map_err(|e| {
            let message = e.to_string();
            let code = if message.starts_with("unknown variant") {
                "unknown_kind"
            } else {
                "invalid_event"
            };
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code,
                format!("event seq {} ({}): {message}", incoming.seq, incoming.kind),
            )
            .with("seq", incoming.seq)
        })?;
    Ok(EventEnvelope {
        event_id: incoming.event_id.unwrap_or_else(Uuid::now_v7),
        session_id: writer.session_id(),
        seq: incoming.seq,
        writer_epoch: writer.state().epoch,
        occurred_at: incoming
            .occurred_at
            .unwrap_or_else(sessionlog_schemas::now_micros),
        causation_id: incoming.causation_id,
        idempotency_key: incoming.idempotency_key,
        schema_version: CURRENT_SCHEMA_VERSION,
        event,
    })
}

async fn checkpoint(
    State(ingest): State<Arc<Ingest>>,
    path: std::result::Result<Path<String>, PathRejection>,
    body: std::result::Result<Json<CheckpointRequest>, JsonRejection>,
) -> Response {
    respond(
        "checkpoint",
        async {
            let session = session_of(path)?;
            let Json(request) = body?;
            let open = ingest.open(session).ok_or_else(|| not_open(session))?;
            let mut open = open.lock().await;
            check_epoch(&open, request.epoch)?;
            let appended = open.writer.checkpoint(request.workspace_revision).await?;
            open.remember(&appended);
            Ok((StatusCode::OK, EventAck::new(&appended, false)))
        }
        .await,
    )
}

async fn close(
    State(ingest): State<Arc<Ingest>>,
    path: std::result::Result<Path<String>, PathRejection>,
    body: std::result::Result<Json<CloseRequest>, JsonRejection>,
) -> Response {
    respond(
        "close",
        async {
            let session = session_of(path)?;
            let Json(request) = body?;
            let open = ingest.open(session).ok_or_else(|| not_open(session))?;
            let mut open = open.lock().await;
            check_epoch(&open, request.epoch)?;
            let appended = open.writer.close(request.outcome, request.reason).await?;
            ingest.sessions().remove(&session);
            Ok((StatusCode::OK, EventAck::new(&appended, false)))
        }
        .await,
    )
}

async fn health(State(ingest): State<Arc<Ingest>>) -> Response {
    let open = ingest.sessions().len();
    respond(
        "health",
        Ok((
            StatusCode::OK,
            json!({
                "status": "ok",
                "topic": ingest.log.topic(),
                "schema_id": ingest.log.schema_id(),
                "open_sessions": open,
                "in_flight": ingest.log.in_flight(),
            }),
        )),
    )
}

async fn render_metrics(State(ingest): State<Arc<Ingest>>) -> Response {
    metrics::gauge!("sessionlog_ingest_open_sessions").set(ingest.sessions().len() as f64);
    metrics::gauge!("sessionlog_producer_in_flight").set(ingest.log.in_flight() as f64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        ingest.metrics.render(),
    )
        .into_response()
}

async fn openapi() -> Response {
    Json(openapi_document()).into_response()
}

async fn not_found(uri: axum::http::Uri) -> Response {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
        format!("no route {uri}; GET /openapi.json lists them"),
    )
    .into_response()
}
