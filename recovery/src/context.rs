//! The context a resumed harness hands its next model call, cut to the caller's token budget.
//!
//! The projector keeps each session's context window ([`ContextWindow`]); recovery takes it as
//! far as the projection goes and folds the rest of the log into it itself, so the view is
//! never staler than the log.

use serde::Serialize;
use sessionlog_keys::Opener;
use sessionlog_schemas::Seq;
use sessionlog_session::SessionState;
use sessionlog_session::context::{ContextWindow, LeftOut, OlderRange, Turn, UnresolvedCall};

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
    /// Tool calls without a result.
    pub unresolved_calls: Vec<UnresolvedCall>,
    /// References to older turns, fetchable from the event index by seq.
    pub older: Vec<OlderRange>,
    /// What the projector's window left out.
    pub left_out: LeftOut,
    /// Recent turns dropped to fit the budget (their seqs).
    pub dropped_for_budget: Vec<Seq>,
    /// The estimated size of what is included.
    pub estimated_tokens: usize,
    /// The budget asked for.
    pub budget_tokens: usize,
}

/// Cuts `window` (plus the plan and unresolved calls of `state`) to `budget_tokens`: the plan
/// and the unresolved calls first, then the newest turns that still fit. Sealed texts are
/// opened with `opener` first (a sealed text that does not open shows as a marker, `[erased]`
/// or `[sealed]`, for the plan; as no text, for a turn).
pub fn within_budget(
    window: &ContextWindow,
    state: &SessionState,
    budget_tokens: usize,
    opener: &Opener,
) -> ResumeContext {
    let plan = state.plan.as_ref().map(|p| opener.text(p).shown());
    let mut unresolved_calls = ContextWindow::unresolved_calls(state);
    for call in &mut unresolved_calls {
        if let Some(reason) = &mut call.resolution_required {
            opener.open_in_place(reason);
        }
    }
    let recent: Vec<Turn> = window
        .recent
        .iter()
        .map(|turn| {
            let opened = turn.sealed_text.as_ref().map(|t| opener.text(t));
            let readable = opened.as_ref().and_then(|t| t.readable());
            turn.clone().with_opened(readable)
        })
        .collect();
    let mut used = plan.as_deref().map_or(0, estimate_tokens)
        + unresolved_calls
            .iter()
            .map(|c| estimate_tokens(&c.tool))
            .sum::<usize>();
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
        unresolved_calls,
        older: window.older.clone(),
        left_out: window.left_out.clone(),
        dropped_for_budget,
        estimated_tokens: used,
        budget_tokens,
    }
}
