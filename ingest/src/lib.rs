//! HTTP ingest: the producer library over HTTP, for harnesses not written in Rust.
//!
//! The service is stateless: any instance serves any session. An append names the session,
//! the writer epoch create or claim answered, and each event's seq; the instance finds where
//! the session stands in a bounded cache of writers, else from the projection's row plus the
//! log after it ([`SessionWriter::current`]), never by folding the partition from its start.
//! Fencing stays the log's and the fold's: every append is confirmed by reading the session's
//! partition back to its events, so a 2xx means the fold accepted them, and a writer fenced by
//! a claim anywhere gets 409 `fenced`. A retried request (same seqs and event ids) is answered
//! with each event's first position, `duplicate: true`, whichever instance wrote it, and a
//! batch part of which reached the log before a failure is completed by its retry.
//!
//! Every answer for an event carries its durable position (partition, offset). Bad input gets
//! a 4xx problem (`application/problem+json`); only the servers behind the service cause a
//! 503, and a bug a 500. Routes and the OpenAPI document come from [`service`].

mod error;

pub use error::{Error, Result};

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use lru::LruCache;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sessionlog_http::{
    Authenticator, Authorized, BodyProblems, Harness, JsonBody, PathParams, Problem,
    ProblemDocument, QueryParams, Readiness, ServerProblems, Service, ServiceInfo,
};
use sessionlog_log::{IngestSettings, Settings};
use sessionlog_producer::{Appended, Confirmed, EventLog, Position, SessionWriter};
use sessionlog_schemas::session_name_sha256;
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Epoch, EventEnvelope, Seq, SessionEvent, SessionId, TerminalOutcome,
};
use sessionlog_session::Rejection;
use sessionlog_session::limits::IdentifierKind;
use sessionlog_store::{NameClaim, SessionNames};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

/// Requests answered, by `method`, `route` and `status`.
pub const REQUESTS_TOTAL: &str = "sessionlog_ingest_requests_total";
/// Events appended through the append route.
pub const EVENTS_TOTAL: &str = "sessionlog_ingest_events_total";
/// Sessions whose writer this instance holds in its cache.
pub const CACHED_SESSIONS: &str = "sessionlog_ingest_cached_sessions";
/// Events sent to Kafka and not yet acknowledged, in this process.
pub const IN_FLIGHT: &str = "sessionlog_producer_in_flight";
/// Times this instance read the log to bring a session's writer up to date: a writer not in
/// its cache, an append or epoch it did not expect, a checkpoint, a close, a lease release.
/// Each costs a round trip to the partition's leader and a read; what sessions cost per
/// request beyond their own appends.
pub const CATCH_UPS_TOTAL: &str = "sessionlog_ingest_catch_ups_total";

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
        CACHED_SESSIONS,
        "Sessions whose writer this ingest instance holds in its cache (bounded by [ingest] cached_sessions)."
    );
    metrics::describe_gauge!(
        IN_FLIGHT,
        "Events sent to Kafka and not yet acknowledged by this process."
    );
    metrics::describe_counter!(
        CATCH_UPS_TOTAL,
        "Times this instance read the log to bring a session's writer up to date (a cache miss, an unexpected append or epoch, a checkpoint, a close, a lease release)."
    );
}

