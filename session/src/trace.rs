//! Trace spans, derived from accepted events: a session span, one span per model call and per
//! tool call, and point spans for steering and approvals (the events on the session span).
//!
//! The tree: the session span (seq 1) is the root; model calls, steering and approvals hang
//! off it; a tool call hangs off the model call that asked for it, the last model call
//! accepted before its request (or the session when there is none).
//!
//! A model call is one event (`ModelResponse` carries its start), so its span is written
//! whole. A tool call opens with `ToolCallRequested` (outcome `pending`) and is completed by
//! its `ToolCallResult`; the session span opens with the first event and is closed by
//! `SessionEnded`. Both writes carry the event's log offset as their write timestamp, so the
//! completing write wins whatever order the two reach the store in. Each span names the log
//! offsets of the events that opened and closed it, so it can be traced back to them.
//!
//! Pure: no I/O. The projector turns [`SpanWrite`]s into rows; the arithmetic on the
//! client-supplied numbers (times, token counts, cost) saturates instead of overflowing.

use crate::SessionState;
use sessionlog_schemas::{
    CallOutcome, EventEnvelope, Micros, Seq, SessionEvent, SessionId, TerminalOutcome,
};

/// `span_kind` of the session itself, the root of its tree.
pub const SESSION: &str = "session";
/// `span_kind` of a model call.
pub const MODEL_CALL: &str = "model_call";
/// `span_kind` of a tool call.
pub const TOOL_CALL: &str = "tool_call";
/// `span_kind` of a steering message: a point in time on the session span.
pub const STEERING: &str = "steering";
/// `span_kind` of an approval's request or decision: a point in time on the session span.
pub const APPROVAL: &str = "approval";

/// The seq of a session's root span: its first event.
pub const SESSION_SPAN_SEQ: Seq = 1;

/// One span write: the columns an event knows. `None` columns are left as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanWrite {
    /// The session.
    pub session_id: SessionId,
    /// The seq that opened the span.
    pub span_seq: Seq,
    /// [`SESSION`], [`MODEL_CALL`], [`TOOL_CALL`], [`STEERING`] or [`APPROVAL`].
    pub span_kind: &'static str,
    /// The agent (session), model, tool, `steering`, or the approval's id.
    pub name: String,
    /// The span it hangs off, set by the write that opens it (none for the session span).
    pub parent_seq: Option<Seq>,
    /// When it began.
    pub start_us: Micros,
    /// Whether this write is the one that opened the span (its event's offset is the
    /// span's opening position).
    pub opens: bool,
    /// The seq that closed the span.
    pub end_seq: Option<Seq>,
    /// When it ended.
    pub end_us: Option<Micros>,
    /// Prompt tokens (model calls; the session's total on its span).
    pub tokens_in: Option<u64>,
    /// Completion tokens (model calls; the session's total on its span).
    pub tokens_out: Option<u64>,
    /// Cost in millionths of a US dollar (model calls; the session's total on its span).
    pub cost_micros: Option<u64>,
    /// `running`, `completed`, `failed`, `cancelled` (sessions); `ok` (model calls);
    /// `pending`, `resolution_required`, `succeeded`, `failed` (tool calls); `noted`
    /// (steering); `requested`, `approved`, `denied` (approvals).
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

    /// Whether this write closes the span (its event's offset is the closing position).
    pub fn closes(&self) -> bool {
        self.end_seq.is_some()
    }
}

