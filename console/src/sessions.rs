//! The sessions list and a session's page.
//!
//! The list is the sessions' own spans from the spans by tenant and day (the projector writes
//! one per session, named by its agent), so a tenant's listing reads its own partitions alone;
//! a status filter reads each listed session's projected status. A session's page is rebuilt
//! from the log (as `GET /v1/sessions/{id}` is) and its timeline read by the event index (as
//! `GET /v1/sessions/{id}/events` is), texts opened; content is shown for the event asked for.

use crate::Console;
use crate::error::Refused;
use crate::inbox::{Notice, READS_AT_ONCE, session_link, text};
use crate::login::Visitor;
use crate::pages::{csrf, frame, since, when};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use futures::{StreamExt, TryStreamExt};
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_log::Role;
use sessionlog_recovery::{EventPage, EventRange, HistoryEvent, LeaseStatus};
use sessionlog_schemas::{Micros, SessionId};
use sessionlog_session::SessionState;
use sessionlog_store::{DaySpanRow, SpanSearch};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Sessions one page of the list shows.
const PAGE: usize = 50;
/// Spans a status filter reads for one page at most, before it offers the next page.
const FILTER_READS: usize = 2_000;
/// Days the list looks back by default, and at most (the spans' own bound).
const DEFAULT_DAYS: i64 = 7;
const MAX_DAYS: i64 = 31;
/// Events a session page shows at once.
const EVENTS: u64 = 100;
/// How long a session page waits for the writer lease before showing the page without it.
const LEASE_WITHIN: Duration = Duration::from_secs(2);
const DAY_US: i64 = 86_400_000_000;

/// The sessions of `visitor`'s tenant (every tenant's for a caller of all) whose session span
/// started in `[from, to)` after `after` (a span's order key), at most `limit`, of `agent` if
/// given.
pub(crate) async fn started_after(
    console: &Console,
    visitor: &Visitor,
    from: Micros,
    to: Micros,
    limit: usize,
    agent: Option<&str>,
    after: Option<(i64, Uuid, i64)>,
) -> Result<Vec<DaySpanRow>, Refused> {
    let search = SpanSearch {
        from_us: from,
        to_us: to,
        after,
        limit,
        tenant: visitor.caller.tenant.clone(),
    };
    let keep = |row: &DaySpanRow| {
        row.span_kind == sessionlog_session::trace::SESSION
            && agent.is_none_or(|a| row.agent.as_deref() == Some(a))
    };
    Ok(console
        .recovery
        .store()
        .spans_between(&search, keep)
        .await?
        .spans)
}

/// The list's query: every member as text, checked here.
#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    status: Option<String>,
    agent: Option<String>,
    q: Option<String>,
    days: Option<String>,
    after: Option<String>,
}

/// The statuses a list may be filtered by.
const STATUSES: [&str; 8] = [
    "running",
    "paused",
    "awaiting_approval",
    "needs_resolution",
    "completed",
    "failed",
    "cancelled",
    "erased",
];

fn bad_query(detail: impl Into<String>) -> Refused {
    Refused::new(StatusCode::BAD_REQUEST, "bad_query", detail)
}

/// A list cursor as the page writes it: `start.session.seq`.
fn decode_after(text: &str) -> Result<(i64, Uuid, i64), Refused> {
    let bad = || bad_query("`after` is not a cursor this page gave out");
    let mut parts = text.splitn(3, '.');
    let start = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let session = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let seq = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok((start, session, seq))
}

fn encode_after((start, session, seq): (i64, Uuid, i64)) -> String {
    format!("{start}.{session}.{seq}")
}

/// A parameter as given, trimmed; an empty one is one not given.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// A row of the list: the session's span and its projected status.
struct Listed {
    span: DaySpanRow,
    status: String,
}

