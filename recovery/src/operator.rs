//! What operators do to sessions: record an in-doubt call's outcome, decide an approval, pause,
//! unpause and steer.
//! Each validates against the session rebuilt from the log before appending anything, then
//! appends as a new writer epoch (fencing any harness still holding the old one), signed and
//! confirmed: the answer comes only once the fold accepted the event. Two of them racing on
//! one session (two approvers, two recovery instances) each fence the other's claim at most
//! once; the loser starts again from a fresh rebuild, so no decision answered with success is
//! lost.

use crate::{Error, Recovery, Result};
use serde::Serialize;
use sessionlog_log::retry::{self, Retryable};
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_schemas::{CallOutcome, Content, Micros, ResultSource, SessionEvent, SessionId};
use sessionlog_session::{Rejection, SessionState};
use sessionlog_store::Wait;
use std::sync::Arc;

/// How many times a privileged action starts again after losing a race for the session.
const RACE_TRIES: usize = 8;

/// Whether `error` means another writer got to the session between this action's rebuild and
/// its event (a claim of its own, or an event at its seq): worth starting again from the log.
pub(crate) fn lost_a_race(error: &Error) -> bool {
    use sessionlog_producer::Error as P;
    matches!(
        error,
        Error::Producer(
            P::Fenced { .. }
                | P::LostClaim { .. }
                | P::Rejected {
                    rejection: Rejection::Zombie { .. }
                        | Rejection::SeqConflict { .. }
                        | Rejection::StaleClaim { .. },
                    ..
                }
        )
    )
}

/// An operator's record of what an in-doubt call did.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// The seq of the call in doubt.
    pub call_seq: u64,
    /// How it ended.
    pub outcome: CallOutcome,
    /// What it returned, as far as the operator knows.
    pub output: String,
    /// Who records it.
    pub operator: String,
    /// Why they believe it.
    pub reason: String,
}

/// An operator's hand on a running session, appended signed in the operator's name.
#[derive(Clone, Debug)]
pub enum OperatorAct {
    /// Stop the session until someone unpauses it, or until `until` (kept in the log, the
    /// reason sealed like any text).
    Pause {
        /// Why.
        reason: String,
        /// When the pause lapses and the session wants its harness again, in microseconds
        /// since the Unix epoch (see [`pause_until`]); `None`: until someone unpauses it.
        until: Option<Micros>,
    },
    /// Let a paused session go on.
    Unpause,
    /// A message for the agent, which the next context view shows as the operator's.
    Steer {
        /// The message.
        text: String,
    },
}

impl OperatorAct {
    /// What the act is called in answers and audit lines.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Pause { .. } => "pause",
            Self::Unpause => "unpause",
            Self::Steer { .. } => "steering message",
        }
    }

    /// The event the act appends to a session in `state`, or why it does not apply.
    fn event(
        &self,
        session: SessionId,
        state: &SessionState,
        operator: &str,
    ) -> Result<SessionEvent> {
        let nothing = |reason| {
            Err(Error::NothingToDo {
                session: session.to_string(),
                reason,
            })
        };
        if state.terminal.is_some() || state.erased {
            return Err(Error::Ended {
                session: session.to_string(),
                outcome: match state.terminal {
                    Some(outcome) => format!("{outcome:?}").to_lowercase(),
                    None => "erased".into(),
                },
            });
        }
        match self {
            Self::Pause { .. } if state.paused => {
                nothing("is already paused (`sessionlog unpause` lifts it)")
            }
            Self::Pause { reason, until } => Ok(SessionEvent::SessionPaused {
                reason: Some(Content::from(reason.clone())),
                until: *until,
            }),
            Self::Unpause if !state.paused => nothing("is not paused; there is nothing to unpause"),
            Self::Unpause => Ok(SessionEvent::SessionResumed {}),
            Self::Steer { text } => Ok(SessionEvent::SteeringMessage {
                author: operator.to_string(),
                content: Content::from(text.clone()),
            }),
        }
    }
}

/// When a pause written as an RFC 3339 time (`2026-12-05T09:00:00Z`) lapses, in microseconds
/// since the Unix epoch, or why it cannot: the text is no RFC 3339 time, or not one after
/// `now` (a pause that lapsed already would end as it began: a typo, or the wrong year).
pub fn pause_until(text: &str, now: Micros) -> std::result::Result<Micros, String> {
    let shown: String = text.chars().take(64).collect();
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            format!("`until` must be an RFC 3339 time like 2026-12-05T09:00:00Z, not {shown:?}")
        })?;
    let until = i64::try_from(time.unix_timestamp_nanos() / 1_000)
        .map_err(|_| format!("`until` {shown:?} is out of range"))?;
    if until <= now {
        return Err(format!(
            "`until` {shown:?} has passed: a pause lapses at a time to come"
        ));
    }
    Ok(until)
}