/// The span write an event makes, judged against the state *before* it is applied
/// (a result needs the request it answers). `last_model_call` is the seq of the last model
/// call accepted before the event, the parent of a tool call it requests. Only meaningful for
/// accepted events.
pub fn span_of(
    event: &EventEnvelope,
    before: &SessionState,
    last_model_call: Option<Seq>,
) -> Option<SpanWrite> {
    let base = |span_seq, span_kind, name: &str, start_us, outcome| SpanWrite {
        session_id: event.session_id,
        span_seq,
        span_kind,
        name: name.to_string(),
        parent_seq: None,
        start_us,
        opens: false,
        end_seq: None,
        end_us: None,
        tokens_in: None,
        tokens_out: None,
        cost_micros: None,
        outcome,
    };
    // A span that this event opens, under `parent`.
    let open = |span_kind, name: &str, start_us, outcome, parent| SpanWrite {
        opens: true,
        parent_seq: parent,
        ..base(event.seq, span_kind, name, start_us, outcome)
    };
    // A span this event opens and closes at once: a point in time on the session span.
    let point = |span_kind, name: &str, outcome| SpanWrite {
        end_seq: Some(event.seq),
        end_us: Some(event.occurred_at),
        ..open(
            span_kind,
            name,
            event.occurred_at,
            outcome,
            Some(SESSION_SPAN_SEQ),
        )
    };
    match &event.event {
        SessionEvent::SessionStarted { agent, .. } | SessionEvent::SessionForked { agent, .. } => {
            Some(open(SESSION, agent, event.occurred_at, "running", None))
        }
        SessionEvent::SessionEnded { outcome, .. } => Some(SpanWrite {
            end_seq: Some(event.seq),
            end_us: Some(event.occurred_at),
            tokens_in: Some(before.tokens_in),
            tokens_out: Some(before.tokens_out),
            cost_micros: Some(before.cost_micros),
            ..base(
                SESSION_SPAN_SEQ,
                SESSION,
                before.agent.as_deref().unwrap_or_default(),
                before.started_at,
                match outcome {
                    TerminalOutcome::Completed => "completed",
                    TerminalOutcome::Failed => "failed",
                    TerminalOutcome::Cancelled => "cancelled",
                },
            )
        }),
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
            ..open(MODEL_CALL, model, *started_at, "ok", Some(SESSION_SPAN_SEQ))
        }),
        SessionEvent::ToolCallRequested { tool, .. } => Some(open(
            TOOL_CALL,
            tool,
            event.occurred_at,
            "pending",
            Some(last_model_call.unwrap_or(SESSION_SPAN_SEQ)),
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
        // Who steered is a person's name, which a trace does not need: the span says only
        // that someone did, and when.
        SessionEvent::SteeringMessage { .. } => Some(point(STEERING, "steering", "noted")),
        SessionEvent::ApprovalRequested { approval_id, .. } => Some(point(
            APPROVAL,
            &approval_span_name(approval_id),
            "requested",
        )),
        SessionEvent::ApprovalDecided {
            approval_id,
            approved,
            ..
        } => Some(point(
            APPROVAL,
            &approval_span_name(approval_id),
            if *approved { "approved" } else { "denied" },
        )),
        _ => None,
    }
}

/// The name an approval's spans carry: a digest of its id, never the id. Harnesses name
/// approvals after what they approve (`refund-jane.doe@example.com`), and spans leave the
/// session: span tables every reader of a tenant lists, OTLP receivers. The request and the
/// decision of one approval share the name, so a reader still pairs them.
/// `approval-` and the first 16 hex digits of `sha256("sessionlog-approval-v1\n" + id)`.
pub fn approval_span_name(approval_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("sessionlog-approval-v1\n{approval_id}").as_bytes());
    format!("approval-{}", &hex::encode(digest)[..16])
}

/// The seq of the last model call once `event` is accepted: the parent of the tool calls
/// requested after it.
pub fn last_model_call_after(event: &EventEnvelope, before: Option<Seq>) -> Option<Seq> {
    match event.event {
        SessionEvent::ModelResponse { .. } => Some(event.seq),
        _ => before,
    }
}

