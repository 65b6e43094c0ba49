//! The log as OpenTelemetry GenAI spans: what one session's events turn into, with ids that
//! a re-export reproduces.
//!
//! The tree is the one the projector writes (`sessionlog_session::trace`): the session is the
//! root (`invoke_agent {agent}`), model calls (`chat {model}`) hang off it, tool calls
//! (`execute_tool {tool}`) hang off the model call that asked for them. Steering and
//! approvals, the projector's point rows on the session, go out as span events on the root
//! span (an OTLP span event is a point in time on a span). A span is exported once, by the
//! event that closes it, so a receiver gets it whole: a session that has not ended has no root
//! span yet, nor its events.
//!
//! Ids: the trace id is the session id's 16 bytes; a span id is the first 8 bytes of
//! SHA-256(session id, the seq that opened the span). The same log gives the same ids on
//! every export, so a receiver that keys spans by id keeps one copy of a re-exported span.
//!
//! Pure: no I/O. The export worker feeds [`Trail::follow`] each event of a session in order.

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sessionlog_schemas::{
    CallOutcome, Content, EventEnvelope, Micros, Seq, SessionEvent, SessionId,
};
use sessionlog_session::SessionState;
use sessionlog_session::trace::{
    self as tree, SESSION_SPAN_SEQ, SpanWrite, last_model_call_after, span_of,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where an event sits in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// The trace id of `session`'s spans: the session id itself.
pub fn trace_id(session: SessionId) -> TraceId {
    TraceId::from_bytes(*session.0.as_bytes())
}

/// The span id of the span `seq` opened in `session`.
pub fn span_id(session: SessionId, seq: Seq) -> SpanId {
    let digest = Sha256::new()
        .chain_update(session.0.as_bytes())
        .chain_update(seq.to_be_bytes())
        .finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    // An all-zero span id is invalid in OTLP; 2^-64 odds, but a fixed answer costs nothing.
    if id == [0; 8] {
        id[7] = 1;
    }
    SpanId::from_bytes(id)
}

/// A tool call between its request and its result.
#[derive(Clone, Debug)]
struct OpenCall {
    /// The span it hangs off: the model call that asked for it, or the session.
    parent: Seq,
    /// The request's event id, the call's id for a receiver (`gen_ai.tool.call.id`).
    call_id: String,
    /// Its arguments, when content is exported.
    arguments: Option<String>,
}

/// What the export remembers of one session: its state (the fold), the last model call, and
/// the tool calls still open.
#[derive(Clone, Debug)]
pub struct Trail {
    /// The session as folded so far.
    pub state: SessionState,
    /// Where the last event followed sits in the log.
    pub applied: Option<LogPosition>,
    last_model_call: Option<Seq>,
    calls: HashMap<Seq, OpenCall>,
    /// The session's steering and approvals so far: the root span's events.
    points: Vec<Point>,
    /// Points beyond [`MAX_SESSION_EVENTS`], counted as the root span's dropped events.
    dropped_points: u32,
}

/// A steering message or an approval's request or decision, kept compact until the root span
/// is built: a trail may hold [`MAX_SESSION_EVENTS`] of them for each open session.
#[derive(Clone, Debug)]
struct Point {
    /// [`tree::STEERING`] or [`tree::APPROVAL`].
    kind: &'static str,
    seq: Seq,
    outcome: &'static str,
    at: LogPosition,
    time_us: Micros,
    /// The approval's span name: a digest of its id, never the id
    /// ([`sessionlog_session::trace::approval_span_name`]).
    approval_id: Option<String>,
}

impl Point {
    fn event(self) -> Event {
        let mut attributes = vec![
            KeyValue::new("sessionlog.event.seq", count(self.seq)),
            KeyValue::new("sessionlog.outcome", self.outcome),
            KeyValue::new("sessionlog.log.partition", i64::from(self.at.partition)),
            KeyValue::new("sessionlog.log.offset", self.at.offset),
        ];
        if let Some(id) = self.approval_id {
            attributes.push(KeyValue::new("sessionlog.approval.id", id));
        }
        Event::new(self.kind, system_time(self.time_us), attributes, 0)
    }
}

/// The most events the root span carries; later ones are counted as dropped. The SDK's own
/// default limit, so a session steered without end does not grow the export's memory or one
/// request without bound.
pub const MAX_SESSION_EVENTS: usize = 128;

/// The span an event closes, before it is turned into OTLP.
struct Closed<'a> {
    write: SpanWrite,
    call: Option<OpenCall>,
    texts: Option<&'a SessionEvent>,
}

