//! Fixtures for tests and benchmarks (feature `testing`): the events a well-behaved writer
//! appends, built in one place so a schema change is a change here rather than in every test.
//!
//! A [`Script`] hands out a session's envelopes in order (the next seq at its epoch); the free
//! functions make the events themselves. Tests that mean to build a malformed envelope write
//! its fields out instead.

use crate::{
    Attestation, CallOutcome, Content, DEFAULT_TENANT, EffectClass, Epoch, EventEnvelope,
    ResultSource, Seq, SessionEvent, SessionId, TerminalOutcome, now_micros,
};

/// `SessionStarted` by `agent` in the default tenant, untitled, with no writer token.
pub fn started(agent: &str) -> SessionEvent {
    SessionEvent::SessionStarted {
        agent: agent.into(),
        title: None,
        tenant: DEFAULT_TENANT.into(),
        writer_token_sha256: None,
        name_sha256: None,
    }
}

/// A user's request of `text`.
pub fn user_request(text: impl Into<String>) -> SessionEvent {
    SessionEvent::UserRequest {
        content: Content::plain(text),
    }
}

/// `model`'s answer `text`, started now, one token and one micro-dollar each way, uncached.
pub fn model_response(model: &str, text: impl Into<String>) -> SessionEvent {
    SessionEvent::ModelResponse {
        model: model.into(),
        tokens_in: 1,
        tokens_out: 1,
        cost_micros: 1,
        started_at: now_micros(),
        content: Content::plain(text),
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        provider: None,
    }
}

/// A request to call `tool` with `{}` as its arguments, needing no approval.
pub fn tool_call(tool: &str, effect: EffectClass) -> SessionEvent {
    SessionEvent::ToolCallRequested {
        tool: tool.into(),
        arguments: Content::plain("{}"),
        effect,
        approval_id: None,
    }
}

/// The executed result of the call at `call_seq`: `outcome`, with `output`.
pub fn tool_result(call_seq: Seq, outcome: CallOutcome, output: impl Into<String>) -> SessionEvent {
    SessionEvent::ToolCallResult {
        call_seq,
        outcome,
        output: Content::plain(output),
        source: ResultSource::Executed,
        recorded_by: None,
        note: None,
    }
}

/// The session's end with `outcome`, no reason given.
pub fn ended(outcome: TerminalOutcome) -> SessionEvent {
    SessionEvent::SessionEnded {
        outcome,
        reason: None,
    }
}

/// `envelope` with a stand-in service signature. The fold checks that a privileged event
/// carries an attestation, not whose (recovery's notary does), so this serves tests of a fold.
pub fn signed(mut envelope: EventEnvelope) -> EventEnvelope {
    envelope.attestation = Some(Attestation {
        key_id: "test-stand-in".into(),
        signature: vec![1; 64],
    });
    envelope
}

/// One session's envelopes, handed out in order: each at the next seq and the script's epoch.
#[derive(Clone, Debug)]
pub struct Script {
    /// The session.
    pub session: SessionId,
    /// The epoch every envelope is written at.
    pub epoch: Epoch,
    /// The seq the next envelope gets.
    pub next_seq: Seq,
}

impl Script {
    /// A new session (a fresh id), at epoch 1, whose next event is seq 1.
    pub fn new() -> Self {
        Self::of(SessionId::new(), 1, 1)
    }

    /// `session`'s events at `epoch` from `next_seq` on.
    pub fn of(session: SessionId, epoch: Epoch, next_seq: Seq) -> Self {
        Self {
            session,
            epoch,
            next_seq,
        }
    }

    /// A new session and its first event, `SessionStarted` by `agent` ([`started`]).
    pub fn started(agent: &str) -> (Self, EventEnvelope) {
        let mut script = Self::new();
        let start = script.next(started(agent));
        (script, start)
    }

    /// `event` as the session's next envelope.
    pub fn next(&mut self, event: SessionEvent) -> EventEnvelope {
        let envelope = EventEnvelope::new(self.session, self.next_seq, self.epoch, event);
        self.next_seq += 1;
        envelope
    }

    /// The next envelope: a call of `tool` ([`tool_call`]) named by the idempotency key `key`.
    pub fn tool_call(&mut self, tool: &str, effect: EffectClass, key: &str) -> EventEnvelope {
        self.next(tool_call(tool, effect)).with_idempotency_key(key)
    }

    /// The next envelope: the result of `call` ([`tool_result`]), caused by it.
    pub fn tool_result(
        &mut self,
        call: &EventEnvelope,
        outcome: CallOutcome,
        output: &str,
    ) -> EventEnvelope {
        self.next(tool_result(call.seq, outcome, output))
            .caused_by(call.event_id)
    }
}

impl Default for Script {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_numbers_its_events_and_links_a_result_to_its_call() {
        let (mut script, start) = Script::started("agent");
        assert_eq!((start.seq, start.writer_epoch), (1, 1));
        let call = script.tool_call("search", EffectClass::Idempotent, "k1");
        let result = script.tool_result(&call, CallOutcome::Succeeded, "found");
        assert_eq!((call.seq, result.seq), (2, 3));
        assert_eq!(call.idempotency_key.as_deref(), Some("k1"));
        assert_eq!(result.causation_id, Some(call.event_id));
        assert_ne!(call.event_id, result.event_id);
        assert_eq!(result.session_id, start.session_id);
        assert_eq!(result.schema_version, crate::CURRENT_SCHEMA_VERSION);
        assert!(matches!(
            result.event,
            SessionEvent::ToolCallResult { call_seq: 2, .. }
        ));
    }
}