/// Counts a read of the log that brings a session's writer up to date ([`CATCH_UPS_TOTAL`]).
fn caught_up() {
    metrics::counter!(CATCH_UPS_TOTAL).increment(1);
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

/// One session's writer, shared by the requests for that session on this instance.
type SharedWriter = Arc<tokio::sync::Mutex<SessionWriter>>;

/// The service's state: the shared log and a cache of recently served sessions' writers.
pub struct Ingest {
    log: Arc<EventLog>,
    access: Arc<dyn Authenticator>,
    settings: IngestSettings,
    /// A cache, not a registry: a writer missing here is rebuilt from the projection and the
    /// log, and one that is behind the log (another instance wrote since) catches up when an
    /// append does not fit it.
    writers: Mutex<LruCache<SessionId, SharedWriter>>,
    /// What `/health/ready` asks.
    readiness: Readiness,
}

/// The routes and their OpenAPI paths; needs no running service.
pub fn service() -> Service<Arc<Ingest>> {
    Service::new(
        INFO,
        OpenApiRouter::new()
            .routes(routes!(create, find_by_name))
            .routes(routes!(claim))
            .routes(routes!(append))
            .routes(routes!(checkpoint))
            .routes(routes!(close))
            .routes(routes!(renew_lease, release_lease)),
        OpenApiRouter::new(),
    )
}

impl Ingest {
    /// Connects to the log with the projection attached (read-only: the keyspace must exist,
    /// `sessionlog init` creates it), letting through whom `access` lets through.
    pub async fn connect(settings: &Settings, access: Arc<dyn Authenticator>) -> Result<Arc<Self>> {
        let projection = sessionlog_store::ProjectionStore::open_checked(settings).await?;
        let log = EventLog::from_settings(settings)
            .await?
            .with_projection(projection.clone());
        // Every append is confirmed: the tail runs from the start.
        log.start_tail().await;
        // Ready while the servers every append needs answer: Kafka (the write and its
        // read-back), the registry (encoding and decoding), the store (the projection writers
        // catch up from, and the data keys, which live in the same cluster).
        let readiness = Readiness::new()
            .kafka(&settings.kafka)
            .registry(log.registry().clone(), log.schema_id())
            .store(projection);
        Ok(Arc::new(Self::build(
            Arc::new(log),
            settings.ingest.clone(),
            access,
            readiness,
        )))
    }

    /// A service writing through `log` (attach the projection to it, see
    /// [`EventLog::with_projection`], or every cache miss folds a partition from its start).
    /// It checks nothing for `/health/ready` ([`Self::connect`] checks the servers).
    pub fn new(
        log: Arc<EventLog>,
        settings: IngestSettings,
        access: Arc<dyn Authenticator>,
    ) -> Arc<Self> {
        Arc::new(Self::build(log, settings, access, Readiness::new()))
    }

    fn build(
        log: Arc<EventLog>,
        settings: IngestSettings,
        access: Arc<dyn Authenticator>,
        readiness: Readiness,
    ) -> Self {
        let capacity = NonZeroUsize::new(settings.cached_sessions).unwrap_or(NonZeroUsize::MIN);
        Self {
            log,
            access,
            settings,
            writers: Mutex::new(LruCache::new(capacity)),
            readiness,
        }
    }

    /// The log the service appends to.
    pub fn log(&self) -> &Arc<EventLog> {
        &self.log
    }

    /// The routes, with the body limit of the settings, rendering `metrics` at `/metrics`.
    pub fn router(self: &Arc<Self>, metrics: PrometheusHandle) -> Router {
        let gauges = Arc::clone(self);
        service()
            .before_scrape(move || {
                metrics::gauge!(CACHED_SESSIONS).set(gauges.writers().len() as f64);
                metrics::gauge!(IN_FLIGHT).set(gauges.log.in_flight() as f64);
            })
            .readiness(self.readiness.clone())
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

    /// The writer of `session`: cached, or caught up from the projection and the log.
    async fn writer(&self, session: SessionId) -> sessionlog_producer::Result<SharedWriter> {
        if let Some(writer) = self.writers().get(&session) {
            return Ok(Arc::clone(writer));
        }
        caught_up();
        let writer = SessionWriter::current(Arc::clone(&self.log), session).await?;
        Ok(self.keep(writer))
    }

    /// Caches `writer`, unless a concurrent request cached one for its session first: then
    /// that one is returned, so requests for a session on this instance take turns.
    fn keep(&self, writer: SessionWriter) -> SharedWriter {
        let session = writer.session_id();
        let mut writers = self.writers();
        if let Some(cached) = writers.get(&session) {
            return Arc::clone(cached);
        }
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        writers.put(session, Arc::clone(&writer));
        writer
    }

    /// The names table of the projection the log reads, prepared once.
    async fn names(&self) -> Result<&SessionNames, Problem> {
        let store = self.log.projection().ok_or_else(|| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "session names live in the projection store, which this ingest instance was started without",
            )
        })?;
        Ok(store.names().await?)
    }

    /// Replaces the cached writer of its session (a claim's new writer).
    fn replace(&self, writer: SessionWriter) {
        let session = writer.session_id();
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        self.writers().put(session, writer);
    }

    /// Drops `session`'s cached writer after a failure that may leave it unlike the log: the
    /// next request catches up afresh.
    fn forget(&self, session: SessionId) {
        self.writers().pop(&session);
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, LruCache<SessionId, SharedWriter>> {
        // Every operation on the cache is a single call: a panic cannot leave it torn.
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
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
        Self::at(
            appended.envelope.seq,
            appended.envelope.event_id,
            appended.position,
            duplicate,
        )
    }

    fn at(seq: Seq, event_id: Uuid, position: Position, duplicate: bool) -> Self {
        Self {
            seq,
            event_id,
            partition: position.partition,
            offset: position.offset,
            duplicate,
        }
    }
}

impl From<&Confirmed> for EventAck {
    fn from(confirmed: &Confirmed) -> Self {
        Self::new(&confirmed.appended, confirmed.duplicate)
    }
}

/// The header an append, checkpoint or close presents the writer token in.
pub const WRITER_TOKEN_HEADER: &str = "sessionlog-writer-token";

/// The answer to create and claim: the session and the epoch to write with.
#[derive(Serialize, ToSchema)]
struct Opened {
    session_id: SessionId,
    /// The epoch to append with.
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// The secret of this epoch's writer: present it in the `Sessionlog-Writer-Token` header of
    /// every append, checkpoint and close. Without it, knowing the epoch is not enough to write.
    writer_token: String,
    /// The seq the next appended event must have.
    #[schema(value_type = u64)]
    next_seq: Seq,
    /// The start or claim event.
    event: EventAck,
    /// The session's name, when the create named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl Opened {
    fn named(mut self, name: Option<String>) -> Self {
        self.name = name;
        self
    }

    fn new(writer: &SessionWriter, event: &Appended) -> Self {
        Self {
            name: None,
            session_id: writer.session_id(),
            epoch: writer.epoch(),
            writer_token: writer
                .token()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
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

/// Starts a session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// Which agent or harness runs it.
    agent: String,
    /// The human-readable task.
    title: Option<String>,
    /// The session's id; a fresh UUIDv7 when absent. Ids are global: one that was ever
    /// started, in any tenant, is refused (`already_started`); frameworks name sessions instead.
    session_id: Option<SessionId>,
    /// A name unique within the caller's tenant (`thread:abc`), by which
    /// `GET /v1/sessions?name=` finds the session: 1 to 512 bytes of UTF-8 without control
    /// characters. A name the tenant's sessions hold already answers 409 `name_taken`, with
    /// the holder's `session_id`. Only the name's digest is stored.
    name: Option<String>,
}

/// A session found by name.
#[derive(Debug, Serialize, ToSchema)]
struct NamedSession {
    session_id: SessionId,
    name: String,
}

/// Finds a session by name.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct NameQuery {
    /// The session's name within the caller's tenant.
    name: String,
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

/// Checks the request's epoch against the session's, catching the writer up first when they
/// differ (another instance's claim may be newer than this instance's memory), and writes with
/// it: an older epoch was fenced by a claim (409 `fenced`), a newer one never claimed (409
/// `unknown_epoch`).
async fn check_epoch(
    writer: &mut SessionWriter,
    epoch: Epoch,
    token: Option<&str>,
) -> Result<(), Problem> {
    if epoch != writer.state().epoch {
        caught_up();
        writer.refresh().await?;
    }
    Ok(writer.write_as(epoch, token)?)
}

/// [`check_epoch`] against the log as it is now, not as this instance last saw the session:
/// for a route whose event the service makes (a checkpoint's seq and digest, a close) or that
/// must be the current epoch's (a lease).
async fn check_epoch_now(
    writer: &mut SessionWriter,
    epoch: Epoch,
    token: Option<&str>,
) -> Result<(), Problem> {
    caught_up();
    writer.refresh().await?;
    check_epoch(writer, epoch, token).await
}

/// [`check_epoch_now`] for a lease renewal, from what this instance already knows: its writer
/// of the session, brought up to what its tail of the log has read (the tail sees every
/// claim, from any process). An HTTP harness renews every third of the TTL, so reading the
/// session's partition per renewal would cost 2,000 reads a second for 10,000 harnesses. The
/// tail trails the log by its lag: a renewal in the moment after another process's claim is
/// acknowledged may still be written at the old epoch, which is harmless (a lease is
/// liveness, never permission; one of an epoch older than the session's is not live, and one
/// older than the lease held never replaces it). An epoch the tail does not show (newer than
/// it knows, or the tail cannot answer) is checked against the log as it is now.
async fn check_epoch_known(
    writer: &mut SessionWriter,
    epoch: Epoch,
    token: Option<&str>,
) -> Result<(), Problem> {
    match writer.refresh_from_tail().await {
        // An older epoch than the tail shows was fenced: 409, with no read either.
        Ok(true) if epoch <= writer.state().epoch => return Ok(writer.write_as(epoch, token)?),
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "the tail could not bring a writer up to date"),
    }
    check_epoch_now(writer, epoch, token).await
}

/// The writer token the request presents (`Sessionlog-Writer-Token`), if any.
fn writer_token(headers: &HeaderMap) -> Result<Option<&str>, Problem> {
    headers
        .get(WRITER_TOKEN_HEADER)
        .map(|value| {
            value.to_str().map_err(|_| {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "the Sessionlog-Writer-Token header is not plain text",
                )
            })
        })
        .transpose()
}

/// A session whose tenant cannot be read (retention deleted its start) answers a caller bound
/// to a tenant exactly as an unknown session does: `start_deleted` would tell another tenant
/// that the id exists. (A caller of every tenant, with authentication off, learns where to go.)
fn tenant_first(
    caller: &sessionlog_http::Caller,
    session: SessionId,
    error: sessionlog_producer::Error,
) -> Problem {
    match error {
        sessionlog_producer::Error::StartDeleted { .. } if caller.tenant.is_some() => {
            caller.unknown_session(session, "tenant_unknown")
        }
        other => other.into(),
    }
}

/// Runs `serve` on `session`'s writer, holding it for the request; a failure that may leave
/// the cached writer unlike the log (an outage, a conflict with another writer) drops it from
/// the cache.
async fn with_writer<T>(
    ingest: &Ingest,
    caller: &sessionlog_http::Caller,
    session: SessionId,
    serve: impl AsyncFnOnce(&mut SessionWriter) -> Result<T, Problem>,
) -> Result<T, Problem> {
    let shared = ingest
        .writer(session)
        .await
        .map_err(|e| tenant_first(caller, session, e))?;
    let mut writer = shared.lock().await;
    caller.require_tenant(session, &writer.state().tenant)?;
    let outcome = serve(&mut writer).await;
    if let Err(problem) = &outcome
        && (problem.status == StatusCode::CONFLICT || problem.status.is_server_error())
    {
        drop(writer);
        ingest.forget(session);
    }
    outcome
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
    let log = Arc::clone(&ingest.log);
    let (agent, title, tenant) = (
        &request.agent,
        request.title.as_deref(),
        caller.home_tenant(),
    );
    let (writer, start) = match (&request.name, request.session_id) {
        (Some(name), session) => create_named(&ingest, tenant, name, session, agent, title).await?,
        // Refused when the session exists, whichever instance created it; of two creates
        // racing, the one whose start the log put second is refused.
        (None, Some(session)) => {
            SessionWriter::create_in(log, session, agent, title, tenant).await?
        }
        (None, None) => SessionWriter::create_new_in(log, agent, title, tenant).await?,
    };
    let opened = Opened::new(&writer, &start).named(request.name);
    ingest.replace(writer);
    Ok((StatusCode::CREATED, Json(opened)))
}

/// Starts a session under a name of the tenant: the name is taken for the session's id in
/// the names table first (a conditional write: of two creates of one name, one takes it),
/// then the start, which records the name's digest, is written. A create that took the name
/// and died before its start is finished by the next create of the name, which starts the
/// session the name points to.
async fn create_named(
    ingest: &Ingest,
    tenant: &str,
    name: &str,
    session: Option<SessionId>,
    agent: &str,
    title: Option<&str>,
) -> Result<(SessionWriter, Appended), Problem> {
    sessionlog_http::identifier(IdentifierKind::SessionName, name)?;
    let names = ingest.names().await?;
    let digest = session_name_sha256(tenant, name);
    let id = session.unwrap_or_default(); // the default id is a fresh UUIDv7
    let id = match names.claim(tenant, &digest, id).await? {
        NameClaim::Taken => id,
        // Another create took the name (or this one, retried): its session, if started, holds
        // it; if not (that create died, or is a moment behind), starting it here settles the
        // name either way.
        NameClaim::Held(holder) if session.is_none_or(|id| id == holder) => holder,
        NameClaim::Held(holder) => return Err(name_taken(holder)),
    };
    // Once the name points at the id, another create may start it too: the start is always
    // read back (never written as a fresh id's), so of the two exactly one is answered 201.
    let log = Arc::clone(&ingest.log);
    match SessionWriter::create_named(Arc::clone(&log), id, agent, title, tenant, &digest).await {
        Ok(started) => Ok(started),
        // Refused on the catch-up, or rejected on the read-back: another start came first.
        Err(
            refused @ (sessionlog_producer::Error::Refused(Rejection::AlreadyStarted)
            | sessionlog_producer::Error::Rejected {
                rejection: Rejection::AlreadyStarted,
                ..
            }),
        ) => {
            // Started under this name (by a racing create of it): the name is taken. Started
            // otherwise (a caller's id used before, ids are global; or a leftover of a create
            // that died): the name must not point at it.
            let holds_name = SessionWriter::current(log, id)
                .await
                .is_ok_and(|w| w.state().name_sha256.as_deref() == Some(digest.as_str()));
            if holds_name {
                return Err(name_taken(id));
            }
            names.release(tenant, &digest, id).await?;
            match session {
                Some(_) => Err(refused.into()),
                // The name was a leftover's and is free again: a retry takes it.
                None => Err(sessionlog_store::Error::Contended {
                    what: "session name",
                }
                .into()),
            }
        }
        Err(other) => Err(other.into()),
    }
}

/// The answer to a name the tenant's sessions hold already: the holder, which the caller may
/// see (the name is its own tenant's).
fn name_taken(holder: SessionId) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "name_taken",
        format!("the name is session {holder}'s: claim or resume that session"),
    )
    .with("session_id", holder.to_string())
}

