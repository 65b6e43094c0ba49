//! The context view: the bounded working set a harness hands its next model call.
//!
//! It is derived from accepted events only, incrementally, so a replay of the same log with the
//! same [`ContextPolicy`] gives the same bytes: the most recent conversation turns (content
//! from the events themselves, cut to a bounded length), the summaries the harness wrote
//! (`ContextSummarized`) in place of the turns they cover, the current plan and the unresolved
//! tool calls (from the fold's state), references to older ranges of turns that no longer
//! fit, and counts of the events left out of the view.
//!
//! Nothing is hidden: every turn the view leaves out lies in a summary's range or an older
//! range, and any range reads back from the log by seq.
//!
//! Pure: no I/O. The projector stores the window; recovery folds the log's tail into it.

use crate::SessionState;
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Content, EventEnvelope, Seq, SessionEvent};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Turns kept verbatim (bounded text) in the view, by default.
pub const RECENT_TURNS: usize = 16;
/// Characters of a turn's text kept in the view by default; the rest is cut and flagged.
pub const TURN_TEXT_CHARS: usize = 2_000;
/// The resume context's token budget when neither the caller nor the policy names one.
pub const TOKEN_BUDGET: usize = 8_000;
/// Summaries kept in the view by default; an older one becomes a reference to its range.
pub const SUMMARIES: usize = 8;
/// Every role that can count as a turn.
pub const TURN_ROLES: [&str; 6] = [
    "user",
    "assistant",
    "tool_call",
    "tool_result",
    "steering",
    "approval",
];
/// Turns that one older-range reference covers before a new range starts.
pub const TURNS_PER_RANGE: u64 = 64;
/// Older-range references kept; beyond it the two oldest merge.
pub const OLDER_RANGES: usize = 8;

/// How a session's context view is built: chosen by the session's agent name when the view
/// starts, and recorded in the view, so events folded into a stored view keep its policy
/// whatever the settings say by then (a view built again from the session's first event takes
/// the settings' policy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextPolicy {
    /// Turns kept verbatim.
    pub recent_turns: usize,
    /// Characters of a turn's (or a summary's) text kept; the rest is cut and flagged.
    pub turn_text_chars: usize,
    /// The resume context's token budget when the caller names none.
    pub token_budget: usize,
    /// Summaries kept; beyond it the oldest becomes a reference to its range.
    pub summaries: usize,
    /// What counts as a turn, by role (see [`TURN_ROLES`]); other events are counted by kind.
    pub turn_roles: BTreeSet<String>,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            recent_turns: RECENT_TURNS,
            turn_text_chars: TURN_TEXT_CHARS,
            token_budget: TOKEN_BUDGET,
            summaries: SUMMARIES,
            turn_roles: TURN_ROLES.into_iter().map(String::from).collect(),
        }
    }
}

impl ContextPolicy {
    /// Checks the policy's values: what a settings file says, before any view is built.
    pub fn validate(&self) -> Result<(), String> {
        if self.recent_turns == 0 || self.turn_text_chars == 0 || self.token_budget == 0 {
            return Err(
                "recent_turns, turn_text_chars and token_budget must each be at least 1".into(),
            );
        }
        if let Some(role) = self
            .turn_roles
            .iter()
            .find(|r| !TURN_ROLES.contains(&r.as_str()))
        {
            return Err(format!(
                "turn_roles: unknown role {role:?} (known: {})",
                TURN_ROLES.join(", ")
            ));
        }
        Ok(())
    }
}

/// Context policies by agent name, with a default for agents not named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextPolicies {
    /// The policy of agents not named below.
    pub default: ContextPolicy,
    /// Policies by agent name.
    pub agents: BTreeMap<String, ContextPolicy>,
}

impl ContextPolicies {
    /// The policy of `agent`.
    pub fn for_agent(&self, agent: &str) -> &ContextPolicy {
        self.agents.get(agent).unwrap_or(&self.default)
    }

    /// Checks every policy; the error names the one at fault.
    pub fn validate(&self) -> Result<(), String> {
        self.default
            .validate()
            .map_err(|e| format!("[context.default] {e}"))?;
        for (agent, policy) in &self.agents {
            policy
                .validate()
                .map_err(|e| format!("[context.agents.{agent}] {e}"))?;
        }
        Ok(())
    }
}

