//! A session's pages. Its page proper is the header (status, epoch, writer and lease, tokens
//! and cost), the operator's acts and the timeline, which grows as events arrive
//! ([`timeline::live`]). The heavier views each have a page of their own, so the session page
//! costs one rebuild and one index read: the context the next harness would get, lineage and
//! a fork's diff, checkpoints (fork from one), the trace waterfall, and erasure behind a typed
//! confirmation ([`views`]). Every page checks the visitor may see the session's tenant.

mod timeline;
mod views;

pub(crate) use timeline::{LIVE_SCRIPT, live, live_script_integrity};
pub(crate) use views::{checkpoints, context, erase_form, lineage, trace};

use crate::Console;
use crate::error::Refused;
use crate::inbox::{Notice, session_link, text};
use crate::login::Visitor;
use crate::pages::{csrf, frame_with, since, when};
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_log::Role;
use sessionlog_recovery::{EventRange, LeaseStatus};
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
use std::sync::Arc;
use std::time::Duration;

/// Events a session page shows at once.
const EVENTS: u64 = 100;
/// How long a session page waits for the writer lease before showing the page without it.
const LEASE_WITHIN: Duration = Duration::from_secs(2);

/// A session page's query: the event whose content to show, the timeline's page.
#[derive(Deserialize, Default)]
pub(crate) struct PageQuery {
    open: Option<String>,
    cursor: Option<String>,
    done: Option<String>,
}

/// The pages of one session, as the tabs every one of them shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Timeline,
    Context,
    Lineage,
    Checkpoints,
    Trace,
}

impl Tab {
    const ALL: [(Tab, &'static str, &'static str); 5] = [
        (Tab::Timeline, "", "Timeline"),
        (Tab::Context, "/context", "Context"),
        (Tab::Lineage, "/lineage", "Lineage"),
        (Tab::Checkpoints, "/checkpoints", "Checkpoints"),
        (Tab::Trace, "/trace", "Trace"),
    ];
}

/// The tabs of `session`'s pages, `current` marked as the page shown.
pub(crate) fn tabs(session: SessionId, current: Tab) -> Markup {
    html! {
        nav.tabs aria-label="This session" {
            @for (tab, path, name) in Tab::ALL {
                @if tab == current {
                    a href={ "/sessions/" (session) (path) } aria-current="page" { (name) }
                } @else {
                    a href={ "/sessions/" (session) (path) } { (name) }
                }
            }
        }
    }
}

/// The session a sub-page names, if the visitor may see it, with its projected state (texts
/// opened) when the projector has it.
pub(crate) async fn visible_session(
    console: &Console,
    visitor: &Visitor,
    session: &str,
) -> Result<(SessionId, Option<SessionState>), Refused> {
    let session = sessionlog_http::session_id(session)?;
    sessionlog_recovery::http::visible(&console.recovery, &visitor.caller, session).await?;
    Ok((session, console.opened_state(session).await?))
}

/// A sub-page's title: what it shows, and the session's agent.
pub(crate) fn sub_title(what: &str, state: Option<&SessionState>) -> String {
    let agent = state.and_then(|s| s.agent.as_deref()).unwrap_or("-");
    format!("{what} · session {agent}")
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
        .opener_for(session, &rebuilt.state, rebuilt.state.erased)
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
        (tabs(session, Tab::Timeline))
        (header(&state, lease.as_ref()))
        (acts(&visitor, &state))
        section aria-labelledby="timeline" {
            h2 #timeline { "Timeline" }
            @match &events {
                Err(why) => {
                    p.empty { "The event index has no events of this session: " (why) "." }
                    (timeline::table(session, &state, None, open))
                }
                Ok(page) => (timeline::table(session, &state, Some(page), open)),
            }
        }
    };
    // The hash in the address too: a browser's cached copy of an older script is not used.
    let integrity = live_script_integrity();
    let src = format!("{LIVE_SCRIPT_PATH}?v={}", &integrity[7..19]);
    Ok(frame_with(
        Some(&visitor),
        &title,
        body,
        Some((&src, integrity)),
    ))
}

/// Where the live timeline's script is served.
pub(crate) const LIVE_SCRIPT_PATH: &str = "/static/live.js";

fn header(state: &SessionState, lease: Option<&LeaseStatus>) -> Markup {
    let now = sessionlog_schemas::now_micros();
    html! {
        dl.header {
            dt { "Id" } dd { code { (state.session_id) } }
            dt { "Status" } dd { span.status #session-status { (state.status().as_str()) } }
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
            dt { "Cost" } dd { (dollars(state.cost_micros as f64)) }
            dt { "Calls" } dd { (state.model_calls) " model, " (state.tool_calls) " tool" }
            @if state.paused {
                dt { "Paused until" }
                dd { (state.paused_until.map_or_else(|| "someone unpauses it".to_string(), when)) }
            }
            @if let Some(parent) = &state.parent {
                dt { "Forked from" } dd { (session_link(parent.parent_session_id, None)) " at seq " (parent.parent_seq) }
            }
            @if !state.redacted.is_empty() {
                dt { "Redactions" } dd { (state.redacted.values().map(|f| f.len()).sum::<usize>()) " field(s)" }
            }
        }
    }
}

/// Millionths of a dollar as dollars.
pub(crate) fn dollars(micros: f64) -> String {
    format!("${:.6}", micros / 1e6)
}

/// What a form of a session's page carries: the login's CSRF token, and where to go back to.
pub(crate) fn from_this_page(visitor: &Visitor) -> Markup {
    html! { (csrf(visitor)) input type="hidden" name="back" value="session"; }
}

/// The operator's acts: pause or unpause and steer a session that has not ended, erase one
/// that is not erased. Only an operator sees them.
fn acts(visitor: &Visitor, state: &SessionState) -> Markup {
    if !visitor.may(Role::Operator) || state.erased {
        return html! {};
    }
    let action = |what: &str| format!("/sessions/{}/{what}", state.session_id);
    html! {
        section aria-labelledby="acts" {
            h2 #acts { "Act" }
            @if state.terminal.is_none() {
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
            p {
                a href=(action("checkpoints")) { "Fork from a checkpoint" } " · "
                a.danger href=(action("erase")) { "Erase this session…" }
            }
        }
    }
}
