//! The derived state of one session and the fold step that advances it.

use crate::verdict::{Rejection, Verdict};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{
    Attestation, Content, DEFAULT_TENANT, EffectClass, Epoch, EventEnvelope, ForkPoint, Micros,
    ResultSource, Seq, SessionEvent, SessionId, TerminalOutcome, sealable,
};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use uuid::Uuid;

/// How many recently accepted `(seq, event_id)` pairs the fold remembers to tell a harmless
/// retry from a conflicting write. A writer retries at most one batch, and the producer caps a
/// batch at this many events, so every retry falls inside the window.
pub const DUPLICATE_WINDOW: usize = 128;

/// Where a session stands, derived from its accepted history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SessionStatus {
    /// Accepting events.
    Running,
    /// Paused by its harness or an operator.
    Paused,
    /// Waiting for a human decision.
    AwaitingApproval,
    /// An in-doubt tool call waits for an operator.
    NeedsResolution,
    /// Ended: task done.
    Completed,
    /// Ended: gave up.
    Failed,
    /// Ended: stopped.
    Cancelled,
    /// Payloads destroyed; only the skeleton remains.
    Erased,
}

impl SessionStatus {
    /// The status as stored in tables (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::AwaitingApproval => "awaiting_approval",
            Self::NeedsResolution => "needs_resolution",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Erased => "erased",
        }
    }

    /// Whether the session has ended (completed, failed, cancelled or erased): it accepts no
    /// more events but an erasure, and never runs again.
    pub fn has_ended(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Cancelled | Self::Erased
        )
    }
}

/// A tool call requested but without a recorded result: in doubt if the harness died.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The seq of the `ToolCallRequested` event.
    pub seq: Seq,
    /// Its event id (results name it as their causation id).
    pub event_id: Uuid,
    /// Tool name.
    pub tool: String,
    /// What repeating it would do.
    pub effect: EffectClass,
    /// The key the tool's service knows the request by.
    pub idempotency_key: Option<String>,
    /// When it was requested.
    pub requested_at: Micros,
    /// Set once the session stopped for an operator to resolve this call: why.
    #[serde(default, with = "sealable::option")]
    pub resolution_required: Option<Content>,
    /// The epoch that requested it, in a session whose gates the fold keeps
    /// ([`SessionState::keeps_gates`]): a non-idempotent call of an older epoch than the
    /// current one is in doubt. Left out of the canonical state when `None` (older sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
}

impl PendingCall {
    /// Whether an operator must settle this call before the session goes on: it was stopped
    /// for one (`ResolutionRequired`), or it is a non-idempotent call whose writer was
    /// superseded before it recorded a result (it may or may not have run).
    pub fn needs_operator(&self, current_epoch: Epoch) -> bool {
        self.resolution_required.is_some()
            || (self.effect == EffectClass::NonIdempotent
                && self.epoch.is_some_and(|epoch| epoch < current_epoch))
    }
}

/// An approval requested and not yet decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// Names the approval within the session.
    pub approval_id: String,
    /// What is to be approved.
    #[serde(with = "sealable")]
    pub action: Content,
    /// The seq of the request.
    pub seq: Seq,
    /// What the request named as approved by its digest (schema v5; `None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_digest: Option<String>,
}

/// The latest decision on an approval: the harness that resumes sees refusals, and the
/// recovery service verifies every decision's attestation before it lets a session resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Names the approval within the session.
    pub approval_id: String,
    /// What was to be approved.
    #[serde(with = "sealable")]
    pub action: Content,
    /// Yes or no.
    pub approved: bool,
    /// Who decided, as the event names them.
    pub decided_by: String,
    /// Why, if they said.
    #[serde(default, with = "sealable::option")]
    pub reason: Option<Content>,
    /// The seq of the decision.
    pub seq: Seq,
    /// What its attestation signs ([`crate::attest::statement`]).
    pub statement: String,
    /// The service's signature, if the event carries one.
    pub attestation: Option<Attestation>,
    /// The digest of what was approved (schema v5; `None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_digest: Option<String>,
    /// The seq of the request decided (schema v5; `None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_seq: Option<Seq>,
    /// The seq of the tool call that acted on the approval, once one did: an approval is
    /// acted on once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acted_on_by: Option<Seq>,
    /// For an approval a fork carried over: the seq of the decision in the parent (this
    /// decision's `seq` is then the fork's first event, whose attestation covers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited_from: Option<Seq>,
}

impl Decision {
    /// Whether a later signed decision may replace this one: nothing acted on it, and it was
    /// not carried over by a fork (the fold's rule; the service supersedes only a decision it
    /// cannot verify).
    pub fn may_be_superseded(&self) -> bool {
        self.acted_on_by.is_none() && self.inherited_from.is_none()
    }
}

