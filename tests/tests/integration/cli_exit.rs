//! The exit statuses every command keeps (0 ok, 1 a difference or a failed check, 2 usage,
//! 3 a server unavailable), errors as a JSON object on stderr with `--json`, and shell
//! completions. The unavailable servers are closed ports, so these need no stack but the
//! registry for the failed check.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use sessionlog_testkit::sessionlog_bin;
use std::process::Output;
use std::time::{Duration, Instant};

/// Runs the binary with `env` on top of the test's environment; no settings file.
fn sessionlog(args: &[&str], env: &[(&str, &str)]) -> Result<(Output, Duration)> {
    let started = Instant::now();
    let output = std::process::Command::new(sessionlog_bin()?)
        .args(args)
        .envs(env.iter().copied())
        .env("SESSIONLOG_CONFIG", "/dev/null")
        .output()
        .with_context(|| format!("running sessionlog {args:?}"))?;
    Ok((output, started.elapsed()))
}

/// The JSON object an error is printed as with `--json`.
fn json_error(output: &Output) -> Result<Value> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no JSON error on stderr: {stderr}"))?;
    Ok(serde_json::from_str(line)?)
}

#[test]
fn an_unreachable_registry_is_exit_3_and_quick() -> Result<()> {
    let (output, took) = sessionlog(
        &["schemas", "list", "--json"],
        &[(
            "SESSIONLOG_REGISTRY__URL",
            "http://127.0.0.1:1/apis/ccompat/v7",
        )],
    )?;
    ensure!(output.status.code() == Some(3), "exit {:?}", output.status);
    ensure!(took < Duration::from_secs(15), "took {took:?}");
    let error = json_error(&output)?;
    ensure!(error["exit_code"] == 3, "{error}");
    ensure!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("registry.url")),
        "the error names the setting: {error}"
    );
    Ok(())
}

#[test]
fn unreachable_cql_nodes_are_exit_3_in_text_too() -> Result<()> {
    let (output, took) = sessionlog(
        &["inspect", "0190e5b8-0000-7000-8000-000000000001"],
        &[("SESSIONLOG_CQL__NODES", "127.0.0.1:1")],
    )?;
    ensure!(output.status.code() == Some(3), "exit {:?}", output.status);
    ensure!(took < Duration::from_secs(15), "took {took:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        stderr.contains("error: cannot connect to CQL") && stderr.contains("SESSIONLOG_CQL__NODES"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn a_failed_check_is_exit_1_and_usage_is_exit_2() -> Result<()> {
    // A topic no one registered schemas for: every kept version is missing.
    let topic = format!("session-events-t-exit-{}", uuid::Uuid::now_v7().simple());
    let (output, _) = sessionlog(
        &["schemas", "check", "--json"],
        &[("SESSIONLOG_KAFKA__TOPIC", topic.as_str())],
    )?;
    ensure!(
        output.status.code() == Some(1),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let error = json_error(&output)?;
    ensure!(error["exit_code"] == 1, "{error}");
    ensure!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("sessionlog init")),
        "{error}"
    );

    let (output, _) = sessionlog(&["inspect", "--no-such-flag", "--json"], &[])?;
    ensure!(output.status.code() == Some(2), "exit {:?}", output.status);
    let error = json_error(&output)?;
    ensure!(error["exit_code"] == 2, "{error}");
    let (output, _) = sessionlog(&["inspect", "x", "--timeout", "soon"], &[])?;
    ensure!(output.status.code() == Some(2), "exit {:?}", output.status);
    let (output, _) = sessionlog(&["--help"], &[])?;
    ensure!(output.status.success(), "--help exits 0");
    Ok(())
}

#[test]
fn completions_print_a_script_for_each_shell() -> Result<()> {
    for (shell, marker) in [
        ("bash", "complete -F _sessionlog"),
        ("zsh", "#compdef sessionlog"),
        ("fish", "complete -c sessionlog"),
    ] {
        // No servers are needed: point every one at a closed port.
        let (output, _) = sessionlog(
            &["completions", shell],
            &[
                ("SESSIONLOG_KAFKA__BOOTSTRAP", "127.0.0.1:1"),
                ("SESSIONLOG_REGISTRY__URL", "http://127.0.0.1:1"),
                ("SESSIONLOG_CQL__NODES", "127.0.0.1:1"),
            ],
        )?;
        ensure!(output.status.success(), "{shell}: exit {:?}", output.status);
        let script = String::from_utf8_lossy(&output.stdout);
        ensure!(
            script.contains(marker),
            "{shell}: no {marker:?} in the script"
        );
        ensure!(
            script.contains("schemas") && script.contains("completions"),
            "{shell}: the script knows the subcommands"
        );
    }
    Ok(())
}

#[test]
fn a_service_whose_port_is_taken_says_so_before_connecting_anywhere() -> Result<()> {
    // The port is held here; every server is a closed port, so a service that connected
    // first would fail on those instead (or wait for them) and never name the port.
    let held = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = held.local_addr()?.to_string();
    for command in ["ingest", "serve-recovery"] {
        let (output, took) = sessionlog(
            &[command, "--listen", &address],
            &[
                ("SESSIONLOG_KAFKA__BOOTSTRAP", "127.0.0.1:1"),
                ("SESSIONLOG_REGISTRY__URL", "http://127.0.0.1:1"),
                ("SESSIONLOG_CQL__NODES", "127.0.0.1:1"),
            ],
        )?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            !output.status.success(),
            "{command}: exit {:?}",
            output.status
        );
        ensure!(
            stderr.contains(&address) && stderr.contains("is another service on it"),
            "{command}: the error names the taken address: {stderr}"
        );
        ensure!(took < Duration::from_secs(10), "{command}: took {took:?}");
    }
    Ok(())
}