/// One conversation turn in the view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// The event's seq.
    pub seq: Seq,
    /// `user`, `assistant`, `tool_call`, `tool_result` or `steering`.
    pub role: String,
    /// The model, tool or author, when the event names one.
    pub name: Option<String>,
    /// For a tool result, the seq of the call it answers.
    pub call_seq: Option<Seq>,
    /// The text, at most the policy's characters; `None` when sealed or erased. With
    /// [`Self::sealed_text`], the readable part that comes before it.
    pub text: Option<String>,
    /// Whether the text was cut to fit.
    pub truncated: bool,
    /// Whether the content is encrypted (readable only with the session's data key).
    pub sealed: bool,
    /// The encrypted content, whole (ciphertext cannot be cut): a reader holding the session's
    /// key opens it and cuts it to the policy's characters ([`Self::with_opened`]). `None` when the
    /// content is plain or the session was erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_text: Option<Content>,
    /// When it happened.
    pub occurred_at: i64,
}

/// A reference to turns that left the recent window: enough to fetch them from the event
/// index (`event_index` by seq), and a count of what they were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OlderRange {
    /// First seq of the range.
    pub first_seq: Seq,
    /// Last seq of the range.
    pub last_seq: Seq,
    /// Turns in the range, by role.
    pub turns: BTreeMap<String, u64>,
    /// When the range is an evicted summary's: that summary's own seq (the event reads back
    /// too). Such a range takes in no evicted turns, so it keeps standing for its summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_seq: Option<Seq>,
}

impl OlderRange {
    fn total(&self) -> u64 {
        self.turns.values().sum()
    }

    fn absorb(&mut self, other: &OlderRange) {
        self.first_seq = self.first_seq.min(other.first_seq);
        self.last_seq = self.last_seq.max(other.last_seq);
        // A merged range stands for turns, no longer for one summary.
        self.summary_seq = None;
        for (role, n) in &other.turns {
            *self.turns.entry(role.clone()).or_default() += n;
        }
    }
}

/// A summary the harness wrote, shown in place of the turns it covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The summary itself, as a turn: its seq is the `ContextSummarized` event's, its role
    /// `summary`, its name the summariser.
    pub turn: Turn,
    /// The first seq it covers: the range reads back from the log.
    pub first_seq: Seq,
    /// The last seq it covers.
    pub last_seq: Seq,
    /// Turns of the view it replaced (recent turns and whole older ranges), by role.
    pub covered: BTreeMap<String, u64>,
}

/// What the view does not carry verbatim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Accepted events that are not conversation turns (claims, checkpoints, approvals, ...), by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Turns moved out of the recent window into older ranges.
    pub evicted_turns: u64,
    /// Turns replaced by a summary.
    #[serde(default)]
    pub summarized_turns: u64,
    /// Summaries moved out of the view into older ranges (their ranges stay referenced).
    #[serde(default)]
    pub evicted_summaries: u64,
    /// Summaries a later summary covers, whole: it stands for them and their range.
    #[serde(default)]
    pub superseded_summaries: u64,
    /// Turns the view showed until an `EventRetracted` withdrew them (schema v4; left out
    /// while 0, so views of sessions without a retraction keep their bytes). The turn and its
    /// retraction both stay in the log and in range reads.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retracted_turns: u64,
    /// Summaries the view showed until an `EventRetracted` withdrew them: what one covered
    /// stays referenced by its range, as an older range (left out while 0, as above).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retracted_summaries: u64,
    /// Turns whose text was cut.
    pub truncated_turns: u64,
    /// Whether the session's payloads were erased (texts removed, skeleton kept).
    pub erased: bool,
}

/// The incrementally maintained part of a session's context view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextWindow {
    /// The offset of the last record folded into this window (accepted or not).
    pub applied_offset: i64,
    /// The policy the window is built with.
    #[serde(default)]
    pub policy: ContextPolicy,
    /// The most recent turns, oldest first.
    pub recent: VecDeque<Turn>,
    /// The summaries kept, oldest first.
    #[serde(default)]
    pub summaries: Vec<Summary>,
    /// References to older turns, ordered by first seq.
    pub older: Vec<OlderRange>,
    /// What was left out.
    pub left_out: LeftOut,
}

impl Default for ContextWindow {
    fn default() -> Self {
        Self::new(ContextPolicy::default())
    }
}

/// A tool call without a result, as the view shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnresolvedCall {
    /// The request's seq.
    pub seq: Seq,
    /// The tool.
    pub tool: String,
    /// `Pure`, `Idempotent` or `NonIdempotent`.
    pub effect: String,
    /// Why an operator must resolve it, if the session stopped for that.
    #[serde(default, with = "sessionlog_schemas::sealable::option")]
    pub resolution_required: Option<Content>,
}