/// An operator's record of an in-doubt call's outcome, kept for the same verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorResult {
    /// The call's seq.
    pub call_seq: Seq,
    /// Who recorded it.
    pub recorded_by: Option<String>,
    /// The seq of the result.
    pub seq: Seq,
    /// What its attestation signs.
    pub statement: String,
    /// The service's signature, if the event carries one.
    pub attestation: Option<Attestation>,
}

/// The latest checkpoint and whether its declared digest matched the fold's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMark {
    /// The checkpoint event's seq.
    pub seq: Seq,
    /// The digest the writer declared.
    pub declared_digest: String,
    /// The digest this fold computed over the same events.
    pub computed_digest: String,
}

impl CheckpointMark {
    /// A checkpoint is verified when the writer's digest equals the fold's.
    pub fn verified(&self) -> bool {
        self.declared_digest == self.computed_digest
    }
}

/// The derived state of one session: everything the fold knows after the events it has seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// Which session.
    pub session_id: SessionId,
    /// Whether the start (or fork) event was accepted.
    pub started: bool,
    /// The agent or harness running it.
    pub agent: Option<String>,
    /// The human-readable task.
    #[serde(default, with = "sealable::option")]
    pub title: Option<Content>,
    /// The tenant it belongs to, fixed by its first event. Left out of the canonical state
    /// when it is the default tenant, so digests of sessions written before tenants existed
    /// are what they were.
    #[serde(default = "default_tenant", skip_serializing_if = "is_default_tenant")]
    pub tenant: String,
    /// Where it was forked from, if it is a fork.
    pub parent: Option<ForkPoint>,
    /// The current writer epoch.
    pub epoch: Epoch,
    /// The writer that claimed the current epoch (none until a claim after the start).
    pub writer: Option<String>,
    /// Hex SHA-256 of the token the current epoch's writer holds, if its start or claim named
    /// one (schema v5): see [`Self::admits_writer`]. Left out of the canonical state when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_token_sha256: Option<String>,
    /// The digest of the session's tenant-scoped name, if its start named one (schema v6;
    /// see [`sessionlog_schemas::session_name_sha256`]). Left out of the canonical state when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_sha256: Option<String>,
    /// Whether the fold keeps this session's gates, writer tokens and approvals' binding: true
    /// for a session started by an event of schema v5 or later. A session started earlier keeps
    /// the rules it was started under, so replaying an old log gives the tables it gave (left
    /// out of the canonical state when false, so old digests are unchanged).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keeps_gates: bool,
    /// The schema version of the session's first event, from v6 on (0 for a session started
    /// earlier): the rules added since v6 hold in a session started under them
    /// ([`crate::limits`], operator kinds in [`crate::gate`]), so an older log replays to the
    /// tables it gave. Left out of the canonical state when 0, so old digests are unchanged.
    #[serde(default, skip_serializing_if = "before_v6")]
    pub started_schema: u32,
    /// The last accepted seq (gap-free from 1).
    pub last_seq: Seq,
    /// When the start event happened.
    pub started_at: Micros,
    /// When the last accepted event happened.
    pub updated_at: Micros,
    /// The current plan.
    pub plan: Option<Content>,
    /// Tool calls without a result, by the seq of their request.
    pub pending_calls: BTreeMap<Seq, PendingCall>,
    /// Approvals without a decision, by approval id.
    pub pending_approvals: BTreeMap<String, PendingApproval>,
    /// The latest decision on each decided approval, by approval id. Left out of the
    /// canonical state while empty, so digests of sessions without one are unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided_approvals: BTreeMap<String, Decision>,
    /// Operators' records of in-doubt calls, by call seq (left out while empty, as above).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operator_results: BTreeMap<Seq, OperatorResult>,
    /// Events withdrawn from the conversation by an `EventRetracted`: the withdrawn seq, to
    /// the seq of the retraction (left out while empty, as above). The log keeps both.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retracted: BTreeMap<Seq, Seq>,
    /// Fields redacted by a `PayloadRedacted` (schema v8), by the event's seq and the field
    /// (left out while empty, as above).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redacted: BTreeMap<Seq, BTreeMap<String, crate::redaction::Redaction>>,
    /// Paused and not resumed.
    pub paused: bool,
    /// When the pause lapses and the session wants its harness again (microseconds since the
    /// Unix epoch; schema v7); `None` = until someone resumes it. Left out of the canonical
    /// state when `None`, so digests of sessions without one are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<Micros>,
    /// How it ended, once it has.
    pub terminal: Option<TerminalOutcome>,
    /// Whether its payloads were erased.
    pub erased: bool,
    /// Prompt tokens over all model calls.
    pub tokens_in: u64,
    /// Completion tokens over all model calls.
    pub tokens_out: u64,
    /// Cost in millionths of a US dollar.
    pub cost_micros: u64,
    /// Model calls answered.
    pub model_calls: u64,
    /// Tool calls requested.
    pub tool_calls: u64,
    /// The latest checkpoint.
    pub last_checkpoint: Option<CheckpointMark>,
    /// A hash chain over every accepted `(seq, event_id)`, hex: the canonical state (and so
    /// every checkpoint digest) names the exact events behind it, in a fixed 64 characters.
    pub history: String,
    /// Recently accepted `(seq, event_id)` pairs, oldest first, to recognise retries. Not
    /// part of the canonical state: it is fully determined by the last
    /// [`DUPLICATE_WINDOW`] accepted events, which the event index holds, so a stored state
    /// leaves it out and whoever loads one rebuilds it (see [`Self::remember_recent`]).
    #[serde(skip)]
    pub recent: VecDeque<(Seq, Uuid)>,
}

