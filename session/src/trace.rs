//! Trace spans: one per model call and one per tool call, derived from accepted events.
//!
//! A model call is one event (`ModelResponse` carries its start), so its span is written
//! whole. A tool call opens with `ToolCallRequested` (outcome `pending`) and is completed by
//! its `ToolCallResult`; both writes carry the event's log offset as their write timestamp,
//! so the completing write wins whatever order the two reach the store in.
//!
//! Pure: no I/O. The projector turns [`SpanWrite`]s into rows; the arithmetic on the
//! client-supplied numbers (times, token counts, cost) saturates instead of overflowing.

use crate::SessionState;
use sessionlog_schemas::{CallOutcome, EventEnvelope, Micros, Seq, SessionEvent, SessionId};

/// `span_kind` of a model call.
pub const MODEL_CALL: &str = "model_call";
/// `span_kind` of a tool call.
pub const TOOL_CALL: &str = "tool_call";

/// One span write: the columns an event knows. `None` columns are left as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanWrite {
    /// The session.
    pub session_id: SessionId,
    /// The seq that opened the span (the model response, or the tool call's request).
    pub span_seq: Seq,
    /// [`MODEL_CALL`] or [`TOOL_CALL`].
    pub span_kind: &'static str,
    /// The model or the tool.
    pub name: String,
    /// When the call began.
    pub start_us: Micros,
    /// The seq that closed the span.
    pub end_seq: Option<Seq>,
    /// When the call ended.
    pub end_us: Option<Micros>,
    /// Prompt tokens (model calls).
    pub tokens_in: Option<u64>,
    /// Completion tokens (model calls).
    pub tokens_out: Option<u64>,
    /// Cost in millionths of a US dollar (model calls).
    pub cost_micros: Option<u64>,
    /// `ok`, `pending`, `resolution_required`, `succeeded` or `failed`.
    pub outcome: &'static str,
}

impl SpanWrite {
    /// The span's duration, once it has ended. Both ends come from the client, so the
    /// difference saturates rather than overflow (a panic in debug builds, a wrap in release).
    pub fn duration_us(&self) -> Option<Micros> {
        self.end_us.map(|end| end.saturating_sub(self.start_us))
    }

    /// The day bucket of the span's start, `YYYY-MM-DD` in UTC.
    pub fn day(&self) -> String {
        day_of(self.start_us)
    }
}

/// The span write an event makes, judged against the state *before* it is applied
/// (a result needs the request it answers). Only meaningful for accepted events.
pub fn span_of(event: &EventEnvelope, before: &SessionState) -> Option<SpanWrite> {
    let base = |span_seq, span_kind, name: &str, start_us, outcome| SpanWrite {
        session_id: event.session_id,
        span_seq,
        span_kind,
        name: name.to_string(),
        start_us,
        end_seq: None,
        end_us: None,
        tokens_in: None,
        tokens_out: None,
        cost_micros: None,
        outcome,
    };
    match &event.event {
        SessionEvent::ModelResponse {
            model,
            tokens_in,
            tokens_out,
            cost_micros,
            started_at,
            ..
        } => Some(SpanWrite {
            end_seq: Some(event.seq),
            end_us: Some(event.occurred_at),
            tokens_in: Some(*tokens_in),
            tokens_out: Some(*tokens_out),
            cost_micros: Some(*cost_micros),
            ..base(event.seq, MODEL_CALL, model, *started_at, "ok")
        }),
        SessionEvent::ToolCallRequested { tool, .. } => Some(base(
            event.seq,
            TOOL_CALL,
            tool,
            event.occurred_at,
            "pending",
        )),
        SessionEvent::ResolutionRequired { call_seq, .. } => {
            let call = before.pending_calls.get(call_seq)?;
            Some(base(
                call.seq,
                TOOL_CALL,
                &call.tool,
                call.requested_at,
                "resolution_required",
            ))
        }
        SessionEvent::ToolCallResult {
            call_seq, outcome, ..
        } => {
            let call = before.pending_calls.get(call_seq)?;
            let outcome = match outcome {
                CallOutcome::Succeeded => "succeeded",
                CallOutcome::Failed => "failed",
            };
            Some(SpanWrite {
                end_seq: Some(event.seq),
                end_us: Some(event.occurred_at),
                ..base(call.seq, TOOL_CALL, &call.tool, call.requested_at, outcome)
            })
        }
        _ => None,
    }
}

/// `YYYY-MM-DD` (UTC) of a time in microseconds since the Unix epoch.
pub fn day_of(micros: Micros) -> String {
    let days = micros.div_euclid(86_400_000_000);
    // Howard Hinnant's civil_from_days: exact for the proleptic Gregorian calendar.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_calendar_days() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(-1), "1969-12-31");
        // 2024-02-29T23:59:59.999999Z and the next microsecond.
        assert_eq!(day_of(1_709_251_199_999_999), "2024-02-29");
        assert_eq!(day_of(1_709_251_200_000_000), "2024-03-01");
    }

    #[test]
    fn extreme_client_numbers_neither_panic_nor_wrap() {
        use crate::SessionState;
        use sessionlog_schemas::Content;
        use uuid::Uuid;
        let session = SessionId(Uuid::now_v7());
        let event = |seq, occurred_at, started_at| EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: session,
            seq,
            writer_epoch: 1,
            occurred_at,
            causation_id: None,
            idempotency_key: None,
            schema_version: 1,
            event: SessionEvent::ModelResponse {
                model: "m".into(),
                tokens_in: u64::MAX,
                tokens_out: u64::MAX - 1,
                cost_micros: u64::MAX,
                started_at,
                content: Content::plain("x"),
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            },
            attestation: None,
        };
        let state = SessionState::empty(session);
        // Ends long before it started, and started long after it ended.
        let backwards = span_of(&event(2, i64::MIN, i64::MAX), &state).expect("a model span");
        assert_eq!(backwards.duration_us(), Some(i64::MIN));
        let forwards = span_of(&event(3, i64::MAX, i64::MIN), &state).expect("a model span");
        assert_eq!(forwards.duration_us(), Some(i64::MAX));
        assert_eq!(forwards.tokens_in, Some(u64::MAX));
        // Days of the extreme times are still computed.
        assert!(day_of(i64::MIN).starts_with('-'));
        assert!(!day_of(i64::MAX).is_empty());
    }
}
