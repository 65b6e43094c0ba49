//! `sessionlog schemas list|check` against the real registry: a fresh topic's subject has
//! every kept version at BACKWARD_TRANSITIVE and passes; a deleted version, a schema this
//! build does not know and a lowered compatibility level each fail `check` with exit 1 and
//! the fix, and `sessionlog init` (the fix it names) makes `check` pass again.

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use sessionlog_schemas::{schema_versions, value_subject};
use sessionlog_testkit::TestStack;
use std::process::Output;

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

fn sessionlog(stack: &TestStack, args: &[&str]) -> Result<Output> {
    stack.sessionlog(args)
}

/// `schemas <command> --json`: the exit code and the report.
fn schemas(stack: &TestStack, command: &str) -> Result<(Option<i32>, Value, String)> {
    let output = sessionlog(stack, &["schemas", command, "--json"])?;
    let report = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "schemas {command} printed no JSON report: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok((
        output.status.code(),
        report,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// The registry's subject URL for the stack's events topic.
fn subject_url(stack: &TestStack) -> String {
    format!(
        "{}/subjects/{}",
        stack.settings.registry.url.trim_end_matches('/'),
        value_subject(&stack.settings.kafka.topic)
    )
}

async fn registry(request: reqwest::RequestBuilder) -> Result<Value> {
    let response = request
        .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
        .send()
        .await?;
    let status = response.status();
    let body = response.text().await?;
    ensure!(
        status.is_success(),
        "the registry answered {status}: {body}"
    );
    Ok(serde_json::from_str(&body)?)
}

fn statuses(report: &Value) -> Vec<(Value, String)> {
    report["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|line| {
            (
                line["kept_version"].clone(),
                line["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn all_registered() -> Vec<(Value, String)> {
    schema_versions()
        .iter()
        .map(|v| (json!(v.version), "registered".to_owned()))
        .collect()
}

/// Runs the fix `check` names, then `check` again: it passes.
fn init_fixes_it(stack: &TestStack) -> Result<()> {
    let init = sessionlog(stack, &["init"])?;
    ensure!(
        init.status.success(),
        "sessionlog init failed: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let (code, report, stderr) = schemas(stack, "check")?;
    ensure!(
        code == Some(0),
        "check after init exited {code:?}: {report} {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn a_fresh_subject_passes_and_a_deleted_latest_version_fails_until_init() -> Result<()> {
    let stack = TestStack::new("cli_schemas_deleted", 1).await?;
    let (code, report, _) = schemas(&stack, "list")?;
    ensure!(code == Some(0), "list exited {code:?}");
    ensure!(
        statuses(&report) == all_registered(),
        "every kept version registered: {report}"
    );
    ensure!(report["compatibility"] == "BACKWARD_TRANSITIVE", "{report}");
    ensure!(report["compatibility_source"] == "subject", "{report}");
    ensure!(report["drift"] == json!([]), "{report}");
    let (code, _, stderr) = schemas(&stack, "check")?;
    ensure!(code == Some(0), "check exited {code:?}: {stderr}");

    // The human listing names every version too.
    let listed = sessionlog(&stack, &["schemas", "list"])?;
    let text = String::from_utf8_lossy(&listed.stdout);
    ensure!(
        text.lines().filter(|l| l.ends_with("registered")).count() == schema_versions().len()
            && text.contains("no drift"),
        "{text}"
    );

    // The latest version deleted: init can register it again (an older one it cannot, as
    // BACKWARD_TRANSITIVE refuses it after newer ones; the drift says so).
    let latest = schema_versions()
        .last()
        .context("no kept versions")?
        .version;
    let http = reqwest::Client::new();
    registry(http.delete(format!("{}/versions/{latest}", subject_url(&stack)))).await?;
    let (code, report, stderr) = schemas(&stack, "check")?;
    ensure!(code == Some(1), "check after a deletion exited {code:?}");
    ensure!(
        statuses(&report)
            .iter()
            .any(|(kept, status)| *kept == json!(latest) && status == "missing"),
        "version {latest} missing: {report}"
    );
    ensure!(
        report["drift"][0]["fix"] == "sessionlog init",
        "the fix is named: {report}"
    );
    ensure!(stderr.contains("sessionlog init"), "{stderr}");
    init_fixes_it(&stack)
}

#[tokio::test]
async fn an_unknown_schema_and_a_lowered_level_fail_check() -> Result<()> {
    let stack = TestStack::new("cli_schemas_unknown", 1).await?;
    let http = reqwest::Client::new();
    let subject = subject_url(&stack);
    let config = format!(
        "{}/config/{}",
        stack.settings.registry.url.trim_end_matches('/'),
        value_subject(&stack.settings.kafka.topic)
    );
    registry(
        http.put(&config)
            .body(json!({"compatibility": "NONE"}).to_string()),
    )
    .await?;
    let stranger = json!({"type": "record", "name": "Stranger", "fields": []}).to_string();
    let id = registry(
        http.post(format!("{subject}/versions"))
            .body(json!({ "schema": stranger }).to_string()),
    )
    .await?["id"]
        .clone();

    let (code, report, stderr) = schemas(&stack, "check")?;
    ensure!(code == Some(1), "check exited {code:?}: {stderr}");
    ensure!(report["compatibility"] == "NONE", "{report}");
    let unknown: Vec<&Value> = report["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|line| line["status"] == "unknown")
        .collect();
    ensure!(
        unknown.len() == 1 && unknown[0]["id"] == id,
        "the stranger is unknown: {report}"
    );
    let problems: Vec<&str> = report["drift"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["problem"].as_str())
        .collect();
    ensure!(
        problems.len() == 2
            && problems[0].contains("NONE, not BACKWARD_TRANSITIVE")
            && problems[1].contains("no schema this build keeps"),
        "{problems:?}"
    );
    // `list` shows the same and exits 0: only `check` judges.
    let (code, _, _) = schemas(&stack, "list")?;
    ensure!(code == Some(0), "list exited {code:?}");

    // The fix the drift names for the stranger, then init for the level.
    let stranger_version = unknown[0]["registry_version"].clone();
    registry(http.delete(format!("{subject}/versions/{stranger_version}"))).await?;
    init_fixes_it(&stack)
}
