//! `POST` and `DELETE /v1/sessions/{session_id}/lease`: an HTTP harness renews the lease of its
//! epoch while it runs, and releases it when it stops without ending the session.

use super::{Answer, check_epoch_known, check_epoch_now, with_writer};
use crate::Ingest;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Authorized, Harness, InvalidRequest, JsonBody, Problem, QueryParams, ServerProblems,
    SessionBodyProblems, SessionPath, UnknownSession, WriterToken,
};
use sessionlog_schemas::{Epoch, SessionId};
use sessionlog_session::Rejection;
use std::sync::Arc;
use utoipa::ToSchema;

sessionlog_http::problems! {
    /// What a renewal may refuse besides what any session route with a body may.
    RenewProblems {
        409 => "`fenced` (the epoch is not the session's current one, or the writer token is \
                another writer's), `writer_token_required`, `unknown_epoch`, `session_ended`, \
                `leases_off`",
    } + InvalidRequest + SessionBodyProblems
}

sessionlog_http::problems! {
    /// What a release may refuse.
    ReleaseProblems {
        409 => "`fenced`, `writer_token_required`, `unknown_epoch`, `leases_off`",
    } + UnknownSession + ServerProblems
}

/// Renews the lease of the epoch's writer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseRequest {
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
pub(crate) struct ReleaseQuery {
    /// The epoch create, claim or resume answered: the session's current one.
    #[param(value_type = u64)]
    epoch: Epoch,
}

/// A writer's lease as written to the lease topic: liveness, not permission to write.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseAnswer {
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
    params(SessionPath, WriterToken),
    request_body = LeaseRequest,
    responses(
        (status = 200, description = "the lease is written to the lease topic", body = LeaseAnswer),
        RenewProblems,
    )
)]
pub(crate) async fn renew_lease(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    token: WriterToken,
    JsonBody(request): JsonBody<LeaseRequest>,
) -> Answer<LeaseAnswer> {
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
        check_epoch_known(writer, request.epoch, token.as_deref()).await?;
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
    params(SessionPath, ReleaseQuery, WriterToken),
    responses(
        (status = 204, description = "released"),
        ReleaseProblems,
    )
)]
pub(crate) async fn release_lease(
    State(ingest): State<Arc<Ingest>>,
    Authorized(caller, _): Authorized<Harness>,
    SessionPath(session): SessionPath,
    QueryParams(query): QueryParams<ReleaseQuery>,
    token: WriterToken,
) -> Result<StatusCode, Problem> {
    lease_ttl(&ingest)?;
    with_writer(&ingest, &caller, session, async |writer| {
        // Only the current epoch's writer releases. (A release is of its epoch alone: one that
        // lands after a claim made meanwhile does not hide the claimant's lease.)
        check_epoch_now(writer, query.epoch, token.as_deref()).await?;
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
