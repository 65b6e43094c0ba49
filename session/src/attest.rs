//! Privileged events and what their attestation signs.
//!
//! A decision on an approval and an operator's record of an in-doubt call are facts only a
//! verified person may establish, through the recovery service, which signs the event's
//! *statement* with its key; so are a resolver's result, a claim the service makes after
//! judging a session's gates, and a fork that carries approvals over. The fold itself stays
//! pure and needs no keys. In a session that keeps its gates (schema v5 on, see
//! [`crate::gate`]) it refuses a privileged event without an attestation and accepts a signed
//! claim past a wait; it keeps each privileged event's statement and attestation in the state,
//! and the recovery service verifies them before it acts on them. In an older session a
//! decision a harness wrote itself is kept, but the gate stays shut until an operator records
//! the decision again through the service (a later decision supersedes an earlier one).

use sessionlog_schemas::{CallOutcome, EventEnvelope, ResultSource, SessionEvent};

/// The first line of every statement: which statement format was signed.
pub const STATEMENT_FORMAT: &str = "sessionlog-attestation-v1";

/// Whether `event` is privileged: only the recovery service may append it, signed.
pub fn is_privileged(event: &SessionEvent) -> bool {
    matches!(
        event,
        SessionEvent::ApprovalDecided { .. }
            | SessionEvent::ToolCallResult {
                source: ResultSource::Operator | ResultSource::Resolver,
                ..
            }
            | SessionEvent::SessionPaused { .. }
            | SessionEvent::SessionResumed {}
            | SessionEvent::PayloadRedacted { .. }
    )
}

/// Whether `e` carries an attestation (a key id and a signature). Whether the signature is
/// genuine is for a holder of the service's public keys to check (the recovery service's
/// notary); the fold only refuses what carries none.
pub fn is_signed(e: &EventEnvelope) -> bool {
    e.attestation
        .as_ref()
        .is_some_and(|a| !a.key_id.is_empty() && !a.signature.is_empty())
}

/// The text an attestation signs: the event's identity and position (so a
/// signature cannot be moved to another event, session or place) and the fact it records.
/// `None` for events that carry no attestation (see [`is_privileged`]; claims and forks the
/// recovery service makes are signed too).
pub fn statement(e: &EventEnvelope) -> Option<String> {
    let fact = match &e.event {
        SessionEvent::ApprovalDecided {
            approval_id,
            approved,
            decided_by,
            request_seq,
            action_digest,
            ..
        } => {
            let mut fact = format!("approval\n{approval_id}\n{approved}\n{decided_by}");
            // Schema v5: the request decided and what it named, so the signature approves
            // exactly that request. (Absent on older decisions, whose statements stay as signed.)
            if request_seq.is_some() || action_digest.is_some() {
                fact.push_str(&format!(
                    "\n{}\n{}",
                    request_seq.map(|s| s.to_string()).unwrap_or_default(),
                    action_digest.as_deref().unwrap_or("-")
                ));
            }
            fact
        }
        SessionEvent::ToolCallResult {
            call_seq,
            outcome,
            source: source @ (ResultSource::Operator | ResultSource::Resolver),
            recorded_by,
            ..
        } => {
            let outcome = match outcome {
                CallOutcome::Succeeded => "succeeded",
                CallOutcome::Failed => "failed",
            };
            let what = match source {
                ResultSource::Operator => "operator_result",
                _ => "resolver_result",
            };
            format!(
                "{what}\n{call_seq}\n{outcome}\n{}",
                recorded_by.as_deref().unwrap_or_default()
            )
        }
        SessionEvent::WriterClaimed {
            writer,
            writer_token_sha256,
        } => format!(
            "claim\n{writer}\n{}",
            writer_token_sha256.as_deref().unwrap_or("-")
        ),
        SessionEvent::SessionForked {
            fork_point,
            forked_by,
            writer_token_sha256,
            inherited_approvals,
            ..
        } => {
            let mut fact = format!(
                "fork\n{}\n{}\n{}\n{}",
                fork_point.parent_session_id,
                fork_point.parent_seq,
                forked_by.as_deref().unwrap_or("-"),
                writer_token_sha256.as_deref().unwrap_or("-")
            );
            for a in inherited_approvals {
                fact.push_str(&format!(
                    "\ninherited\n{}\n{}\n{}\n{}",
                    a.approval_id,
                    a.action_digest.as_deref().unwrap_or("-"),
                    a.decided_by,
                    a.parent_decision_seq
                ));
            }
            fact
        }
        // Schema v6 on: an operator's hand on a session. A pause's reason and a steering
        // message's words are sealed text, which the statement does not carry; the position
        // and event id bind the signature to this event. When a pause lapses (v7) is signed
        // too, so no one moves it; a pause without an end signs what it signed before.
        SessionEvent::SessionPaused { until: None, .. } => "pause".to_string(),
        SessionEvent::SessionPaused {
            until: Some(until), ..
        } => format!("pause\n{until}"),
        SessionEvent::SessionResumed {} => "unpause".to_string(),
        SessionEvent::SteeringMessage { author, .. } => format!("steering\n{author}"),
        // Schema v8: which field, by whom, why, when and which key; the signature covers the
        // readable record whole.
        SessionEvent::PayloadRedacted {
            redacted_seq,
            field,
            redacted_by,
            reason,
            redacted_at,
            key_id,
            key_destroyed,
        } => format!(
            "redaction\n{redacted_seq}\n{field}\n{redacted_by}\n{redacted_at}\n{key_id}\n{key_destroyed}\n{reason}"
        ),
        _ => return None,
    };
    Some(format!(
        "{STATEMENT_FORMAT}\n{}\n{}\n{}\n{}\n{fact}",
        e.session_id, e.seq, e.writer_epoch, e.event_id
    ))
}
