//! The ingest routes, a module each: `create` (start a session, find one by name), `claim`,
//! `append`, `checkpoint` (checkpoint and close), `lease` (renew and release). Here: what
//! they answer with and how they hold a session's writer.

pub(crate) mod append;
pub(crate) mod checkpoint;
pub(crate) mod claim;
pub(crate) mod create;
pub(crate) mod lease;

use crate::{Ingest, caught_up};
use axum::Json;
use axum::http::StatusCode;
use serde::Serialize;
use sessionlog_http::{Caller, Problem};
use sessionlog_producer::{Appended, Confirmed, Position, SessionWriter};
use sessionlog_schemas::{Epoch, Seq, SessionId};
use utoipa::ToSchema;
use uuid::Uuid;

/// A route's answer: its status and body, or a problem.
type Answer<T> = std::result::Result<(StatusCode, Json<T>), Problem>;

/// One event's durable position, as every answer reports it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventAck {
    #[schema(value_type = u64)]
    seq: Seq,
    event_id: Uuid,
    partition: i32,
    offset: i64,
    /// True when the event had been written before (a retry): the position is the first write's.
    duplicate: bool,
    /// Secrets the scan found in the event's texts (`[privacy] secret_scan`): each field, the
    /// rule, and the `action`: `redacted` (written without its text and redacted with
    /// `reason`: it reads as redacted everywhere) or `warned` (written sealed as usual).
    /// Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    secrets: Vec<SecretNotice>,
}

/// A secret the scan found in a text of an appended event. It never holds the text.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SecretNotice {
    /// The field (`output`, `arguments`, `content`, ...).
    field: String,
    /// The id of the rule that matched (`aws-access-token`, `private-key`, ...).
    rule: String,
    /// `redacted` or `warned`.
    #[schema(example = "redacted")]
    action: String,
    /// The redaction's reason: `secret detected: RULE`.
    reason: String,
}

impl From<&sessionlog_keys::SecretFound> for SecretNotice {
    fn from(found: &sessionlog_keys::SecretFound) -> Self {
        let action = match found.action {
            sessionlog_keys::SecretAction::Redacted => "redacted",
            sessionlog_keys::SecretAction::Warned => "warned",
        };
        // Counted where the harness is told: once per secret answered.
        metrics::counter!(
            crate::SECRETS_DETECTED_TOTAL,
            "action" => action,
            "rule" => found.rule.clone()
        )
        .increment(1);
        Self {
            field: found.field.to_string(),
            rule: found.rule.clone(),
            action: action.to_string(),
            reason: found.reason.clone(),
        }
    }
}

impl EventAck {
    fn new(appended: &Appended, duplicate: bool) -> Self {
        Self {
            secrets: appended.secrets.iter().map(SecretNotice::from).collect(),
            ..Self::at(
                appended.envelope.seq,
                appended.envelope.event_id,
                appended.position,
                duplicate,
            )
        }
    }

    fn at(seq: Seq, event_id: Uuid, position: Position, duplicate: bool) -> Self {
        Self {
            seq,
            event_id,
            partition: position.partition,
            offset: position.offset,
            duplicate,
            secrets: Vec::new(),
        }
    }
}

impl From<&Confirmed> for EventAck {
    fn from(confirmed: &Confirmed) -> Self {
        Self::new(&confirmed.appended, confirmed.duplicate)
    }
}

/// The answer to create and claim: the session and the epoch to write with.
#[derive(Serialize, ToSchema)]
pub(crate) struct Opened {
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

/// A session whose tenant cannot be read (retention deleted its start) answers a caller bound
/// to a tenant exactly as an unknown session does: `start_deleted` would tell another tenant
/// that the id exists. (A caller of every tenant, with authentication off, learns where to go.)
fn tenant_first(caller: &Caller, session: SessionId, error: sessionlog_producer::Error) -> Problem {
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
    caller: &Caller,
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
