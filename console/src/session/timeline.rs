//! A session's timeline: one row per event (kind, seq, time, tool, model, outcome), its content
//! opened on demand, a redacted field shown as redacted with its reason and an erased session's
//! texts as erased. On the last page the timeline is live: `live.js` (served by the console,
//! allowed by `script-src 'self'`, pinned by its integrity hash) listens to [`live`], a stream
//! of server-sent events carrying each new event's row as the console rendered (and escaped)
//! it, and the session's status.

use super::visible_session;
use crate::Console;
use crate::error::Refused;
use crate::login::Visitor;
use crate::pages::when;
use crate::sessions::percent;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use futures::Stream;
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_recovery::{EventPage, EventRange, HistoryEvent};
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::time::Instant;

/// The script that keeps a timeline live: a few lines of our own, no library.
pub(crate) const LIVE_SCRIPT: &str = include_str!("../../static/live.js");

/// How often a live timeline looks for new events.
const LIVE_EVERY: Duration = Duration::from_secs(1);
/// How long one stream lasts: the browser then connects again, and its login is checked again.
const LIVE_FOR: Duration = Duration::from_secs(300);
/// Events one look sends at most (the rest come at the next look).
const LIVE_BATCH: u64 = 100;

/// `sha256-…` of [`LIVE_SCRIPT`], for the script element's `integrity`.
pub(crate) fn live_script_integrity() -> &'static str {
    static INTEGRITY: LazyLock<String> = LazyLock::new(|| {
        format!(
            "sha256-{}",
            STANDARD.encode(Sha256::digest(LIVE_SCRIPT.as_bytes()))
        )
    });
    &INTEGRITY
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
        "field",
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

/// What the row of a session's events knows of the session beyond the event.
pub(crate) struct RowContext<'a> {
    session: SessionId,
    state: Option<&'a SessionState>,
    open: Option<u64>,
}

/// One event's row.
fn row(at: &RowContext<'_>, e: &HistoryEvent) -> Markup {
    let own = e.session_id == at.session;
    let retracted = at
        .state
        .filter(|_| own)
        .and_then(|s| s.retracted.get(&e.seq));
    let redactions = at
        .state
        .filter(|_| own)
        .and_then(|s| s.redacted.get(&e.seq));
    let erased = at.state.is_some_and(|s| s.erased && own);
    html! {
        tr id={ "e" (e.seq) } {
            td { (e.seq) @if !own { " " span.flag { "inherited" } } }
            td { (e.kind) }
            td { (when(e.occurred_at)) }
            td { (e.writer_epoch) }
            td { (summary(e)) }
            td {
                @if let Some(by) = retracted { span.flag { "retracted by seq " (by) } " " }
                @if let Some(fields) = redactions {
                    @for (field, r) in fields {
                        span.flag.redacted { (field) " redacted by " (r.redacted_by) " (seq " (r.redaction_seq) "): " (r.reason) } " "
                    }
                }
                @if erased { span.flag.erased { "erased" } " " }
                @if let Some(why) = &e.missing { span.flag { "missing: " (why) } }
                @else {
                    @for (field, why) in e.unopened.iter().filter(|(f, _)| redactions.is_none_or(|r| !r.contains_key(*f))) {
                        @if why.starts_with("redacted") { span.flag.redacted { (field) ": " (why) } " " }
                        @else if why == "erased" && erased {}
                        @else { span.flag { (field) ": " (why) } " " }
                    }
                }
                @if at.open == Some(e.seq) && own {
                    pre.content { (e.event.as_ref().and_then(|ev| serde_json::to_string_pretty(ev).ok()).unwrap_or_default()) }
                } @else if e.event.is_some() && own {
                    a href={ "/sessions/" (at.session) "?open=" (e.seq) "#e" (e.seq) } aria-label={ "Open the content of seq " (e.seq) } { "Open" }
                }
            }
        }
    }
}