impl SessionState {
    /// The state of a session before any event.
    pub fn empty(session_id: SessionId) -> Self {
        Self {
            session_id,
            started: false,
            agent: None,
            title: None,
            tenant: default_tenant(),
            parent: None,
            epoch: 0,
            writer: None,
            writer_token_sha256: None,
            name_sha256: None,
            keeps_gates: false,
            started_schema: 0,
            last_seq: 0,
            started_at: 0,
            updated_at: 0,
            plan: None,
            pending_calls: BTreeMap::new(),
            pending_approvals: BTreeMap::new(),
            decided_approvals: BTreeMap::new(),
            operator_results: BTreeMap::new(),
            retracted: BTreeMap::new(),
            redacted: BTreeMap::new(),
            paused: false,
            paused_until: None,
            terminal: None,
            erased: false,
            tokens_in: 0,
            tokens_out: 0,
            cost_micros: 0,
            model_calls: 0,
            tool_calls: 0,
            last_checkpoint: None,
            history: String::new(),
            recent: VecDeque::new(),
        }
    }

    /// Restores the duplicate window of a state read back from storage: `accepted` are the
    /// session's accepted `(seq, event_id)` pairs in the order they were accepted (any
    /// number; only the last [`DUPLICATE_WINDOW`] are kept).
    pub fn remember_recent(&mut self, accepted: impl IntoIterator<Item = (Seq, Uuid)>) {
        self.recent.clear();
        for pair in accepted {
            self.push_recent(pair);
        }
    }

    fn push_recent(&mut self, pair: (Seq, Uuid)) {
        self.recent.push_back(pair);
        if self.recent.len() > DUPLICATE_WINDOW {
            self.recent.pop_front();
        }
    }

    /// Whether the session's start event has been accepted.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The seq the next sequenced event must carry.
    pub fn next_seq(&self) -> Seq {
        self.last_seq + 1
    }

    /// Where the session stands.
    pub fn status(&self) -> SessionStatus {
        if self.erased {
            return SessionStatus::Erased;
        }
        match self.terminal {
            Some(TerminalOutcome::Completed) => return SessionStatus::Completed,
            Some(TerminalOutcome::Failed) => return SessionStatus::Failed,
            Some(TerminalOutcome::Cancelled) => return SessionStatus::Cancelled,
            None => {}
        }
        if self
            .pending_calls
            .values()
            .any(|c| c.needs_operator(self.epoch))
        {
            SessionStatus::NeedsResolution
        } else if !self.pending_approvals.is_empty() {
            SessionStatus::AwaitingApproval
        } else if self.paused {
            SessionStatus::Paused
        } else {
            SessionStatus::Running
        }
    }

