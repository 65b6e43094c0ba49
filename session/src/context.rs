//! The context view: the bounded working set a harness hands its next model call.
//!
//! It is derived from accepted events only, incrementally, so a replay of the same log gives
//! the same bytes: the most recent conversation turns (content from the events themselves,
//! cut to a bounded length), the current plan and the unresolved tool calls (from the fold's
//! state), references to older ranges of turns that no longer fit, and counts of the events
//! left out of the view.
//!
//! Pure: no I/O. The projector stores the window; recovery folds the log's tail into it.

use crate::SessionState;
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Content, EventEnvelope, Seq, SessionEvent};
use std::collections::{BTreeMap, VecDeque};

/// Turns kept verbatim (bounded text) in the view.
pub const RECENT_TURNS: usize = 16;
/// Characters of a turn's text kept in the view; the rest is cut and flagged.
pub const TURN_TEXT_CHARS: usize = 2_000;
/// Turns that one older-range reference covers before a new range starts.
pub const TURNS_PER_RANGE: u64 = 64;
/// Older-range references kept; beyond it the two oldest merge.
pub const OLDER_RANGES: usize = 8;

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
    /// The text, at most [`TURN_TEXT_CHARS`] characters; `None` when sealed or erased. With
    /// [`Self::sealed_text`], the readable part that comes before it.
    pub text: Option<String>,
    /// Whether the text was cut to fit.
    pub truncated: bool,
    /// Whether the content is encrypted (readable only with the session's data key).
    pub sealed: bool,
    /// The encrypted content, whole (ciphertext cannot be cut): a reader holding the session's
    /// key opens it and cuts it to [`TURN_TEXT_CHARS`] ([`Self::with_opened`]). `None` when the
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
}

impl OlderRange {
    fn total(&self) -> u64 {
        self.turns.values().sum()
    }

    fn absorb(&mut self, other: &OlderRange) {
        self.first_seq = self.first_seq.min(other.first_seq);
        self.last_seq = self.last_seq.max(other.last_seq);
        for (role, n) in &other.turns {
            *self.turns.entry(role.clone()).or_default() += n;
        }
    }
}

/// What the view does not carry verbatim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Accepted events that are not conversation turns (claims, checkpoints, approvals, ...), by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Turns moved out of the recent window into older ranges.
    pub evicted_turns: u64,
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
    /// The most recent turns, oldest first.
    pub recent: VecDeque<Turn>,
    /// References to older turns, oldest first.
    pub older: Vec<OlderRange>,
    /// What was left out.
    pub left_out: LeftOut,
}

impl Default for ContextWindow {
    fn default() -> Self {
        Self {
            applied_offset: -1,
            recent: VecDeque::new(),
            older: Vec::new(),
            left_out: LeftOut::default(),
        }
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
}

impl ContextWindow {
    /// Folds one accepted event into the window.
    pub fn apply(&mut self, event: &EventEnvelope) -> TurnChange {
        use SessionEvent as E;
        let turn = |role: &str, name: Option<&str>, call_seq, prefix: &str, content: &Content| {
            let (text, truncated, sealed_text) = match content {
                Content::Plain(text) => {
                    let (cut, truncated) = cut_text(&format!("{prefix}{text}"));
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
            E::SessionErased { .. } => {
                // The data key is gone: the view keeps the skeleton, not the words.
                for t in &mut self.recent {
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
        if new_turn.truncated {
            self.left_out.truncated_turns += 1;
        }
        self.recent.push_back(new_turn);
        while self.recent.len() > RECENT_TURNS {
            if let Some(old) = self.recent.pop_front() {
                self.evict(&old);
            }
        }
        TurnChange::Added
    }

    fn evict(&mut self, turn: &Turn) {
        self.left_out.evicted_turns += 1;
        let single = OlderRange {
            first_seq: turn.seq,
            last_seq: turn.seq,
            turns: BTreeMap::from([(turn.role.clone(), 1)]),
        };
        match self.older.last_mut() {
            Some(last) if last.total() < TURNS_PER_RANGE => last.absorb(&single),
            _ => self.older.push(single),
        }
        if self.older.len() > OLDER_RANGES {
            let first = self.older.remove(0);
            self.older[0].absorb(&first);
        }
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
    /// prefix and the opened text, cut to [`TURN_TEXT_CHARS`].
    pub fn with_opened(mut self, opened: Option<&str>) -> Self {
        if self.sealed_text.take().is_some() {
            if let Some(opened) = opened {
                let whole = format!("{}{opened}", self.text.as_deref().unwrap_or_default());
                let (cut, truncated) = cut_text(&whole);
                self.text = Some(cut);
                self.truncated = truncated;
            } else {
                self.text = None;
            }
        }
        self
    }
}

/// A text cut to [`TURN_TEXT_CHARS`] characters, and whether it was cut.
fn cut_text(text: &str) -> (String, bool) {
    let cut: String = text.chars().take(TURN_TEXT_CHARS).collect();
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
}
