//! `sessionlog doctor` on the real stack: with everything as `init` leaves it, it exits 0 and
//! reports every server it asked (each Kafka broker, the registry, each CQL node, the OTLP
//! receiver when one is named) with what it runs, each setting with where it came from (a
//! value from the environment, one from a settings file, one left at its default), and the
//! brokers' clocks; a registry URL pointing nowhere exits 3 naming the variable that set it;
//! a `[retention]` the topic does not have exits 1 naming the command that fixes it.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use sessionlog_log::topic;
use sessionlog_testkit::{TestStack, free_address, sessionlog_bin};
use std::process::Output;

/// Runs `sessionlog doctor ARGS` in `stack`'s corner with `env` added.
fn doctor(stack: &TestStack, env: &[(&str, &str)], args: &[&str]) -> Result<Output> {
    stack
        .command(&["doctor"])?
        .args(args)
        .envs(env.iter().copied())
        .output()
        .context("running sessionlog doctor")
}

/// `doctor --json`: its exit code and the report it printed.
fn doctor_json(
    stack: &TestStack,
    env: &[(&str, &str)],
    args: &[&str],
) -> Result<(Option<i32>, Value)> {
    // The servers answer in milliseconds, but CI runs every test at once on a few cores, and
    // a registry slow to answer under that load is not what these tests look for (a server
    // that is not there is refused at once, whatever the timeout).
    let mut all = vec!["--json", "--timeout", "30s"];
    all.extend_from_slice(args);
    let output = doctor(stack, env, &all)?;
    let report = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "doctor printed no JSON report: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok((output.status.code(), report))
}

fn array<'a>(report: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    report[key]
        .as_array()
        .with_context(|| format!("the report has no {key} list: {report}"))
}

