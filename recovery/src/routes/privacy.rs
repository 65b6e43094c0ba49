//! A session's privacy: `erase` it whole, see where its `erasure` stands, `redactions` of one
//! field of one event and their receipts.

use super::{Answer, TakeoverProblems, visible};
use crate::{ErasureStatus, Recovery};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use sessionlog_http::{
    Authorized, InvalidRequest, JsonBody, Operator, SessionPath, SessionProblems,
};
use std::sync::Arc;
use utoipa::ToSchema;

/// Why a session is to be erased.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EraseRequest {
    /// Why. Kept readable in the log and the receipt: say which request or policy, not whose
    /// data.
    reason: String,
}

/// An erasure's receipt.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct ReceiptView(sessionlog_keys::ErasureReceipt);

/// Where an erasure stands.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct ErasureStatusView(ErasureStatus);

/// One field of one event to redact, and why.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedactRequest {
    /// The seq of the event.
    seq: u64,
    /// The sealed field (`output`, `arguments`, `content`, ...).
    field: String,
    /// Why. Kept readable in the log and the receipt: say what and which policy, not the text.
    reason: String,
}

/// A redaction's receipt.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub(crate) struct RedactionReceiptView(crate::RedactionReceipt);

sessionlog_http::problems! {
    /// What an erasure may refuse besides what any takeover for an operator may.
    EraseProblems {} + InvalidRequest + TakeoverProblems
}

sessionlog_http::problems! {
    /// What a redaction may refuse besides what any takeover for an operator may.
    RedactProblems {
        422 => "`invalid_request`, `not_redactable`",
    } + TakeoverProblems
}

/// Erases a session: appends `SessionErased`, destroys its data key (every sealed copy of its
/// texts becomes unreadable) and answers the receipt. The projector then drops its texts,
/// context turns and stored checkpoint states. Erasing again answers the same receipt.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/erase",
    tag = "operators",
    params(SessionPath),
    request_body = EraseRequest,
    responses(
        (status = 200, description = "erased: the receipt", body = ReceiptView),
        EraseProblems,
    )
)]
pub(crate) async fn erase(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(r): JsonBody<EraseRequest>,
) -> Answer<ReceiptView> {
    visible(&recovery, &caller, session).await?;
    let receipt = recovery
        .erase(session, &caller.on_behalf(""), &r.reason)
        .await?;
    caller.audit("erase", session);
    Ok(Json(ReceiptView(receipt)))
}

/// Redacts one field of one event: destroys the field's own key (every sealed copy of that
/// text becomes unreadable) and appends `PayloadRedacted`, signed, in the operator's name (the
/// harness writing is fenced, as by a pause, and resumes); answers the receipt. Every other
/// text of the session still opens; it resumes and forks. Redacting again answers the same.
#[utoipa::path(
    post,
    path = "/sessions/{session_id}/redactions",
    tag = "operators",
    params(SessionPath),
    request_body = RedactRequest,
    responses(
        (status = 200, description = "redacted: the receipt", body = RedactionReceiptView),
        RedactProblems,
    )
)]
pub(crate) async fn redact(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
    JsonBody(r): JsonBody<RedactRequest>,
) -> Answer<RedactionReceiptView> {
    visible(&recovery, &caller, session).await?;
    let receipt = recovery
        .redact(session, r.seq, &r.field, &caller.on_behalf(""), &r.reason)
        .await?;
    caller.audit("redact", session);
    Ok(Json(RedactionReceiptView(receipt)))
}

/// The receipts of a session's redactions, oldest first.
#[derive(Serialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Vec<Object>)]
pub(crate) struct RedactionsView(Vec<crate::RedactionReceipt>);

/// A session's redactions, each as its receipt (seq, field, who, why, when, which key), oldest
/// first: the same as `sessionlog redact SESSION --status`.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/redactions",
    tag = "operators",
    params(SessionPath),
    responses(
        (status = 200, description = "the receipts", body = RedactionsView),
        SessionProblems,
    )
)]
pub(crate) async fn redactions(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
) -> Answer<RedactionsView> {
    visible(&recovery, &caller, session).await?;
    Ok(Json(RedactionsView(recovery.redactions(session).await?)))
}

/// Where a session's erasure stands: in the log, in the projection, the data key, the receipt.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/erasure",
    tag = "operators",
    params(SessionPath),
    responses(
        (status = 200, description = "the status", body = ErasureStatusView),
        SessionProblems,
    )
)]
pub(crate) async fn erasure(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Operator>,
    SessionPath(session): SessionPath,
) -> Answer<ErasureStatusView> {
    visible(&recovery, &caller, session).await?;
    Ok(Json(ErasureStatusView(
        recovery.erasure_status(session).await?,
    )))
}
