//! What the projector made of sessions' traces: `GET /v1/sessions/{session_id}/trace` (one
//! session's span tree), `GET /v1/spans` (every session's spans by start time) and
//! `GET /v1/usage` (rollups over days).

use super::{Answer, LIMITS, number, visible};
use crate::history::clip;
use crate::{Recovery, SessionTrace, SpanPage, SpanQuery, UsageBy, UsageReport};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use sessionlog_http::{
    Authorized, Problem, QueryParams, Reader, ServerProblems, SessionPath, SessionProblems,
};
use std::sync::Arc;

sessionlog_http::problems! {
    /// What a session's trace may refuse besides what any session route may.
    TraceProblems {
        404 => "`unknown_session`: no span projected (unknown, or not projected yet)",
    } + SessionProblems
}

sessionlog_http::problems! {
    /// What a page of spans may refuse.
    SpansProblems {
        400 => "`bad_range` (a time that is not RFC 3339, `to` not after `from`, over 31 days), \
                `bad_limit`, `bad_cursor`, `bad_query` (a missing `from`, an unknown parameter)",
    } + ServerProblems
}

sessionlog_http::problems! {
    /// What a usage report may refuse.
    UsageProblems {
        400 => "`bad_range` (not a date, backwards, over 366 days), `bad_query` (a missing \
                `from`, an unknown `by` or parameter)",
    } + ServerProblems
}

/// A session's trace as the projector wrote it: a tree of spans. The session's span is the
/// root; model calls, steering and approvals hang off it, and tool calls off the model call
/// that asked for them. Each span names the log offsets of the events that opened and closed
/// it. Spans the projector has not applied yet are not in the answer.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/trace",
    tag = "traces",
    params(SessionPath),
    responses(
        (status = 200, description = "the span tree", body = SessionTrace),
        TraceProblems,
    )
)]
pub(crate) async fn trace(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    SessionPath(session): SessionPath,
) -> Answer<SessionTrace> {
    visible(&recovery, &caller, session).await?;
    Ok(Json(
        crate::trace::session_trace(recovery.store(), session).await?,
    ))
}

/// The query of `GET /v1/spans`, as text: numbers are checked by [`SpanQuery::page`] so a bad
/// one says which parameter it is. Unknown parameters are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpansQuery {
    from: Option<String>,
    to: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// Every session's spans by start time, a page at a time (from the spans by tenant and day,
/// merged across their partitions), filtered by agent, model, tool and outcome. A tenant's
/// credential sees its own tenant's spans, read from its own partitions alone. A narrow filter
/// over a long range reads more spans than it answers: narrow the range too.
#[utoipa::path(
    get,
    path = "/spans",
    tag = "traces",
    params(
        ("from" = String, Query, description = "RFC 3339: spans that began at or after it"),
        ("to" = Option<String>, Query, description = "RFC 3339: and before it (default now); at most 31 days after `from`"),
        ("agent" = Option<String>, Query, description = "only spans of this agent's sessions"),
        ("model" = Option<String>, Query, description = "only calls of this model"),
        ("tool" = Option<String>, Query, description = "only calls of this tool"),
        ("outcome" = Option<String>, Query, description = "only spans with this outcome (`failed`, `ok`, `pending`, ...)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "spans per page, 1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "the previous page's `next_cursor`, with the same other parameters"),
    ),
    responses(
        (status = 200, description = "one page; `next_cursor` when more may remain", body = SpanPage),
        SpansProblems,
    )
)]
pub(crate) async fn spans(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    QueryParams(query): QueryParams<SpansQuery>,
) -> Answer<SpanPage> {
    let given = |value: Option<String>| value.filter(|v| !v.is_empty());
    let from = given(query.from).ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "from (an RFC 3339 time) is required",
        )
    })?;
    let limit = number("limit", "bad_limit", LIMITS, given(query.limit))?;
    let query = SpanQuery {
        from,
        to: given(query.to),
        agent: given(query.agent),
        model: given(query.model),
        tool: given(query.tool),
        outcome: given(query.outcome),
        limit: limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
        cursor: given(query.cursor),
    };
    let page = query
        .page(recovery.store(), caller.tenant.as_deref())
        .await?;
    Ok(Json(page))
}

/// The query of `GET /v1/usage`. Unknown parameters are refused, like the events range's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    by: Option<String>,
}

/// Usage over whole UTC days, from the rollups the projector keeps (one read per day, no scan
/// of spans): calls, failed tool calls, tokens, cost and latency quantiles by model, agent,
/// tool or day. A call counts on the day its span started, once it has ended. A tenant's
/// credential sees its own sessions' usage.
#[utoipa::path(
    get,
    path = "/usage",
    tag = "traces",
    params(
        ("from" = String, Query, description = "the first day, `YYYY-MM-DD` (UTC)"),
        ("to" = Option<String>, Query, description = "the last day, included (default: `from`); at most 366 days after it"),
        ("by" = Option<String>, Query, description = "`model` (default), `agent`, `tool` or `day`"),
    ),
    responses(
        (status = 200, description = "the report", body = UsageReport),
        UsageProblems,
    )
)]
pub(crate) async fn usage(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Answer<UsageReport> {
    let bad_query = |detail: String| Problem::new(StatusCode::BAD_REQUEST, "bad_query", detail);
    let from = query
        .from
        .filter(|f| !f.is_empty())
        .ok_or_else(|| bad_query("from (a date, YYYY-MM-DD) is required".into()))?;
    let to = query
        .to
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| from.clone());
    let by = match query.by.as_deref() {
        None | Some("") => UsageBy::Model,
        Some(by) => UsageBy::parse(by).ok_or_else(|| {
            bad_query(format!(
                "by must be model, agent, tool or day, not {:?}",
                clip(by)
            ))
        })?,
    };
    let report =
        crate::usage::usage(recovery.store(), caller.tenant.as_deref(), &from, &to, by).await?;
    Ok(Json(report))
}