/// What folding an event did to the window's turns, so only that is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnChange {
    /// No turn changed.
    None,
    /// A turn joined the window: the last of [`ContextWindow::recent`].
    Added,
    /// The session was erased: every turn lost its text.
    Erased,
    /// A summary replaced the turns between these seqs (inclusive).
    Summarized {
        /// First seq covered.
        first_seq: Seq,
        /// Last seq covered.
        last_seq: Seq,
    },
    /// A retraction withdrew the turn at this seq from the recent turns.
    Retracted {
        /// The withdrawn turn's seq.
        seq: Seq,
    },
}

impl ContextWindow {
    /// An empty window built with `policy`.
    pub fn new(policy: ContextPolicy) -> Self {
        Self {
            applied_offset: -1,
            policy,
            recent: VecDeque::new(),
            summaries: Vec::new(),
            older: Vec::new(),
            left_out: LeftOut::default(),
        }
    }

    /// Folds one accepted event, as [`Self::apply`]; the event that starts the session starts
    /// the window over, built with its agent's policy from `policies`.
    pub fn fold(&mut self, event: &EventEnvelope, policies: &ContextPolicies) -> TurnChange {
        if let SessionEvent::SessionStarted { agent, .. }
        | SessionEvent::SessionForked { agent, .. } = &event.event
        {
            let applied_offset = self.applied_offset;
            *self = Self::new(policies.for_agent(agent).clone());
            self.applied_offset = applied_offset;
        }
        self.apply(event)
    }

    /// Folds one accepted event into the window.
    pub fn apply(&mut self, event: &EventEnvelope) -> TurnChange {
        use SessionEvent as E;
        let chars = self.policy.turn_text_chars;
        let turn = |role: &str, name: Option<&str>, call_seq, prefix: &str, content: &Content| {
            let (text, truncated, sealed_text) = match content {
                Content::Plain(text) => {
                    let (cut, truncated) = cut_text(&format!("{prefix}{text}"), chars);
                    (Some(cut), truncated, None)
                }
                sealed @ Content::Sealed { .. } => (
                    (!prefix.is_empty()).then(|| prefix.to_string()),
                    false,
                    Some(sealed.clone()),
                ),
            };
            Turn {
                seq: event.seq,
                role: role.into(),
                name: name.map(String::from),
                call_seq,
                text,
                truncated,
                sealed: sealed_text.is_some(),
                sealed_text,
                occurred_at: event.occurred_at,
            }
        };
        let new_turn = match &event.event {
            E::UserRequest { content } => turn("user", None, None, "", content),
            E::ModelResponse { model, content, .. } => {
                turn("assistant", Some(model), None, "", content)
            }
            E::ToolCallRequested {
                tool, arguments, ..
            } => turn("tool_call", Some(tool), None, "", arguments),
            E::ToolCallResult {
                call_seq, output, ..
            } => turn("tool_result", None, Some(*call_seq), "", output),
            E::SteeringMessage { author, content } => {
                turn("steering", Some(author), None, "", content)
            }
            // A decision changes what the agent may do next; a refusal above all must reach it.
            E::ApprovalDecided {
                approval_id,
                approved,
                decided_by,
                reason,
                ..
            } => {
                let decision = if *approved { "approved" } else { "denied" };
                let said = format!("approval {approval_id} {decision} by {decided_by}");
                match reason {
                    Some(reason) => turn(
                        "approval",
                        Some(decided_by),
                        None,
                        &format!("{said}: "),
                        reason,
                    ),
                    None => turn(
                        "approval",
                        Some(decided_by),
                        None,
                        "",
                        &Content::Plain(said),
                    ),
                }
            }
            E::ContextSummarized {
                first_seq,
                last_seq,
                summarized_by,
                summary,
            } => {
                let summary = turn("summary", Some(summarized_by), None, "", summary);
                self.summarize(summary, *first_seq, *last_seq);
                return TurnChange::Summarized {
                    first_seq: *first_seq,
                    last_seq: *last_seq,
                };
            }
            E::EventRetracted { retracted_seq, .. } => {
                *self
                    .left_out
                    .by_kind
                    .entry(event.event.kind().into())
                    .or_default() += 1;
                return self.retract(*retracted_seq);
            }
            E::SessionErased { .. } => {
                // The data key is gone: the view keeps the skeleton, not the words.
                let summaries = self.summaries.iter_mut().map(|s| &mut s.turn);
                for t in self.recent.iter_mut().chain(summaries) {
                    t.text = None;
                    t.sealed_text = None;
                }
                self.left_out.erased = true;
                *self
                    .left_out
                    .by_kind
                    .entry(event.event.kind().into())
                    .or_default() += 1;
                return TurnChange::Erased;
            }
            other => {
                *self
                    .left_out
                    .by_kind
                    .entry(other.kind().into())
                    .or_default() += 1;
                return TurnChange::None;
            }
        };
        if !self.policy.turn_roles.contains(&new_turn.role) {
            // Not a turn under this policy: counted like any other event the view leaves out.
            *self
                .left_out
                .by_kind
                .entry(event.event.kind().into())
                .or_default() += 1;
            return TurnChange::None;
        }
        if new_turn.truncated {
            self.left_out.truncated_turns += 1;
        }
        self.recent.push_back(new_turn);
        while self.recent.len() > self.policy.recent_turns {
            if let Some(old) = self.recent.pop_front() {
                self.left_out.evicted_turns += 1;
                let single = OlderRange {
                    first_seq: old.seq,
                    last_seq: old.seq,
                    turns: BTreeMap::from([(old.role.clone(), 1)]),
                    summary_seq: None,
                };
                // Into the newest range if it holds evicted turns, has room and no summary's
                // range starts in between (a reference then reads as "these seqs, minus what
                // the summaries cover"); else a new one.
                let joins = self.older.last().is_some_and(|last| {
                    last.summary_seq.is_none()
                        && last.total() < TURNS_PER_RANGE
                        && last.last_seq < old.seq
                        && !self.summary_starts_between(last.last_seq, old.seq)
                });
                match self.older.last_mut() {
                    Some(last) if joins => last.absorb(&single),
                    _ => self.push_older(single),
                }
            }
        }
        TurnChange::Added
    }

