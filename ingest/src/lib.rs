//! HTTP ingest: the producer library over HTTP, for harnesses not written in Rust.
//!
//! The service holds a [`SessionWriter`] for every session created or claimed through it; a
//! harness appends with the epoch it was given and the seq it expects, so a retry of the same
//! request (same seq and event id) is answered from the recorded positions instead of being
//! written twice. A restarted service holds no writers: the harness claims its session again.
//! Every answer for an event carries its durable position (partition, offset). Bad input gets
//! a 4xx problem (`application/problem+json`); only the servers behind the service cause a
//! 503, and a bug a 500. Routes and the OpenAPI document come from [`service`].

mod error;

pub use error::{Error, Result};

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sessionlog_http::{
    Authenticator, Authorized, BodyProblems, Harness, JsonBody, PathParams, Problem,
    ProblemDocument, ServerProblems, Service, ServiceInfo,
};
use sessionlog_log::IngestSettings;
use sessionlog_producer::{Appended, EventLog, Position, SessionWriter};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Epoch, EventEnvelope, Seq, SessionEvent, SessionId, TerminalOutcome,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

/// Requests answered, by `method`, `route` and `status`.
pub const REQUESTS_TOTAL: &str = "sessionlog_ingest_requests_total";
/// Events appended through the append route.
pub const EVENTS_TOTAL: &str = "sessionlog_ingest_events_total";
/// Sessions this service holds a writer for.
pub const OPEN_SESSIONS: &str = "sessionlog_ingest_open_sessions";
/// Events sent to Kafka and not yet acknowledged, in this process.
pub const IN_FLIGHT: &str = "sessionlog_producer_in_flight";

/// Gives the ingest metrics their `# HELP` lines; [`sessionlog_http::metrics::install`] calls it.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "HTTP requests the ingest service answered, by method, route and status."
    );
    metrics::describe_counter!(
        EVENTS_TOTAL,
        "Events appended to the log through POST /v1/sessions/{session_id}/events."
    );
    metrics::describe_gauge!(
        OPEN_SESSIONS,
        "Sessions the ingest service holds a writer for (created or claimed here, not closed)."
    );
    metrics::describe_gauge!(
        IN_FLIGHT,
        "Events sent to Kafka and not yet acknowledged by this process."
    );
}

/// What the ingest service is, for its document and its metrics.
const INFO: ServiceInfo = ServiceInfo {
    title: "sessionlog ingest",
    description: "Append durable agent-session events to the session log over HTTP. Create or \
        claim a session to get a writer epoch; append events with the seq you expect (gap-free \
        from 1) and an event_id, so that a retry is idempotent; every answer carries the durable \
        Kafka position (partition, offset). Errors are RFC 9457 problems whose `code` member is \
        stable.",
    requests_metric: REQUESTS_TOTAL,
    problems_metric: None,
};

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
    access: Arc<dyn Authenticator>,
    settings: IngestSettings,
    sessions: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<OpenSession>>>>,
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

/// The routes and their OpenAPI paths; needs no running service.
pub fn service() -> Service<Arc<Ingest>> {
    Service::new(
        INFO,
        OpenApiRouter::new()
            .routes(routes!(create))
            .routes(routes!(claim))
            .routes(routes!(append))
            .routes(routes!(checkpoint))
            .routes(routes!(close)),
        OpenApiRouter::new().routes(routes!(health)),
    )
}