/// The resolved setting `key`.
fn setting<'a>(report: &'a Value, key: &str) -> Result<&'a Value> {
    array(report, "settings")?
        .iter()
        .find(|s| s["key"] == key)
        .with_context(|| format!("setting {key} is not in the report"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_healthy_deployment_exits_0_with_every_server_its_version_and_each_settings_source()
-> Result<()> {
    let stack = TestStack::new("cli_doctor_ok", 2).await?;
    // A settings file of the test's corner that also sets `[projector] batch_max`, and the
    // topic named by a variable, so each source has a setting to show.
    let mut with_batch = stack.clone();
    with_batch.settings.projector.batch_max = 1234;
    let file = sessionlog_testkit::served::write_settings_file(&with_batch.settings)?;
    let file_arg = file.to_string_lossy().to_string();
    let topic_env = [(
        "SESSIONLOG_KAFKA__TOPIC",
        stack.settings.kafka.topic.as_str(),
    )];
    let (code, report) = doctor_json(&stack, &topic_env, &["--config", &file_arg])?;
    ensure!(code == Some(0), "doctor exited {code:?}: {report:#}");
    ensure!(report["healthy"] == true && report["problems"] == serde_json::json!([]));

    // Each setting with its source: the file, the environment, the default.
    ensure!(
        report["settings_file"] == file_arg.as_str(),
        "{}",
        report["settings_file"]
    );
    let batch = setting(&report, "projector.batch_max")?;
    ensure!(batch["value"] == 1234, "{batch}");
    ensure!(
        batch["source"] == serde_json::json!({"kind": "file", "path": file_arg}),
        "{batch}"
    );
    let topic_setting = setting(&report, "kafka.topic")?;
    ensure!(
        topic_setting["value"] == stack.settings.kafka.topic.as_str()
            && topic_setting["source"]
                == serde_json::json!({"kind": "env", "variable": "SESSIONLOG_KAFKA__TOPIC"}),
        "{topic_setting}"
    );
    let group = setting(&report, "projector.group_id")?;
    ensure!(
        group["source"] == serde_json::json!({"kind": "default"}),
        "{group}"
    );

    // Every server answered and says what it runs.
    let servers = array(&report, "servers")?;
    for server in servers {
        ensure!(server["status"] == "ok", "{server}");
    }
    let with_role = |server: &str, role: &str| -> Vec<&Value> {
        servers
            .iter()
            .filter(|s| {
                s["server"] == server && s["role"].as_str().is_some_and(|r| r.starts_with(role))
            })
            .collect()
    };
    let live = topic::live_brokers(&stack.settings.kafka).await?;
    let brokers = with_role("kafka", "broker");
    ensure!(
        brokers.len() == live.len(),
        "{} broker lines for the live brokers {live:?}: {servers:#?}",
        brokers.len()
    );
    for broker in &brokers {
        let version = broker["version"].as_str().unwrap_or_default();
        ensure!(version.starts_with("Kafka protocol: "), "{broker}");
        let produce = broker["api_versions"]
            .as_array()
            .and_then(|apis| apis.iter().find(|a| a["api"] == "Produce"));
        ensure!(
            produce.is_some_and(|p| p["max"].as_i64() >= Some(3)),
            "{broker}"
        );
    }
    let registry = with_role("registry", "registry");
    ensure!(
        registry.len() == 1
            && registry[0]["version"]
                .as_str()
                .is_some_and(|v| v.contains("Registry ")),
        "{registry:?}"
    );
    let nodes = with_role("cql", "node");
    ensure!(!nodes.is_empty(), "no CQL node reported: {servers:#?}");
    for node in &nodes {
        let version = node["version"].as_str().unwrap_or_default();
        ensure!(
            version.starts_with("Cassandra ") || version.starts_with("ScyllaDB "),
            "{node}"
        );
    }
    if let Ok(endpoint) = std::env::var("SESSIONLOG_OTLP_ENDPOINT") {
        let receiver = with_role("otlp", "receiver");
        ensure!(
            receiver.len() == 1
                && receiver[0]["address"] == endpoint.as_str()
                && receiver[0]["version"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("Arize Phoenix ")),
            "{receiver:?}"
        );
    }

    // The topics as init made them, the keyspaces migrated, each broker's clock measured.
    let topics = array(&report, "topics")?;
    ensure!(topics.len() == 4, "{topics:#?}");
    ensure!(topics[0]["topic"] == stack.settings.kafka.topic.as_str());
    ensure!(topics[0]["partitions"] == 2 && topics[0]["configs"]["cleanup.policy"] == "delete");
    // The lease topic: compacted, partitioned as the events topic is.
    ensure!(topics[2]["topic"] == stack.settings.kafka.lease_topic().as_str());
    ensure!(topics[2]["partitions"] == 2 && topics[2]["configs"]["cleanup.policy"] == "compact");
    // The wake topic: partitioned as the events topic is, kept a day.
    ensure!(topics[3]["topic"] == stack.settings.kafka.wake_topic().as_str());
    ensure!(topics[3]["partitions"] == 2 && topics[3]["configs"]["retention.ms"] == "86400000");
    let keyspaces = array(&report, "keyspaces")?;
    ensure!(
        keyspaces[0]["state"] == "migrated" && keyspaces[1]["state"] == "present",
        "{keyspaces:#?}"
    );
    let clocks = report["clock"]["clocks"]
        .as_array()
        .context("no clock measured")?;
    ensure!(clocks.len() == live.len(), "{clocks:#?}");
    for clock in clocks {
        // The brokers run on this host: one clock, so the offset is within its own bound.
        let offset = clock["offset_ms"].as_i64().unwrap_or(i64::MAX);
        let bound = clock["uncertainty_ms"].as_i64().unwrap_or_default();
        ensure!(offset.abs() <= bound, "{clock}");
    }

    // The same as a table.
    let text = doctor(
        &stack,
        &topic_env,
        &["--config", &file_arg, "--timeout", "5s"],
    )?;
    let stdout = String::from_utf8_lossy(&text.stdout);
    ensure!(
        text.status.code() == Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&text.stderr)
    );
    let batch_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("projector.batch_max "))
        .context("no projector.batch_max line")?;
    ensure!(
        batch_line.ends_with(&format!("file {file_arg}")),
        "{batch_line}"
    );
    ensure!(stdout.trim_end().ends_with("healthy"), "{stdout}");
    std::fs::remove_file(&file)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_does_not_answer_exits_3_naming_the_variable_that_set_its_url() -> Result<()>
{
    let stack = TestStack::new("cli_doctor_reg", 1).await?;
    let nowhere = format!("http://{}/apis/ccompat/v7", free_address()?);
    let env = [("SESSIONLOG_REGISTRY__URL", nowhere.as_str())];
    let (code, report) = doctor_json(&stack, &env, &["--no-clock"])?;
    ensure!(code == Some(3), "doctor exited {code:?}: {report:#}");
    let problems = array(&report, "problems")?;
    ensure!(
        problems.len() == 1,
        "only the registry is wrong: {problems:#?}"
    );
    let problem = &problems[0];
    ensure!(
        problem["check"] == "registry" && problem["unreachable"] == true,
        "{problem}"
    );
    let fix = problem["fix"].as_str().unwrap_or_default();
    ensure!(
        fix.contains("registry.url") && fix.contains("SESSIONLOG_REGISTRY__URL"),
        "{fix}"
    );
    let registry = array(&report, "servers")?
        .iter()
        .find(|s| s["server"] == "registry")
        .context("no registry line")?;
    ensure!(
        registry["status"] == "unreachable" && registry["address"] == nowhere.as_str(),
        "{registry}"
    );
    // The other servers are still reported as they are.
    ensure!(
        array(&report, "servers")?
            .iter()
            .any(|s| s["server"] == "kafka" && s["status"] == "ok")
    );

    // The error on stderr says it too, as every command's does.
    let output = doctor(&stack, &env, &["--json", "--no-clock", "--timeout", "5s"])?;
    let error: Value = serde_json::from_slice(&output.stderr)
        .with_context(|| String::from_utf8_lossy(&output.stderr).to_string())?;
    ensure!(error["exit_code"] == 3, "{error}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retention_the_topic_does_not_have_exits_1_naming_the_command_that_fixes_it() -> Result<()>
{
    let stack = TestStack::new("cli_doctor_ret", 1).await?;
    let env = [("SESSIONLOG_RETENTION__RETENTION_MS", "86400000")];
    let (code, report) = doctor_json(&stack, &env, &["--no-clock"])?;
    ensure!(code == Some(1), "doctor exited {code:?}: {report:#}");
    let problems = array(&report, "problems")?;
    ensure!(problems.len() == 1, "{problems:#?}");
    let problem = &problems[0];
    let text = problem["problem"].as_str().unwrap_or_default();
    ensure!(
        problem["check"] == "topic"
            && problem["unreachable"] == false
            && text.contains(&stack.settings.kafka.topic)
            && text.contains("retention.ms is -1, the settings want 86400000"),
        "{problem}"
    );
    let fix = problem["fix"].as_str().unwrap_or_default();
    ensure!(
        fix.starts_with("sessionlog init --apply")
            && fix.contains(&format!(
                "--entity-name {} --add-config retention.ms=86400000",
                stack.settings.kafka.topic
            ))
            && fix.contains(
                "retention.retention_ms comes from env SESSIONLOG_RETENTION__RETENTION_MS"
            ),
        "{fix}"
    );
    Ok(())
}

#[test]
fn a_duration_without_units_it_can_read_is_a_usage_error() -> Result<()> {
    let output = std::process::Command::new(sessionlog_bin()?)
        .args(["doctor", "--timeout", "soon"])
        .output()?;
    ensure!(output.status.code() == Some(2), "{output:?}");
    Ok(())
}
