//! The inbox: everything that waits for a person, oldest first. Approvals pending and calls
//! in doubt come from the lists the projector keeps (`sessions_awaiting`), paused sessions
//! from the recent sessions' listing, sessions without a live writer from the lease topic (as
//! `sessionlog sessions --orphaned` reads them). Each is shown only to callers who may see its
//! tenant, and each action only to the role that may take it.

use crate::Console;
use crate::error::Refused;
use crate::login::Visitor;
use crate::pages::{csrf, frame, since};
use axum::extract::{Query, State};
use futures::{StreamExt, TryStreamExt};
use maud::{Markup, html};
use serde::Deserialize;
use sessionlog_log::Role;
use sessionlog_schemas::{Content, Micros, SessionId};
use sessionlog_session::{SessionState, SessionStatus};
use sessionlog_store::{AwaitingSession, Wait};
use std::sync::Arc;
use std::time::Duration;

/// Reads of session rows one page makes at once.
pub(crate) const READS_AT_ONCE: usize = 16;
/// How long the inbox waits for the lease topic before showing the rest without orphans.
const ORPHANS_WITHIN: Duration = Duration::from_secs(5);
/// How far back the inbox looks for paused sessions, and how many sessions it reads there.
const PAUSED_WITHIN_DAYS: i64 = 7;
const PAUSED_READ_AT_MOST: usize = 1_000;

/// What an action just did, named by the page it redirected to (a fixed word, never echoed).
#[derive(Deserialize, Default)]
pub(crate) struct Notice {
    pub(crate) done: Option<String>,
}

impl Notice {
    pub(crate) fn text(&self) -> Option<&'static str> {
        Some(match self.done.as_deref()? {
            "approved" => "Approved: the decision is recorded and signed.",
            "denied" => "Denied: the decision is recorded and signed.",
            "resolved" => "The call's outcome is recorded and signed.",
            "paused" => "Paused: the harness that was writing is fenced.",
            "unpaused" => "Unpaused: the session can be resumed.",
            "steered" => "The steering message is recorded.",
            "forked" => "Forked: this is the new session, branched from its parent's checkpoint.",
            _ => return None,
        })
    }
}

/// A text of a session as the page shows it: opened, or why not.
pub(crate) fn text(content: &Content, erased: bool) -> String {
    match content.as_plain() {
        _ if erased => "(erased)".into(),
        Some(text) => text.to_string(),
        None => "(sealed: this console holds no key that opens it)".into(),
    }
}

/// A session waiting for `whom`, with its state (texts opened), if the visitor may see it.
struct Waiting {
    row: AwaitingSession,
    state: SessionState,
}

impl Console {
    /// The projected state of `session` with its texts opened, if it is projected.
    pub(crate) async fn opened_state(
        &self,
        session: SessionId,
    ) -> Result<Option<SessionState>, Refused> {
        let Some(state) = self.recovery.store().session_state(session).await? else {
            return Ok(None);
        };
        let opener = self
            .recovery
            .opener_for(session, &state, state.erased)
            .await?;
        Ok(Some(sessionlog_recovery::reveal::opened_state(
            &opener, &state,
        )))
    }

    /// The sessions waiting for `whom` that `visitor` may see, oldest wait first.
    async fn waiting(&self, visitor: &Visitor, whom: Wait) -> Result<Vec<Waiting>, Refused> {
        let rows = self.recovery.store().awaiting(whom).await?;
        let mut waiting: Vec<Waiting> = futures::stream::iter(rows)
            .map(|row| async move {
                let state = self.opened_state(row.session_id).await?;
                Ok::<_, Refused>(state.map(|state| Waiting { row, state }))
            })
            .buffer_unordered(READS_AT_ONCE)
            .try_filter_map(|w| async move { Ok(w) })
            .try_collect()
            .await?;
        waiting.retain(|w| visitor.caller.sees_tenant(&w.state.tenant));
        waiting.sort_by_key(|w| w.row.since_us);
        Ok(waiting)
    }