/// Finds the caller's tenant's session of a name.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "sessions",
    params(NameQuery),
    responses(
        (status = 200, description = "the session of that name", body = NamedSession),
        (status = 404, description = "`unknown_name`: no session of the caller's tenant has that name", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_identifier`: the name breaks the rule for names", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn find_by_name(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    QueryParams(query): QueryParams<NameQuery>,
) -> Answer<NamedSession> {
    sessionlog_http::identifier(IdentifierKind::SessionName, &query.name)?;
    let digest = session_name_sha256(caller.home_tenant(), &query.name);
    let found = ingest
        .names()
        .await?
        .find(caller.home_tenant(), &digest)
        .await?;
    match found {
        Some(session_id) => Ok((
            StatusCode::OK,
            Json(NamedSession {
                session_id,
                name: query.name,
            }),
        )),
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "unknown_name",
            "no session of this tenant has that name",
        )),
    }
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
        (status = 409, description = "`lost_claim`, `session_ended`, `start_deleted` (retention deleted the session's start: resume it through the recovery service); the session waits, so a takeover would walk past the wait: `needs_resolution`, `awaiting_approval`, `paused`, `call_in_doubt` (a non-idempotent call has no result: resume through the recovery service, which stops it for an operator)", body = ProblemDocument, content_type = "application/problem+json"),
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

/// Appends events; a retry of accepted events (same seq and event_id) answers their first
/// positions with `duplicate: true` and writes nothing.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/events",
    tag = "sessions",
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ("Sessionlog-Writer-Token" = Option<String>, Header, description = "the writer token create, claim or resume answered; required when the session's writer holds one"),
    ),
    request_body = AppendRequest,
    responses(
        (status = 200, description = "every event is durable and accepted by the session's fold (read back from the log)", body = AppendedEvents),
        (status = 404, description = "`unknown_session`: not in the log", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`wrong_seq`, `seq_conflict`, `fenced` (a claim superseded the epoch, or the writer token is another writer's), `writer_token_required`, `unknown_epoch`, `session_ended`, `start_deleted`; a tool call while the session waits: `needs_resolution`, `awaiting_approval`, `paused`", body = ProblemDocument, content_type = "application/problem+json"),
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
    headers: HeaderMap,
    JsonBody(request): JsonBody<AppendRequest>,
) -> Answer<AppendedEvents> {
    let session = sessionlog_http::session_id(&session)?;
    let token = writer_token(&headers)?;
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
    let projection = ingest.log.projection();
    let (next_seq, acks, fresh) = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch(writer, request.epoch, token).await?;
        let plan = match plan_append(writer, &request.events) {
            Ok(plan) => plan,
            Err(_) => {
                // This instance's memory of the session may be behind the log: catch up once.
                caught_up();
                writer.refresh().await?;
                plan_append(writer, &request.events)?
            }
        };
        let mut acks = Vec::with_capacity(request.events.len());
        for retry in plan.retries {
            acks.push(first_position(writer, projection, retry).await?);
        }
        let fresh = request.events[plan.fresh_from..]
            .iter()
            .map(|incoming| envelope(writer, incoming))
            .collect::<Result<Vec<_>, Problem>>()?;
        let confirmed = writer.append_confirmed(fresh).await?;
        let fresh = confirmed.iter().filter(|c| !c.duplicate).count();
        acks.extend(confirmed.iter().map(EventAck::from));
        Ok((writer.next_seq(), acks, fresh))
    })
    .await?;
    metrics::counter!(EVENTS_TOTAL).increment(fresh as u64);
    Ok((
        StatusCode::OK,
        Json(AppendedEvents {
            session_id: session,
            next_seq,
            events: acks,
        }),
    ))
}

/// How an append request splits: events the session already accepted (a retry), then new
/// ones from `fresh_from` on.
struct AppendPlan {
    retries: Vec<(Seq, Option<Uuid>)>,
    fresh_from: usize,
}

/// Splits `events` into retried and new ones by seq, refusing a gap or a retry in the middle.
fn plan_append(writer: &SessionWriter, events: &[IncomingEvent]) -> Result<AppendPlan, Problem> {
    let last = writer.state().last_seq;
    let fresh_from = events.iter().take_while(|e| e.seq <= last).count();
    let retries = events[..fresh_from]
        .iter()
        .map(|e| (e.seq, e.event_id))
        .collect();
    for (incoming, expected) in events[fresh_from..].iter().zip(writer.next_seq()..) {
        if incoming.seq != expected {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "wrong_seq",
                format!("expected seq {expected}, got {}", incoming.seq),
            )
            .with("expected_seq", expected)
            .with("seq", incoming.seq));
        }
    }
    Ok(AppendPlan {
        retries,
        fresh_from,
    })
}

/// Answers a retried event (seq already accepted) with its first position, from the writer's
/// memory or the projection's event index: whichever instance wrote it.
async fn first_position(
    writer: &SessionWriter,
    projection: Option<&sessionlog_store::ProjectionStore>,
    (seq, event_id): (Seq, Option<Uuid>),
) -> Result<EventAck, Problem> {
    let conflict = |message: String| {
        Problem::new(StatusCode::CONFLICT, "seq_conflict", message).with("seq", seq)
    };
    // As the fold judges it: a retry repeats an accepted (seq, event id) pair. (A claim's
    // pair shares the seq the claimant wrote next, so a seq alone names no event.)
    let recent = &writer.state().recent;
    let first_id = match event_id {
        Some(id) if recent.contains(&(seq, id)) => id,
        Some(_) | None if recent.front().is_some_and(|(oldest, _)| seq >= *oldest) => {
            return Err(conflict(format!(
                "seq {seq} is already taken by another event; a retry must repeat its event_id"
            )));
        }
        _ => {
            return Err(conflict(format!(
                "seq {seq} was accepted more than {} events ago: not a retry this service can \
                 recognise",
                sessionlog_session::DUPLICATE_WINDOW
            )));
        }
    };
    let position = match writer.position_of(seq, first_id) {
        Some(position) => Some(position),
        None => match projection {
            Some(store) => store
                .locate(writer.session_id(), seq)
                .await
                .map_err(|e| {
                    let (status, code) = sessionlog_http::store_error_status(&e);
                    Problem::new(status, code, e.to_string())
                })?
                .map(|(partition, offset)| Position { partition, offset }),
            None => None,
        },
    };
    let position = position.ok_or_else(|| {
        Problem::internal(format!(
            "seq {seq} of session {} is accepted but neither this instance nor the event index \
             knows its position",
            writer.session_id()
        ))
    })?;
    Ok(EventAck::at(seq, first_id, position, true))
}

/// Builds the envelope of a new event, refusing kinds this route does not take.
fn envelope(writer: &SessionWriter, incoming: &IncomingEvent) -> Result<EventEnvelope, Problem> {
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
    let data = match &incoming.data {
        Value::Null => json!({}),
        data => data.clone(),
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
    // Facts of the recovery service: decisions, operator results, pauses and unpauses (signed
    // for a verified person), the stop for an operator, and erasure.
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
                "event seq {} ({}): decisions, operator results, pauses, unpauses, resolution stops and erasure are recorded by the recovery service for a verified person (POST /v1/sessions/{{id}}/approvals/{{approval_id}}, /resolutions, /pause, /unpause), not appended by a harness",
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
        writer_epoch: writer.epoch(),
        occurred_at: incoming
            .occurred_at
            .unwrap_or_else(sessionlog_schemas::now_micros),
        causation_id: incoming.causation_id,
        idempotency_key: incoming.idempotency_key.clone(),
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
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ("Sessionlog-Writer-Token" = Option<String>, Header, description = "the writer token create, claim or resume answered; required when the session's writer holds one"),
    ),
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "the checkpoint is durable", body = EventAck),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `writer_token_required`, `unknown_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn checkpoint(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<CheckpointRequest>,
) -> Answer<EventAck> {
    let session = sessionlog_http::session_id(&session)?;
    let token = writer_token(&headers)?;
    let appended = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch_now(writer, request.epoch, token).await?;
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
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ("Sessionlog-Writer-Token" = Option<String>, Header, description = "the writer token create, claim or resume answered; required when the session's writer holds one"),
    ),
    request_body = CloseRequest,
    responses(
        (status = 200, description = "the end is durable", body = EventAck),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `writer_token_required`, `unknown_epoch`, `session_ended`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn close(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<CloseRequest>,
) -> Answer<EventAck> {
    let session = sessionlog_http::session_id(&session)?;
    let token = writer_token(&headers)?;
    let appended = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch_now(writer, request.epoch, token).await?;
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

/// Renews the lease of the epoch's writer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct LeaseRequest {
    /// The epoch create, claim or resume answered: the session's current one.
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// A name for the holder (after the caller's verified name); the name the epoch's claim
    /// recorded, or the session's agent, when absent.
    writer: Option<String>,
}

/// Releases the lease of the epoch's writer.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ReleaseQuery {
    /// The epoch create, claim or resume answered: the session's current one.
    #[param(value_type = u64)]
    epoch: Epoch,
}

/// A writer's lease as written to the lease topic: liveness, not permission to write.
#[derive(Debug, Serialize, ToSchema)]
struct LeaseAnswer {
    session_id: SessionId,
    /// Who holds it.
    writer: String,
    /// The epoch it is held at.
    #[schema(value_type = u64)]
    epoch: Epoch,
    /// When it was renewed, in microseconds since the Unix epoch.
    renewed_at: i64,
    /// When it lapses unless renewed again, in microseconds since the Unix epoch: renew every
    /// third of `ttl_ms`.
    expires_at: i64,
    /// `[lease] ttl_ms` of this service.
    ttl_ms: u64,
}

/// The most bytes of a lease holder's name.
const MAX_HOLDER_BYTES: usize = 256;

/// The lease TTL, or 409 `leases_off` when `[lease] ttl_ms = 0`.
fn lease_ttl(ingest: &Ingest) -> Result<std::time::Duration, Problem> {
    ingest.log.lease_ttl().ok_or_else(|| {
        Problem::new(
            StatusCode::CONFLICT,
            "leases_off",
            "writer leases are off on this service ([lease] ttl_ms = 0, SESSIONLOG_LEASE__TTL_MS)",
        )
    })
}

/// Renews (or takes) the writer lease of the session's current epoch, for a harness writing
/// over HTTP: call it every third of `ttl_ms` while the harness runs. A lease says the harness
/// is alive; it lets no one write (the epoch and the writer token decide that).
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/lease",
    tag = "sessions",
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ("Sessionlog-Writer-Token" = Option<String>, Header, description = "the writer token create, claim or resume answered; required when the session's writer holds one"),
    ),
    request_body = LeaseRequest,
    responses(
        (status = 200, description = "the lease is written to the lease topic", body = LeaseAnswer),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced` (the epoch is not the session's current one, or the writer token is another writer's), `writer_token_required`, `unknown_epoch`, `session_ended`, `leases_off`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = ProblemDocument, content_type = "application/problem+json"),
        BodyProblems,
        ServerProblems,
    )
)]
async fn renew_lease(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<LeaseRequest>,
) -> Answer<LeaseAnswer> {
    let session = sessionlog_http::session_id(&session)?;
    let token = writer_token(&headers)?;
    let ttl = lease_ttl(&ingest)?;
    if let Some(name) = &request.writer
        && name.len() > MAX_HOLDER_BYTES
    {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("writer is {} bytes; at most {MAX_HOLDER_BYTES}", name.len()),
        ));
    }
    let lease = with_writer(&ingest, &caller, session, async |writer| {
        check_epoch_known(writer, request.epoch, token).await?;
        let state = writer.state();
        // An ended session has no harness to keep alive (its close released the lease).
        if state.terminal.is_some() || state.erased {
            return Err(sessionlog_producer::Error::Refused(Rejection::AfterTerminal).into());
        }
        let holder = match &request.writer {
            Some(name) => caller.on_behalf(name),
            None => state
                .writer
                .clone()
                .or_else(|| state.agent.clone())
                .unwrap_or_default(),
        };
        let now = sessionlog_schemas::now_micros();
        let lease = sessionlog_log::Lease::renewed(session, &holder, request.epoch, now, ttl)
            .ok_or_else(|| {
                Problem::internal("[lease] ttl_ms puts the expiry past what a timestamp holds")
            })?;
        ingest.log.put_lease(&lease).await?;
        Ok(lease)
    })
    .await?;
    Ok((
        StatusCode::OK,
        Json(LeaseAnswer {
            session_id: session,
            writer: lease.writer,
            epoch: lease.epoch,
            renewed_at: lease.renewed_at,
            expires_at: lease.expires_at,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }),
    ))
}

/// Releases the writer lease of the session's current epoch (a release of that epoch in the
/// lease topic, which hides no later epoch's lease): for a harness that stops running the
/// session without ending it (`/close` releases it too). A released or lapsed lease says no
/// harness is running the session.
#[utoipa::path(
    delete,
    path = "/sessions/{session_id}/lease",
    tag = "sessions",
    params(
        ("session_id" = Uuid, Path, description = "the session"),
        ReleaseQuery,
        ("Sessionlog-Writer-Token" = Option<String>, Header, description = "the writer token create, claim or resume answered; required when the session's writer holds one"),
    ),
    responses(
        (status = 204, description = "released"),
        (status = 404, description = "`unknown_session`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`fenced`, `writer_token_required`, `unknown_epoch`, `leases_off`", body = ProblemDocument, content_type = "application/problem+json"),
        ServerProblems,
    )
)]
async fn release_lease(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    PathParams(session): PathParams<String>,
    QueryParams(query): QueryParams<ReleaseQuery>,
    headers: HeaderMap,
) -> Result<StatusCode, Problem> {
    let session = sessionlog_http::session_id(&session)?;
    let token = writer_token(&headers)?;
    lease_ttl(&ingest)?;
    with_writer(&ingest, &caller, session, async |writer| {
        // Only the current epoch's writer releases. (A release is of its epoch alone: one that
        // lands after a claim made meanwhile does not hide the claimant's lease.)
        check_epoch_now(writer, query.epoch, token).await?;
        let state = writer.state();
        let holder = state.writer.as_ref().or(state.agent.as_ref());
        Ok(ingest
            .log
            .release_lease(session, query.epoch, holder.map_or("", String::as_str))
            .await?)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
