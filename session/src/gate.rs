//! Gates: where a session waits for someone, kept by the fold whoever writes.
//!
//! A session waits while a tool call needs an operator (it was stopped for one, or it is a
//! non-idempotent call whose writer was superseded before it recorded a result), while an
//! approval is pending, and while it is paused. In a session that keeps its gates
//! ([`SessionState::keeps_gates`]: started by an event of schema v5 or later):
//!
//! - a harness's claim is refused while the session waits, and while a non-idempotent call is
//!   pending (the claim would leave it in doubt): the recovery service, whose claims are signed,
//!   takes such a session over and stops it for an operator;
//! - a new intent (`ToolCallRequested`) is refused while the session waits;
//! - only the events that settle a wait open it: a signed decision naming the request it
//!   decides, a signed operator or resolver result, an unpause;
//! - an approval id is requested once, and acted on by at most one call, whose digest must be
//!   the one approved; a signed decision names the request it decides, and a later one
//!   supersedes it only while nothing acted on it (the service records a decision again when
//!   the one in the log does not carry its signature).
//!
//! The rules live here, in the fold, so ingest, the library, recovery, the projector and a raw
//! Kafka producer meet the same ones. What the fold cannot check is whether a signature is
//! genuine: it holds no keys (so every reader folds a log the same way forever, whatever keys
//! were rotated since). The recovery service verifies the signatures a session relies on
//! before it acts on them (docs/design.md, "Gates").

use crate::attest;
use crate::state::SessionState;
use crate::verdict::{Rejection, Verdict};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Content, EffectClass, Epoch, EventEnvelope, ResultSource, Seq};
use sessionlog_schemas::{SessionEvent, call_digest};
use sha2::{Digest, Sha256};
use std::fmt;

/// The first schema version whose sessions keep their gates in the fold.
pub const GATES_FROM_SCHEMA: u32 = 5;

/// Why a session cannot go on now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gate {
    /// Tool calls an operator must settle (`sessionlog resolve`).
    NeedsResolution {
        /// The calls' seqs.
        calls: Vec<Seq>,
    },
    /// Approvals waiting for a decision (`sessionlog approve`).
    AwaitingApproval {
        /// The approvals' ids.
        approvals: Vec<String>,
    },
    /// Paused until someone unpauses it (`sessionlog unpause`).
    Paused,
    /// Non-idempotent calls without a result: a takeover would leave them in doubt, so a
    /// harness resumes such a session through the recovery service, not by a claim.
    CallInDoubt {
        /// The calls' seqs.
        calls: Vec<Seq>,
    },
}

impl Gate {
    /// A short, stable label: the HTTP problem `code` and the rejection label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::NeedsResolution { .. } => "needs_resolution",
            Self::AwaitingApproval { .. } => "awaiting_approval",
            Self::Paused => "paused",
            Self::CallInDoubt { .. } => "call_in_doubt",
        }
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeedsResolution { calls } => write!(
                f,
                "the session waits for an operator to record the outcome of the tool call(s) at seq {calls:?} (sessionlog resolve)"
            ),
            Self::AwaitingApproval { approvals } => write!(
                f,
                "the session waits for a decision on approval(s) {approvals:?} (sessionlog approve)"
            ),
            Self::Paused => write!(f, "the session is paused (sessionlog unpause)"),
            Self::CallInDoubt { calls } => write!(
                f,
                "non-idempotent tool call(s) at seq {calls:?} have no result: a takeover would leave them in doubt; resume the session through the recovery service, which stops it for an operator"
            ),
        }
    }
}

