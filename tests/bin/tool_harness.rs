//! A stand-in agent harness for the recovery tests: it starts a session, makes one tool call
//! against a counting test service, and blocks at a chosen step so the test can `kill -9` it
//! exactly there.
//!
//! Usage: `tool_harness <service-url> <tool> <pure|idempotent|non-idempotent> <a|b|c|d>`, with
//! the stack's settings in the environment (`TestStack::env`). Steps:
//! - `a`: before the request is recorded;
//! - `b`: after the request is recorded, before the call;
//! - `c`: after the call, before its result is recorded;
//! - `d`: after the result is recorded.
//!
//! It prints `session <id>` and `key <idempotency key>` first, `acked <seq> <event id>` for
//! every acknowledged event, `step <x>` on reaching each step, and after the chosen step's line
//! it waits on stdin forever: the test reads up to that line, then kills it.

use anyhow::{Context, Result, bail};
use sessionlog_log::Settings;
use sessionlog_producer::{Appended, EventLog, ProducerOptions, SessionWriter};
use sessionlog_schemas::{CallOutcome, Content, EffectClass, ResultSource, SessionEvent};
use std::io::BufRead;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [service, tool, effect, stop] = args.as_slice() else {
        bail!(
            "usage: tool_harness <service-url> <tool> <pure|idempotent|non-idempotent> <a|b|c|d>"
        );
    };
    let effect = match effect.as_str() {
        "pure" => EffectClass::Pure,
        "idempotent" => EffectClass::Idempotent,
        "non-idempotent" => EffectClass::NonIdempotent,
        other => bail!("unknown effect class {other}"),
    };
    let step = |name: &str| {
        println!("step {name}");
        if name == stop {
            // Hold the step until killed: the test decides when this process dies.
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            std::process::exit(0);
        }
    };

    let settings = Settings::load(None).context("loading settings from the environment")?;
    let log = Arc::new(EventLog::connect(&settings, ProducerOptions::default()).await?);
    let (mut writer, started) = SessionWriter::create(log, "tool-harness", Some(tool)).await?;
    // Renewed while the process lives: killed, it leaves a lease that lapses after its TTL.
    writer.hold_lease("tool-harness").await?;
    let key = uuid::Uuid::now_v7().to_string();
    println!("session {}", writer.session_id());
    println!("key {key}");
    acked(&started);
    acked(&writer.user_request("do the thing").await?);

    step("a");
    let request = writer
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: tool.clone(),
                arguments: Content::plain(r#"{"amount": 1}"#),
                effect,
                approval_id: None,
            },
            None,
            Some(key.clone()),
        )
        .await?;
    acked(&request);

    step("b");
    let response = reqwest::Client::new()
        .post(format!("{service}/{tool}/calls/{key}"))
        .send()
        .await?
        .error_for_status()?;
    let output = response.text().await?;

    step("c");
    acked(
        &writer
            .append_with(
                SessionEvent::ToolCallResult {
                    call_seq: request.envelope.seq,
                    outcome: CallOutcome::Succeeded,
                    output: Content::plain(output),
                    source: ResultSource::Executed,
                    recorded_by: None,
                    note: None,
                },
                Some(request.envelope.event_id),
                Some(key),
            )
            .await?,
    );

    step("d");
    Ok(())
}

/// Tells the test an event is acknowledged, so it can check the rebuild keeps it.
fn acked(appended: &Appended) {
    println!(
        "acked {} {}",
        appended.envelope.seq, appended.envelope.event_id
    );
}
