//! `sessionlog status` on the real stack: with events appended and no projector in the group,
//! the group has lag and no live instance, and status exits 1 naming the command that fixes
//! it; once a projector runs and catches up, the lag is 0, the group has one live instance and
//! status exits 0. The text table and the `--json` object both carry it.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use sessionlog_producer::SessionWriter;
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::{TestStack, wait_for};
use std::process::Output;
use std::time::Duration;

fn status(stack: &TestStack, json: bool) -> Result<Output> {
    let mut command = stack.command(&[])?;
    command.args(["status", "--group", &stack.group]);
    if json {
        command.arg("--json");
    }
    command.output().context("running sessionlog status")
}

/// `status --json`: its exit code and the object it printed.
fn status_json(stack: &TestStack) -> Result<(Option<i32>, Value)> {
    let output = status(stack, true)?;
    let report = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "status printed no JSON: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok((output.status.code(), report))
}

/// The one group's total lag and live instances.
fn group_facts(report: &Value) -> Result<(i64, usize)> {
    let group = &report["groups"][0];
    let lag = group["partitions"]
        .as_array()
        .context("partitions")?
        .iter()
        .map(|p| p["lag"].as_i64().unwrap_or_default())
        .sum();
    let members = group["members"].as_array().context("members")?.len();
    Ok((lag, members))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_reports_lag_without_a_projector_and_health_once_one_catches_up() -> Result<()> {
    let stack = TestStack::new("cli_status", 2).await?;
    let log = event_log(&stack).await?;
    for i in 0..4 {
        let (mut writer, _) = SessionWriter::create(log.clone(), "status-agent", None).await?;
        writer.user_request(&format!("request {i}")).await?;
    }

    // No projector: lag, no live instance, exit 1 with the fix.
    let (code, report) = status_json(&stack)?;
    ensure!(code == Some(1), "status exited {code:?}: {report}");
    let (lag, members) = group_facts(&report)?;
    // Nothing consumed: the lag is every record appended.
    let appended: i64 = report["topic"]["partitions"]
        .as_array()
        .context("topic partitions")?
        .iter()
        .map(|p| p["end"].as_i64().unwrap_or_default() - p["start"].as_i64().unwrap_or_default())
        .sum();
    ensure!(
        lag > 0 && lag == appended && members == 0,
        "lag {lag} of {appended} appended, members {members}: {report}"
    );
    ensure!(report["healthy"] == false, "{report}");
    ensure!(report["topic"]["topic"] == stack.settings.kafka.topic.as_str());
    ensure!(report["topic"]["partitions"].as_array().map(Vec::len) == Some(2));
    ensure!(report["dead_letters"] == 0, "{report}");
    ensure!(report["store"]["state"] == "migrated", "{report}");
    ensure!(
        report["schemas"]["compatibility"] == "BACKWARD_TRANSITIVE",
        "{report}"
    );
    let fixes: Vec<&str> = report["problems"]
        .as_array()
        .context("problems")?
        .iter()
        .filter_map(|p| p["fix"].as_str())
        .collect();
    let wanted = format!(
        "start a projector: sessionlog project --group {}",
        stack.group
    );
    ensure!(fixes == [wanted.as_str()], "{report}");

    let text = status(&stack, false)?;
    let stdout = String::from_utf8_lossy(&text.stdout);
    ensure!(text.status.code() == Some(1), "{stdout}");
    ensure!(
        stdout.contains(&format!("0 live instance(s), lag {lag}")) && stdout.contains(&wanted),
        "{stdout}"
    );

    // A projector catches up: lag 0, one live instance, exit 0.
    let mut projector = stack.spawn_projector()?;
    let report = wait_for(
        "status to show the group caught up with one instance",
        Duration::from_secs(90),
        || {
            let stack = stack.clone();
            async move {
                let (code, report) = status_json(&stack)?;
                let (lag, members) = group_facts(&report)?;
                Ok((code == Some(0) && lag == 0 && members == 1).then_some(report))
            }
        },
    )
    .await?;
    projector.assert_running()?;
    ensure!(report["healthy"] == true && report["problems"] == serde_json::json!([]));
    let text = status(&stack, false)?;
    let stdout = String::from_utf8_lossy(&text.stdout);
    ensure!(
        text.status.code() == Some(0)
            && stdout.contains("1 live instance(s), lag 0")
            && stdout.trim_end().ends_with("healthy"),
        "{stdout}"
    );
    Ok(())
}