impl Ingest {
    /// A service writing through `log`, letting through whom `access` lets through.
    pub fn new(
        log: Arc<EventLog>,
        settings: IngestSettings,
        access: Arc<dyn Authenticator>,
    ) -> Arc<Self> {
        Arc::new(Self {
            log,
            access,
            settings,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// The routes, with the body limit of the settings, rendering `metrics` at `/metrics`.
    pub fn router(self: &Arc<Self>, metrics: PrometheusHandle) -> Router {
        let gauges = Arc::clone(self);
        service()
            .before_scrape(move || {
                metrics::gauge!(OPEN_SESSIONS).set(gauges.sessions().len() as f64);
                metrics::gauge!(IN_FLIGHT).set(gauges.log.in_flight() as f64);
            })
            .router(Arc::clone(self), metrics, Arc::clone(&self.access))
            .layer(DefaultBodyLimit::max(self.settings.max_body_bytes))
    }

    /// Serves on `listener` until `shutdown` completes, then flushes the producer. Installs
    /// the process's metrics recorder.
    pub async fn serve(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let metrics = sessionlog_http::metrics::install(&[
            describe_metrics,
            sessionlog_http::auth::describe_metrics,
        ]);
        axum::serve(listener, self.router(metrics))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)?;
        Ok(self.log.flush(std::time::Duration::from_secs(30)).await?)
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

/// One event's durable position, as every answer reports it.
#[derive(Debug, Serialize, ToSchema)]
struct EventAck {
    #[schema(value_type = u64)]
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
#[derive(Debug, Serialize, ToSchema)]
struct Opened {
    session_id: SessionId,
    /// The epoch to append with.
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// The seq the next appended event must have.
    #[schema(value_type = u64)]
    next_seq: Seq,
    /// The start or claim event.
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

/// The answer to an append: each event's position, in request order.
#[derive(Debug, Serialize, ToSchema)]
struct AppendedEvents {
    session_id: SessionId,
    /// The seq the next appended event must have.
    #[schema(value_type = u64)]
    next_seq: Seq,
    events: Vec<EventAck>,
}

/// The service's liveness and what it writes to.
#[derive(Debug, Serialize, ToSchema)]
struct HealthReport {
    #[schema(example = "ok")]
    status: &'static str,
    /// The Kafka topic events are appended to.
    topic: String,
    /// The registry's id of the schema events are encoded with.
    schema_id: u32,
    /// Sessions this service holds a writer for.
    open_sessions: usize,
    /// Events sent and not yet acknowledged.
    in_flight: usize,
}

/// Starts a session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// Which agent or harness runs it.
    agent: String,
    /// The human-readable task.
    title: Option<String>,
    /// The session's id; a fresh UUIDv7 when absent.
    session_id: Option<SessionId>,
}

/// Takes a session over.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ClaimRequest {
    /// Which harness takes over.
    writer: String,
}

/// Events to append, in seq order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AppendRequest {
    /// The epoch create or claim answered.
    #[schema(value_type = u64)]
    epoch: Epoch,
    events: Vec<IncomingEvent>,
}

/// One event of an append request: the envelope fields the harness owns, and the kind's data.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct IncomingEvent {
    /// The event's seq: the next one, or an earlier one to retry it.
    #[schema(value_type = u64)]
    seq: Seq,
    /// The event's id; a retry must repeat it. A fresh UUIDv7 when absent.
    event_id: Option<Uuid>,
    /// The kind, a `SessionEvent` variant name (`UserRequest`, `ToolCallRequested`, ...);
    /// `SessionStarted`, `SessionForked`, `WriterClaimed` and `Checkpoint` have their own routes.
    #[schema(example = "UserRequest")]
    kind: String,
    /// The kind's fields, as in the `SessionEvent` schema's variant of that name.
    #[serde(default)]
    #[schema(value_type = Object, example = json!({"content": {"Plain": "Upgrade the logging crate."}}))]
    data: Value,
    /// The event this one answers (e.g. the tool call a result answers).
    causation_id: Option<Uuid>,
    /// A key that lets an external service recognise a repeated side-effecting request.
    idempotency_key: Option<String>,
    /// When the harness created the event, in microseconds since the Unix epoch; now when absent.
    occurred_at: Option<i64>,
}

/// Records a checkpoint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CheckpointRequest {
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// The workspace revision at this point, if the harness has one.
    workspace_revision: Option<String>,
}

/// Ends the session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CloseRequest {
    #[schema(value_type = u64)]
    epoch: Epoch,
    outcome: TerminalOutcome,
    /// Why it ended.
    reason: Option<String>,
}

type Answer<T> = std::result::Result<(StatusCode, Json<T>), Problem>;