impl Trail {
    /// A session of which nothing has been followed yet.
    pub fn new(session: SessionId) -> Self {
        Self {
            state: SessionState::empty(session),
            applied: None,
            last_model_call: None,
            calls: HashMap::new(),
            points: Vec::new(),
            dropped_points: 0,
        }
    }

    /// Whether the record at `at` was followed already (a redelivery): the session's records
    /// sit on one partition, in order.
    pub fn has_seen(&self, at: LogPosition) -> bool {
        self.applied
            .is_some_and(|seen| seen.partition == at.partition && seen.offset >= at.offset)
    }

    /// Folds `event` (read at `at`) and returns the span it closes, if any. `opened` is the
    /// same event with its texts opened, when message content is exported: texts are put on
    /// the spans only from it, and only when they are plain (an erased or unopenable text
    /// never is).
    pub fn follow(
        &mut self,
        event: &EventEnvelope,
        at: LogPosition,
        opened: Option<&EventEnvelope>,
    ) -> Option<SpanData> {
        let closed = self.advance(event, at, opened)?;
        let mut span = span_data(
            event,
            &closed.write,
            closed.call,
            &self.state,
            at,
            closed.texts,
        );
        if closed.write.span_kind == tree::SESSION {
            span.events.events = self.points.drain(..).map(Point::event).collect();
            span.events.dropped_count = std::mem::take(&mut self.dropped_points);
        }
        Some(span)
    }

    /// Drops every text of the session the trail keeps (the arguments of its open tool
    /// calls): the session was erased, and what was opened before must not go out later.
    pub fn forget_texts(&mut self) {
        for call in self.calls.values_mut() {
            call.arguments = None;
        }
    }

    /// Folds `event` without building its span: catching up on a session's past.
    pub fn catch_up(
        &mut self,
        event: &EventEnvelope,
        at: LogPosition,
        opened: Option<&EventEnvelope>,
    ) {
        let _ = self.advance(event, at, opened);
    }

    fn advance<'a>(
        &mut self,
        event: &EventEnvelope,
        at: LogPosition,
        opened: Option<&'a EventEnvelope>,
    ) -> Option<Closed<'a>> {
        let write = span_of(event, &self.state, self.last_model_call);
        let accepted = self.state.apply(event).is_accepted();
        self.applied = Some(at);
        if !accepted {
            return None;
        }
        let texts = opened.filter(|_| !self.state.erased).map(|e| &e.event);
        let call = match &event.event {
            SessionEvent::ToolCallRequested { .. } => {
                let arguments = match texts {
                    Some(SessionEvent::ToolCallRequested { arguments, .. }) => plain(arguments),
                    _ => None,
                };
                self.calls.insert(
                    event.seq,
                    OpenCall {
                        parent: self.last_model_call.unwrap_or(SESSION_SPAN_SEQ),
                        call_id: event.event_id.to_string(),
                        arguments,
                    },
                );
                None
            }
            SessionEvent::ToolCallResult { call_seq, .. } => self.calls.remove(call_seq),
            // The arguments of an open call were opened when it was followed (or caught up
            // with a key cached before the redaction): they must not leave on its span.
            SessionEvent::PayloadRedacted {
                redacted_seq,
                field,
                ..
            } => {
                if field == "arguments"
                    && let Some(call) = self.calls.get_mut(redacted_seq)
                {
                    call.arguments = None;
                }
                None
            }
            _ => None,
        };
        self.last_model_call = last_model_call_after(event, self.last_model_call);
        let write = write.filter(SpanWrite::closes)?;
        if matches!(write.span_kind, tree::STEERING | tree::APPROVAL) {
            self.note_point(&write, at);
            return None;
        }
        Some(Closed { write, call, texts })
    }

    /// Keeps a steering message or an approval's request or decision for the root span.
    fn note_point(&mut self, write: &SpanWrite, at: LogPosition) {
        if self.points.len() >= MAX_SESSION_EVENTS {
            self.dropped_points = self.dropped_points.saturating_add(1);
            return;
        }
        self.points.push(Point {
            kind: write.span_kind,
            seq: write.span_seq,
            outcome: write.outcome,
            at,
            time_us: write.start_us,
            approval_id: (write.span_kind == tree::APPROVAL).then(|| write.name.clone()),
        });
    }
}

