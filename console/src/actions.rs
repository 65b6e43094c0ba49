//! The forms: decide an approval, record an in-doubt call's outcome, pause, unpause, steer,
//! fork from a checkpoint, erase.
//! Each checks the role the recovery service's route needs (403 otherwise, as there), the
//! login's CSRF token, and that the caller may see the session's tenant (404 otherwise), then
//! calls the library function that route calls, in the caller's verified name, and writes the
//! same audit line. Then back to the page the form was on.

use crate::Console;
use crate::error::Refused;
use crate::login::Visitor;
use crate::pages::{frame, when};
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Redirect;
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_log::Role;
use sessionlog_recovery::{ForkAt, OperatorAct, Resolution};
use sessionlog_schemas::{CallOutcome, SessionId};
use sessionlog_session::limits::IdentifierKind;
use std::sync::Arc;

/// Checks the visitor may take an action of `role` on `session` with this form, and that the
/// session is one it may see; the session's id.
async fn allowed(
    console: &Console,
    visitor: &Visitor,
    role: Role,
    session: &str,
    csrf: &str,
) -> Result<SessionId, Refused> {
    let session = sessionlog_http::session_id(session)?;
    visitor.caller.require_for(role, session)?;
    visitor.check_csrf(csrf)?;
    sessionlog_recovery::http::visible(&console.recovery, &visitor.caller, session).await?;
    Ok(session)
}

/// Where a form sends the browser after it acted: the session's page or the inbox.
fn back(to_session: Option<&str>, session: SessionId, done: &str) -> Redirect {
    match to_session {
        Some("session") => Redirect::to(&format!("/sessions/{session}?done={done}")),
        _ => Redirect::to(&format!("/?done={done}")),
    }
}

/// A decision on a pending approval.
#[derive(Deserialize)]
pub(crate) struct DecisionForm {
    csrf: String,
    /// `approve` or `deny`.
    decision: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    back: Option<String>,
}

/// `POST /sessions/{id}/approvals/{approval_id}`: what `POST /v1/sessions/{id}/approvals/..` does.
pub(crate) async fn decide(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path((session, approval_id)): Path<(String, String)>,
    Form(form): Form<DecisionForm>,
) -> Result<Redirect, Refused> {
    let session = allowed(&console, &visitor, Role::Approver, &session, &form.csrf).await?;
    sessionlog_http::identifier(IdentifierKind::ApprovalId, &approval_id)?;
    let approved = match form.decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => {
            return Err(Refused::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                "decision must be approve or deny",
            ));
        }
    };
    let reason = Some(form.reason).filter(|r| !r.trim().is_empty());
    console
        .recovery
        .decide_approval(
            session,
            &approval_id,
            approved,
            &visitor.caller.on_behalf(""),
            reason,
        )
        .await?;
    visitor.caller.audit("approve", session);
    let done = if approved { "approved" } else { "denied" };
    Ok(back(form.back.as_deref(), session, done))
}

/// An operator's outcome for an in-doubt call.
#[derive(Deserialize)]
pub(crate) struct ResolutionForm {
    csrf: String,
    call_seq: u64,
    /// `succeeded` or `failed`.
    outcome: String,
    #[serde(default)]
    output: String,
    reason: String,
    #[serde(default)]
    back: Option<String>,
}

/// `POST /sessions/{id}/resolutions`: what `POST /v1/sessions/{id}/resolutions` does.
pub(crate) async fn resolve(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<ResolutionForm>,
) -> Result<Redirect, Refused> {
    let session = allowed(&console, &visitor, Role::Operator, &session, &form.csrf).await?;
    let outcome = match form.outcome.as_str() {
        "succeeded" => CallOutcome::Succeeded,
        "failed" => CallOutcome::Failed,
        _ => {
            return Err(Refused::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                "outcome must be succeeded or failed",
            ));
        }
    };
    let resolution = Resolution {
        call_seq: form.call_seq,
        outcome,
        output: form.output,
        operator: visitor.caller.on_behalf(""),
        reason: form.reason,
    };
    console
        .recovery
        .record_resolution(session, resolution)
        .await?;
    visitor.caller.audit("resolve", session);
    Ok(back(form.back.as_deref(), session, "resolved"))
}

/// A pause: why, and until when (RFC 3339, optional).
#[derive(Deserialize)]
pub(crate) struct PauseForm {
    csrf: String,
    reason: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    back: Option<String>,
}

/// A form that carries nothing but its token and where to go back to.
#[derive(Deserialize)]
pub(crate) struct PlainForm {
    csrf: String,
    #[serde(default)]
    back: Option<String>,
}

/// A steering message.
#[derive(Deserialize)]
pub(crate) struct SteeringForm {
    csrf: String,
    text: String,
    #[serde(default)]
    back: Option<String>,
}

