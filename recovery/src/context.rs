//! The context a resumed harness hands its next model call, cut to the caller's token budget.
//!
//! The projector keeps each session's context window ([`ContextWindow`]); recovery takes it as
//! far as the projection goes and folds the rest of the log into it itself, so the view is
//! never staler than the log.

use serde::Serialize;
use sessionlog_keys::Opener;
use sessionlog_schemas::Seq;
use sessionlog_session::SessionState;
use sessionlog_session::context::{
    ContextPolicy, ContextWindow, LeftOut, OlderRange, Summary, Turn, UnresolvedCall,
};

/// A rough token count for text: about four characters a token, plus a little per turn.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4) + 4
}

/// The working set for the next model call.
#[derive(Clone, Debug, Serialize)]
pub struct ResumeContext {
    /// The current plan.
    pub plan: Option<String>,
    /// The most recent turns that fit the budget, oldest first.
    pub turns: Vec<Turn>,
    /// Summaries of earlier ranges that fit the budget, oldest first: each stands for the
    /// turns of its range, which read back in full with `GET /v1/sessions/{id}/events`.
    pub summaries: Vec<Summary>,
    /// Tool calls without a result.
    pub unresolved_calls: Vec<UnresolvedCall>,
    /// References to older turns (and to summaries that did not fit), readable by seq range.
    pub older: Vec<OlderRange>,
    /// The policy the view was built with.
    pub policy: ContextPolicy,
    /// What the projector's window left out.
    pub left_out: LeftOut,
    /// Recent turns dropped to fit the budget (their seqs).
    pub dropped_for_budget: Vec<Seq>,
    /// The estimated size of what is included.
    pub estimated_tokens: usize,
    /// The budget asked for.
    pub budget_tokens: usize,
    /// For a fork: its parent's view at the fork point, marked as inherited, within what this
    /// view left of the budget. The session's own turns above follow it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited: Option<Box<crate::view::InheritedContext>>,
}

/// Cuts `window` (plus the plan and unresolved calls of `state`) to `budget_tokens` (`None`:
/// the window's policy's): the plan, the unresolved calls and the summaries first, then the
/// newest turns that still fit. Sealed texts are
/// opened with `opener` first (a sealed text that does not open shows as a marker, `[erased]`
/// or `[sealed]`, for the plan; as no text, for a turn).
pub fn within_budget(
    window: &ContextWindow,
    state: &SessionState,
    budget_tokens: Option<usize>,
    opener: &Opener,
) -> ResumeContext {
    let budget_tokens = budget_tokens.unwrap_or(window.policy.token_budget);
    let chars = window.policy.turn_text_chars;
    let open = |turn: &Turn| {
        // A redacted text shows why in its place, never nothing: the turn still happened.
        let opened = turn
            .sealed_text
            .as_ref()
            .map(|t| opener.text(t))
            .and_then(|t| match t {
                sessionlog_keys::Text::Plain(text) => Some(text),
                redacted @ sessionlog_keys::Text::Redacted(_) => Some(redacted.shown()),
                _ => None,
            });
        let mut turn = turn.clone().with_opened(opened.as_deref(), chars);
        // An erased session shows no text, plain text written without encryption included.
        if opener.is_erased() {
            turn.text = None;
        }
        turn
    };
    let plan = state.plan.as_ref().map(|p| opener.text(p).shown());
    let mut unresolved_calls = ContextWindow::unresolved_calls(state);
    for call in &mut unresolved_calls {
        if let Some(reason) = &mut call.resolution_required {
            opener.open_in_place(reason);
        }
    }
    let recent: Vec<Turn> = window.recent.iter().map(open).collect();
    // Summaries are the compressed past: they go in before any recent turn, newest first,
    // while they fit; one that does not fit leaves its range to the references.
    let mut used = plan.as_deref().map_or(0, estimate_tokens)
        + unresolved_calls
            .iter()
            .map(|c| estimate_tokens(&c.tool))
            .sum::<usize>();
    let mut summaries = Vec::new();
    let mut older = window.older.clone();
    for summary in window.summaries.iter().rev() {
        let turn = open(&summary.turn);
        let cost = estimate_tokens(turn.text.as_deref().unwrap_or(""));
        if used + cost <= budget_tokens {
            used += cost;
            summaries.push(Summary {
                turn,
                ..summary.clone()
            });
        } else {
            older.push(OlderRange {
                first_seq: summary.first_seq,
                last_seq: summary.last_seq,
                turns: summary.covered.clone(),
                summary_seq: Some(summary.turn.seq),
            });
        }
    }
    summaries.reverse();
    older.sort_by_key(|r| r.first_seq);
    let mut kept = Vec::new();
    let mut dropped_for_budget = Vec::new();
    for turn in recent.iter().rev() {
        let cost = estimate_tokens(turn.text.as_deref().unwrap_or(""));
        if used + cost <= budget_tokens && dropped_for_budget.is_empty() {
            used += cost;
            kept.push(turn.clone());
        } else {
            // Once one turn does not fit, older ones go too: the view stays a suffix.
            dropped_for_budget.push(turn.seq);
        }
    }
    kept.reverse();
    dropped_for_budget.reverse();
    ResumeContext {
        plan,
        turns: kept,
        summaries,
        unresolved_calls,
        older,
        policy: window.policy.clone(),
        left_out: window.left_out.clone(),
        dropped_for_budget,
        estimated_tokens: used,
        budget_tokens,
        inherited: None,
    }
}