/// Hex SHA-256 of a writer token: what starts, forks and claims record.
pub fn writer_token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl SessionState {
    /// What the session waits for now, if anything: an operator, then an approval, then an
    /// unpause.
    pub fn gate(&self) -> Option<Gate> {
        let calls: Vec<Seq> = self
            .pending_calls
            .values()
            .filter(|c| c.needs_operator(self.epoch))
            .map(|c| c.seq)
            .collect();
        if !calls.is_empty() {
            return Some(Gate::NeedsResolution { calls });
        }
        if !self.pending_approvals.is_empty() {
            return Some(Gate::AwaitingApproval {
                approvals: self.pending_approvals.keys().cloned().collect(),
            });
        }
        self.paused.then_some(Gate::Paused)
    }

    /// What keeps a harness from taking the session over: [`Self::gate`], or a non-idempotent
    /// call without a result, which the takeover would leave in doubt.
    pub fn gate_for_takeover(&self) -> Option<Gate> {
        self.gate().or_else(|| {
            let calls: Vec<Seq> = self
                .pending_calls
                .values()
                .filter(|c| c.effect == EffectClass::NonIdempotent)
                .map(|c| c.seq)
                .collect();
            (!calls.is_empty()).then_some(Gate::CallInDoubt { calls })
        })
    }

    /// Whether a writer presenting `token` (or none) may append at `epoch`: the epoch must be
    /// the current one and, when the current writer's start or claim recorded a token's hash,
    /// the token must be that one. A fenced harness that learns the current epoch still cannot
    /// write with it. The services (ingest, the library's stateless writers) ask this before
    /// they append for a caller; the events themselves carry no token.
    pub fn admits_writer(&self, epoch: Epoch, token: Option<&str>) -> Result<(), Rejection> {
        let current = self.epoch;
        if epoch < current {
            return Err(Rejection::Zombie { epoch, current });
        }
        if epoch > current {
            return Err(Rejection::UnclaimedEpoch { epoch, current });
        }
        match (&self.writer_token_sha256, token) {
            (None, _) => Ok(()),
            (Some(_), None) => Err(Rejection::WriterTokenRequired),
            (Some(expected), Some(token)) if writer_token_sha256(token) == *expected => Ok(()),
            (Some(_), Some(_)) => Err(Rejection::WrongWriterToken { epoch }),
        }
    }

    /// A claim above the current epoch: a signed one (the recovery service judged the
    /// session) is accepted; a harness's is refused while the session waits or a
    /// non-idempotent call is pending.
    pub(crate) fn judge_claim(&self, e: &EventEnvelope) -> Verdict {
        if !self.keeps_gates || attest::is_signed(e) {
            return Verdict::Accepted;
        }
        match self.gate_for_takeover() {
            Some(gate) => Verdict::Rejected(Rejection::Gated(gate)),
            None => Verdict::Accepted,
        }
    }

    /// Operator kinds, in a session started under schema v6 or later: a pause and an unpause
    /// are an operator's, signed by the recovery service for a verified person; a steering
    /// message is signed, or written by the current writer under its own name (a harness's
    /// own note), never in someone else's name.
    pub(crate) fn judge_operator_kinds(&self, e: &EventEnvelope) -> Verdict {
        use SessionEvent as E;
        if !self.keeps_v6_rules() || attest::is_signed(e) {
            return Verdict::Accepted;
        }
        match &e.event {
            E::SessionPaused { .. } => Verdict::Rejected(Rejection::Unsigned {
                kind: "a pause".into(),
            }),
            E::SessionResumed {} => Verdict::Rejected(Rejection::Unsigned {
                kind: "an unpause".into(),
            }),
            E::SteeringMessage { author, .. } if Some(author.as_str()) != self.writer_name() => {
                invalid(format!(
                    "a harness's steering message names its own writer as author ({:?}); an operator's comes through the recovery service (POST /v1/sessions/{{id}}/steering)",
                    self.writer_name().unwrap_or_default()
                ))
            }
            _ => Verdict::Accepted,
        }
    }

    /// The name the current epoch's writer wrote under: its claim's, or the start's agent.
    pub fn writer_name(&self) -> Option<&str> {
        self.writer.as_deref().or(self.agent.as_deref())
    }

    /// The rules of a session that keeps its gates, for a sequenced event that passed the
    /// epoch, seq and kind rules.
    pub(crate) fn judge_gates(&self, e: &EventEnvelope) -> Verdict {
        use SessionEvent as E;
        match &e.event {
            E::ToolCallRequested {
                tool,
                arguments,
                approval_id,
                ..
            } => {
                if let Some(gate) = self.gate() {
                    return Verdict::Rejected(Rejection::Gated(gate));
                }
                match approval_id {
                    Some(id) => self.judge_approved_call(id, tool, e, arguments),
                    None => Verdict::Accepted,
                }
            }
            E::ToolCallResult {
                call_seq, source, ..
            } => match source {
                ResultSource::Executed
                    if self
                        .pending_calls
                        .get(call_seq)
                        .is_some_and(|c| c.needs_operator(self.epoch)) =>
                {
                    invalid(format!(
                        "tool call at seq {call_seq} is in doubt (its writer was superseded before it recorded a result): an operator records its outcome"
                    ))
                }
                ResultSource::Executed => Verdict::Accepted,
                ResultSource::Resolver | ResultSource::Operator if !attest::is_signed(e) => {
                    Verdict::Rejected(Rejection::Unsigned {
                        kind: format!("a {source:?} result"),
                    })
                }
                ResultSource::Resolver | ResultSource::Operator => Verdict::Accepted,
            },
            E::ApprovalRequested { approval_id, .. }
                if self.decided_approvals.contains_key(approval_id) =>
            {
                invalid(format!(
                    "approval {approval_id:?} was already requested and decided: an approval id is requested once per session"
                ))
            }
            E::ApprovalDecided {
                approval_id,
                request_seq,
                action_digest,
                ..
            } => {
                if !attest::is_signed(e) {
                    return Verdict::Rejected(Rejection::Unsigned {
                        kind: "a decision".into(),
                    });
                }
                // The request it decides: pending, or decided by a decision nothing acted on yet,
                // which a later signed one supersedes (the service records a decision again when
                // the one in the log does not carry its signature).
                let (asked_at, asked_for) = match (
                    self.pending_approvals.get(approval_id),
                    self.decided_approvals.get(approval_id),
                ) {
                    (Some(request), _) => (Some(request.seq), &request.action_digest),
                    (None, Some(d)) if d.may_be_superseded() => (d.request_seq, &d.action_digest),
                    (None, _) => {
                        return invalid(format!(
                            "approval {approval_id:?} was acted on or carried over: its decision stands"
                        ));
                    }
                };
                if *request_seq != asked_at {
                    return invalid(format!(
                        "the decision names request seq {request_seq:?}; approval {approval_id:?} was requested at seq {asked_at:?}"
                    ));
                }
                if action_digest != asked_for {
                    return invalid(format!(
                        "the decision names action digest {action_digest:?}; the request named {asked_for:?}"
                    ));
                }
                Verdict::Accepted
            }
            _ => Verdict::Accepted,
        }
    }

    /// A call that acts on approval `id`: granted here (or carried over by this fork), not
    /// acted on yet, and, where the arguments are readable, the very call approved.
    fn judge_approved_call(
        &self,
        id: &str,
        tool: &str,
        e: &EventEnvelope,
        arguments: &Content,
    ) -> Verdict {
        let Some(decision) = self.decided_approvals.get(id) else {
            return invalid(format!(
                "the call acts on approval {id:?}, which this session has not granted"
            ));
        };
        if !decision.approved {
            return invalid(format!(
                "the call acts on approval {id:?}, which was denied"
            ));
        }
        if let Some(by) = decision.acted_on_by {
            return invalid(format!(
                "approval {id:?} was already acted on by the call at seq {by}"
            ));
        }
        // Sealed arguments cannot be digested here; the services check them before sealing.
        if let (Some(approved), Some(text)) = (&decision.action_digest, arguments.as_plain()) {
            let digest = call_digest(tool, e.idempotency_key.as_deref(), text);
            if digest != *approved {
                return invalid(format!(
                    "the call is not the one approval {id:?} approved (call digest {digest}, approved {approved})"
                ));
            }
        }
        Verdict::Accepted
    }
}

fn invalid(why: String) -> Verdict {
    Verdict::Rejected(Rejection::Invalid(why))
}