/// The model's output on a model call's span (with `--with-content`).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// A tool call's arguments on its span (with `--with-content`).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// A tool call's result on its span (with `--with-content`).
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

/// Every attribute that carries a session's text: all a span says that the session's data
/// key sealed. The rest (names, times, tokens, outcomes) goes out without `--with-content`.
pub const CONTENT_ATTRIBUTES: [&str; 3] = [OUTPUT_MESSAGES, TOOL_CALL_ARGUMENTS, TOOL_CALL_RESULT];

/// Whether `span` carries a text of its session.
pub(crate) fn carries_content(span: &SpanData) -> bool {
    span.attributes
        .iter()
        .any(|kv| CONTENT_ATTRIBUTES.contains(&kv.key.as_str()))
}

/// Removes the texts `span` carries, keeping the rest; whether it carried any.
pub(crate) fn strip_content(span: &mut SpanData) -> bool {
    let before = span.attributes.len();
    span.attributes
        .retain(|kv| !CONTENT_ATTRIBUTES.contains(&kv.key.as_str()));
    span.attributes.len() != before
}

/// The session whose span `span` is: its trace id is the session id ([`trace_id`]).
pub(crate) fn session_of(span: &SpanData) -> SessionId {
    SessionId(uuid::Uuid::from_bytes(
        span.span_context.trace_id().to_bytes(),
    ))
}

/// `gen_ai.provider.name` of a model call whose event names no provider.
pub const UNKNOWN_PROVIDER: &str = "unknown";

/// The most of one text a span carries: receivers refuse large requests, and a trace is for
/// reading, not for keeping whole tool outputs.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;

/// A text as it may go on a span: only when it reads as plain text, cut at
/// [`MAX_TEXT_BYTES`] with a marker saying how much was left out.
fn plain(content: &Content) -> Option<String> {
    let Content::Plain(text) = content else {
        return None;
    };
    Some(cut(text, MAX_TEXT_BYTES))
}

/// `text`, or its first `max` bytes (at a character boundary) with a marker saying how much
/// was left out.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [{} more bytes not exported]",
        &text[..end],
        text.len() - end
    )
}

/// The latest time a span may carry: 9999-12-31T23:59:59.999999Z, well inside what OTLP's
/// nanoseconds since the epoch (a u64) and every platform's `SystemTime` hold.
const LATEST_US: u64 = 253_402_300_799_999_999;

/// A time from the log as OTLP wants it; a client's time before the epoch reads as the epoch,
/// one after [`LATEST_US`] as that.
fn system_time(micros: Micros) -> SystemTime {
    let micros = u64::try_from(micros).unwrap_or_default().min(LATEST_US);
    UNIX_EPOCH + Duration::from_micros(micros)
}

/// A count from a client as an OTLP integer (which is signed): saturates.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Dollars from millionths of a dollar, for a chart (not for accounts: those are the rollups).
fn dollars(micros: u64) -> f64 {
    // u64 → f64 rounds above 2^53 millionths (9 billion dollars): fine for a chart.
    micros as f64 / 1e6
}

/// The scope every exported span names, built once rather than per span.
static SCOPE: std::sync::LazyLock<InstrumentationScope> = std::sync::LazyLock::new(|| {
    InstrumentationScope::builder("sessionlog-export")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
});

