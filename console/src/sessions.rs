//! The sessions list.
//!
//! The list is the sessions' own spans from the spans by tenant and day (the projector writes
//! one per session, named by its agent), so a tenant's listing reads its own partitions alone;
//! a status filter reads each listed session's projected status. A session's own pages are
//! [`crate::session`]'s.

use crate::Console;
use crate::error::Refused;
use crate::inbox::{READS_AT_ONCE, session_link};
use crate::login::Visitor;
use crate::pages::{frame, since};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use futures::{StreamExt, TryStreamExt};
use maud::html;
use serde::Deserialize;
use sessionlog_schemas::{Micros, SessionId};
use sessionlog_store::{DaySpanRow, SpanSearch};
use std::sync::Arc;
use uuid::Uuid;

/// Sessions one page of the list shows.
const PAGE: usize = 50;
/// Spans a status filter reads for one page at most, before it offers the next page.
const FILTER_READS: usize = 2_000;
/// Days the list looks back by default, and at most (the spans' own bound).
const DEFAULT_DAYS: i64 = 7;
const MAX_DAYS: i64 = 31;
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

/// A page's `days` parameter: `default` when not given, else a whole number from 1 to `most`.
pub(crate) fn days(value: &Option<String>, default: i64, most: i64) -> Result<i64, Refused> {
    match given(value) {
        None => Ok(default),
        Some(d) => d
            .parse::<i64>()
            .ok()
            .filter(|d| (1..=most).contains(d))
            .ok_or_else(|| bad_query(format!("days must be a whole number from 1 to {most}"))),
    }
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
    let days = days(&query.days, DEFAULT_DAYS, MAX_DAYS)?;
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
pub(crate) fn percent(text: &str) -> String {
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