    /// The canonical encoding of the state: what digests and tables store.
    pub fn canonical_json(&self) -> String {
        // Every map in the state is a BTreeMap and every list is ordered by the log,
        // so serde_json's output is a pure function of the accepted history.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// SHA-256 of [`Self::canonical_json`], hex-encoded: what a checkpoint declares.
    pub fn digest(&self) -> String {
        Self::digest_of(&self.canonical_json())
    }

    /// The digest of a state already serialised with [`Self::canonical_json`].
    pub fn digest_of(canonical_json: &str) -> String {
        hex::encode(Sha256::digest(canonical_json.as_bytes()))
    }

    /// The fold step: judge one event against the state and, if accepted, apply it.
    pub fn apply(&mut self, event: &EventEnvelope) -> Verdict {
        let verdict = self.judge(event);
        if verdict.is_accepted() {
            self.accept(event);
        }
        verdict
    }

    /// Decides an event's fate without changing the state.
    pub fn judge(&self, e: &EventEnvelope) -> Verdict {
        use SessionEvent as E;
        if e.session_id != self.session_id {
            return reject_invalid(format!(
                "event of session {} folded into session {}",
                e.session_id, self.session_id
            ));
        }
        if self.recent.contains(&(e.seq, e.event_id)) {
            return Verdict::Duplicate;
        }
        if !self.started {
            return match &e.event {
                E::SessionStarted { .. } | E::SessionForked { .. } if e.seq != 1 => {
                    Verdict::Rejected(Rejection::Gap {
                        expected: 1,
                        got: e.seq,
                    })
                }
                E::SessionStarted { .. } | E::SessionForked { .. } if e.writer_epoch == 0 => {
                    reject_invalid("a session starts at epoch 1 or above".into())
                }
                E::SessionForked {
                    inherited_approvals,
                    ..
                } if !inherited_approvals.is_empty() && !crate::attest::is_signed(e) => {
                    Verdict::Rejected(Rejection::Unsigned {
                        kind: "a fork carrying approvals over".into(),
                    })
                }
                E::SessionStarted { .. } | E::SessionForked { .. } => Verdict::Accepted,
                _ => Verdict::Rejected(Rejection::NotStarted),
            };
        }
        match &e.event {
            E::SessionStarted { .. } | E::SessionForked { .. } => {
                Verdict::Rejected(Rejection::AlreadyStarted)
            }
            E::WriterClaimed { .. } if e.writer_epoch > self.epoch => self.judge_claim(e),
            E::WriterClaimed { .. } => Verdict::Rejected(Rejection::StaleClaim {
                epoch: e.writer_epoch,
                current: self.epoch,
            }),
            event => match self
                .judge_sequenced(e)
                .and(|| self.judge_limits(e))
                .and(|| self.judge_operator_kinds(e))
                .and(|| self.judge_redaction(e))
            {
                Verdict::Accepted => match self.judge_kind(event) {
                    Verdict::Accepted if self.keeps_gates => self.judge_gates(e),
                    other => other,
                },
                other => other,
            },
        }
    }

    /// The limits on client-chosen identifiers ([`crate::limits`]), in a session started
    /// under them.
    fn judge_limits(&self, e: &EventEnvelope) -> Verdict {
        use crate::limits::{IdentifierKind as K, check};
        use SessionEvent as E;
        if !self.keeps_v6_rules() {
            return Verdict::Accepted;
        }
        let approval = match &e.event {
            E::ApprovalRequested { approval_id, .. }
            | E::ApprovalDecided { approval_id, .. }
            | E::ToolCallRequested {
                approval_id: Some(approval_id),
                ..
            } => Some((K::ApprovalId, approval_id.as_str())),
            E::FrameworkStateSaved { key, .. } => Some((K::FrameworkKey, key.as_str())),
            _ => None,
        };
        let key = e
            .idempotency_key
            .as_deref()
            .map(|key| (K::IdempotencyKey, key));
        match approval
            .into_iter()
            .chain(key)
            .try_for_each(|(kind, text)| check(kind, text))
        {
            Ok(()) => Verdict::Accepted,
            Err(bad) => reject_invalid(bad.to_string()),
        }
    }

    /// Whether the session was started under schema v6 or later, and keeps the rules added
    /// then (identifier limits, operator kinds).
    pub(crate) fn keeps_v6_rules(&self) -> bool {
        !before_v6(&self.started_schema)
    }

    /// Epoch and seq rules for every event that takes a seq.
    fn judge_sequenced(&self, e: &EventEnvelope) -> Verdict {
        let current = self.epoch;
        if e.writer_epoch < current {
            return Verdict::Rejected(Rejection::Zombie {
                epoch: e.writer_epoch,
                current,
            });
        }
        if e.writer_epoch > current {
            return Verdict::Rejected(Rejection::UnclaimedEpoch {
                epoch: e.writer_epoch,
                current,
            });
        }
        let expected = self.next_seq();
        if e.seq > expected {
            return Verdict::Rejected(Rejection::Gap {
                expected,
                got: e.seq,
            });
        }
        if e.seq < expected {
            return Verdict::Rejected(Rejection::SeqConflict { seq: e.seq });
        }
        // An ended session may still be erased, or have a field redacted.
        let after_end = matches!(
            e.event,
            SessionEvent::SessionErased { .. } | SessionEvent::PayloadRedacted { .. }
        );
        if self.erased || (self.terminal.is_some() && !after_end) {
            return Verdict::Rejected(Rejection::AfterTerminal);
        }
        Verdict::Accepted
    }

    /// Whether an `EventRetracted` withdrew the event at `seq`.
    pub fn is_retracted(&self, seq: Seq) -> bool {
        self.retracted.contains_key(&seq)
    }

    /// Kind-specific rules: results, resolutions and decisions must refer to something open.
    fn judge_kind(&self, event: &SessionEvent) -> Verdict {
        use SessionEvent as E;
        match event {
            // An operator may record a call again (superseding a record the service cannot
            // verify); any other result needs the call to be pending.
            E::ToolCallResult {
                call_seq,
                source: ResultSource::Operator,
                ..
            } if self.operator_results.contains_key(call_seq) => Verdict::Accepted,
            E::ToolCallResult { call_seq, .. } if !self.pending_calls.contains_key(call_seq) => {
                reject_invalid(format!("no pending tool call at seq {call_seq}"))
            }
            // A call stopped for an operator is settled by an operator, not by the harness.
            E::ToolCallResult {
                call_seq, source, ..
            } if *source != ResultSource::Operator
                && self
                    .pending_calls
                    .get(call_seq)
                    .is_some_and(|c| c.resolution_required.is_some()) =>
            {
                reject_invalid(format!(
                    "tool call at seq {call_seq} awaits an operator's resolution"
                ))
            }
            E::ResolutionRequired { call_seq, .. } => match self.pending_calls.get(call_seq) {
                None => reject_invalid(format!("no pending tool call at seq {call_seq}")),
                Some(c) if c.resolution_required.is_some() => reject_invalid(format!(
                    "tool call at seq {call_seq} already awaits resolution"
                )),
                Some(_) => Verdict::Accepted,
            },
            E::ApprovalRequested { approval_id, .. }
                if self.pending_approvals.contains_key(approval_id) =>
            {
                reject_invalid(format!("approval {approval_id:?} is already pending"))
            }
            // A later decision supersedes an earlier one (see crate::attest).
            E::ApprovalDecided { approval_id, .. }
                if !self.pending_approvals.contains_key(approval_id)
                    && !self.decided_approvals.contains_key(approval_id) =>
            {
                reject_invalid(format!("no pending approval {approval_id:?}"))
            }
            E::SessionPaused { .. } if self.paused => {
                reject_invalid("the session is already paused".into())
            }
            // A time before 1970 is no time a pause could lapse at: a writer's mistake.
            E::SessionPaused {
                until: Some(until), ..
            } if *until < 0 => reject_invalid(format!(
                "a pause lapses at a time since 1970: got {until} µs"
            )),
            E::SessionResumed {} if !self.paused => {
                reject_invalid("the session is not paused".into())
            }
            // A summary covers a range of what this session already holds: a reference a
            // reader can follow, never a hole or a promise about events to come.
            E::ContextSummarized {
                first_seq,
                last_seq,
                ..
            } if *first_seq == 0 || first_seq > last_seq || *last_seq > self.last_seq => {
                reject_invalid(format!(
                    "a summary covers a range within seqs 1..={}: got {first_seq}..={last_seq}",
                    self.last_seq
                ))
            }
            // A retraction names an event this session already holds (judge_sequenced made
            // this event's seq `last_seq + 1`), once; a retraction is itself never withdrawn,
            // so what the view shows never depends on undoing an undo.
            E::EventRetracted { retracted_seq, .. }
                if *retracted_seq == 0 || *retracted_seq > self.last_seq =>
            {
                reject_invalid(format!(
                    "a retraction names an earlier event of this session, seq 1..={}: got {retracted_seq}",
                    self.last_seq
                ))
            }
            E::EventRetracted { retracted_seq, .. }
                if self.retracted.contains_key(retracted_seq) =>
            {
                reject_invalid(format!(
                    "seq {retracted_seq} is already retracted (by seq {})",
                    self.retracted[retracted_seq]
                ))
            }
            E::EventRetracted { retracted_seq, .. }
                if self.retracted.values().any(|by| by == retracted_seq) =>
            {
                reject_invalid(format!(
                    "seq {retracted_seq} is a retraction; a retraction cannot be retracted"
                ))
            }
            // A framework's saved state is read back by its framework and key: without them
            // it could be found by no one. What the state holds is the framework's own.
            E::FrameworkStateSaved { framework, key, .. }
                if framework.is_empty() || key.is_empty() =>
            {
                reject_invalid(format!(
                    "a framework state names its framework and its key: got framework {framework:?}, key {key:?}"
                ))
            }
            E::ModelResponse {
                tokens_in,
                tokens_out,
                cost_micros,
                ..
            } if self.tokens_in.checked_add(*tokens_in).is_none()
                || self.tokens_out.checked_add(*tokens_out).is_none()
                || self.cost_micros.checked_add(*cost_micros).is_none() =>
            {
                // Client-supplied numbers: a total that cannot be kept is a bad value, and
                // the event is refused with a reason rather than crashing every reader.
                reject_invalid(format!(
                    "token or cost totals would overflow: tokens_in {tokens_in}, \
                     tokens_out {tokens_out}, cost_micros {cost_micros}"
                ))
            }
            _ => Verdict::Accepted,
        }
    }

    /// Applies an event already judged acceptable.
    fn accept(&mut self, e: &EventEnvelope) {
        use SessionEvent as E;
        // A checkpoint's digest covers every event before it, so take it before changing anything.
        let digest_before = matches!(e.event, E::Checkpoint { .. }).then(|| self.digest());

        self.push_recent((e.seq, e.event_id));
        let mut chain = Sha256::new();
        chain.update(self.history.as_bytes());
        chain.update(e.seq.to_be_bytes());
        chain.update(e.event_id.as_bytes());
        self.history = hex::encode(chain.finalize());
        self.updated_at = e.occurred_at;
        if !matches!(e.event, E::WriterClaimed { .. }) {
            self.last_seq = e.seq;
        }
        match &e.event {
            E::SessionStarted {
                agent,
                title,
                tenant,
                writer_token_sha256,
                name_sha256,
            } => {
                self.keeps_gates = e.schema_version >= crate::gate::GATES_FROM_SCHEMA;
                self.started_schema = started_schema(e.schema_version);
                self.writer_token_sha256.clone_from(writer_token_sha256);
                self.name_sha256.clone_from(name_sha256);
                self.tenant.clone_from(tenant);
                self.started = true;
                self.agent = Some(agent.clone());
                self.title.clone_from(title);
                self.epoch = e.writer_epoch;
                self.started_at = e.occurred_at;
            }
            E::SessionForked {
                fork_point,
                agent,
                tenant,
                writer_token_sha256,
                inherited_approvals,
                ..
            } => {
                self.keeps_gates = e.schema_version >= crate::gate::GATES_FROM_SCHEMA;
                self.started_schema = started_schema(e.schema_version);
                self.writer_token_sha256.clone_from(writer_token_sha256);
                let statement = crate::attest::statement(e).unwrap_or_default();
                for inherited in inherited_approvals {
                    self.decided_approvals.insert(
                        inherited.approval_id.clone(),
                        Decision {
                            approval_id: inherited.approval_id.clone(),
                            // The action's words stay the parent's: the digest names it.
                            action: Content::plain(""),
                            approved: true,
                            decided_by: inherited.decided_by.clone(),
                            reason: None,
                            seq: e.seq,
                            statement: statement.clone(),
                            attestation: e.attestation.clone(),
                            action_digest: inherited.action_digest.clone(),
                            request_seq: None,
                            acted_on_by: None,
                            inherited_from: Some(inherited.parent_decision_seq),
                        },
                    );
                }
                self.tenant.clone_from(tenant);
                self.started = true;
                self.agent = Some(agent.clone());
                self.parent = Some(fork_point.clone());
                self.epoch = e.writer_epoch;
                self.started_at = e.occurred_at;
            }
            E::WriterClaimed {
                writer,
                writer_token_sha256,
            } => {
                self.epoch = e.writer_epoch;
                self.writer = Some(writer.clone());
                self.writer_token_sha256.clone_from(writer_token_sha256);
            }
            E::UserRequest { .. } | E::SteeringMessage { .. } => {}
            E::ModelResponse {
                tokens_in,
                tokens_out,
                cost_micros,
                ..
            } => {
                // judge_kind refused any event whose totals would overflow.
                self.model_calls = self.model_calls.saturating_add(1);
                self.tokens_in = self.tokens_in.saturating_add(*tokens_in);
                self.tokens_out = self.tokens_out.saturating_add(*tokens_out);
                self.cost_micros = self.cost_micros.saturating_add(*cost_micros);
            }
            E::ToolCallRequested {
                tool,
                effect,
                approval_id,
                ..
            } => {
                if let Some(approval) = approval_id
                    .as_ref()
                    .and_then(|id| self.decided_approvals.get_mut(id))
                {
                    approval.acted_on_by = Some(e.seq);
                }
                self.tool_calls += 1;
                self.pending_calls.insert(
                    e.seq,
                    PendingCall {
                        seq: e.seq,
                        event_id: e.event_id,
                        tool: tool.clone(),
                        effect: *effect,
                        idempotency_key: e.idempotency_key.clone(),
                        requested_at: e.occurred_at,
                        resolution_required: None,
                        epoch: self.keeps_gates.then_some(e.writer_epoch),
                    },
                );
            }
            E::ToolCallResult {
                call_seq,
                source,
                recorded_by,
                ..
            } => {
                self.pending_calls.remove(call_seq);
                if *source == ResultSource::Operator {
                    self.operator_results.insert(
                        *call_seq,
                        OperatorResult {
                            call_seq: *call_seq,
                            recorded_by: recorded_by.clone(),
                            seq: e.seq,
                            statement: crate::attest::statement(e).unwrap_or_default(),
                            attestation: e.attestation.clone(),
                        },
                    );
                }
            }
            E::ResolutionRequired { call_seq, reason } => {
                if let Some(call) = self.pending_calls.get_mut(call_seq) {
                    call.resolution_required = Some(reason.clone());
                }
            }
            E::PlanUpdated { plan } => self.plan = Some(plan.clone()),
            E::ApprovalRequested {
                approval_id,
                action,
                action_digest,
            } => {
                self.pending_approvals.insert(
                    approval_id.clone(),
                    PendingApproval {
                        approval_id: approval_id.clone(),
                        action: action.clone(),
                        seq: e.seq,
                        action_digest: action_digest.clone(),
                    },
                );
            }
            E::ApprovalDecided {
                approval_id,
                approved,
                decided_by,
                reason,
                action_digest,
                request_seq,
            } => {
                // The request, or the decision this one supersedes, names the action.
                let action = self
                    .pending_approvals
                    .remove(approval_id)
                    .map(|r| r.action)
                    .or_else(|| {
                        self.decided_approvals
                            .get(approval_id)
                            .map(|d| d.action.clone())
                    })
                    .unwrap_or_else(|| Content::plain(""));
                self.decided_approvals.insert(
                    approval_id.clone(),
                    Decision {
                        approval_id: approval_id.clone(),
                        action,
                        approved: *approved,
                        decided_by: decided_by.clone(),
                        reason: reason.clone(),
                        seq: e.seq,
                        statement: crate::attest::statement(e).unwrap_or_default(),
                        attestation: e.attestation.clone(),
                        action_digest: action_digest.clone(),
                        request_seq: *request_seq,
                        acted_on_by: None,
                        inherited_from: None,
                    },
                );
            }
            E::Checkpoint { state_digest, .. } => {
                self.last_checkpoint = Some(CheckpointMark {
                    seq: e.seq,
                    declared_digest: state_digest.clone(),
                    computed_digest: digest_before.unwrap_or_default(),
                });
            }
            E::SessionPaused { until, .. } => {
                self.paused = true;
                self.paused_until = *until;
            }
            E::SessionResumed {} => {
                self.paused = false;
                self.paused_until = None;
            }
            E::SessionEnded { outcome, .. } => self.terminal = Some(*outcome),
            E::SessionErased { .. } => {
                self.erased = true;
                self.withdraw_text();
            }
            // Only the context view keeps summaries (crate::context); the state has no use for them.
            E::ContextSummarized { .. } => {}
            // The withdrawn event stays a fact: its totals, and a tool call it requested (a
            // side effect may have happened), stay as they are. The context view drops it.
            E::EventRetracted { retracted_seq, .. } => {
                self.retracted.insert(*retracted_seq, e.seq);
            }
            // A framework's state is the framework's to read back (range reads); the fold
            // keeps nothing of it.
            E::FrameworkStateSaved { .. } => {}
            // The text is destroyed with its key; the fold keeps the record, never the text.
            E::PayloadRedacted { .. } => self.accept_redaction(e),
        }
    }
}

impl SessionState {
    /// Drops every sensitive text the state holds (an erasure): what projections store of an
    /// erased session keeps its skeleton, not its words, even if they were written in plain text.
    fn withdraw_text(&mut self) {
        self.title = None;
        self.plan = None;
        self.texts_mut(|text| *text = Content::plain(""));
    }