/// The timeline of a page of events (`None`: the index has none yet), live when it is the last
/// page.
pub(crate) fn table(
    session: SessionId,
    state: &SessionState,
    page: Option<&EventPage>,
    open: Option<u64>,
) -> Markup {
    let at = RowContext {
        session,
        state: Some(state),
        open,
    };
    let events = page.map_or(&[][..], |p| &p.events[..]);
    let last_seq = events
        .iter()
        .filter(|e| e.session_id == session)
        .map(|e| e.seq)
        .max()
        .unwrap_or(0);
    let next = page.and_then(|p| p.next_cursor.as_ref());
    let live = next.is_none() && !state.erased;
    html! {
        table.timeline {
            caption { "Events of this session, oldest first" @if live { "; new events appear as they are written" } }
            thead { tr { th scope="col" { "Seq" } th scope="col" { "Kind" } th scope="col" { "When" } th scope="col" { "Epoch" } th scope="col" { "What" } th scope="col" { "Content" } } }
            @if live {
                tbody data-live={ "/sessions/" (session) "/live?after=" (last_seq) } {
                    @for e in events { (row(&at, e)) }
                }
            } @else {
                tbody { @for e in events { (row(&at, e)) } }
            }
        }
        @if live { p.hint #live-note aria-live="polite" {} }
        @if let Some(next) = next {
            p { a rel="next" href={ "/sessions/" (session) "?cursor=" (percent(next)) } { "Later events" } }
        }
    }
}

/// The live stream's query: the last seq the page shows.
#[derive(Deserialize, Default)]
pub(crate) struct LiveQuery {
    after: Option<String>,
}

/// `GET /sessions/{id}/live`: server-sent events, `row` (an event's row, its id the seq) for
/// each event after `after` (or the `Last-Event-ID` the browser reconnects with), and `status`
/// when the projected status changes. Ends after [`LIVE_FOR`]; the browser connects again.
/// The login is asked again before every look: once it ends, the stream sends `ended` (why)
/// and stops.
pub(crate) async fn live(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
    Query(query): Query<LiveQuery>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, Refused> {
    let (session, _) = visible_session(&console, &visitor, &session).await?;
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let after = resumed
        .or_else(|| query.after.and_then(|a| a.parse().ok()))
        .unwrap_or(0);
    let stream = looks(console, visitor, session, after);
    Ok((
        [(header::CACHE_CONTROL, "no-store")],
        Sse::new(stream).keep_alive(KeepAlive::default()),
    ))
}

/// What a live stream has sent so far.
struct Watching {
    console: Arc<Console>,
    /// Asked again at every look: a stream outlives the request that checked the login.
    visitor: Visitor,
    session: SessionId,
    after: u64,
    status: Option<String>,
    ends: Instant,
    first: bool,
}

/// The stream of a live timeline: a look at the index every [`LIVE_EVERY`].
fn looks(
    console: Arc<Console>,
    visitor: Visitor,
    session: SessionId,
    after: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let watching = Watching {
        console,
        visitor,
        session,
        after,
        status: None,
        ends: Instant::now() + LIVE_FOR,
        first: true,
    };
    let batches = futures::stream::unfold(watching, |mut w| async move {
        if !w.first {
            tokio::time::sleep(LIVE_EVERY).await;
        }
        w.first = false;
        if Instant::now() >= w.ends {
            return None;
        }
        // A login that ended (logged out, expired, its key withdrawn) sees nothing more: the
        // page is told why, and its script stops listening.
        if let Some(why) = w.visitor.still_logged_in(&w.console).await {
            w.ends = Instant::now();
            let ended = Ok(Event::default().event("ended").data(why));
            return Some((futures::stream::iter(vec![ended]), w));
        }
        let events = look(&mut w).await;
        Some((futures::stream::iter(events), w))
    });
    futures::StreamExt::flatten(batches)
}

/// One look: the rows of the events after the last one sent, and the status if it changed.
async fn look(w: &mut Watching) -> Vec<Result<Event, Infallible>> {
    let mut out = Vec::new();
    let range = EventRange {
        from_seq: Some(w.after.saturating_add(1)),
        limit: Some(LIVE_BATCH),
        ..EventRange::default()
    };
    // A read that fails (the index not there yet, a store blip) is tried at the next look.
    if let Ok(page) = w.console.recovery.events(w.session, range).await {
        let state = w.console.opened_state(w.session).await.ok().flatten();
        let at = RowContext {
            session: w.session,
            state: state.as_ref(),
            open: None,
        };
        for e in page.events.iter().filter(|e| e.session_id == w.session) {
            // Carriage returns cannot travel in an event's data; as a reference they read the same.
            let markup = row(&at, e).into_string().replace('\r', "&#13;");
            out.push(Ok(Event::default()
                .event("row")
                .id(e.seq.to_string())
                .data(markup)));
            w.after = w.after.max(e.seq);
        }
    }
    if let Ok(Some(status)) = w.console.recovery.store().session_status(w.session).await
        && w.status.as_ref() != Some(&status)
    {
        out.push(Ok(Event::default().event("status").data(status.clone())));
        w.status = Some(status);
    }
    out
}