/// Which of `buckets` partitions of a day's spans a session's spans go to: spread by the
/// session id's random bits, so one day is not one CQL partition for the whole fleet.
pub fn day_bucket(session: SessionId, buckets: u16) -> i32 {
    let low = session.0.as_u64_pair().1;
    // Below `buckets`, so within an i32.
    i32::from(u16::try_from(low % u64::from(buckets.max(1))).unwrap_or_default())
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

/// The days since the Unix epoch of a `YYYY-MM-DD` (UTC) date, the inverse of [`day_of`];
/// `None` for anything else (a month 13, a February 30th, a year beyond 9999).
pub fn day_number(date: &str) -> Option<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(date, &format).ok()?;
    Some((date - time::Date::from_calendar_date(1970, time::Month::January, 1).ok()?).whole_days())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_back_as_the_days_they_name() {
        assert_eq!(day_number("1970-01-01"), Some(0));
        assert_eq!(day_number("1969-12-31"), Some(-1));
        assert_eq!(day_number("2024-02-29"), Some(19_782));
        assert_eq!(day_number("2024-03-01"), Some(19_783));
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-1-01",
            "x",
            "",
            "2024-01-32",
        ] {
            assert_eq!(day_number(bad), None, "{bad}");
        }
        for days in [-1_000, 0, 19_782, 30_000] {
            assert_eq!(day_number(&day_of(days * 86_400_000_000)), Some(days));
        }
    }

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
        let backwards = span_of(&event(2, i64::MIN, i64::MAX), &state, None).expect("a model span");
        assert_eq!(backwards.duration_us(), Some(i64::MIN));
        let forwards = span_of(&event(3, i64::MAX, i64::MIN), &state, None).expect("a model span");
        assert_eq!(forwards.duration_us(), Some(i64::MAX));
        assert_eq!(forwards.tokens_in, Some(u64::MAX));
        // Days of the extreme times are still computed.
        assert!(day_of(i64::MIN).starts_with('-'));
        assert!(!day_of(i64::MAX).is_empty());
    }

    #[test]
    fn a_tool_call_hangs_off_the_model_call_that_asked_for_it() {
        use crate::SessionState;
        use sessionlog_schemas::{Content, EffectClass, ResultSource};
        use uuid::Uuid;
        let session = SessionId(Uuid::now_v7());
        let envelope = |seq: Seq, event| EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: session,
            seq,
            writer_epoch: 1,
            occurred_at: 1_000 * i64::try_from(seq).unwrap_or_default(),
            causation_id: None,
            idempotency_key: None,
            schema_version: 1,
            event,
            attestation: None,
        };
        let events = [
            SessionEvent::SessionStarted {
                agent: "planner".into(),
                title: None,
                tenant: "default".into(),
                writer_token_sha256: None,
                name_sha256: None,
            },
            SessionEvent::ToolCallRequested {
                tool: "before_any_model".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Pure,
                approval_id: None,
            },
            SessionEvent::ModelResponse {
                model: "m".into(),
                tokens_in: 10,
                tokens_out: 5,
                cost_micros: 7,
                started_at: 2_500,
                content: Content::plain("call search"),
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            },
            SessionEvent::ToolCallRequested {
                tool: "search".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Idempotent,
                approval_id: None,
            },
            SessionEvent::ToolCallResult {
                call_seq: 4,
                outcome: CallOutcome::Failed,
                output: Content::plain("no"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
            SessionEvent::SteeringMessage {
                author: "a person".into(),
                content: Content::plain("stop"),
            },
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Completed,
                reason: None,
            },
        ];
        let mut state = SessionState::empty(session);
        let mut last_model_call = None;
        let mut spans = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let event = envelope(Seq::try_from(i + 1).unwrap_or_default(), event);
            spans.push(span_of(&event, &state, last_model_call));
            assert!(state.apply(&event).is_accepted(), "event {}", i + 1);
            last_model_call = last_model_call_after(&event, last_model_call);
        }
        let span = |i: usize| spans[i].clone().expect("a span");
        let root = span(0);
        assert_eq!(
            (root.span_kind, root.parent_seq, root.opens),
            (SESSION, None, true)
        );
        assert_eq!(
            span(1).parent_seq,
            Some(SESSION_SPAN_SEQ),
            "no model call yet"
        );
        assert_eq!(
            (span(2).span_kind, span(2).parent_seq),
            (MODEL_CALL, Some(1))
        );
        assert_eq!(
            (span(3).span_kind, span(3).parent_seq),
            (TOOL_CALL, Some(3))
        );
        // The result closes the request's span, and does not move it.
        let result = span(4);
        assert_eq!(
            (result.span_seq, result.parent_seq, result.opens),
            (4, None, false)
        );
        assert_eq!((result.end_seq, result.outcome), (Some(5), "failed"));
        assert_eq!(result.duration_us(), Some(1_000));
        // Steering is a point on the session span, without its author.
        let steering = span(5);
        assert_eq!(
            (steering.span_kind, steering.name.as_str()),
            (STEERING, "steering")
        );
        assert_eq!(
            (steering.parent_seq, steering.duration_us()),
            (Some(1), Some(0))
        );
        // The end closes the root with the session's totals.
        let end = span(6);
        assert_eq!(
            (end.span_seq, end.span_kind, end.outcome),
            (1, SESSION, "completed")
        );
        assert_eq!(
            (end.tokens_in, end.cost_micros, end.start_us),
            (Some(10), Some(7), 1_000)
        );
        assert_eq!(end.name, "planner");
    }

    #[test]
    fn day_buckets_stay_below_their_count() {
        use uuid::Uuid;
        for _ in 0..200 {
            let session = SessionId(Uuid::now_v7());
            assert!((0..16).contains(&day_bucket(session, 16)));
            assert_eq!(day_bucket(session, 1), 0);
            assert_eq!(day_bucket(session, 0), 0);
        }
    }
}
