//! `POST /v1/sessions/{session_id}/events`: a writer appends a batch of events, each answered
//! with its durable position; a retried batch is answered with the first write's.

use super::{Answer, EventAck, check_epoch, with_writer};
use crate::Ingest;
use crate::{EVENTS_TOTAL, caught_up};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sessionlog_http::{
    Authorized, Harness, JsonBody, Problem, SessionBodyProblems, SessionPath, WriterToken,
};
use sessionlog_producer::{Position, SessionWriter};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Epoch, EventEnvelope, Seq, SessionEvent, SessionId,
};
use std::sync::Arc;
use utoipa::ToSchema;
use uuid::Uuid;

/// Kinds with their own endpoint: they change who writes or what the writer declares, so
/// the service makes them rather than taking them from a batch.
const RESERVED_KINDS: &[&str] = &[
    "SessionStarted",
    "SessionForked",
    "WriterClaimed",
    "Checkpoint",
];

/// Events to append, in seq order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendRequest {
    /// The epoch create or claim answered.
    #[schema(value_type = u64)]
    epoch: Epoch,
    events: Vec<IncomingEvent>,
}

/// One event of an append request: the envelope fields the harness owns, and the kind's data.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IncomingEvent {
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

/// The answer to an append: each event's position, in request order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppendedEvents {
    session_id: SessionId,
    /// The seq the next appended event must have.
    #[schema(value_type = u64)]
    next_seq: Seq,
    events: Vec<EventAck>,
}

sessionlog_http::problems! {
    /// What an append may refuse besides what any session route with a body may.
    AppendProblems {
        404 => "`unknown_session`: not in the log",
        409 => "`wrong_seq`, `seq_conflict`, `fenced` (a claim superseded the epoch, or the \
                writer token is another writer's), `writer_token_required`, `unknown_epoch`, \
                `session_ended`, `start_deleted`; a tool call while the session waits: \
                `needs_resolution`, `awaiting_approval`, `paused`",
        413 => "`too_large`, `too_many_events`",
        422 => "`invalid_request`, `unknown_kind`, `reserved_kind`, `invalid_event`, \
                `secret_detected` (a text holds a secret and `[privacy] encrypt = false`: it \
                cannot be sealed and redacted, so nothing was written)",
    } + SessionBodyProblems
}

/// Appends events; a retry of accepted events (same seq and event_id) answers their first
/// positions with `duplicate: true` and writes nothing.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/events",
    tag = "sessions",
    params(SessionPath, WriterToken),
    request_body = AppendRequest,
    responses(
        (status = 200, description = "every event is durable and accepted by the session's fold (read back from the log)", body = AppendedEvents),
        AppendProblems,
    )
)]
pub(crate) async fn append(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    token: WriterToken,
    JsonBody(request): JsonBody<AppendRequest>,
) -> Answer<AppendedEvents> {
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
        check_epoch(writer, request.epoch, token.as_deref()).await?;
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
        let confirmed = if unsafe_ack_before_confirm() {
            let sent = writer.append_envelopes(fresh).await?;
            sent.into_iter()
                .map(|appended| sessionlog_producer::Confirmed {
                    appended,
                    duplicate: false,
                })
                .collect::<Vec<_>>()
        } else {
            writer.append_confirmed(fresh).await?
        };
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
pub(crate) struct AppendPlan {
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

/// TEST ONLY: `SESSIONLOG_TEST_UNSAFE_ACK_BEFORE_CONFIRM=1` answers an append once Kafka
/// acknowledged it, before the session's fold confirmed it: the broken build the checked-history
/// soak must catch (docs/operations.md, "Checked histories"). Never set in a deployment; unset
/// (or anything but `1`), nothing changes.
fn unsafe_ack_before_confirm() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let set =
            std::env::var("SESSIONLOG_TEST_UNSAFE_ACK_BEFORE_CONFIRM").is_ok_and(|v| v == "1");
        if set {
            tracing::error!(
                "SESSIONLOG_TEST_UNSAFE_ACK_BEFORE_CONFIRM=1: appends are answered before the fold \
                 confirms them (a deliberately broken build for the checked-history soak; never in \
                 production)"
            );
        }
        set
    })
}