/// Takes the operator's act on `session`, as `POST /v1/sessions/{id}/pause` (and `/unpause`,
/// `/steering`) do.
async fn operate(
    console: &Console,
    visitor: &Visitor,
    session: &str,
    csrf: &str,
    act: OperatorAct,
    audit: &'static str,
) -> Result<SessionId, Refused> {
    let session = allowed(console, visitor, Role::Operator, session, csrf).await?;
    console
        .recovery
        .operate(session, &visitor.caller.on_behalf(""), act)
        .await?;
    visitor.caller.audit(audit, session);
    Ok(session)
}

/// `POST /sessions/{id}/pause`.
pub(crate) async fn pause(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<PauseForm>,
) -> Result<Redirect, Refused> {
    let until = Some(form.until.trim())
        .filter(|u| !u.is_empty())
        .map(|u| sessionlog_recovery::pause_until(u, sessionlog_schemas::now_micros()))
        .transpose()
        .map_err(|why| Refused::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", why))?;
    let act = OperatorAct::Pause {
        reason: form.reason,
        until,
    };
    let session = operate(&console, &visitor, &session, &form.csrf, act, "pause").await?;
    Ok(back(form.back.as_deref(), session, "paused"))
}

/// `POST /sessions/{id}/unpause`.
pub(crate) async fn unpause(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<PlainForm>,
) -> Result<Redirect, Refused> {
    let act = OperatorAct::Unpause;
    let session = operate(&console, &visitor, &session, &form.csrf, act, "unpause").await?;
    Ok(back(form.back.as_deref(), session, "unpaused"))
}

/// `POST /sessions/{id}/steering`.
pub(crate) async fn steer(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<SteeringForm>,
) -> Result<Redirect, Refused> {
    let act = OperatorAct::Steer { text: form.text };
    let session = operate(&console, &visitor, &session, &form.csrf, act, "steer").await?;
    Ok(back(form.back.as_deref(), session, "steered"))
}

/// A fork from a checkpoint.
#[derive(Deserialize)]
pub(crate) struct ForkForm {
    csrf: String,
    at_checkpoint: u64,
    agent: String,
}

/// `POST /sessions/{id}/fork`: what `POST /v1/sessions/{id}/fork` does with `at_checkpoint`;
/// then to the new session's page.
pub(crate) async fn fork(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<ForkForm>,
) -> Result<Redirect, Refused> {
    let session = allowed(&console, &visitor, Role::Operator, &session, &form.csrf).await?;
    let by = visitor.caller.on_behalf("");
    let first = console
        .recovery
        .fork_by(
            session,
            ForkAt::Checkpoint(form.at_checkpoint),
            form.agent.trim(),
            Some(&by),
            None,
            &[],
        )
        .await?;
    visitor.caller.audit("fork", session);
    let child = first.envelope.session_id;
    Ok(Redirect::to(&format!("/sessions/{child}?done=forked")))
}

/// An erasure: why, and the session's id typed again.
#[derive(Deserialize)]
pub(crate) struct EraseForm {
    csrf: String,
    reason: String,
    confirm: String,
}

/// `POST /sessions/{id}/erase`: what `POST /v1/sessions/{id}/erase` does, once the session's
/// id was typed to confirm; answers the receipt.
pub(crate) async fn erase(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Form(form): Form<EraseForm>,
) -> Result<Markup, Refused> {
    let session = allowed(&console, &visitor, Role::Operator, &session, &form.csrf).await?;
    if form.confirm.trim() != session.to_string() {
        return Err(Refused::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_confirmed",
            "type the session's id exactly to confirm the erasure; nothing was erased",
        ));
    }
    let receipt = console
        .recovery
        .erase(session, &visitor.caller.on_behalf(""), form.reason.trim())
        .await?;
    visitor.caller.audit("erase", session);
    let body = html! {
        p.notice role="status" { "Erased: the data key is destroyed. Keep this receipt." }
        dl.header.receipt {
            dt { "Session" } dd { code { (receipt.session_id) } }
            dt { "Requested by" } dd { (receipt.requested_by) }
            dt { "Reason" } dd.text { (receipt.reason) }
            dt { "Erased at" } dd { (when(receipt.erased_at)) }
            dt { "Erasure event" } dd { "seq " (receipt.erased_seq) " at " (receipt.log_partition) ":" (receipt.log_offset) }
            dt { "Key destroyed" } dd {
                @match &receipt.destroyed_kek_id {
                    Some(kek) => { "the session's data key, wrapped by " code { (kek) } },
                    None => "none: written without encryption, its text stays in the topic until retention removes it",
                }
            }
        }
        p { a href={ "/sessions/" (session) } { "The session's page" } }
    };
    Ok(frame(Some(&visitor), "Erasure receipt", body))
}