    /// Paused sessions among those started in the last days that `visitor` may see.
    async fn paused(&self, visitor: &Visitor) -> Result<Vec<SessionState>, Refused> {
        let now = sessionlog_schemas::now_micros();
        let from = now - PAUSED_WITHIN_DAYS * 86_400_000_000;
        let started = crate::sessions::started_after(
            self,
            visitor,
            from,
            now,
            PAUSED_READ_AT_MOST,
            None,
            None,
        )
        .await?;
        let mut paused: Vec<SessionState> = futures::stream::iter(started)
            .map(|span| async move {
                let id = SessionId(span.session_id);
                let status = self.recovery.store().session_status(id).await?;
                if status.as_deref() != Some(SessionStatus::Paused.as_str()) {
                    return Ok(None);
                }
                self.opened_state(id).await
            })
            .buffer_unordered(READS_AT_ONCE)
            .try_filter_map(|s| async move { Ok(s) })
            .try_collect()
            .await?;
        paused.sort_by_key(|s| s.updated_at);
        Ok(paused)
    }

    /// Sessions without a live writer that `visitor` may see, or why they could not be read.
    pub(crate) async fn orphaned(
        &self,
        visitor: &Visitor,
    ) -> Result<Vec<(sessionlog_wake::OrphanedSession, String)>, String> {
        let read = sessionlog_wake::orphaned(self.recovery.settings(), self.recovery.store());
        let orphans = match tokio::time::timeout(ORPHANS_WITHIN, read).await {
            Ok(Ok(orphans)) => orphans,
            Ok(Err(e)) => return Err(format!("the lease topic could not be read: {e}")),
            Err(_) => {
                return Err(format!(
                    "the lease topic was not read within {ORPHANS_WITHIN:?}"
                ));
            }
        };
        let mut seen = Vec::new();
        for orphan in orphans {
            let tenant = match self.recovery.store().session_state(orphan.session_id).await {
                Ok(state) => state.map(|s| s.tenant),
                Err(e) => return Err(format!("a session's row could not be read: {e}")),
            };
            // Not projected yet: only a caller of every tenant sees it.
            let visible = match &tenant {
                Some(tenant) => visitor.caller.sees_tenant(tenant),
                None => visitor.caller.tenant.is_none(),
            };
            if visible {
                seen.push((orphan, tenant.unwrap_or_else(|| "-".into())));
            }
        }
        Ok(seen)
    }
}

/// `GET /`: the inbox.
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Query(notice): Query<Notice>,
) -> Result<Markup, Refused> {
    let (approvals, in_doubt, paused) = tokio::try_join!(
        console.waiting(&visitor, Wait::Approval),
        console.waiting(&visitor, Wait::Operator),
        console.paused(&visitor),
    )?;
    let orphaned = console.orphaned(&visitor).await;
    let now = sessionlog_schemas::now_micros();
    let body = html! {
        @if let Some(done) = notice.text() { p.notice role="status" { (done) } }
        (approvals_section(&visitor, &approvals, now))
        (in_doubt_section(&visitor, &in_doubt, now))
        (paused_section(&visitor, &paused, now))
        (orphaned_section(&orphaned))
    };
    Ok(frame(Some(&visitor), "Inbox", body))
}

/// A link to a session's page, named by its agent and id.
pub(crate) fn session_link(session: SessionId, agent: Option<&str>) -> Markup {
    html! {
        a href={ "/sessions/" (session) } { (agent.unwrap_or("-")) " " code { (session) } }
    }
}

