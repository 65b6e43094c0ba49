//! A scripted harness run: the walking skeleton `sessionlog example`, the demo and the
//! end-to-end tests append. It lives with the command, not in the producer library that
//! harnesses link.

use sessionlog_producer::{Appended, EventLog, Result, SessionWriter};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, ResultSource, SessionEvent, TerminalOutcome,
};
use std::sync::Arc;

/// Appends one complete session: started, a user request, a model response, a tool call and
/// its result, a checkpoint, and the terminal outcome. Returns the writer and what the log
/// acknowledged, in order.
pub async fn run_example_session(log: Arc<EventLog>) -> Result<(SessionWriter, Vec<Appended>)> {
    let (mut writer, start) =
        SessionWriter::create(log, "example-harness", Some("walking skeleton")).await?;
    let mut appended = vec![start];
    appended.push(
        writer
            .user_request("Upgrade the logging crate and make the tests pass.")
            .await?,
    );
    let response = writer
        .append(SessionEvent::ModelResponse {
            model: "example-model".into(),
            tokens_in: 1_250,
            tokens_out: 310,
            cost_micros: 4_200,
            started_at: sessionlog_schemas::now_micros(),
            content: Content::plain("I will bump the version and run the test suite."),
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            provider: None,
        })
        .await?;
    appended.push(response);
    let call = writer
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "shell".into(),
                arguments: Content::plain("cargo update -p log && cargo test"),
                effect: EffectClass::Idempotent,
                approval_id: None,
            },
            None,
            Some(format!("{}-shell-1", writer.session_id())),
        )
        .await?;
    let (call_seq, call_id) = (call.envelope.seq, call.envelope.event_id);
    appended.push(call);
    let result = writer
        .append_with(
            SessionEvent::ToolCallResult {
                call_seq,
                outcome: CallOutcome::Succeeded,
                output: Content::plain("test result: ok. 42 passed; 0 failed"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
            Some(call_id),
            None,
        )
        .await?;
    appended.push(result);
    appended.push(writer.checkpoint(Some("git:4f2c1e9".into())).await?);
    appended.push(
        writer
            .close(TerminalOutcome::Completed, Some("tests pass".into()))
            .await?,
    );
    Ok((writer, appended))
}
