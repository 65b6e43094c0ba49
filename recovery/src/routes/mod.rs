//! The recovery routes, a module each: `session` (a session rebuilt), `resume`, `work`,
//! `fork` (fork, lineage, diff), `events`, `traces` (a trace, spans, usage), `operators`
//! (pause, unpause, steer, resolutions, approvals) and `privacy` (erase, erasure, redact).
//! Here: how a recovery error answers, what every route shares (the recorded event, the
//! tenant check, number parameters) and the problem groups several routes answer.

pub(crate) mod events;
pub(crate) mod fork;
pub(crate) mod operators;
pub(crate) mod privacy;
pub(crate) mod resume;
pub(crate) mod session;
pub(crate) mod traces;
pub(crate) mod work;

use crate::history::clip;
use crate::{Error, Recovery, Scope};
use axum::Json;
use axum::http::StatusCode;
use serde::Serialize;
use sessionlog_http::{Caller, Problem, SessionBodyProblems};
use sessionlog_producer::Appended;
use sessionlog_schemas::{EventEnvelope, SessionId};
use utoipa::ToSchema;

/// A route's answer: its body, or a problem.
type Answer<T> = Result<Json<T>, Problem>;

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
            Error::ReasonRequired { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
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

sessionlog_http::problems! {
    /// What a route that takes the session over to write an operator's event (an erasure, a
    /// redaction) may refuse besides what any session route with a body may.
    TakeoverProblems {
        409 => "`fenced`, `lost_claim`",
    } + SessionBodyProblems
}

sessionlog_http::problems! {
    /// What a route recording an operator's decision at the session's epoch (a resolution, an
    /// approval) may refuse besides what any session route with a body may.
    DecisionProblems {
        409 => "`fenced`, `unknown_epoch`, `session_ended`",
    } + SessionBodyProblems
}

/// An event recovery appended, with its durable position.
#[derive(Serialize, ToSchema)]
pub(crate) struct RecordedEvent {
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

/// What a caller may read of a session's relatives: a credential narrowed to one session sees
/// them only as ids (its route checks made sure the session is that one).
fn scope_of(caller: &Caller) -> Scope {
    match caller.session {
        Some(_) => Scope::Session,
        None => Scope::Family,
    }
}

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
