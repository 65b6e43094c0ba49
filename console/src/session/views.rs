//! A session's views, each on its own page: the context the next harness would get
//! (`Recovery::context_view`, as the MCP server's reader shows a model), lineage and a fork's
//! diff against its parent (`lineage_in`, `diff_in`, as `GET .../lineage` and `.../diff`),
//! checkpoints with their verification (and a fork from one), the trace waterfall
//! (`session_trace`, as `GET .../trace`), and the erasure's typed confirmation.

use super::{Tab, dollars, sub_title, tabs, visible_session};
use crate::Console;
use crate::error::Refused;
use crate::inbox::session_link;
use crate::login::Visitor;
use crate::pages::{csrf, frame, when};
use axum::extract::{Path, State};
use maud::{Markup, html};
use sessionlog_log::Role;
use sessionlog_recovery::context::ResumeContext;
use sessionlog_recovery::{BranchDiff, Error as RecoveryError, LoggedEvent, Scope};
use sessionlog_session::context::Turn;
use std::sync::Arc;

/// `GET /sessions/{id}/context`: the view a harness resuming now would be handed.
pub(crate) async fn context(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
) -> Result<Markup, Refused> {
    let (session, state) = visible_session(&console, &visitor, &session).await?;
    let view = console.recovery.context_view(session, None).await?;
    let body = html! {
        (tabs(session, Tab::Context))
        p.hint { "What the next harness gets when it resumes this session now: the plan, the unresolved calls, summaries and the newest turns that fit its token budget. Nothing is appended by looking." }
        (context_view(&view, 2))
    };
    Ok(frame(
        Some(&visitor),
        &sub_title("Context", state.as_ref()),
        body,
    ))
}

fn turn_text(turn: &Turn) -> Markup {
    html! {
        @match &turn.text {
            Some(text) => { (text) @if turn.truncated { " …" span.flag { "truncated" } } },
            None if turn.sealed => span.flag { "no text: sealed, redacted or erased" },
            None => span.flag { "no text" },
        }
    }
}

/// A context view; `level` is its heading's level (an inherited view nests one deeper).
fn context_view(view: &ResumeContext, level: u8) -> Markup {
    let heading = |text: &str| match level {
        2 => html! { h2 { (text) } },
        3 => html! { h3 { (text) } },
        _ => html! { h4 { (text) } },
    };
    html! {
        dl.header {
            dt { "Plan" } dd.text { (view.plan.as_deref().unwrap_or("-")) }
            dt { "Size" } dd { (view.estimated_tokens) " of " (view.budget_tokens) " tokens (estimated)" }
            dt { "Left out" } dd { (view.left_out.evicted_turns) " turns evicted, " (view.left_out.summarized_turns) " summarized, " (view.dropped_for_budget.len()) " dropped for the budget" }
        }
        @if !view.unresolved_calls.is_empty() {
            (heading("Unresolved calls"))
            ul { @for call in &view.unresolved_calls { li { "seq " (call.seq) " " code { (call.tool) } " (" (call.effect) ")" } } }
        }
        @if !view.summaries.is_empty() {
            (heading("Summaries"))
            ul { @for s in &view.summaries { li { "seqs " (s.first_seq) "–" (s.last_seq) ": " (turn_text(&s.turn)) } } }
        }
        (heading("Turns"))
        @if view.turns.is_empty() { p.empty { "No turn." } }
        @else {
            table.context {
                thead { tr { th scope="col" { "Seq" } th scope="col" { "Role" } th scope="col" { "Name" } th scope="col" { "When" } th scope="col" { "Text" } } }
                tbody {
                    @for t in &view.turns {
                        tr { td { (t.seq) } td { (t.role) } td { (t.name.as_deref().unwrap_or("")) } td { (when(t.occurred_at)) } td.text { (turn_text(t)) } }
                    }
                }
            }
        }
        @if !view.older.is_empty() {
            p.hint { "Older turns, readable by range on the timeline: "
                @for o in &view.older { "seqs " (o.first_seq) "–" (o.last_seq) "; " } }
        }
        @if let Some(inherited) = &view.inherited {
            (heading("Inherited from the parent"))
            p { (session_link(inherited.parent, None)) " through seq " (inherited.through_seq) }
            @match (&inherited.context, &inherited.unavailable) {
                (Some(parent), _) => (context_view(parent, level.saturating_add(1))),
                (None, Some(why)) => p.empty { "Not included: " (why) },
                (None, None) => p.empty { "Not included." },
            }
        }
    }
}

