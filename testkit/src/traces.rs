//! A tool-calling session the trace tests append and read back as spans.

use crate::TestStack;
use crate::projector::event_log;
use anyhow::Result;
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, ResultSource, SessionEvent, SessionId, TerminalOutcome,
};

/// What the test session appended, to check the spans against.
pub struct ToolSession {
    pub session: SessionId,
    pub start: Appended,
    pub model: Appended,
    pub calls: Vec<(Appended, Appended)>,
    pub steering: Appended,
    pub end: Appended,
}

/// A session that asks a model, runs the two tools it asked for, is steered, and ends.
pub async fn tool_session(stack: &TestStack) -> Result<ToolSession> {
    let log = event_log(stack).await?;
    let (mut writer, start) = SessionWriter::create(log, "planner", Some("traces")).await?;
    writer.user_request("find the bug").await?;
    let model = writer
        .append(SessionEvent::ModelResponse {
            model: "model-x".into(),
            tokens_in: 1_200,
            tokens_out: 300,
            cost_micros: 4_500,
            // Just after the session began: spans by time then list the session first.
            started_at: start.envelope.occurred_at + 1,
            content: Content::plain("grep, then read"),
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            provider: Some("openai".into()),
        })
        .await?;
    let mut calls = Vec::new();
    for (tool, outcome) in [
        ("grep", CallOutcome::Succeeded),
        ("read", CallOutcome::Failed),
    ] {
        let request = writer
            .append(SessionEvent::ToolCallRequested {
                tool: tool.into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Pure,
                approval_id: None,
            })
            .await?;
        let result = writer
            .append(SessionEvent::ToolCallResult {
                call_seq: request.envelope.seq,
                outcome,
                output: Content::plain("out"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            })
            .await?;
        calls.push((request, result));
    }
    // A harness's own note: in its own writer's name (an operator's is signed by recovery).
    let author = writer.state().writer_name().unwrap_or_default().to_string();
    let steering = writer
        .append(SessionEvent::SteeringMessage {
            author,
            content: Content::plain("look in src/"),
        })
        .await?;
    let end = writer.close(TerminalOutcome::Completed, None).await?;
    Ok(ToolSession {
        session: writer.session_id(),
        start,
        model,
        calls,
        steering,
        end,
    })
}

/// When a model call started: its `ModelResponse`'s `started_at` (its time otherwise).
pub fn started_at(model: &Appended) -> i64 {
    match &model.envelope.event {
        SessionEvent::ModelResponse { started_at, .. } => *started_at,
        _ => model.envelope.occurred_at,
    }
}