fn not_open(session: SessionId) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "session_not_open",
        format!(
            "session {session} is not open on this ingest service: create it, or claim it \
             (POST /v1/sessions/{session}/claim) to take it over"
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

/// Starts a new session (seq 1, epoch 1).
#[utoipa::path(
    post,
    path = "/sessions",
    tag = "sessions",
    request_body = CreateRequest,
    responses(
        (status = 201, description = "started", body = Opened),
        (status = 400, description = "`malformed_json`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`already_started`: the session exists", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 413, description = "`too_large`: body or event over the limit", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `invalid_event`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn create(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Answer<Opened> {
    let session = request.session_id.unwrap_or_default();
    if ingest.open(session).is_some() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "already_started",
            format!("session {session} is already open here"),
        ));
    }
    let (writer, start) = SessionWriter::create_in(
        Arc::clone(&ingest.log),
        session,
        &request.agent,
        request.title.as_deref(),
        caller.home_tenant(),
    )
    .await?;
    let opened = Opened::new(&writer, &start);
    let mut open = OpenSession::new(writer);
    open.remember(&start);
    ingest
        .sessions()
        .insert(session, Arc::new(tokio::sync::Mutex::new(open)));
    Ok((StatusCode::CREATED, Json(opened)))
}

/// Takes a session over with the next epoch; fences every earlier writer.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/claim",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "claimed", body = Opened),
        (status = 404, description = "`unknown_session`: not in the log", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`lost_claim`, `session_ended`, `start_deleted` (retention deleted the session's start: resume it through the recovery service)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn claim(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<ClaimRequest>,
) -> Answer<Opened> {
    let session = sessionlog_http::session_id(&session)?;
    let pending = SessionWriter::prepare_takeover(
        Arc::clone(&ingest.log),
        session,
        &caller.on_behalf(&request.writer),
    )
    .await?;
    // Before the claim is written: another tenant's session is not there for this caller.
    caller.require_tenant(session, &pending.state().tenant)?;
    let (writer, claimed) = pending.commit().await?;
    caller.audit("claim", session);
    let opened = Opened::new(&writer, &claimed);
    // A writer this service held for the session is fenced by the claim; drop it.
    ingest.sessions().insert(
        session,
        Arc::new(tokio::sync::Mutex::new(OpenSession::new(writer))),
    );
    Ok((StatusCode::OK, Json(opened)))
}

/// Appends events; a retry of accepted events (same seq and event_id) answers their first
/// positions with `duplicate: true` and writes nothing.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/events",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = AppendRequest,
    responses(
        (status = 200, description = "every event is durable", body = AppendedEvents),
        (status = 404, description = "`session_not_open`: create or claim it here first", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`wrong_seq`, `seq_conflict`, `stale_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 413, description = "`too_large`, `too_many_events`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `unknown_kind`, `reserved_kind`, `invalid_event`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn append(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<AppendRequest>,
) -> Answer<AppendedEvents> {
    let session = sessionlog_http::session_id(&session)?;
    // Beyond the duplicate window a retried request would be judged a conflict.
    let limit = ingest
        .settings
        .max_batch_events
        .min(sessionlog_session::DUPLICATE_WINDOW);
    if request.events.len() > limit {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_events",
            format!(
                "{} events in one request; at most {limit}",
                request.events.len()
            ),
        ));
    }
    let open = ingest.open(session).ok_or_else(|| not_open(session))?;
    let mut open = open.lock().await;
    caller.require_tenant(session, &open.writer.state().tenant)?;
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
    metrics::counter!(EVENTS_TOTAL).increment(appended.len() as u64);
    Ok((
        StatusCode::OK,
        Json(AppendedEvents {
            session_id: session,
            next_seq: open.writer.next_seq(),
            events: acks,
        }),
    ))
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
                "{} events are not appended directly: use POST /v1/sessions, /claim or /checkpoint",
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
    // Facts of the recovery service: decisions and operator results (signed for a verified
    // person), the stop for an operator, and erasure.
    if sessionlog_session::attest::is_privileged(&event)
        || matches!(
            event,
            SessionEvent::ResolutionRequired { .. } | SessionEvent::SessionErased { .. }
        )
    {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "reserved_kind",
            format!(
                "event seq {} ({}): decisions, operator results, resolution stops and erasure are recorded by the recovery service for a verified person (POST /v1/sessions/{{id}}/approvals/{{approval_id}}, /resolutions), not appended by a harness",
                incoming.seq,
                event.kind()
            ),
        )
        .with("seq", incoming.seq));
    }
    let mut envelope = [EventEnvelope {
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
        attestation: None,
    }];
    // The service seals; a harness sends plain text (with encryption off too: a text sealed
    // elsewhere would open nowhere).
    sessionlog_keys::refuse_sealed(&mut envelope)
        .map_err(|e| sessionlog_http::from_keys(&e, e.to_string()))?;
    let [envelope] = envelope;
    Ok(envelope)
}

/// Records a checkpoint: a verified position to resume or fork from.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/checkpoint",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "the checkpoint is durable", body = EventAck),
        (status = 404, description = "`session_not_open`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`stale_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn checkpoint(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<CheckpointRequest>,
) -> Answer<EventAck> {
    let session = sessionlog_http::session_id(&session)?;
    let open = ingest.open(session).ok_or_else(|| not_open(session))?;
    let mut open = open.lock().await;
    caller.require_tenant(session, &open.writer.state().tenant)?;
    check_epoch(&open, request.epoch)?;
    let appended = open.writer.checkpoint(request.workspace_revision).await?;
    open.remember(&appended);
    Ok((StatusCode::OK, Json(EventAck::new(&appended, false))))
}

/// Ends the session with its outcome; the service lets go of its writer.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/close",
    tag = "sessions",
    params(("session_id" = Uuid, Path, description = "the session")),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "the end is durable", body = EventAck),
        (status = 404, description = "`session_not_open`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`stale_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn close(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    JsonBody(request): JsonBody<CloseRequest>,
) -> Answer<EventAck> {
    let session = sessionlog_http::session_id(&session)?;
    let open = ingest.open(session).ok_or_else(|| not_open(session))?;
    let mut open = open.lock().await;
    caller.require_tenant(session, &open.writer.state().tenant)?;
    check_epoch(&open, request.epoch)?;
    let appended = open.writer.close(request.outcome, request.reason).await?;
    ingest.sessions().remove(&session);
    Ok((StatusCode::OK, Json(EventAck::new(&appended, false))))
}

/// Liveness, and what the service writes to.
#[utoipa::path(
    get,
    path = "/health",
    tag = "infrastructure",
    responses((status = 200, description = "serving", body = HealthReport))
)]
async fn health(State(ingest): State<Arc<Ingest>>) -> Json<HealthReport> {
    Json(HealthReport {
        status: "ok",
        topic: ingest.log.topic().to_string(),
        schema_id: ingest.log.schema_id(),
        open_sessions: ingest.sessions().len(),
        in_flight: ingest.log.in_flight(),
    })
}