    /// Shows `summary` in place of the turns it covers: recent turns and whole older ranges
    /// in `first_seq..=last_seq` leave the view (the range still reads back from the log).
    fn summarize(&mut self, summary: Turn, first_seq: Seq, last_seq: Seq) {
        let inside = |seq: Seq| (first_seq..=last_seq).contains(&seq);
        let mut covered: BTreeMap<String, u64> = BTreeMap::new();
        self.recent.retain(|t| {
            let keep = !inside(t.seq);
            if !keep {
                *covered.entry(t.role.clone()).or_default() += 1;
            }
            keep
        });
        self.left_out.summarized_turns += covered.values().sum::<u64>();
        self.older.retain(|r| {
            let keep = !(inside(r.first_seq) && inside(r.last_seq));
            if !keep {
                for (role, n) in &r.turns {
                    *covered.entry(role.clone()).or_default() += n;
                }
            }
            keep
        });
        // Earlier summaries this one covers whole (their event and their range, as a rolling
        // summary does) are superseded: it stands for them. Any other stays as it is.
        let whole = |s: &Summary| inside(s.turn.seq) && inside(s.first_seq) && inside(s.last_seq);
        let (superseded, kept): (Vec<Summary>, Vec<Summary>) = std::mem::take(&mut self.summaries)
            .into_iter()
            .partition(whole);
        self.summaries = kept;
        for old in superseded {
            self.left_out.superseded_summaries += 1;
            for (role, n) in old.covered {
                *covered.entry(role).or_default() += n;
            }
        }
        if summary.truncated {
            self.left_out.truncated_turns += 1;
        }
        self.summaries.push(Summary {
            turn: summary,
            first_seq,
            last_seq,
            covered,
        });
        while self.summaries.len() > self.policy.summaries {
            // The oldest summary leaves; what it covered stays referenced by its range.
            let old = self.summaries.remove(0);
            self.left_out.evicted_summaries += 1;
            self.push_older(OlderRange {
                first_seq: old.first_seq,
                last_seq: old.last_seq,
                turns: old.covered,
                summary_seq: Some(old.turn.seq),
            });
        }
    }

    /// Withdraws the turn or summary at `seq` (an `EventRetracted`'s target) from the view. A
    /// turn that already left the recent turns stays inside its summary's or older range (the
    /// range reads back with the retraction); any other event was never shown.
    fn retract(&mut self, seq: Seq) -> TurnChange {
        if let Some(at) = self.recent.iter().position(|t| t.seq == seq) {
            self.recent.remove(at);
            self.left_out.retracted_turns += 1;
            return TurnChange::Retracted { seq };
        }
        if let Some(at) = self.summaries.iter().position(|s| s.turn.seq == seq) {
            // The covered turns left the view for this summary, so its range stays referenced:
            // a reference to turns now, not to the withdrawn summary.
            let old = self.summaries.remove(at);
            self.left_out.retracted_summaries += 1;
            self.push_older(OlderRange {
                first_seq: old.first_seq,
                last_seq: old.last_seq,
                turns: old.covered,
                summary_seq: None,
            });
        }
        // A summary evicted earlier: its range now stands for turns, not for the summary.
        for r in self.older.iter_mut().filter(|r| r.summary_seq == Some(seq)) {
            r.summary_seq = None;
        }
        TurnChange::None
    }

