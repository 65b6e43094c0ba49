//! Errors of the recovery service.

/// What can go wrong recovering a session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The registry, or a record that does not decode.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// The projection store: unreachable, missing or outdated (its message names the command
    /// that fixes it), or holding a row it cannot read.
    #[error(transparent)]
    Store(#[from] sessionlog_store::Error),
    /// No event of the session is in the log.
    #[error("unknown session {0}: no event of it is in the log")]
    UnknownSession(String),
    /// Appending to the log failed (claiming, recording an outcome, forking).
    #[error(transparent)]
    Producer(#[from] sessionlog_producer::Error),
    /// The session ended; it cannot be resumed (fork it instead).
    #[error("session {session} already ended ({outcome}); fork it to continue from a checkpoint")]
    Ended {
        /// The session.
        session: String,
        /// How it ended.
        outcome: String,
    },
    /// The session waits for a human decision that is not in the log yet.
    #[error(
        "session {session} awaits approval {approval_id:?}; record the decision first (`sessionlog approve`)"
    )]
    AwaitingApproval {
        /// The session.
        session: String,
        /// The approval it waits for.
        approval_id: String,
    },
    /// In-doubt tool calls need an operator to record their outcome before the run may go on.
    #[error(
        "session {session} needs resolution of tool call(s) at seq {calls:?}; record their outcome first (`sessionlog resolve`)"
    )]
    NeedsResolution {
        /// The session.
        session: String,
        /// The seqs of the calls in doubt.
        calls: Vec<u64>,
    },
    /// An operator paused the session (`sessionlog pause`): no writer may take it over until
    /// it is unpaused.
    #[error(
        "session {session} is paused by an operator; run `sessionlog unpause {session}` before resuming it"
    )]
    Paused {
        /// The session.
        session: String,
    },
    /// A worker woken for the session at `woken_at` found it at a later epoch, lost the claim
    /// to another, or found a live lease at its current epoch (its harness is alive): someone
    /// else runs it now. Not a failure: the worker moves on.
    #[error(
        "session {session} was already taken: woken at epoch {woken_at}, it is at epoch {current} now, claimed since or held by a live lease"
    )]
    AlreadyTaken {
        /// The session.
        session: String,
        /// The epoch the wake named.
        woken_at: u64,
        /// The epoch the log holds.
        current: u64,
    },
    /// A pause of a paused session, or an unpause of a running one: nothing to do.
    #[error("session {session} {reason}")]
    NothingToDo {
        /// The session.
        session: String,
        /// Why, and what would apply instead.
        reason: &'static str,
    },
    /// An operator named a call that is not in doubt: it has a recorded result, or never existed.
    #[error("session {session} has no tool call in doubt at seq {call_seq}")]
    NotInDoubt {
        /// The session.
        session: String,
        /// The seq named.
        call_seq: u64,
    },
    /// A decision for an approval that is not pending.
    #[error("session {session} has no pending approval {approval_id:?}")]
    NoSuchApproval {
        /// The session.
        session: String,
        /// The approval named.
        approval_id: String,
    },
    /// An act that must say why (an erasure) was asked without a reason.
    #[error("{action} needs a reason ({hint}); nothing was done")]
    ReasonRequired {
        /// The act refused, e.g. "an erasure".
        action: &'static str,
        /// What a reason names.
        hint: &'static str,
    },
    /// A redaction named something that cannot be redacted.
    #[error("cannot redact {field} of seq {seq} of session {session}: {reason}")]
    NotRedactable {
        /// The session.
        session: String,
        /// The seq named.
        seq: u64,
        /// The field named.
        field: String,
        /// Why not.
        reason: String,
    },
    /// A fork point past the parent's end, or not a checkpoint when one was asked for.
    #[error("cannot fork session {session} at seq {seq}: {reason}")]
    BadForkPoint {
        /// The parent.
        session: String,
        /// The seq asked for.
        seq: u64,
        /// Why not.
        reason: String,
    },
    /// The parent waits for a person at the fork point: a child would not inherit the wait.
    #[error(
        "cannot fork session {session} at seq {seq}: there it awaits approval(s) {approvals:?} and the outcome of call(s) at seq {calls:?} (not idempotent, or marked for an operator); decide or resolve them first (`sessionlog approve`, `sessionlog resolve`), or fork before the request"
    )]
    ForkOfWaitingSession {
        /// The parent.
        session: String,
        /// The fork point asked for.
        seq: u64,
        /// Approvals pending there.
        approvals: Vec<String>,
        /// Calls in doubt there that only an operator may settle.
        calls: Vec<u64>,
    },
    /// The session relies on a decision or operator record the service did not sign.
    #[error(
        "session {session} relies on decision(s) {approvals:?} and operator record(s) for call(s) {calls:?} that the recovery service did not sign (written by someone else); record them again (`sessionlog approve`, `sessionlog resolve`)"
    )]
    Unverified {
        /// The session.
        session: String,
        /// Approvals whose latest decision does not verify.
        approvals: Vec<String>,
        /// Calls whose operator record does not verify.
        calls: Vec<u64>,
    },
    /// A range read asked for something it cannot answer: bounds, limit, kinds or cursor.
    /// `code` names which (`bad_range`, `bad_limit`, `unknown_kind`, `bad_cursor`).
    #[error("{reason}")]
    BadRange {
        /// Which part of the request, as a stable code.
        code: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A range read named a session the event index does not have: unknown, or the projector
    /// has not reached it yet (range reads go by the index; a rebuild reads the log).
    #[error(
        "unknown session {0}: the event index has none of its events (unknown, or the projector \
         has not reached it yet)"
    )]
    NotIndexed(String),
    /// A trace read named a session the projection has no span of.
    #[error(
        "unknown session {0}: the projection has no span of it (unknown, not projected yet, or \
         its rows expired with [retention] ended_session_ttl_secs)"
    )]
    NoSpans(String),
    /// The record at the offset the event index gives for an event is another one: the
    /// keyspace does not describe this topic (see `sessionlog init`'s topic check).
    #[error(
        "the event index puts seq {seq} of session {session} at partition {partition} offset \
         {offset}, and the record there is another event; the keyspace was not projected from \
         this topic (replay it: `sessionlog replay`)"
    )]
    IndexMismatch {
        /// The session.
        session: String,
        /// The seq the index names.
        seq: u64,
        /// The partition it names.
        partition: i32,
        /// The offset it names.
        offset: i64,
    },
    /// Data keys: the key store is unreachable, or a KEK setting is wrong.
    #[error(transparent)]
    Keys(#[from] sessionlog_keys::Error),
    /// A privileged event could not be signed, or the keys could not be read.
    #[error("attestation: {reason}")]
    Attestation {
        /// What is wrong, and the setting that fixes it.
        reason: String,
    },
}

impl Error {
    /// Whether the error is the caller's (a 4xx): bad input or a state that forbids the action.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            Self::UnknownSession(_)
                | Self::Ended { .. }
                | Self::AwaitingApproval { .. }
                | Self::NeedsResolution { .. }
                | Self::Paused { .. }
                | Self::AlreadyTaken { .. }
                | Self::NothingToDo { .. }
                | Self::NotInDoubt { .. }
                | Self::NoSuchApproval { .. }
                | Self::NotRedactable { .. }
                | Self::ReasonRequired { .. }
                | Self::BadForkPoint { .. }
                | Self::ForkOfWaitingSession { .. }
                | Self::Unverified { .. }
                | Self::BadRange { .. }
                | Self::NotIndexed(_)
                | Self::NoSpans(_)
        )
    }
}

/// Result with recovery's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