/// `GET /sessions/{id}/lineage`: ancestors with their fork points, children, and for a fork
/// the events after the fork point on each side.
pub(crate) async fn lineage(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
) -> Result<Markup, Refused> {
    let (session, state) = visible_session(&console, &visitor, &session).await?;
    // A console login is never narrowed to one session: it sees the family.
    let lineage = console.recovery.lineage_in(session, Scope::Family).await?;
    let diff = match console.recovery.diff_in(session, Scope::Family).await {
        Ok(diff) => Some(diff),
        Err(RecoveryError::BadForkPoint { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let body = html! {
        (tabs(session, Tab::Lineage))
        section aria-labelledby="ancestors" {
            h2 #ancestors { "Ancestors" }
            @if lineage.ancestors.is_empty() { p.empty { "None: this session is not a fork." } }
            @else {
                ol {
                    @for a in &lineage.ancestors {
                        li { "forked from " (session_link(a.parent_session_id, None)) " at seq " (a.parent_seq) }
                    }
                }
            }
        }
        section aria-labelledby="children" {
            h2 #children { "Forks of this session (" (lineage.children.len()) ")" }
            @if lineage.children.is_empty() { p.empty { "No session was forked from this one." } }
            @else {
                ul { @for (child, seq) in &lineage.children { li { (session_link(*child, None)) " forked at seq " (seq) } } }
            }
        }
        @if let Some(diff) = &diff { (diff_section(diff)) }
    };
    Ok(frame(
        Some(&visitor),
        &sub_title("Lineage", state.as_ref()),
        body,
    ))
}

fn diff_side(events: &[LoggedEvent]) -> Markup {
    html! {
        @if events.is_empty() { p.empty { "No event after the fork point." } }
        @else {
            ol.diff {
                @for e in events {
                    li { "seq " (e.envelope.seq) " " (e.envelope.event.kind()) " · " (when(e.envelope.occurred_at)) }
                }
            }
        }
    }
}

fn diff_section(diff: &BranchDiff) -> Markup {
    html! {
        section aria-labelledby="diff" {
            h2 #diff { "Diff against the parent" }
            p { "Forked from " (session_link(diff.fork_point.parent_session_id, None)) " at seq " (diff.fork_point.parent_seq) "; what each side did after it:" }
            div.sides {
                div { h3 { "The parent only (" (diff.parent_only.len()) ")" } (diff_side(&diff.parent_only)) }
                div { h3 { "This fork only (" (diff.child_only.len()) ")" } (diff_side(&diff.child_only)) }
            }
        }
    }
}

/// `GET /sessions/{id}/checkpoints`: each checkpoint, whether the projector verified its
/// digest, and (for an operator) a fork from it.
pub(crate) async fn checkpoints(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
) -> Result<Markup, Refused> {
    let (session, state) = visible_session(&console, &visitor, &session).await?;
    let rows = console.recovery.store().checkpoints(session).await?;
    let forks = visitor.may(Role::Operator) && !state.as_ref().is_some_and(|s| s.erased);
    let agent = state
        .as_ref()
        .and_then(|s| s.agent.clone())
        .unwrap_or_default();
    let body = html! {
        (tabs(session, Tab::Checkpoints))
        @if rows.is_empty() { p.empty { "No checkpoint is projected for this session." } }
        @else {
            table.checkpoints {
                caption { "Checkpoints, newest first; a verified one's digest matches the state the projector folded" }
                thead { tr { th scope="col" { "Seq" } th scope="col" { "Position" } th scope="col" { "Verified" } th scope="col" { "Digest" } @if forks { th scope="col" { "Fork" } } } }
                tbody {
                    @for c in &rows {
                        tr {
                            td { (c.seq) }
                            td { (c.log_partition) ":" (c.log_offset) }
                            td { @if c.verified { span.ok { "verified" } } @else { span.flag { "not verified" } } }
                            td { code { (c.declared_digest.chars().take(16).collect::<String>()) } @if !c.verified { " (computed " code { (c.computed_digest.chars().take(16).collect::<String>()) } ")" } }
                            @if forks {
                                td {
                                    form.fork method="post" action={ "/sessions/" (session) "/fork" } {
                                        (csrf(&visitor))
                                        input type="hidden" name="at_checkpoint" value=(c.seq);
                                        label for={ "fork-agent-" (c.seq) } { "Agent of the fork" }
                                        input id={ "fork-agent-" (c.seq) } name="agent" type="text" required value=(agent);
                                        button type="submit" { "Fork at seq " (c.seq) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(frame(
        Some(&visitor),
        &sub_title("Checkpoints", state.as_ref()),
        body,
    ))
}

/// Width in SVG units of a waterfall's bar area.
const BAR_WIDTH: f64 = 320.0;

/// `GET /sessions/{id}/trace`: the spans the projector wrote, as a waterfall.
pub(crate) async fn trace(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
) -> Result<Markup, Refused> {
    let (session, state) = visible_session(&console, &visitor, &session).await?;
    let trace =
        match sessionlog_recovery::trace::session_trace(console.recovery.store(), session).await {
            Ok(trace) => Some(trace),
            Err(RecoveryError::NoSpans(_)) => None,
            Err(e) => return Err(e.into()),
        };
    let now = sessionlog_schemas::now_micros();
    let spans = trace.as_ref().map(|t| t.walk()).unwrap_or_default();
    let start = spans
        .iter()
        .map(|(_, s)| s.span.start_us)
        .min()
        .unwrap_or(now);
    let end = spans
        .iter()
        .map(|(_, s)| s.span.end_us.unwrap_or(now))
        .max()
        .unwrap_or(now)
        .max(start + 1);
    let scale = BAR_WIDTH / (end - start) as f64;
    let body = html! {
        (tabs(session, Tab::Trace))
        @if spans.is_empty() { p.empty { "No span of this session is projected (yet)." } }
        @else {
            table.waterfall {
                caption { "Spans by the seq that opened them; bars on one time axis of " (millis(end - start)) }
                thead { tr { th scope="col" { "Span" } th scope="col" { "Kind" } th scope="col" { "Outcome" } th scope="col" { "Starts" } th scope="col" { "Lasts" } th scope="col" { "Tokens" } th scope="col" { "Cost" } th scope="col" { "Timeline" } } }
                tbody {
                    @for (depth, node) in &spans {
                        @let s = &node.span;
                        @let until = s.end_us.unwrap_or(now);
                        @let x = (s.start_us - start) as f64 * scale;
                        @let w = ((until - s.start_us) as f64 * scale).max(1.0);
                        tr {
                            td class={ "depth-" ((*depth).min(6)) } { (s.name) }
                            td { (s.span_kind) }
                            td { (s.outcome) }
                            td { "+" (millis(s.start_us - start)) }
                            td { @if s.end_us.is_some() { (millis(until - s.start_us)) } @else { "open" } }
                            td { @if let (Some(i), Some(o)) = (s.tokens_in, s.tokens_out) { (i) " / " (o) } }
                            td { @if let Some(c) = s.cost_micros { (dollars(c as f64)) } }
                            td {
                                svg.bar width=(BAR_WIDTH) height="12" viewBox={ "0 0 " (BAR_WIDTH) " 12" } preserveAspectRatio="none" role="img" aria-label={ (s.name) ": from +" (millis(s.start_us - start)) " for " (millis(until - s.start_us)) } {
                                    rect x=(format!("{x:.1}")) y="1" width=(format!("{w:.1}")) height="10" class=(if s.outcome == "failed" { "failed" } else { "span" }) {}
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(frame(
        Some(&visitor),
        &sub_title("Trace", state.as_ref()),
        body,
    ))
}

/// Microseconds as milliseconds for people.
fn millis(us: i64) -> String {
    format!("{:.1} ms", us as f64 / 1_000.0)
}

/// `GET /sessions/{id}/erase`: what erasing does, and the form that asks for the reason and
/// for the session's id typed again. Only an operator gets it.
pub(crate) async fn erase_form(
    State(console): State<Arc<Console>>,
    visitor: Visitor,
    Path(session): Path<String>,
) -> Result<Markup, Refused> {
    let (session, state) = visible_session(&console, &visitor, &session).await?;
    visitor.caller.require_for(Role::Operator, session)?;
    let body = html! {
        p { "Erasing " (session_link(session, state.as_ref().and_then(|s| s.agent.as_deref()))) " destroys its data key: every text of it becomes unreadable wherever a copy sits (the log, the dead letters, the tables, backups), and it can never be resumed. Its forks keep their own texts. This cannot be undone." }
        form.erase method="post" action={ "/sessions/" (session) "/erase" } {
            (csrf(&visitor))
            label for="erase-reason" { "Why (the request or policy; no personal data)" }
            input id="erase-reason" name="reason" type="text" required;
            label for="erase-confirm" { "Type the session's id to confirm: " code { (session) } }
            input id="erase-confirm" name="confirm" type="text" required autocomplete="off";
            button.danger type="submit" { "Erase for good" }
        }
    };
    Ok(frame(
        Some(&visitor),
        &sub_title("Erase", state.as_ref()),
        body,
    ))
}