/// `GET /sessions`: sessions by start time, filtered, a page at a time.
pub(crate) async fn list(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Query(query): Query<ListQuery>,
) -> Result<Response, Refused> {
    if let Some(q) = given(&query.q) {
        return find(&console, &visitor, q).await;
    }
    let status = given(&query.status);
    if let Some(s) = status.filter(|s| !STATUSES.contains(s)) {
        return Err(bad_query(format!(
            "status must be one of {}, not {:?}",
            STATUSES.join(", "),
            s.chars().take(40).collect::<String>()
        )));
    }
    let agent = given(&query.agent);
    let days = match given(&query.days) {
        None => DEFAULT_DAYS,
        Some(d) => d
            .parse::<i64>()
            .ok()
            .filter(|d| (1..=MAX_DAYS).contains(d))
            .ok_or_else(|| {
                bad_query(format!("days must be a whole number from 1 to {MAX_DAYS}"))
            })?,
    };
    let mut after = given(&query.after).map(decode_after).transpose()?;
    let now = sessionlog_schemas::now_micros();
    let from = now - days * DAY_US;
    let (mut rows, mut read, mut more) = (Vec::new(), 0, false);
    // Read spans until the page is full; with a status filter, until FILTER_READS were read.
    while rows.len() < PAGE && read < FILTER_READS {
        let batch = if status.is_some() {
            200
        } else {
            PAGE - rows.len()
        };
        let spans = started_after(&console, &visitor, from, now, batch, agent, after).await?;
        read += spans.len();
        let exhausted = spans.len() < batch;
        after = spans.last().map(DaySpanRow::order_key).or(after);
        let listed: Vec<Listed> = futures::stream::iter(spans)
            .map(|span| {
                let console = &console;
                async move {
                    let id = SessionId(span.session_id);
                    let status = console.recovery.store().session_status(id).await?;
                    Ok::<_, Refused>(Listed {
                        span,
                        status: status.unwrap_or_else(|| "not projected".into()),
                    })
                }
            })
            .buffered(READS_AT_ONCE)
            .try_collect()
            .await?;
        for row in listed {
            if status.is_none_or(|s| s == row.status) {
                if rows.len() == PAGE {
                    // The rest of the batch comes on the next page.
                    after = rows.last().map(|r: &Listed| r.span.order_key());
                    more = true;
                    break;
                }
                rows.push(row);
            }
        }
        if exhausted {
            break;
        }
        more = true;
    }
    let more = more || read >= FILTER_READS;
    let next = more.then(|| after.map(encode_after)).flatten();
    let every_tenant = visitor.caller.tenant.is_none();
    let body = html! {
        form.filters method="get" action="/sessions" role="search" {
            label for="status" { "Status" }
            select id="status" name="status" {
                option value="" selected[status.is_none()] { "any" }
                @for s in STATUSES { option value=(s) selected[status == Some(s)] { (s) } }
            }
            label for="agent" { "Agent" }
            input id="agent" name="agent" type="text" value=(agent.unwrap_or(""));
            label for="days" { "Started in the last (days)" }
            input id="days" name="days" type="number" min="1" max=(MAX_DAYS) value=(days);
            label for="q" { "Name or id" }
            input id="q" name="q" type="search";
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() { p.empty { "No session matches." } }
        @else {
            table {
                thead { tr { th { "Session" } th { "Status" } th { "Started" } @if every_tenant { th { "Tenant" } } } }
                tbody {
                    @for row in &rows {
                        tr {
                            td { (session_link(SessionId(row.span.session_id), row.span.agent.as_deref())) }
                            td { span.status { (row.status) } }
                            td { (since(row.span.start_us, now)) }
                            @if every_tenant { td { (row.span.tenant.as_deref().unwrap_or("-")) } }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &next {
            p { a rel="next" href={ "/sessions?days=" (days) "&status=" (status.unwrap_or("")) "&agent=" (percent(agent.unwrap_or(""))) "&after=" (next) } { "Next page" } }
        }
    };
    Ok(frame(Some(&visitor), "Sessions", body).into_response())
}

/// `text` percent-encoded for a query string (maud escapes it for the attribute).
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A search by id (to its page) or by name (in the visitor's tenant).
async fn find(console: &Console, visitor: &Visitor, q: &str) -> Result<Response, Refused> {
    if let Ok(id) = q.parse::<SessionId>() {
        return Ok(Redirect::to(&format!("/sessions/{id}")).into_response());
    }
    let tenant = visitor.caller.home_tenant();
    let digest = sessionlog_schemas::session_name_sha256(tenant, q);
    let names = console.recovery.store().names().await?;
    match names.find(tenant, &digest).await? {
        Some(id) => Ok(Redirect::to(&format!("/sessions/{id}")).into_response()),
        None => Err(Refused::new(
            StatusCode::NOT_FOUND,
            "unknown_name",
            format!("no session of tenant {tenant} is named that"),
        )),
    }
}

/// A session page's query: the event whose content to show, the timeline's page.
#[derive(Deserialize, Default)]
pub(crate) struct PageQuery {
    open: Option<String>,
    cursor: Option<String>,
    done: Option<String>,
}

/// `GET /sessions/{id}`: the header, the operator's acts, the timeline.
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Query(query): Query<PageQuery>,
) -> Result<Markup, Refused> {
    let session = sessionlog_http::session_id(&session)?;
    let rebuilt = console.recovery.rebuild(session).await?;
    visitor
        .caller
        .require_tenant(session, &rebuilt.state.tenant)?;
    let opener = console
        .recovery
        .opener(session, rebuilt.state.erased)
        .await?;
    let state = sessionlog_recovery::reveal::opened_state(&opener, &rebuilt.state);
    let lease = match tokio::time::timeout(LEASE_WITHIN, console.recovery.lease(session)).await {
        Ok(Ok(Some(lease))) => Some(LeaseStatus::of(
            lease,
            state.epoch,
            sessionlog_schemas::now_micros(),
        )),
        _ => None,
    };
    let open = query.open.as_deref().and_then(|s| s.parse::<u64>().ok());
    let range = EventRange {
        limit: Some(EVENTS),
        cursor: query.cursor.filter(|c| !c.is_empty()),
        ..EventRange::default()
    };
    let events = match console.recovery.events(session, range).await {
        Ok(page) => Ok(page),
        Err(sessionlog_recovery::Error::NotIndexed(_)) => Err("not projected yet"),
        Err(e) => return Err(e.into()),
    };
    let notice = Notice { done: query.done };
    let title = format!("Session {}", state.agent.as_deref().unwrap_or("-"));
    let body = html! {
        @if let Some(done) = notice.text() { p.notice role="status" { (done) } }
        (header(&state, lease.as_ref()))
        (acts(&visitor, &state))
        section aria-labelledby="timeline" {
            h2 #timeline { "Timeline" }
            @match &events {
                Err(why) => p.empty { "The event index has no events of this session: " (why) "." },
                Ok(page) => (timeline(session, &state, page, open)),
            }
        }
    };
    Ok(frame(Some(&visitor), &title, body))
}

fn header(state: &SessionState, lease: Option<&LeaseStatus>) -> Markup {
    let now = sessionlog_schemas::now_micros();
    html! {
        dl.header {
            dt { "Id" } dd { code { (state.session_id) } }
            dt { "Status" } dd { span.status { (state.status().as_str()) } }
            dt { "Title" } dd.text { (state.title.as_ref().map_or_else(|| "-".into(), |t| text(t, state.erased))) }
            dt { "Tenant" } dd { (state.tenant) }
            dt { "Epoch" } dd { (state.epoch) }
            dt { "Writer" } dd { (state.writer.as_deref().unwrap_or("-")) }
            dt { "Lease" } dd {
                @match lease {
                    Some(l) => { (l.writer) " at epoch " (l.epoch) ", until " (l.expires_at) @if l.live { " (live)" } @else { " (lapsed)" } },
                    None => "none",
                }
            }
            dt { "Started" } dd { (since(state.started_at, now)) }
            dt { "Updated" } dd { (since(state.updated_at, now)) }
            dt { "Tokens" } dd { (state.tokens_in) " in, " (state.tokens_out) " out" }
            dt { "Cost" } dd { "$" (format!("{:.6}", state.cost_micros as f64 / 1e6)) }
            dt { "Calls" } dd { (state.model_calls) " model, " (state.tool_calls) " tool" }
            @if let Some(until) = state.paused_until { dt { "Paused until" } dd { (when(until)) } }
            @if let Some(parent) = &state.parent {
                dt { "Forked from" } dd { (session_link(parent.parent_session_id, None)) " at seq " (parent.parent_seq) }
            }
        }
    }
}

/// What a form of a session's page carries: the login's CSRF token, and where to go back to.
fn from_this_page(visitor: &Visitor) -> Markup {
    html! { (csrf(visitor)) input type="hidden" name="back" value="session"; }
}

/// The operator's acts on a session that has not ended.
fn acts(visitor: &Visitor, state: &SessionState) -> Markup {
    if !visitor.may(Role::Operator) || state.terminal.is_some() || state.erased {
        return html! {};
    }
    let action = |what: &str| format!("/sessions/{}/{what}", state.session_id);
    html! {
        section aria-labelledby="acts" {
            h2 #acts { "Act" }
            @if state.paused {
                form method="post" action=(action("unpause")) {
                    (from_this_page(visitor))
                    button type="submit" { "Unpause" }
                }
            } @else {
                form method="post" action=(action("pause")) {
                    (from_this_page(visitor))
                    label for="pause-reason" { "Why pause" }
                    input id="pause-reason" name="reason" type="text" required;
                    label for="pause-until" { "Until (RFC 3339, optional)" }
                    input id="pause-until" name="until" type="text" placeholder="2026-12-05T09:00:00Z";
                    button type="submit" { "Pause" }
                }
            }
            form method="post" action=(action("steering")) {
                (from_this_page(visitor))
                label for="steer-text" { "Steering message" }
                input id="steer-text" name="text" type="text" required;
                button type="submit" { "Steer" }
            }
        }
    }
}

/// What a timeline row says about an event beside its kind: its tool, model, outcome, approval.
fn summary(event: &HistoryEvent) -> String {
    let Some(fields) = event
        .event
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
    else {
        return String::new();
    };
    [
        "tool",
        "model",
        "outcome",
        "approval_id",
        "effect",
        "approved",
    ]
    .iter()
    .filter_map(|name| {
        let value = fields.get(*name)?;
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), String::from);
        Some(format!("{name} {shown}"))
    })
    .collect::<Vec<_>>()
    .join(" · ")
}

fn timeline(
    session: SessionId,
    state: &SessionState,
    page: &EventPage,
    open: Option<u64>,
) -> Markup {
    html! {
        table.timeline {
            thead { tr { th { "Seq" } th { "Kind" } th { "When" } th { "Epoch" } th { "What" } th { "Content" } } }
            tbody {
                @for e in &page.events {
                    tr id={ "e" (e.seq) } {
                        td { (e.seq) }
                        td { (e.kind) }
                        td { (when(e.occurred_at)) }
                        td { (e.writer_epoch) }
                        td { (summary(e)) }
                        td {
                            @if let Some(by) = state.retracted.get(&e.seq) { span.flag { "retracted by seq " (by) } " " }
                            @if let Some(why) = &e.missing { span.flag { "missing: " (why) } }
                            @else if !e.unopened.is_empty() {
                                span.flag { @for (field, why) in &e.unopened { (field) ": " (why) " " } }
                            }
                            @if open == Some(e.seq) {
                                pre.content { (e.event.as_ref().and_then(|ev| serde_json::to_string_pretty(ev).ok()).unwrap_or_default()) }
                            } @else if e.event.is_some() {
                                a href={ "/sessions/" (session) "?open=" (e.seq) "#e" (e.seq) } aria-label={ "Open the content of seq " (e.seq) } { "Open" }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &page.next_cursor {
            p { a rel="next" href={ "/sessions/" (session) "?cursor=" (percent(next)) } { "Later events" } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_cursor_reads_back_and_anything_else_is_refused() {
        let key = (-5, Uuid::now_v7(), 7);
        assert_eq!(decode_after(&encode_after(key)).ok(), Some(key));
        for bad in ["", "x", "1.2.3", "1.not-a-uuid.3"] {
            assert!(decode_after(bad).is_err(), "{bad}");
        }
        assert_eq!(percent("a b&c=ü"), "a%20b%26c%3D%C3%BC");
    }
}
