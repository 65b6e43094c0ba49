//! Privileged events and what their attestation signs.
//!
//! A decision on an approval and an operator's record of an in-doubt call are facts only a
//! verified person may establish, through the recovery service, which signs the event's
//! *statement* with its key. The fold itself stays pure and needs no keys: it accepts such
//! events and keeps each one's statement and attestation in the state; the recovery service
//! verifies them before it lets a session resume. A decision a harness wrote itself (straight
//! to Kafka, unsigned or with a signature of its own) is kept, but the gate stays shut until
//! an operator records the decision again through the service (a later decision supersedes an
//! earlier one).

use sessionlog_schemas::{CallOutcome, EventEnvelope, ResultSource, SessionEvent};

/// The first line of every statement: which statement format was signed.
pub const STATEMENT_FORMAT: &str = "sessionlog-attestation-v1";

/// Whether `event` is privileged: only the recovery service may append it, signed.
pub fn is_privileged(event: &SessionEvent) -> bool {
    matches!(
        event,
        SessionEvent::ApprovalDecided { .. }
            | SessionEvent::ToolCallResult {
                source: ResultSource::Operator,
                ..
            }
    )
}

/// The text a privileged event's attestation signs: the event's identity and position (so a
/// signature cannot be moved to another event, session or place) and the fact it records.
/// `None` for events that are not privileged.
pub fn statement(e: &EventEnvelope) -> Option<String> {
    let fact = match &e.event {
        SessionEvent::ApprovalDecided {
            approval_id,
            approved,
            decided_by,
            ..
        } => format!("approval\n{approval_id}\n{approved}\n{decided_by}"),
        SessionEvent::ToolCallResult {
            call_seq,
            outcome,
            source: ResultSource::Operator,
            recorded_by,
            ..
        } => {
            let outcome = match outcome {
                CallOutcome::Succeeded => "succeeded",
                CallOutcome::Failed => "failed",
            };
            format!(
                "operator_result\n{call_seq}\n{outcome}\n{}",
                recorded_by.as_deref().unwrap_or_default()
            )
        }
        _ => return None,
    };
    Some(format!(
        "{STATEMENT_FORMAT}\n{}\n{}\n{}\n{}\n{fact}",
        e.session_id, e.seq, e.writer_epoch, e.event_id
    ))
}
