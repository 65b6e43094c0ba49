//! A pause that says when it lapses (schema v7): `sessionlog pause --until` and `POST
//! /v1/sessions/{id}/pause {"until": ...}` record the time in the log, `sessionlog status
//! SESSION` and `GET /v1/sessions/{id}` show it as `paused_until`, the rebuilt state keeps it
//! and an unpause clears it; a bad time is refused (exit 2, or 422) and appends nothing.

use anyhow::{Context, Result, ensure};
use reqwest::{Client, Method};
use serde_json::{Value, json};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{Micros, SessionEvent, SessionId};
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::recovery::accepted_events;
use sessionlog_testkit::{ServedProcess, TestStack};
use std::process::Output;

/// The end every pause here takes: far enough ahead that no run reaches it.
const UNTIL: &str = "2099-01-02T03:04:05Z";
/// [`UNTIL`] in microseconds since the Unix epoch.
const UNTIL_MICROS: Micros = 4_071_006_245_000_000;

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

/// The `until` of each pause of `session`, in order.
async fn pauses(recovery: &Recovery, session: SessionId) -> Result<Vec<Option<Micros>>> {
    Ok(accepted_events(recovery, session)
        .await?
        .into_iter()
        .filter_map(|e| match e.envelope.event {
            SessionEvent::SessionPaused { until, .. } => Some(until),
            _ => None,
        })
        .collect())
}

/// A session a harness started and wrote to.
async fn session(stack: &TestStack) -> Result<SessionId> {
    let (mut harness, _) = SessionWriter::create(event_log(stack).await?, "agent", None).await?;
    harness.user_request("migrate the database").await?;
    Ok(harness.session_id())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_pauses_until_a_time_and_status_shows_it() -> Result<()> {
    let stack = TestStack::new("pause_until_cli", 1).await?;
    let session = session(&stack).await?;
    let id = session.to_string();
    let recovery = Recovery::connect(&stack.settings).await?;

    // Times that are no time to come are refused as clap refuses any bad flag: exit 2, the
    // reason on stderr, nothing appended (not even the claim).
    let before = accepted_events(&recovery, session).await?.len();
    for bad in ["2001-01-01T00:00:00Z", "tomorrow", "+0s", "+soon"] {
        let output = sessionlog(&stack, &["pause", &id, "--reason", "r", "--until", bad])?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(output.status.code() == Some(2), "{bad}: {output:?}");
        ensure!(stderr.contains("--until"), "{bad}: {stderr}");
    }
    ensure!(
        accepted_events(&recovery, session).await?.len() == before,
        "a refused pause appends nothing"
    );

    succeeds(
        &stack,
        &["pause", &id, "--reason", "change freeze", "--until", UNTIL],
    )?;
    ensure!(pauses(&recovery, session).await? == [Some(UNTIL_MICROS)]);
    ensure!(recovery.rebuild(session).await?.state.paused_until == Some(UNTIL_MICROS));
    let status = succeeds(&stack, &["status", &id])?;
    ensure!(status["status"] == "paused", "{status}");
    ensure!(status["paused_until"] == UNTIL, "{status}");
    let output = stack.command(&[])?.args(["status", &id]).output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    ensure!(
        text.contains(&format!(": paused until {UNTIL}, ")),
        "{text}"
    );

    // An unpause clears it; a pause from now lapses that far ahead.
    succeeds(&stack, &["unpause", &id])?;
    let status = succeeds(&stack, &["status", &id])?;
    ensure!(status.get("paused_until").is_none(), "{status}");
    ensure!(
        recovery
            .rebuild(session)
            .await?
            .state
            .paused_until
            .is_none()
    );
    let asked = sessionlog_schemas::now_micros();
    succeeds(
        &stack,
        &["pause", &id, "--reason", "lunch", "--until", "+30m"],
    )?;
    let until = recovery
        .rebuild(session)
        .await?
        .state
        .paused_until
        .context("a pause from now has an end")?;
    let half_hour = 30 * 60 * 1_000_000;
    let after = sessionlog_schemas::now_micros();
    ensure!(
        (asked + half_hour..=after + half_hour).contains(&until),
        "{until} is not 30 min after {asked}..{after}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn http_pauses_until_a_time_and_the_session_view_shows_it() -> Result<()> {
    let stack = TestStack::new("pause_until_http", 1).await?;
    let session = session(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let service = ServedProcess::start(&stack, "serve-recovery").await?;
    let http: Client = sessionlog_testkit::auth::client()?;
    let call = |method: Method, path: String, body: Option<Value>| {
        let mut request = http.request(method, format!("{}{path}", service.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let body: Value = response.json().await?;
            anyhow::Ok((status, body))
        }
    };
    let pause = format!("/v1/sessions/{session}/pause");
    let view = format!("/v1/sessions/{session}");

    let before = accepted_events(&recovery, session).await?.len();
    for bad in [
        json!("2001-01-01T00:00:00Z"),
        json!("+30m"),
        json!("2099-13-01T00:00:00Z"),
        json!(""),
    ] {
        let (status, problem) = call(
            Method::POST,
            pause.clone(),
            Some(json!({"reason": "r", "until": bad})),
        )
        .await?;
        ensure!(status == 422, "{bad}: {status} {problem}");
        ensure!(problem["code"] == "invalid_request", "{bad}: {problem}");
        ensure!(
            problem["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("until"),
            "{bad}: {problem}"
        );
    }
    // Not a string at all: the body's form is wrong (a 4xx, never a 500).
    let (status, problem) = call(
        Method::POST,
        pause.clone(),
        Some(json!({"reason": "r", "until": 4_071_006_245_i64})),
    )
    .await?;
    ensure!((400..500).contains(&status), "{status} {problem}");
    ensure!(
        accepted_events(&recovery, session).await?.len() == before,
        "a refused pause appends nothing"
    );

    let (status, paused) = call(
        Method::POST,
        pause.clone(),
        Some(json!({"reason": "change freeze", "until": "2099-01-02T04:04:05+01:00"})),
    )
    .await?;
    ensure!(status == 200, "{status} {paused}");
    ensure!(
        paused["event"]["event"]["SessionPaused"]["until"] == UNTIL_MICROS,
        "{paused}"
    );
    let (status, shown) = call(Method::GET, view.clone(), None).await?;
    ensure!(status == 200, "{status} {shown}");
    ensure!(shown["status"] == "paused", "{shown}");
    ensure!(shown["paused_until"] == UNTIL, "{shown}");
    ensure!(
        shown["rebuilt"]["state"]["paused_until"] == UNTIL_MICROS,
        "{shown}"
    );

    let (status, _) = call(
        Method::POST,
        format!("/v1/sessions/{session}/unpause"),
        Some(json!({})),
    )
    .await?;
    ensure!(status == 200);
    let (_, shown) = call(Method::GET, view.clone(), None).await?;
    ensure!(shown.get("paused_until").is_none(), "{shown}");
    // Without `until`, a pause waits for an unpause, as before.
    let (status, _) = call(Method::POST, pause, Some(json!({"reason": "audit"}))).await?;
    ensure!(status == 200);
    let (_, shown) = call(Method::GET, view, None).await?;
    ensure!(
        shown["status"] == "paused" && shown.get("paused_until").is_none(),
        "{shown}"
    );
    ensure!(pauses(&recovery, session).await? == [Some(UNTIL_MICROS), None]);
    Ok(())
}