    /// Calls `visit` with every sensitive text the state holds (a title, the plan, approvals'
    /// actions, decisions' reasons, why calls await an operator): what a reader opens.
    pub fn texts_mut(&mut self, mut visit: impl FnMut(&mut Content)) {
        let texts = self
            .title
            .iter_mut()
            .chain(self.plan.iter_mut())
            .chain(self.pending_approvals.values_mut().map(|a| &mut a.action))
            .chain(
                self.decided_approvals
                    .values_mut()
                    .flat_map(|d| std::iter::once(&mut d.action).chain(d.reason.iter_mut())),
            )
            .chain(
                self.pending_calls
                    .values_mut()
                    .filter_map(|c| c.resolution_required.as_mut()),
            );
        for text in texts {
            visit(text);
        }
    }
}

fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

fn is_default_tenant(tenant: &String) -> bool {
    tenant == DEFAULT_TENANT
}

fn reject_invalid(why: String) -> Verdict {
    Verdict::Rejected(Rejection::Invalid(why))
}

/// Whether a session started before schema v6 (see [`SessionState::started_schema`]).
fn before_v6(version: &u32) -> bool {
    *version < crate::limits::LIMITS_FROM_SCHEMA
}

/// What [`SessionState::started_schema`] keeps of a first event's schema version.
fn started_schema(version: u32) -> u32 {
    if before_v6(&version) { 0 } else { version }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::CURRENT_SCHEMA_VERSION;

    const AT: Micros = 1_750_000_000_000_000;
    const HOUR: Micros = 3_600_000_000;

    /// A session started under the current schema, and the seq its next event takes.
    fn started() -> (SessionState, Seq) {
        let session = SessionId(Uuid::from_u128(7));
        let mut state = SessionState::empty(session);
        let start = SessionEvent::SessionStarted {
            agent: "harness".into(),
            title: None,
            tenant: DEFAULT_TENANT.into(),
            writer_token_sha256: None,
            name_sha256: None,
        };
        assert_eq!(state.apply(&envelope(&state, 1, start)), Verdict::Accepted);
        (state, 2)
    }

    /// `event` at `seq`, signed (pauses are the recovery service's, signed from schema v6).
    fn envelope(state: &SessionState, seq: Seq, event: SessionEvent) -> EventEnvelope {
        EventEnvelope {
            event_id: Uuid::from_u128(u128::from(seq)),
            session_id: state.session_id,
            seq,
            writer_epoch: 1,
            occurred_at: AT + i64::try_from(seq).expect("small"),
            causation_id: None,
            idempotency_key: None,
            schema_version: CURRENT_SCHEMA_VERSION,
            event,
            attestation: Some(Attestation {
                key_id: "k1".into(),
                signature: vec![1],
            }),
        }
    }

    fn pause(until: Option<Micros>) -> SessionEvent {
        SessionEvent::SessionPaused {
            reason: Some(Content::plain("lunch")),
            until,
        }
    }

    #[test]
    fn a_pause_keeps_when_it_lapses_and_a_resume_clears_it() {
        let (mut state, seq) = started();
        let until = AT + HOUR;
        assert_eq!(
            state.apply(&envelope(&state, seq, pause(Some(until)))),
            Verdict::Accepted
        );
        assert!(state.paused);
        assert_eq!(state.paused_until, Some(until));
        assert_eq!(state.status(), SessionStatus::Paused);
        // The service's signature covers when the pause lapses; one without an end signs
        // what pauses signed before.
        let signed = |until| crate::attest::statement(&envelope(&state, 9, pause(until)));
        assert!(signed(Some(until)).is_some_and(|s| s.ends_with(&format!("\npause\n{until}"))));
        assert!(signed(None).is_some_and(|s| s.ends_with("\npause")));
        let resume = SessionEvent::SessionResumed {};
        assert_eq!(
            state.apply(&envelope(&state, seq + 1, resume)),
            Verdict::Accepted
        );
        assert!(!state.paused);
        assert_eq!(state.paused_until, None);
        // A pause without an end waits for someone to resume it.
        assert_eq!(
            state.apply(&envelope(&state, seq + 2, pause(None))),
            Verdict::Accepted
        );
        assert!(state.paused);
        assert_eq!(state.paused_until, None);
    }

    #[test]
    fn a_pause_that_lapses_before_1970_is_invalid_and_changes_nothing() {
        let (mut state, seq) = started();
        let before = state.clone();
        for until in [-1, Micros::MIN] {
            let verdict = state.apply(&envelope(&state, seq, pause(Some(until))));
            assert!(
                matches!(&verdict, Verdict::Rejected(Rejection::Invalid(why)) if why.contains("1970")),
                "{until}: {verdict:?}"
            );
            assert_eq!(state, before, "{until}");
        }
        // The epoch itself and any later time are times a pause may lapse at.
        assert_eq!(
            state.apply(&envelope(&state, seq, pause(Some(0)))),
            Verdict::Accepted
        );
        assert_eq!(state.paused_until, Some(0));
    }

    #[test]
    fn a_state_without_a_pause_end_keeps_its_digest() {
        let (mut state, seq) = started();
        assert_eq!(
            state.apply(&envelope(&state, seq, pause(None))),
            Verdict::Accepted
        );
        assert!(!state.canonical_json().contains("paused_until"));
        let mut with_end = state.clone();
        with_end.paused_until = Some(AT);
        assert!(with_end.canonical_json().contains("\"paused_until\""));
        assert_ne!(with_end.digest(), state.digest());
        // A stored state read back keeps it.
        let read: SessionState =
            serde_json::from_str(&with_end.canonical_json()).expect("reads back");
        assert_eq!(read.paused_until, Some(AT));
    }
}