    /// Whether a summary's range (kept, or evicted to a reference) starts between `a` and `b`.
    fn summary_starts_between(&self, a: Seq, b: Seq) -> bool {
        let kept = self.summaries.iter().map(|s| s.first_seq);
        let evicted = self
            .older
            .iter()
            .filter(|r| r.summary_seq.is_some())
            .map(|r| r.first_seq);
        kept.chain(evicted).any(|f| a < f && f < b)
    }

    /// Adds a reference in first-seq order; beyond [`OLDER_RANGES`] the two oldest merge into
    /// one that spans both, so no seq a reference covered is ever left uncovered.
    fn push_older(&mut self, range: OlderRange) {
        let at = self
            .older
            .partition_point(|r| r.first_seq <= range.first_seq);
        self.older.insert(at, range);
        while self.older.len() > OLDER_RANGES {
            let first = self.older.remove(0);
            self.older[0].absorb(&first);
        }
    }

    /// Whether the view shows `seq`'s turn, or references it by a summary's or an older range.
    pub fn reaches(&self, seq: Seq) -> bool {
        self.recent.iter().any(|t| t.seq == seq)
            || self
                .summaries
                .iter()
                .any(|s| (s.first_seq..=s.last_seq).contains(&seq))
            || self
                .older
                .iter()
                .any(|r| (r.first_seq..=r.last_seq).contains(&seq))
    }

    /// The unresolved tool calls of `state`, in seq order.
    pub fn unresolved_calls(state: &SessionState) -> Vec<UnresolvedCall> {
        state
            .pending_calls
            .values()
            .map(|c| UnresolvedCall {
                seq: c.seq,
                tool: c.tool.clone(),
                effect: format!("{:?}", c.effect),
                resolution_required: c.resolution_required.clone(),
            })
            .collect()
    }
}