fn approvals_section(visitor: &Visitor, approvals: &[Waiting], now: Micros) -> Markup {
    let decides = visitor.may(Role::Approver);
    html! {
        section aria-labelledby="approvals" {
            h2 #approvals { "Approvals pending (" (approvals.len()) ")" }
            @if approvals.is_empty() { p.empty { "No approval waits for a decision." } }
            @else {
                table {
                    thead { tr { th { "Session" } th { "Approval" } th { "Action to approve" } th { "Asked by" } th { "Since" } @if decides { th { "Decision" } } } }
                    tbody {
                        @for w in approvals {
                            @for approval in w.state.pending_approvals.values() {
                                tr {
                                    td { (session_link(w.row.session_id, w.state.agent.as_deref())) }
                                    td { code { (approval.approval_id) } }
                                    td.text { (text(&approval.action, w.state.erased)) }
                                    td { (w.state.writer.as_deref().or(w.state.agent.as_deref()).unwrap_or("-")) " (epoch " (w.state.epoch) ")" }
                                    td { (since(w.row.since_us, now)) }
                                    @if decides {
                                        td {
                                            form.decide method="post" action={ "/sessions/" (w.row.session_id) "/approvals/" (approval.approval_id) } {
                                                (csrf(visitor))
                                                label for={ "reason-" (w.row.session_id) "-" (approval.approval_id) } { "Reason" }
                                                input id={ "reason-" (w.row.session_id) "-" (approval.approval_id) } name="reason" type="text";
                                                button type="submit" name="decision" value="approve" { "Approve" }
                                                button.deny type="submit" name="decision" value="deny" { "Deny" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn in_doubt_section(visitor: &Visitor, in_doubt: &[Waiting], now: Micros) -> Markup {
    let resolves = visitor.may(Role::Operator);
    html! {
        section aria-labelledby="in-doubt" {
            h2 #in-doubt { "Calls in doubt (" (in_doubt.len()) ")" }
            @if in_doubt.is_empty() { p.empty { "No call waits for an operator." } }
            @else {
                table {
                    thead { tr { th { "Session" } th { "Call" } th { "Key" } th { "Why it waits" } th { "Since" } @if resolves { th { "Outcome" } } } }
                    tbody {
                        @for w in in_doubt {
                            @for call in w.state.pending_calls.values().filter(|c| c.needs_operator(w.state.epoch)) {
                                tr {
                                    td { (session_link(w.row.session_id, w.state.agent.as_deref())) }
                                    td { code { (call.tool) } " seq " (call.seq) " (" (format!("{:?}", call.effect)) ")" }
                                    td { code { (call.idempotency_key.as_deref().unwrap_or("-")) } }
                                    td.text { (call.resolution_required.as_ref().map_or_else(|| "its writer was superseded before it recorded a result".to_string(), |why| text(why, w.state.erased))) }
                                    td { (since(call.requested_at, now)) }
                                    @if resolves {
                                        td {
                                            @let id = format!("{}-{}", w.row.session_id, call.seq);
                                            form.resolve method="post" action={ "/sessions/" (w.row.session_id) "/resolutions" } {
                                                (csrf(visitor))
                                                input type="hidden" name="call_seq" value=(call.seq);
                                                label for={ "outcome-" (id) } { "Outcome" }
                                                select id={ "outcome-" (id) } name="outcome" {
                                                    option value="succeeded" { "It took effect" }
                                                    option value="failed" { "It failed" }
                                                }
                                                label for={ "output-" (id) } { "Output" }
                                                input id={ "output-" (id) } name="output" type="text";
                                                label for={ "why-" (id) } { "Reason" }
                                                input id={ "why-" (id) } name="reason" type="text" required;
                                                button type="submit" { "Record outcome" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn paused_section(visitor: &Visitor, paused: &[SessionState], now: Micros) -> Markup {
    let operates = visitor.may(Role::Operator);
    html! {
        section aria-labelledby="paused" {
            h2 #paused { "Paused sessions (" (paused.len()) ")" }
            p.hint { "Among the sessions started in the last " (PAUSED_WITHIN_DAYS) " days (the first " (PAUSED_READ_AT_MOST) ")." }
            @if paused.is_empty() { p.empty { "No session is paused." } }
            @else {
                table {
                    thead { tr { th { "Session" } th { "Paused since" } th { "Until" } @if operates { th { "Act" } } } }
                    tbody {
                        @for state in paused {
                            tr {
                                td { (session_link(state.session_id, state.agent.as_deref())) }
                                td { (since(state.updated_at, now)) }
                                td { (state.paused_until.map_or_else(|| "someone unpauses it".to_string(), crate::pages::when)) }
                                @if operates {
                                    td {
                                        form method="post" action={ "/sessions/" (state.session_id) "/unpause" } {
                                            (csrf(visitor))
                                            button type="submit" { "Unpause" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn orphaned_section(
    orphaned: &Result<Vec<(sessionlog_wake::OrphanedSession, String)>, String>,
) -> Markup {
    html! {
        section aria-labelledby="orphaned" {
            h2 #orphaned { "Sessions without a live writer" }
            @match orphaned {
                Err(why) => p.refusal role="alert" { (why) },
                Ok(list) if list.is_empty() => p.empty { "Every session that has not ended has a live writer." },
                Ok(list) => table {
                    thead { tr { th { "Session" } th { "Tenant" } th { "Last holder" } th { "Epoch" } th { "Lapsed" } th { "Waits for" } } }
                    tbody {
                        @for (o, tenant) in list {
                            tr {
                                td { (session_link(o.session_id, o.agent.as_deref())) }
                                td { (tenant) }
                                td { (o.holder) }
                                td { (o.epoch) }
                                td { (o.age_secs) "s ago" }
                                td { (o.waits_for) }
                            }
                        }
                    }
                },
            }
        }
    }
}
