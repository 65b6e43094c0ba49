//! Whom a waiting session waits for, as `sessions_awaiting` lists it.

use sessionlog_session::SessionStatus;

/// Whom a waiting session waits for, as `sessions_awaiting` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// A human's decision on a pending approval (status `awaiting_approval`).
    Approval,
    /// An operator's outcome for an in-doubt tool call (status `needs_resolution`).
    Operator,
}

impl Wait {
    /// Whom a session of `status` waits for, if anyone.
    pub fn of(status: SessionStatus) -> Option<Self> {
        match status {
            SessionStatus::AwaitingApproval => Some(Self::Approval),
            SessionStatus::NeedsResolution => Some(Self::Operator),
            _ => None,
        }
    }

    /// The status of a session waiting for this.
    pub fn status(self) -> SessionStatus {
        match self {
            Self::Approval => SessionStatus::AwaitingApproval,
            Self::Operator => SessionStatus::NeedsResolution,
        }
    }

    /// The partition key in `sessions_awaiting`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Operator => "operator",
        }
    }
}