impl Turn {
    /// The turn as a reader shows it, given the opened text of [`Self::sealed_text`] (`None`
    /// when the reader could not open it: no key, or the key was destroyed): the readable
    /// prefix and the opened text, cut to `chars` characters (the view's policy).
    pub fn with_opened(mut self, opened: Option<&str>, chars: usize) -> Self {
        if self.sealed_text.take().is_some() {
            if let Some(opened) = opened {
                let whole = format!("{}{opened}", self.text.as_deref().unwrap_or_default());
                let (cut, truncated) = cut_text(&whole, chars);
                self.text = Some(cut);
                self.truncated = truncated;
            } else {
                self.text = None;
            }
        }
        self
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A text cut to `chars` characters, and whether it was cut.
fn cut_text(text: &str, chars: usize) -> (String, bool) {
    let cut: String = text.chars().take(chars).collect();
    let truncated = cut.len() < text.len();
    (cut, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::SessionId;
    use uuid::Uuid;

    fn event(seq: Seq, event: SessionEvent) -> EventEnvelope {
        EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: SessionId(Uuid::nil()),
            seq,
            writer_epoch: 1,
            occurred_at: seq as i64,
            causation_id: None,
            idempotency_key: None,
            schema_version: 1,
            event,
            attestation: None,
        }
    }

    #[test]
    fn window_stays_bounded_and_accounts_for_what_it_drops() {
        let mut w = ContextWindow::default();
        let long = "x".repeat(TURN_TEXT_CHARS + 10);
        for seq in 1..=2_000 {
            w.apply(&event(
                seq,
                SessionEvent::UserRequest {
                    content: Content::plain(if seq == 2_000 { &long } else { "hi" }),
                },
            ));
        }
        w.apply(&event(
            2_001,
            SessionEvent::Checkpoint {
                state_digest: String::new(),
                workspace_revision: None,
            },
        ));
        assert_eq!(w.recent.len(), RECENT_TURNS);
        assert!(w.older.len() <= OLDER_RANGES);
        let covered: u64 = w.older.iter().map(OlderRange::total).sum();
        assert_eq!(covered, 2_000 - RECENT_TURNS as u64);
        assert_eq!(w.left_out.evicted_turns, covered);
        assert_eq!(w.older[0].first_seq, 1);
        assert_eq!(w.left_out.truncated_turns, 1);
        assert_eq!(
            w.recent
                .back()
                .and_then(|t| t.text.as_ref())
                .map(String::len),
            Some(TURN_TEXT_CHARS)
        );
        assert_eq!(w.left_out.by_kind.get("Checkpoint"), Some(&1));
    }

    #[test]
    fn erasure_removes_texts_but_keeps_the_skeleton() {
        let mut w = ContextWindow::default();
        w.apply(&event(
            1,
            SessionEvent::UserRequest {
                content: Content::plain("secret"),
            },
        ));
        w.apply(&event(
            2,
            SessionEvent::SessionErased {
                requested_by: "ops".into(),
                reason: "gdpr".into(),
            },
        ));
        assert_eq!(w.recent.len(), 1);
        assert_eq!(w.recent[0].text, None);
        assert!(w.left_out.erased);
    }

    fn summary(seq: Seq, first_seq: Seq, last_seq: Seq) -> EventEnvelope {
        event(
            seq,
            SessionEvent::ContextSummarized {
                first_seq,
                last_seq,
                summarized_by: "summariser".into(),
                summary: Content::plain(format!("what happened in {first_seq}..={last_seq}")),
            },
        )
    }

    /// Folds a user request at each of `seqs`.
    fn user_turns(w: &mut ContextWindow, seqs: std::ops::RangeInclusive<Seq>) {
        for seq in seqs {
            w.apply(&event(
                seq,
                SessionEvent::UserRequest {
                    content: Content::plain("hi"),
                },
            ));
        }
    }

    #[test]
    fn a_summary_replaces_the_turns_it_covers_and_keeps_their_range() {
        let mut w = ContextWindow::default();
        user_turns(&mut w, 1..=10);
        let change = w.apply(&summary(11, 3, 7));
        assert_eq!(
            change,
            TurnChange::Summarized {
                first_seq: 3,
                last_seq: 7
            }
        );
        let seqs: Vec<Seq> = w.recent.iter().map(|t| t.seq).collect();
        assert_eq!(seqs, [1, 2, 8, 9, 10]);
        assert_eq!(w.summaries.len(), 1);
        assert_eq!(w.summaries[0].covered.get("user"), Some(&5));
        assert_eq!(w.summaries[0].turn.role, "summary");
        assert_eq!(w.left_out.summarized_turns, 5);
        assert!((1..=10).all(|seq| w.reaches(seq)));
    }

    #[test]
    fn the_view_records_its_policy_and_the_same_policy_gives_the_same_bytes() {
        let narrow = ContextPolicy {
            recent_turns: 3,
            turn_text_chars: 5,
            turn_roles: ["user".to_string()].into(),
            ..ContextPolicy::default()
        };
        let policies = ContextPolicies {
            default: ContextPolicy::default(),
            agents: BTreeMap::from([("narrow".to_string(), narrow.clone())]),
        };
        let start = event(
            1,
            SessionEvent::SessionStarted {
                agent: "narrow".into(),
                title: None,
                tenant: "default".into(),
                writer_token_sha256: None,
                name_sha256: None,
            },
        );
        let fold = |policies: &ContextPolicies| {
            let mut w = ContextWindow::default();
            w.fold(&start, policies);
            for seq in 2..=20 {
                let content = Content::plain("a longer text than five");
                w.apply(&event(
                    seq,
                    if seq % 2 == 0 {
                        SessionEvent::UserRequest { content }
                    } else {
                        SessionEvent::SteeringMessage {
                            author: "ops".into(),
                            content,
                        }
                    },
                ));
            }
            w
        };
        let (a, b) = (fold(&policies), fold(&policies));
        assert_eq!(a.policy, narrow);
        assert_eq!(
            serde_json::to_string(&a).expect("json"),
            serde_json::to_string(&b).expect("json")
        );
        assert_eq!(a.recent.len(), 3);
        assert!(a.recent.iter().all(|t| t.role == "user"));
        assert_eq!(a.recent[0].text.as_deref(), Some("a lon"));
        assert_eq!(a.left_out.by_kind.get("SteeringMessage"), Some(&9));
        let other = fold(&ContextPolicies::default());
        assert_ne!(
            serde_json::to_string(&a).expect("json"),
            serde_json::to_string(&other).expect("json")
        );
    }

    #[test]
    fn policies_are_checked() {
        let mut p = ContextPolicies::default();
        assert!(p.validate().is_ok());
        p.agents.insert(
            "bad".into(),
            ContextPolicy {
                turn_roles: ["thought".to_string()].into(),
                ..ContextPolicy::default()
            },
        );
        let e = p.validate().expect_err("unknown role");
        assert!(
            e.contains("context.agents.bad") && e.contains("thought"),
            "{e}"
        );
    }

    /// A summary over earlier summaries supersedes them: one wholly inside its range (event and
    /// range) leaves the view; any other stays (review: rolling summaries otherwise piled up
    /// and crowded out the recent turns).
    #[test]
    fn a_summary_of_summaries_supersedes_them() {
        let mut w = ContextWindow::default();
        for seq in 2..=9 {
            w.apply(&event(
                seq,
                SessionEvent::UserRequest {
                    content: Content::plain("t"),
                },
            ));
        }
        w.apply(&summary(10, 2, 7));
        for seq in 11..=14 {
            w.apply(&event(
                seq,
                SessionEvent::UserRequest {
                    content: Content::plain("t"),
                },
            ));
        }
        w.apply(&summary(15, 8, 12));
        w.apply(&summary(16, 2, 15));
        let kept: Vec<(Seq, Seq, Seq)> = w
            .summaries
            .iter()
            .map(|s| (s.turn.seq, s.first_seq, s.last_seq))
            .collect();
        assert_eq!(kept, [(16, 2, 15)]);
        assert!(w.older.is_empty(), "{:?}", w.older);
        w.apply(&summary(17, 14, 16));
        let kept: Vec<Seq> = w.summaries.iter().map(|s| s.turn.seq).collect();
        assert_eq!(kept, [16, 17]);
        assert_eq!(w.left_out.superseded_summaries, 2);
        assert!((2..=14).all(|seq| w.reaches(seq)));
    }

    fn retraction(seq: Seq, retracted_seq: Seq) -> EventEnvelope {
        event(
            seq,
            SessionEvent::EventRetracted {
                retracted_seq,
                retracted_by: "openai-agents:pop_item".into(),
            },
        )
    }

    /// A retracted turn leaves the recent turns and is counted; a retracted summary leaves the
    /// view and its range stays referenced; a retraction of anything else shows nothing new.
    #[test]
    fn a_retraction_withdraws_a_turn_or_a_summary_and_keeps_every_range() {
        let mut w = ContextWindow::default();
        user_turns(&mut w, 1..=6);
        assert_eq!(w.apply(&retraction(7, 6)), TurnChange::Retracted { seq: 6 });
        let seqs: Vec<Seq> = w.recent.iter().map(|t| t.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        assert_eq!(w.left_out.retracted_turns, 1);
        assert_eq!(w.left_out.by_kind.get("EventRetracted"), Some(&1));

        w.apply(&summary(8, 1, 3));
        assert_eq!(w.apply(&retraction(9, 8)), TurnChange::None);
        assert!(w.summaries.is_empty(), "{:?}", w.summaries);
        assert_eq!(w.left_out.retracted_summaries, 1);
        let older: Vec<(Seq, Seq, Option<Seq>)> = w
            .older
            .iter()
            .map(|r| (r.first_seq, r.last_seq, r.summary_seq))
            .collect();
        assert_eq!(older, [(1, 3, None)]);
        assert!((1..=5).all(|seq| w.reaches(seq)));

        // A retraction (seq 7) is not a turn: nothing the view shows changes.
        let before = w.clone();
        assert_eq!(w.apply(&retraction(10, 7)), TurnChange::None);
        assert_eq!(
            (w.recent.clone(), w.older.clone()),
            (before.recent, before.older)
        );
        assert_eq!(w.left_out.retracted_turns, 1);
    }

    /// A framework's saved state is not a turn: the view counts it by kind and shows nothing
    /// of it, and its retraction changes nothing shown.
    #[test]
    fn a_framework_state_is_counted_not_shown() {
        let mut w = ContextWindow::default();
        user_turns(&mut w, 1..=2);
        let saved = event(
            3,
            SessionEvent::FrameworkStateSaved {
                framework: "langgraph".into(),
                key: "checkpoint::1".into(),
                state: Content::plain("{}"),
            },
        );
        assert_eq!(w.apply(&saved), TurnChange::None);
        let seqs: Vec<Seq> = w.recent.iter().map(|t| t.seq).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(w.left_out.by_kind.get("FrameworkStateSaved"), Some(&1));
        let before = w.clone();
        assert_eq!(w.apply(&retraction(4, 3)), TurnChange::None);
        assert_eq!(
            (w.recent.clone(), w.older.clone(), w.summaries.clone()),
            (before.recent, before.older, before.summaries)
        );
        assert_eq!(w.left_out.retracted_turns, 0);
    }

    /// A view without retractions serialises as it did before schema v4.
    #[test]
    fn left_out_without_retractions_keeps_its_bytes() {
        let json = serde_json::to_string(&LeftOut::default()).expect("json");
        assert!(!json.contains("retracted"), "{json}");
    }

    /// The example in the README's "The context view", exactly.
    #[test]
    fn the_readme_example() {
        let mut w = ContextWindow::new(ContextPolicy {
            recent_turns: 8,
            summaries: 2,
            ..ContextPolicy::default()
        });
        let mut seq = 1;
        for round in 0..5 {
            for i in 0..8 {
                seq += 1;
                let content = Content::plain("t");
                w.apply(&event(
                    seq,
                    if i % 2 == 0 {
                        SessionEvent::UserRequest { content }
                    } else {
                        SessionEvent::SteeringMessage {
                            author: "a".into(),
                            content,
                        }
                    },
                ));
            }
            if round < 4 {
                let (first, last) = (w.recent[0].seq, w.recent[5].seq);
                seq += 1;
                w.apply(&summary(seq, first, last));
            }
        }
        let kept: Vec<(Seq, Seq, Seq)> = w
            .summaries
            .iter()
            .map(|s| (s.turn.seq, s.first_seq, s.last_seq))
            .collect();
        assert_eq!(kept, [(28, 20, 25), (37, 29, 34)]);
        let recent: Vec<Seq> = w.recent.iter().map(|t| t.seq).collect();
        assert_eq!(recent, (38..=45).collect::<Vec<_>>());
        let older: Vec<(Seq, Seq, Option<Seq>)> = w
            .older
            .iter()
            .map(|r| (r.first_seq, r.last_seq, r.summary_seq))
            .collect();
        assert_eq!(
            older,
            [
                (2, 7, Some(10)),
                (8, 9, None),
                (11, 16, Some(19)),
                (17, 18, None),
                (26, 27, None),
                (35, 36, None)
            ]
        );
        assert_eq!(
            (
                w.left_out.summarized_turns,
                w.left_out.evicted_turns,
                w.left_out.evicted_summaries
            ),
            (24, 8, 2)
        );
    }

    proptest::proptest! {
        /// Every turn the view leaves out stays reachable from it, by a summary's range or an
        /// older range, or was retracted, whatever the policy and wherever summaries and
        /// retractions fall; and no retracted turn or summary is shown.
        #[test]
        fn every_turn_left_out_is_reachable(
            recent_turns in 1usize..6,
            summaries in 1usize..4,
            steps in proptest::collection::vec((0u8..6, 0u64..40, 0u64..40), 1..400),
        ) {
            let policy = ContextPolicy { recent_turns, summaries, ..ContextPolicy::default() };
            let mut w = ContextWindow::new(policy);
            let mut turns = Vec::new();
            // Retracted seq -> the retraction's seq, as the fold keeps them.
            let mut retracted: BTreeMap<Seq, Seq> = BTreeMap::new();
            let mut seq = 0;
            for (what, a, b) in steps {
                seq += 1;
                // A retraction as the fold accepts one: an earlier seq, not yet retracted,
                // not itself a retraction (found from `a` backwards, mostly recent seqs).
                let target = (1..seq)
                    .rev()
                    .skip(a as usize % seq as usize)
                    .find(|s| !retracted.contains_key(s) && !retracted.values().any(|by| by == s));
                let e = match (what, target) {
                    (0, _) if seq > 1 => {
                        // A summary of a range within what the session holds.
                        let (x, y) = ((seq - 1).min(a + 1), (seq - 1).min(b + 1));
                        summary(seq, x.min(y), x.max(y))
                    }
                    (1, _) => event(seq, SessionEvent::Checkpoint {
                        state_digest: String::new(),
                        workspace_revision: None,
                    }),
                    (2, Some(target)) => {
                        retracted.insert(target, seq);
                        event(seq, SessionEvent::EventRetracted {
                            retracted_seq: target,
                            retracted_by: "test".into(),
                        })
                    }
                    _ => {
                        turns.push(seq);
                        event(seq, SessionEvent::UserRequest { content: Content::plain("t") })
                    }
                };
                w.apply(&e);
                proptest::prop_assert!(w.recent.len() <= recent_turns);
                proptest::prop_assert!(w.summaries.len() <= summaries);
                proptest::prop_assert!(w.older.len() <= OLDER_RANGES);
            }
            for t in turns {
                proptest::prop_assert!(
                    w.reaches(t) || retracted.contains_key(&t),
                    "turn {} unreachable: {:?}", t, w
                );
            }
            for t in &w.recent {
                proptest::prop_assert!(!retracted.contains_key(&t.seq), "retracted turn {} shown", t.seq);
            }
            for s in &w.summaries {
                proptest::prop_assert!(!retracted.contains_key(&s.turn.seq), "retracted summary {} shown", s.turn.seq);
            }
            let withdrawn = w.left_out.retracted_turns + w.left_out.retracted_summaries;
            proptest::prop_assert!(withdrawn <= retracted.len() as u64);
            proptest::prop_assert_eq!(
                w.left_out.by_kind.get("EventRetracted").copied().unwrap_or(0),
                retracted.len() as u64
            );
        }
    }
}
