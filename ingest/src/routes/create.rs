//! `POST /v1/sessions` starts a session, named or not; `GET /v1/sessions?name=` finds the
//! caller's tenant's session of a name.

use super::{Answer, Opened};
use crate::Ingest;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sessionlog_http::{Authorized, Harness, JsonBody, Problem, QueryParams, ServerProblems};
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_schemas::{SessionId, session_name_sha256};
use sessionlog_session::Rejection;
use sessionlog_session::limits::IdentifierKind;
use sessionlog_store::NameClaim;
use std::sync::Arc;
use utoipa::ToSchema;

/// Starts a session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateRequest {
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
pub(crate) struct NamedSession {
    session_id: SessionId,
    name: String,
}

/// Finds a session by name.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct NameQuery {
    /// The session's name within the caller's tenant.
    name: String,
}

sessionlog_http::problems! {
    /// What a create may refuse.
    CreateProblems {
        400 => "`malformed_json`",
        409 => "`already_started`: the session exists",
        413 => "`too_large`: body or event over the limit",
        415 => "`unsupported_media_type`",
        422 => "`invalid_request`, `invalid_event`",
    } + ServerProblems
}

/// Starts a new session (seq 1, epoch 1).
#[utoipa::path(
    post,
    path = "/sessions",
    tag = "sessions",
    request_body = CreateRequest,
    responses(
        (status = 201, description = "started", body = Opened),
        CreateProblems,
    )
)]
pub(crate) async fn create(
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
            // A read that fails says nothing of whose the session is: answer it (503) and
            // free nothing, or a live session's name could go to another.
            let holder = SessionWriter::current(log, id).await?;
            if holder.state().name_sha256.as_deref() == Some(digest.as_str()) {
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

sessionlog_http::problems! {
    /// What a find by name may refuse.
    FindProblems {
        404 => "`unknown_name`: no session of the caller's tenant has that name",
        422 => "`invalid_identifier`: the name breaks the rule for names",
    } + ServerProblems
}

/// Finds the caller's tenant's session of a name.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "sessions",
    params(NameQuery),
    responses(
        (status = 200, description = "the session of that name", body = NamedSession),
        FindProblems,
    )
)]
pub(crate) async fn find_by_name(
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