/// The OTLP span of a closing span write. `call` is the tool call it closes, `state` the
/// session after the event, `texts` the opened event when content is exported.
fn span_data(
    event: &EventEnvelope,
    write: &SpanWrite,
    call: Option<OpenCall>,
    state: &SessionState,
    at: LogPosition,
    texts: Option<&SessionEvent>,
) -> SpanData {
    let session = write.session_id;
    let mut attributes = vec![
        KeyValue::new("gen_ai.conversation.id", session.to_string()),
        KeyValue::new("sessionlog.span.seq", count(write.span_seq)),
        KeyValue::new("sessionlog.outcome", write.outcome),
        KeyValue::new("sessionlog.log.partition", i64::from(at.partition)),
        KeyValue::new("sessionlog.log.offset", at.offset),
    ];
    if let Some(end_seq) = write.end_seq {
        attributes.push(KeyValue::new("sessionlog.end.seq", count(end_seq)));
    }
    let mut status = Status::Ok;
    let mut fail = |attributes: &mut Vec<KeyValue>, error_type: &'static str| {
        attributes.push(KeyValue::new("error.type", error_type));
        status = Status::error(error_type);
    };
    let mut parent = write.parent_seq;
    let mut links = SpanLinks::default();
    let (name, kind) = match (&event.event, write.span_kind) {
        (SessionEvent::SessionEnded { .. }, tree::SESSION) => {
            let agent = &write.name;
            attributes.extend([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", agent.clone()),
                KeyValue::new("sessionlog.tenant", state.tenant.clone()),
                KeyValue::new("sessionlog.usage.input_tokens", count(state.tokens_in)),
                KeyValue::new("sessionlog.usage.output_tokens", count(state.tokens_out)),
                KeyValue::new("sessionlog.cost_usd", dollars(state.cost_micros)),
            ]);
            if write.outcome == "failed" {
                fail(&mut attributes, "session_failed");
            }
            // A fork points at the parent session's root, in the parent's trace.
            if let Some(fork) = &state.parent {
                let parent_root = SpanContext::new(
                    trace_id(fork.parent_session_id),
                    span_id(fork.parent_session_id, SESSION_SPAN_SEQ),
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                );
                let mut link = opentelemetry::trace::Link::with_context(parent_root);
                link.attributes = vec![KeyValue::new(
                    "sessionlog.fork.parent_seq",
                    count(fork.parent_seq),
                )];
                links.links.push(link);
            }
            (format!("invoke_agent {agent}"), SpanKind::Internal)
        }
        (
            SessionEvent::ModelResponse {
                model,
                tokens_in,
                tokens_out,
                cost_micros,
                cache_read_tokens,
                cache_creation_tokens,
                provider,
                ..
            },
            _,
        ) => {
            attributes.extend([
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", model.clone()),
                KeyValue::new("gen_ai.response.model", model.clone()),
                KeyValue::new("gen_ai.usage.input_tokens", count(*tokens_in)),
                KeyValue::new("gen_ai.usage.output_tokens", count(*tokens_out)),
                KeyValue::new("sessionlog.cost_usd", dollars(*cost_micros)),
            ]);
            // The convention requires the provider; `unknown` says the harness did not name it
            // rather than leaving the attribute out.
            let provider = provider.as_deref().unwrap_or(UNKNOWN_PROVIDER);
            attributes.push(KeyValue::new("gen_ai.provider.name", provider.to_owned()));
            if *cache_read_tokens > 0 {
                attributes.push(KeyValue::new(
                    "gen_ai.usage.cache_read.input_tokens",
                    count(*cache_read_tokens),
                ));
            }
            if *cache_creation_tokens > 0 {
                attributes.push(KeyValue::new(
                    "gen_ai.usage.cache_creation.input_tokens",
                    count(*cache_creation_tokens),
                ));
            }
            if let Some(SessionEvent::ModelResponse { content, .. }) = texts
                && let Some(text) = plain(content)
            {
                let messages = serde_json::json!([{
                    "role": "assistant",
                    "parts": [{"type": "text", "content": text}],
                }]);
                attributes.push(KeyValue::new(OUTPUT_MESSAGES, messages.to_string()));
            }
            (format!("chat {model}"), SpanKind::Client)
        }
        (SessionEvent::ToolCallResult { outcome, .. }, _) => {
            // A result whose request the trail never saw hangs off the session.
            let call = call.unwrap_or(OpenCall {
                parent: SESSION_SPAN_SEQ,
                call_id: String::new(),
                arguments: None,
            });
            parent = Some(call.parent);
            let tool = &write.name;
            attributes.extend([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.clone()),
                KeyValue::new("gen_ai.tool.type", "function"),
            ]);
            if !call.call_id.is_empty() {
                attributes.push(KeyValue::new("gen_ai.tool.call.id", call.call_id));
            }
            if *outcome == CallOutcome::Failed {
                fail(&mut attributes, "tool_failed");
            }
            if texts.is_some() {
                if let Some(arguments) = call.arguments {
                    attributes.push(KeyValue::new(TOOL_CALL_ARGUMENTS, arguments));
                }
                if let Some(SessionEvent::ToolCallResult { output, .. }) = texts
                    && let Some(text) = plain(output)
                {
                    attributes.push(KeyValue::new(TOOL_CALL_RESULT, text));
                }
            }
            (format!("execute_tool {tool}"), SpanKind::Internal)
        }
        (_, kind) => (kind.to_string(), SpanKind::Internal),
    };
    let start = system_time(write.start_us);
    let end = system_time(write.end_us.unwrap_or(write.start_us)).max(start);
    SpanData {
        span_context: SpanContext::new(
            trace_id(session),
            span_id(session, write.span_seq),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: parent.map_or(SpanId::INVALID, |seq| span_id(session, seq)),
        parent_span_is_remote: false,
        span_kind: kind,
        name: name.into(),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links,
        status,
        instrumentation_scope: SCOPE.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use opentelemetry::Value;
    use sessionlog_schemas::{EffectClass, ResultSource, TerminalOutcome};
    use uuid::Uuid;

    fn envelope(session: SessionId, seq: Seq, event: SessionEvent) -> EventEnvelope {
        EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: session,
            seq,
            writer_epoch: 1,
            occurred_at: 1_000_000 * i64::try_from(seq).unwrap_or_default(),
            causation_id: None,
            idempotency_key: None,
            schema_version: 1,
            event,
            attestation: None,
        }
    }

    fn events() -> Vec<SessionEvent> {
        vec![
            SessionEvent::SessionStarted {
                agent: "planner".into(),
                title: None,
                tenant: "acme".into(),
                writer_token_sha256: None,
                name_sha256: None,
            },
            SessionEvent::ModelResponse {
                model: "model-x".into(),
                tokens_in: 100,
                tokens_out: 20,
                cost_micros: 1_500,
                started_at: 1_500_000,
                content: Content::plain("call grep"),
                cache_read_tokens: 7,
                cache_creation_tokens: 0,
                provider: Some("openai".into()),
            },
            SessionEvent::ToolCallRequested {
                tool: "grep".into(),
                arguments: Content::plain("{\"q\":\"bug\"}"),
                effect: EffectClass::Pure,
                approval_id: None,
            },
            SessionEvent::ToolCallResult {
                call_seq: 3,
                outcome: CallOutcome::Failed,
                output: Content::plain("no match"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Completed,
                reason: None,
            },
        ]
    }

    /// Where the test events sit: the i-th (from 0) at offset 40 + i of partition 2.
    fn position(i: usize) -> LogPosition {
        LogPosition {
            partition: 2,
            offset: 40 + i64::try_from(i).unwrap_or_default(),
        }
    }

    /// Follows [`events`], with content when asked; returns the spans by the seq that closed
    /// them.
    pub(crate) fn follow(session: SessionId, with_content: bool) -> Vec<(Seq, SpanData)> {
        follow_events(session, events(), with_content)
    }

    /// Follows `events` as seqs 1.. at [`position`]s 0..; the spans by the seq that closed them.
    fn follow_events(
        session: SessionId,
        events: Vec<SessionEvent>,
        with_content: bool,
    ) -> Vec<(Seq, SpanData)> {
        let mut trail = Trail::new(session);
        let mut spans = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let seq = Seq::try_from(i + 1).unwrap_or_default();
            let event = envelope(session, seq, event);
            let opened = with_content.then(|| event.clone());
            if let Some(span) = trail.follow(&event, position(i), opened.as_ref()) {
                spans.push((seq, span));
            }
        }
        spans
    }

    /// The value of `key` among `attributes` (a span's or an event's).
    fn value_of<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
        attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        value_of(&span.attributes, key)
    }

    #[test]
    fn spans_follow_the_genai_conventions_and_the_tree() {
        let session = SessionId(Uuid::now_v7());
        let spans = follow(session, false);
        let closed_by: Vec<Seq> = spans.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            closed_by,
            [2, 4, 5],
            "a span is exported by the event that closes it"
        );
        let (model, tool, root) = (&spans[0].1, &spans[1].1, &spans[2].1);
        assert_eq!(model.name, "chat model-x");
        assert_eq!(model.span_kind, SpanKind::Client);
        assert_eq!(
            attribute(model, "gen_ai.operation.name"),
            Some(&Value::from("chat"))
        );
        assert_eq!(
            attribute(model, "gen_ai.provider.name"),
            Some(&Value::from("openai"))
        );
        assert_eq!(
            attribute(model, "gen_ai.request.model"),
            Some(&Value::from("model-x"))
        );
        assert_eq!(
            attribute(model, "gen_ai.usage.input_tokens"),
            Some(&Value::I64(100))
        );
        assert_eq!(
            attribute(model, "gen_ai.usage.output_tokens"),
            Some(&Value::I64(20))
        );
        assert_eq!(
            attribute(model, "gen_ai.usage.cache_read.input_tokens"),
            Some(&Value::I64(7))
        );
        assert_eq!(
            attribute(model, "gen_ai.conversation.id"),
            Some(&Value::from(session.to_string()))
        );
        assert_eq!(
            attribute(model, "sessionlog.log.offset"),
            Some(&Value::I64(41))
        );
        assert_eq!(
            model.end_time.duration_since(model.start_time).ok(),
            Some(Duration::from_micros(500_000))
        );

        assert_eq!(tool.name, "execute_tool grep");
        assert_eq!(
            attribute(tool, "gen_ai.tool.name"),
            Some(&Value::from("grep"))
        );
        assert_eq!(
            attribute(tool, "error.type"),
            Some(&Value::from("tool_failed"))
        );
        assert!(matches!(tool.status, Status::Error { .. }));
        assert!(attribute(tool, "gen_ai.tool.call.id").is_some());
        // The tool call hangs off the model call that asked for it, which hangs off the root.
        assert_eq!(tool.parent_span_id, model.span_context.span_id());
        assert_eq!(model.parent_span_id, root.span_context.span_id());
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert_eq!(root.name, "invoke_agent planner");
        assert_eq!(
            attribute(root, "gen_ai.agent.name"),
            Some(&Value::from("planner"))
        );
        assert_eq!(
            root.end_time.duration_since(root.start_time).ok(),
            Some(Duration::from_secs(4))
        );
        for (_, span) in &spans {
            assert_eq!(span.span_context.trace_id(), trace_id(session));
            // Without the opt-in, no text leaves.
            for key in [
                "gen_ai.output.messages",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result",
            ] {
                assert!(attribute(span, key).is_none(), "{key}");
            }
        }
    }

    #[test]
    fn a_re_export_gives_the_same_ids() {
        let session = SessionId(Uuid::now_v7());
        let ids = |spans: Vec<(Seq, SpanData)>| -> Vec<(TraceId, SpanId, SpanId)> {
            spans
                .into_iter()
                .map(|(_, s)| {
                    (
                        s.span_context.trace_id(),
                        s.span_context.span_id(),
                        s.parent_span_id,
                    )
                })
                .collect()
        };
        assert_eq!(ids(follow(session, false)), ids(follow(session, true)));
        let other = SessionId(Uuid::now_v7());
        assert_ne!(span_id(session, 2), span_id(other, 2));
        assert_ne!(span_id(session, 2), span_id(session, 3));
    }

    #[test]
    fn content_goes_only_where_opted_in_and_plain() {
        let session = SessionId(Uuid::now_v7());
        let spans = follow(session, true);
        let (model, tool) = (&spans[0].1, &spans[1].1);
        let messages = attribute(model, "gen_ai.output.messages").map(Value::as_str);
        assert!(
            messages.as_ref().is_some_and(|m| m.contains("call grep")),
            "{messages:?}"
        );
        assert_eq!(
            attribute(tool, "gen_ai.tool.call.arguments"),
            Some(&Value::from("{\"q\":\"bug\"}"))
        );
        assert_eq!(
            attribute(tool, "gen_ai.tool.call.result"),
            Some(&Value::from("no match"))
        );
    }

    #[test]
    fn stripping_a_span_takes_its_texts_and_leaves_the_rest() {
        let session = SessionId(Uuid::now_v7());
        let without = follow(session, false);
        for ((_, mut span), (_, plain)) in follow(session, true).into_iter().zip(without) {
            assert_eq!(session_of(&span), session);
            let carried = carries_content(&span);
            assert_eq!(strip_content(&mut span), carried);
            assert!(!carries_content(&span), "{:?}", span.attributes);
            // What is left is what an export without content sends (the events' ids aside).
            let keys = |span: &SpanData| -> Vec<String> {
                span.attributes
                    .iter()
                    .map(|kv| kv.key.to_string())
                    .collect()
            };
            assert_eq!(keys(&span), keys(&plain), "{}", span.name);
        }
    }

    /// The spans `events` close, without content.
    fn follow_all(session: SessionId, events: Vec<SessionEvent>) -> Vec<SpanData> {
        follow_events(session, events, false)
            .into_iter()
            .map(|(_, span)| span)
            .collect()
    }

    fn started() -> SessionEvent {
        events().remove(0)
    }

    fn ended() -> SessionEvent {
        SessionEvent::SessionEnded {
            outcome: TerminalOutcome::Completed,
            reason: None,
        }
    }

    #[test]
    fn steering_and_approvals_are_events_on_the_root_span() {
        let session = SessionId(Uuid::now_v7());
        let spans = follow_all(
            session,
            vec![
                started(),
                SessionEvent::SteeringMessage {
                    author: "ana".into(),
                    content: Content::plain("use the staging database"),
                },
                SessionEvent::ApprovalRequested {
                    approval_id: "deploy-1".into(),
                    action: Content::plain("deploy"),
                    action_digest: None,
                },
                ended(),
            ],
        );
        assert_eq!(spans.len(), 1, "only the root: {spans:#?}");
        let root = &spans[0];
        assert_eq!(root.name, "invoke_agent planner");
        let events: Vec<(&str, SystemTime)> = root
            .events
            .iter()
            .map(|e| (e.name.as_ref(), e.timestamp))
            .collect();
        assert_eq!(
            events,
            [
                ("steering", system_time(2_000_000)),
                ("approval", system_time(3_000_000)),
            ]
        );
        let (steering, approval) = (&root.events[0].attributes, &root.events[1].attributes);
        assert_eq!(
            value_of(steering, "sessionlog.event.seq"),
            Some(&Value::I64(2))
        );
        assert_eq!(
            value_of(steering, "sessionlog.log.offset"),
            Some(&Value::I64(position(1).offset))
        );
        assert_eq!(
            value_of(approval, "sessionlog.approval.id"),
            Some(&Value::from(sessionlog_session::trace::approval_span_name(
                "deploy-1"
            )))
        );
        assert_eq!(
            value_of(approval, "sessionlog.outcome"),
            Some(&Value::from("requested"))
        );
        // Neither who steered, nor what they said, nor the approval's own id leaves.
        let everything = format!("{:?}", root.events);
        assert!(!everything.contains("ana") && !everything.contains("staging"));
        assert!(!everything.contains("deploy-1"), "{everything}");
        assert_eq!(root.events.dropped_count, 0);
    }

    #[test]
    fn steering_before_a_mid_way_start_is_kept_and_long_approval_ids_leave_as_digests() {
        let session = SessionId(Uuid::now_v7());
        let long_id = "é".repeat(256);
        let past = [
            started(),
            SessionEvent::SteeringMessage {
                author: "ana".into(),
                content: Content::plain("stop"),
            },
            SessionEvent::ApprovalRequested {
                approval_id: long_id.clone(),
                action: Content::plain("deploy"),
                action_digest: None,
            },
        ];
        let mut trail = Trail::new(session);
        // The export met this session mid-way: its past is folded, not exported.
        for (i, event) in past.into_iter().enumerate() {
            let seq = Seq::try_from(i + 1).unwrap_or_default();
            trail.catch_up(&envelope(session, seq, event), position(i), None);
        }
        let root = trail
            .follow(&envelope(session, 4, ended()), position(3), None)
            .expect("the end closes the root span");
        let names: Vec<&str> = root.events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(names, ["steering", "approval"]);
        let id = value_of(&root.events[1].attributes, "sessionlog.approval.id")
            .map(|id| id.as_str().into_owned())
            .unwrap_or_default();
        assert_eq!(id, sessionlog_session::trace::approval_span_name(&long_id));
    }

    #[test]
    fn a_session_steered_without_end_keeps_a_bounded_number_of_events() {
        let session = SessionId(Uuid::now_v7());
        let mut events = vec![started()];
        events.extend(
            (0..MAX_SESSION_EVENTS + 2).map(|_| SessionEvent::SteeringMessage {
                author: "ana".into(),
                content: Content::plain("again"),
            }),
        );
        events.push(ended());
        let spans = follow_all(session, events);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].events.len(), MAX_SESSION_EVENTS);
        assert_eq!(spans[0].events.dropped_count, 2);
    }

    #[test]
    fn a_model_call_without_a_provider_says_unknown() {
        let session = SessionId(Uuid::now_v7());
        let mut model = events().remove(1);
        if let SessionEvent::ModelResponse { provider, .. } = &mut model {
            *provider = None;
        }
        let spans = follow_all(session, vec![started(), model]);
        assert_eq!(spans.len(), 1);
        assert_eq!(
            attribute(&spans[0], "gen_ai.provider.name"),
            Some(&Value::from(UNKNOWN_PROVIDER))
        );
    }

    /// A tool call's arguments redacted while the call is open: the trail opened and kept
    /// them when the call was followed, and its span (closed by the result) must not carry
    /// them (found by review: the trail kept the opened arguments until the result).
    #[test]
    fn arguments_redacted_while_their_call_is_open_leave_with_no_span() {
        let session = SessionId(Uuid::now_v7());
        let mut events = events();
        let result = events.remove(3);
        events.insert(
            3,
            SessionEvent::PayloadRedacted {
                redacted_seq: 3,
                field: "arguments".into(),
                redacted_by: "alice".into(),
                reason: "a token in the arguments".into(),
                redacted_at: 3_500_000,
                key_id: "dk2g:3:arguments".into(),
                key_destroyed: true,
            },
        );
        events.insert(4, result);
        let mut trail = Trail::new(session);
        let mut spans = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let seq = Seq::try_from(i + 1).unwrap_or_default();
            let mut event = envelope(session, seq, event);
            if matches!(event.event, SessionEvent::PayloadRedacted { .. }) {
                // Signed by the recovery service; the fold checks that there is a signature.
                event.attestation = Some(sessionlog_schemas::Attestation {
                    key_id: "recovery-1".into(),
                    signature: vec![1; 64],
                });
            }
            let opened = event.clone();
            if let Some(span) = trail.follow(&event, position(i), Some(&opened)) {
                spans.push((seq, span));
            }
        }
        assert_eq!(
            trail.state.redactions().count(),
            1,
            "the redaction was accepted"
        );
        let (_, tool) = spans
            .iter()
            .find(|(seq, _)| *seq == 5)
            .expect("the result closes the call's span");
        assert_eq!(attribute(tool, TOOL_CALL_ARGUMENTS), None);
        assert_eq!(
            attribute(tool, TOOL_CALL_RESULT),
            Some(&Value::from("no match")),
            "only the redacted field is withheld"
        );
    }

    #[test]
    fn rejected_and_repeated_events_export_nothing() {
        let session = SessionId(Uuid::now_v7());
        let mut trail = Trail::new(session);
        let at = LogPosition {
            partition: 0,
            offset: 1,
        };
        // A model response before the session started is rejected by the fold.
        let early = envelope(session, 1, events().remove(1));
        assert!(trail.follow(&early, at, None).is_none());
        let start = envelope(session, 1, events().remove(0));
        assert!(trail.follow(&start, at, None).is_none());
        let model = envelope(session, 2, events().remove(1));
        assert!(trail.follow(&model, at, None).is_some());
        // The same model response again (a duplicate append) is not a second span.
        assert!(trail.follow(&model, at, None).is_none());
    }
}
