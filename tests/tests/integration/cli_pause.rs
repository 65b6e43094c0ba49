//! `sessionlog pause|unpause|steer` on the real stack: a pause fences the harness that was
//! writing and records why and by whom; resume refuses the paused session (409
//! `session_paused` over HTTP) until `unpause`; steering is appended with its author and is in
//! the resumed harness's context view; a second pause is refused without taking the session
//! over.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Error, Recovery};
use sessionlog_schemas::{SessionEvent, SessionId};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::recovery::accepted_events;
use std::process::Output;

fn sessionlog(stack: &TestStack, args: &[&str]) -> Result<Output> {
    stack
        .command(&[])?
        .args(args)
        .arg("--json")
        .output()
        .with_context(|| format!("running sessionlog {args:?}"))
}

/// Runs a command that must succeed; returns its JSON output.
fn succeeds(stack: &TestStack, args: &[&str]) -> Result<Value> {
    let output = sessionlog(stack, args)?;
    ensure!(
        output.status.success(),
        "sessionlog {args:?} exited {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// Runs a command that must fail with exit 1; returns its error message.
fn refused(stack: &TestStack, args: &[&str]) -> Result<String> {
    let output = sessionlog(stack, args)?;
    ensure!(
        output.status.code() == Some(1),
        "sessionlog {args:?} should exit 1, exited {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no JSON error: {stderr}"))?;
    let error: Value = serde_json::from_str(line)?;
    Ok(error["error"].as_str().unwrap_or_default().to_owned())
}

/// The kinds of `session`'s accepted events, with the writer of each
/// claim and the author of each steering message.
async fn kinds(recovery: &Recovery, session: SessionId) -> Result<Vec<String>> {
    Ok(accepted_events(recovery, session)
        .await?
        .into_iter()
        .map(|e| match &e.envelope.event {
            SessionEvent::WriterClaimed { writer, .. } => format!("WriterClaimed {writer}"),
            SessionEvent::SteeringMessage { author, .. } => format!("SteeringMessage {author}"),
            other => other.kind().to_owned(),
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_session_is_not_resumed_until_unpaused() -> Result<()> {
    let stack = TestStack::new("cli_pause", 1).await?;
    let (mut harness, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    harness.user_request("migrate the database").await?;
    let session = harness.session_id();
    let id = session.to_string();
    let recovery = Recovery::connect(&stack.settings).await?;
    let before = kinds(&recovery, session).await?.len();

    let paused = succeeds(
        &stack,
        &["pause", &id, "--reason", "change freeze", "--by", "alice"],
    )?;
    ensure!(paused.to_string().contains("SessionPaused"), "{paused}");
    // The harness that was writing is fenced: it learns at its next read-back.
    match harness.checkpoint(None).await {
        Err(sessionlog_producer::Error::Fenced { .. }) => {}
        other => bail!("the harness should be fenced after the pause, got {other:?}"),
    }

    match recovery.resume(session, "harness-2", None).await {
        Err(error @ Error::Paused { .. }) => {
            ensure!(error.to_string().contains("sessionlog unpause"), "{error}");
            let problem = sessionlog_http::Problem::from(error);
            ensure!(
                problem.status.as_u16() == 409 && problem.code == "session_paused",
                "{} {}",
                problem.status,
                problem.code
            );
        }
        other => bail!("Paused expected, got {other:?}"),
    }
    let error = refused(&stack, &["resume", &id, "--writer", "harness-2"])?;
    ensure!(error.contains("is paused"), "{error}");

    // A second pause is refused and takes nothing over.
    let count = kinds(&recovery, session).await?.len();
    let error = refused(&stack, &["pause", &id, "--reason", "again"])?;
    ensure!(error.contains("already paused"), "{error}");
    ensure!(
        kinds(&recovery, session).await?.len() == count,
        "nothing appended"
    );

    succeeds(
        &stack,
        &[
            "steer",
            &id,
            "--text",
            "use the staging cluster",
            "--by",
            "bob",
        ],
    )?;
    succeeds(&stack, &["unpause", &id, "--by", "alice"])?;
    let error = refused(&stack, &["unpause", &id])?;
    ensure!(error.contains("not paused"), "{error}");

    let kinds = kinds(&recovery, session).await?;
    ensure!(
        kinds[before..]
            == [
                "WriterClaimed operator:alice",
                "SessionPaused",
                "WriterClaimed operator:bob",
                "SteeringMessage bob",
                "WriterClaimed operator:alice",
                "SessionResumed",
            ],
        "{kinds:?}"
    );
    let bundle = recovery.resume(session, "harness-2", None).await?;
    ensure!(!bundle.state.paused, "resumed after unpause");
    // The resumed harness sees the steering in its context view, with its author.
    let context = serde_json::to_string(&bundle.context)?;
    ensure!(
        context.contains("use the staging cluster") && context.contains("bob"),
        "the steering is in the context view: {context}"
    );
    Ok(())
}
