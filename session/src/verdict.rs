//! What the fold decided about one event.

use crate::gate::Gate;
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Epoch, Seq};
use std::fmt;

/// The fold's decision about one event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The event is part of the session's history and changed its state.
    Accepted,
    /// A repeat of an event already accepted (same seq and event id): harmless, ignored.
    Duplicate,
    /// The event is not part of the history.
    Rejected(Rejection),
}

impl Verdict {
    /// True when the event entered the history.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Self::Accepted)
    }

    /// This verdict, or when it accepts, the next judgement's.
    pub fn and(self, next: impl FnOnce() -> Verdict) -> Verdict {
        match self {
            Self::Accepted => next(),
            other => other,
        }
    }
}

/// Why an event was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// The session has no start event yet.
    NotStarted,
    /// A second start (or fork) event for a session that already began.
    AlreadyStarted,
    /// A write from an epoch that a later claim fenced off.
    Zombie {
        /// The event's epoch.
        epoch: Epoch,
        /// The session's current epoch.
        current: Epoch,
    },
    /// A write at an epoch no accepted claim established.
    UnclaimedEpoch {
        /// The event's epoch.
        epoch: Epoch,
        /// The session's current epoch.
        current: Epoch,
    },
    /// A claim that does not exceed the current epoch: another writer claimed it first.
    StaleClaim {
        /// The epoch claimed.
        epoch: Epoch,
        /// The session's current epoch.
        current: Epoch,
    },
    /// The seq skips ahead of the next expected one.
    Gap {
        /// The seq the fold expected.
        expected: Seq,
        /// The seq the event had.
        got: Seq,
    },
    /// The seq was already taken by a different event.
    SeqConflict {
        /// The seq in question.
        seq: Seq,
    },
    /// The session already ended; only claims and erasure may follow.
    AfterTerminal,
    /// The event does not fit the session's state (e.g. a result for a call that is not pending).
    Invalid(String),
    /// The session waits (for an operator, a decision, an unpause), and the event would walk
    /// past the wait: a harness's claim, or a new intent.
    Gated(Gate),
    /// A privileged event (a decision, an operator's or a resolver's result, a fork carrying
    /// approvals over) without the recovery service's attestation.
    Unsigned {
        /// What was unsigned.
        kind: String,
    },
    /// The current writer holds a token and the caller presented none (not an event rule: see
    /// [`crate::SessionState::admits_writer`]).
    WriterTokenRequired,
    /// The caller presented another token than the current writer's (see
    /// [`crate::SessionState::admits_writer`]): it is not the writer of this epoch.
    WrongWriterToken {
        /// The epoch the caller wrote with.
        epoch: Epoch,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotStarted => write!(f, "not started: the session has no start event"),
            Self::AlreadyStarted => write!(f, "already started: a session has one start event"),
            Self::Zombie { epoch, current } => {
                write!(
                    f,
                    "zombie write: epoch {epoch} was fenced by epoch {current}"
                )
            }
            Self::UnclaimedEpoch { epoch, current } => {
                write!(
                    f,
                    "epoch {epoch} was never claimed (current epoch {current})"
                )
            }
            Self::StaleClaim { epoch, current } => {
                write!(
                    f,
                    "stale claim: epoch {epoch} is not above current epoch {current}"
                )
            }
            Self::Gap { expected, got } => write!(f, "gap: expected seq {expected}, got {got}"),
            Self::SeqConflict { seq } => write!(f, "seq {seq} is already taken by another event"),
            Self::AfterTerminal => write!(f, "the session already ended"),
            Self::Invalid(why) => write!(f, "invalid: {why}"),
            Self::Gated(gate) => write!(f, "{gate}"),
            Self::Unsigned { kind } => write!(
                f,
                "unsigned: {kind} enters the log only through the recovery service, signed"
            ),
            Self::WriterTokenRequired => write!(
                f,
                "this session's writer holds a writer token: present the token its create, claim or resume answered"
            ),
            Self::WrongWriterToken { epoch } => write!(
                f,
                "fenced: the writer token is not the one of epoch {epoch}'s writer"
            ),
        }
    }
}

impl Rejection {
    /// A short, stable label for tables and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotStarted => "not_started",
            Self::AlreadyStarted => "already_started",
            Self::Zombie { .. } => "zombie",
            Self::UnclaimedEpoch { .. } => "unclaimed_epoch",
            Self::StaleClaim { .. } => "stale_claim",
            Self::Gap { .. } => "gap",
            Self::SeqConflict { .. } => "seq_conflict",
            Self::AfterTerminal => "after_terminal",
            Self::Invalid(_) => "invalid",
            Self::Gated(gate) => gate.label(),
            Self::Unsigned { .. } => "unsigned",
            Self::WriterTokenRequired => "writer_token_required",
            Self::WrongWriterToken { .. } => "wrong_writer_token",
        }
    }
}