/// A session that waits for an operator, as the projection lists it.
#[derive(Clone, Debug, Serialize)]
pub struct StuckSession {
    /// The session.
    pub session_id: SessionId,
    /// Its status (`needs_resolution`, or `awaiting_approval`).
    pub status: String,
    /// Its last seq.
    pub last_seq: i64,
}

impl Recovery {
    /// Records an operator's outcome for an in-doubt call. Fails, appending nothing, when the
    /// call is not in doubt (it has a result, or there is no such call).
    pub async fn record_resolution(
        &self,
        session: SessionId,
        resolution: Resolution,
    ) -> Result<Appended> {
        // Without a key nothing could be signed: fail before the claim fences the harness.
        self.notary().signing_key()?;
        (|| self.record_resolution_once(session, resolution.clone()))
            .retry(retry::tries(RACE_TRIES))
            .when(lost_a_race)
            .await
    }

    async fn record_resolution_once(
        &self,
        session: SessionId,
        resolution: Resolution,
    ) -> Result<Appended> {
        let writer = format!("operator:{}", resolution.operator);
        self.claim_and_append(session, &writer, |state| {
            let (event_id, idempotency_key) =
                self.resolvable(session, state, resolution.call_seq)?;
            let event = SessionEvent::ToolCallResult {
                call_seq: resolution.call_seq,
                outcome: resolution.outcome,
                output: Content::plain(resolution.output.clone()),
                source: ResultSource::Operator,
                recorded_by: Some(resolution.operator.clone()),
                note: Some(resolution.reason.clone().into()),
            };
            Ok((event, event_id, idempotency_key))
        })
        .await
    }

    /// Claims `session` as `writer` and appends the signed event `judge` makes of the session's
    /// state, judged twice: on the rebuild, so a refused request fences no harness, and on the
    /// state the claim caught up to, since another instance may have settled the same thing in
    /// between and its answered event must stand. `judge` answers the event, its causation id
    /// and its idempotency key.
    pub(crate) async fn claim_and_append<F>(
        &self,
        session: SessionId,
        writer: &str,
        judge: F,
    ) -> Result<Appended>
    where
        F: Fn(&SessionState) -> Result<(SessionEvent, Option<uuid::Uuid>, Option<String>)>,
    {
        let rebuilt = self.rebuild(session).await?;
        self.claim_and_append_from(rebuilt, writer, judge).await
    }

    /// [`Self::claim_and_append`] on a session the caller has just rebuilt (one rebuild,
    /// not two, for an act that first looked at the session).
    pub(crate) async fn claim_and_append_from<F>(
        &self,
        rebuilt: crate::RebuiltSession,
        writer: &str,
        judge: F,
    ) -> Result<Appended>
    where
        F: Fn(&SessionState) -> Result<(SessionEvent, Option<uuid::Uuid>, Option<String>)>,
    {
        judge(&rebuilt.state)?;
        let (mut claimed, _) = SessionWriter::claim_from(
            Arc::clone(self.log()),
            rebuilt.state,
            rebuilt.partition,
            rebuilt.end_offset,
            writer,
        )
        .await?;
        let (event, causation_id, idempotency_key) = judge(claimed.state())?;
        self.append_attested(&mut claimed, event, causation_id, idempotency_key)
            .await
    }

    /// Whether the call at `call_seq` may be recorded now: in doubt, or settled by an operator
    /// record the service cannot verify (someone else wrote it), which recording it again
    /// supersedes. The call's event id and key, for the record's causation.
    fn resolvable(
        &self,
        session: SessionId,
        state: &SessionState,
        call_seq: u64,
    ) -> Result<(Option<uuid::Uuid>, Option<String>)> {
        match state.pending_calls.get(&call_seq) {
            Some(call) => Ok((Some(call.event_id), call.idempotency_key.clone())),
            None => match state.operator_results.get(&call_seq) {
                Some(r) if !self.notary().verifies(&r.statement, r.attestation.as_ref()) => {
                    Ok((None, None))
                }
                _ => Err(Error::NotInDoubt {
                    session: session.to_string(),
                    call_seq,
                }),
            },
        }
    }

    /// Whether approval `approval_id` may be decided now: pending; or decided by an event the
    /// service cannot verify (a harness's own, forged or unsigned), which a new decision
    /// supersedes: in a session that keeps its gates only while nothing acted on it (the
    /// fold's rule), in an older one always. The request's seq and digest the decision names.
    fn decidable(
        &self,
        session: SessionId,
        state: &SessionState,
        approval_id: &str,
    ) -> Result<(Option<u64>, Option<String>)> {
        if let Some(request) = state.pending_approvals.get(approval_id) {
            return Ok((Some(request.seq), request.action_digest.clone()));
        }
        match state.decided_approvals.get(approval_id) {
            Some(d)
                if !self.notary().verifies(&d.statement, d.attestation.as_ref())
                    && (!state.keeps_gates || d.may_be_superseded()) =>
            {
                Ok((d.request_seq, d.action_digest.clone()))
            }
            _ => Err(Error::NoSuchApproval {
                session: session.to_string(),
                approval_id: approval_id.to_string(),
            }),
        }
    }

