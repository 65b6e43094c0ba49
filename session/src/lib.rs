//! The session fold: one pure function that turns a session's events, in log order,
//! into its accepted history and its derived state.
//!
//! The projector and the recovery service both call [`SessionState::apply`], so they can
//! never disagree about which events a session accepted. The rules (docs/design.md, "One writer
//! per session, arbitrated by the log"):
//!
//! - the first event is `SessionStarted` or `SessionForked` at seq 1;
//! - `WriterClaimed` with an epoch above the current one wins and fences every older writer;
//!   a later claim of the same or an older epoch is rejected. Claims are arbitrated by
//!   epoch alone and do not take a seq, so a takeover cannot be starved by a live zombie;
//! - any other event is accepted when its epoch is the current one and its seq is the next;
//! - a repeat of a recently accepted `(seq, event_id)` is a harmless duplicate;
//! - anything else is rejected with a [`Rejection`] that says why;
//! - in a session started under schema v5 or later, the gates hold whoever writes: no
//!   harness claim or new intent walks past a wait for an operator, a decision or an unpause,
//!   and decisions bind to the request they decide ([`gate`]).
//!
//! Two more pure folds derive views from accepted events, used by the projector (which stores
//! them) and recovery (which folds the log's tail into them): [`context`], the bounded
//! context window a resumed harness hands its next model call, and [`trace`], one span per
//! model or tool call. [`usage`] folds the closed calls into rollups by day and model, agent
//! or tool, for the projector.

pub mod attest;
pub mod context;
pub mod gate;
pub mod limits;
mod redaction;
mod state;
pub mod trace;
pub mod usage;
mod verdict;

pub use gate::{Gate, writer_token_sha256};
pub use redaction::Redaction;
pub use state::{
    CheckpointMark, DUPLICATE_WINDOW, Decision, OperatorResult, PendingApproval, PendingCall,
    SessionState, SessionStatus,
};
pub use verdict::{Rejection, Verdict};

use sessionlog_schemas::EventEnvelope;

/// Folds a whole sequence of events (in log order) from an empty state.
///
/// Handy for tests and small sessions; long sessions fold incrementally with
/// [`SessionState::apply`] so that they never sit in memory whole.
pub fn fold<'a>(events: impl IntoIterator<Item = &'a EventEnvelope>) -> Option<SessionState> {
    let mut state: Option<SessionState> = None;
    for event in events {
        match &mut state {
            Some(s) => {
                s.apply(event);
            }
            None => {
                let mut s = SessionState::empty(event.session_id);
                s.apply(event);
                if s.is_started() {
                    state = Some(s);
                }
            }
        }
    }
    state
}