    /// Appends a privileged event signed by the service's key, confirmed: the answer comes
    /// once the fold accepted it (a race lost to another writer is [`Error::Producer`]).
    pub(crate) async fn append_attested(
        &self,
        writer: &mut SessionWriter,
        event: SessionEvent,
        causation_id: Option<uuid::Uuid>,
        idempotency_key: Option<String>,
    ) -> Result<Appended> {
        let mut envelope =
            writer
                .envelopes(vec![event])
                .pop()
                .ok_or_else(|| Error::Attestation {
                    reason: "no envelope was prepared".into(),
                })?;
        envelope.causation_id = causation_id;
        envelope.idempotency_key = idempotency_key;
        self.notary().attest(&mut envelope)?;
        Ok(writer.append_envelope_confirmed(envelope).await?)
    }

    /// Records a human's decision on a pending approval. Fails, appending nothing, when no such
    /// approval is pending.
    pub async fn decide_approval(
        &self,
        session: SessionId,
        approval_id: &str,
        approved: bool,
        decided_by: &str,
        reason: Option<String>,
    ) -> Result<Appended> {
        // Without a key nothing could be signed: fail before the claim fences the harness.
        self.notary().signing_key()?;
        (|| self.decide_approval_once(session, approval_id, approved, decided_by, reason.clone()))
            .retry(retry::tries(RACE_TRIES))
            .when(lost_a_race)
            .await
    }

    async fn decide_approval_once(
        &self,
        session: SessionId,
        approval_id: &str,
        approved: bool,
        decided_by: &str,
        reason: Option<String>,
    ) -> Result<Appended> {
        self.claim_and_append(session, &format!("approver:{decided_by}"), |state| {
            let (request_seq, action_digest) = self.decidable(session, state, approval_id)?;
            // The decision names the request it decides and what that request named, and its
            // signature covers both: it approves exactly that.
            let event = SessionEvent::ApprovalDecided {
                approval_id: approval_id.to_string(),
                approved,
                decided_by: decided_by.to_string(),
                reason: reason.clone().map(Content::from),
                request_seq,
                action_digest,
            };
            Ok((event, None, None))
        })
        .await
    }

    /// Pauses, unpauses or steers `session` for `operator` (a verified person): takes the
    /// session over as `operator:<operator>` (the harness that was writing is fenced and must
    /// resume) and appends the act, signed and confirmed. An act that does not apply (a pause
    /// of a paused session, any act on an ended one) appends nothing, not even the claim.
    pub async fn operate(
        &self,
        session: SessionId,
        operator: &str,
        act: OperatorAct,
    ) -> Result<Appended> {
        // Without a key nothing could be signed: fail before the claim fences the harness.
        self.notary().signing_key()?;
        let writer = format!("operator:{operator}");
        (|| {
            self.claim_and_append(session, &writer, |state| {
                Ok((act.event(session, state, operator)?, None, None))
            })
        })
        .retry(retry::tries(RACE_TRIES))
        .when(lost_a_race)
        .await
    }

    /// Sessions the projection shows as needing an operator (`sessions_awaiting`, which the
    /// projector keeps as sessions enter and leave the wait), by id.
    pub async fn sessions_needing_resolution(&self) -> Result<Vec<StuckSession>> {
        self.sessions_awaiting(Wait::Operator).await
    }

    /// Sessions the projection shows as awaiting a decision on an approval, by id.
    pub async fn sessions_awaiting_approval(&self) -> Result<Vec<StuckSession>> {
        self.sessions_awaiting(Wait::Approval).await
    }

    async fn sessions_awaiting(&self, whom: Wait) -> Result<Vec<StuckSession>> {
        Ok(self
            .store()
            .awaiting(whom)
            .await?
            .into_iter()
            .map(|waiting| StuckSession {
                session_id: waiting.session_id,
                status: waiting.status,
                last_seq: waiting.last_seq,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-05T09:00:00Z.
    const AT: Micros = 1_796_461_200_000_000;

    #[test]
    fn a_pause_lapses_at_an_rfc3339_time_to_come() {
        assert_eq!(pause_until("2026-12-05T09:00:00Z", AT - 1), Ok(AT));
        assert_eq!(pause_until("2026-12-05T10:00:00+01:00", AT - 1), Ok(AT));
        assert_eq!(pause_until("2026-12-05T09:00:00.000001Z", AT), Ok(AT + 1));
        for (text, why) in [
            ("2026-12-05T09:00:00Z", "has passed"),
            ("1969-12-31T23:59:59Z", "has passed"),
            ("tomorrow", "RFC 3339"),
            ("+30m", "RFC 3339"),
            ("2026-12-05", "RFC 3339"),
            ("", "RFC 3339"),
        ] {
            let error = pause_until(text, AT).expect_err(text);
            assert!(error.contains(why), "{text}: {error}");
        }
        let long = "9".repeat(10_000);
        assert!(pause_until(&long, AT).expect_err("long").len() < 200);
    }
}
