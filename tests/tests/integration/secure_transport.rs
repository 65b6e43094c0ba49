//! The secure tier's transport checks (`scripts/test-secure`, against `scripts/stack up --secure`):
//! with the stack's credentials every server is reached over TLS, and a wrong password or an
//! untrusted certificate stops `sessionlog init` with an error that names the setting to fix.
//!
//! These tests need the secure stack's environment, so they are ignored in the plain tier;
//! `scripts/test-secure` runs them with `--ignored`.

use anyhow::{Context, Result, ensure};
use sessionlog_testkit::TestStack;
use std::process::Output;
use std::time::Duration;

/// Runs `sessionlog init` for the test's corner of the stack with `overrides` on top of the
/// secure environment, bounded by a deadline.
fn init_with(stack: &TestStack, overrides: &[(&str, &str)]) -> Result<Output> {
    let mut command = stack.command(&["init"])?;
    for (key, value) in overrides {
        command.env(key, value);
    }
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("spawning sessionlog init")?;
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    wait.recv_timeout(Duration::from_secs(120))
        .context("sessionlog init did not finish within 120 s")?
        .context("waiting for sessionlog init")
}

/// Asserts that `init` failed and that its error names `setting`.
fn refused_naming(output: &Output, setting: &str) -> Result<()> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(!output.status.success(), "init succeeded: {stderr}");
    ensure!(
        stderr.contains(setting),
        "the error does not name `{setting}`: {stderr}"
    );
    Ok(())
}

fn require_secure_stack() -> Result<()> {
    ensure!(
        std::env::var("SESSIONLOG_STACK_SECURE").as_deref() == Ok("1"),
        "not the secure stack's environment: run scripts/test-secure"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn init_reaches_every_server_with_the_stacks_credentials() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_init", 1).await?;
    let output = init_with(&stack, &[])?;
    ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn a_wrong_kafka_password_names_the_setting() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_kafka_pw", 1).await?;
    let output = init_with(
        &stack,
        &[("SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "wrong")],
    )?;
    refused_naming(&output, "sasl.password")
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn an_untrusted_kafka_certificate_names_the_setting() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_kafka_ca", 1).await?;
    // The system's CAs did not sign the stack's brokers.
    let output = init_with(
        &stack,
        &[(
            "SESSIONLOG_KAFKA__LIBRDKAFKA__SSL_CA_LOCATION",
            "/etc/ssl/certs/ca-certificates.crt",
        )],
    )?;
    refused_naming(&output, "ssl.ca.location")
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn a_wrong_registry_password_names_the_setting() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_registry_pw", 1).await?;
    let output = init_with(&stack, &[("SESSIONLOG_REGISTRY__PASSWORD", "wrong")])?;
    refused_naming(&output, "registry.password")
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn a_wrong_cql_password_names_the_setting() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_cql_pw", 1).await?;
    let output = init_with(&stack, &[("SESSIONLOG_CQL__PASSWORD", "wrong")])?;
    refused_naming(&output, "cql.password")
}

#[tokio::test]
#[ignore = "secure tier: run by scripts/test-secure"]
async fn an_untrusted_cql_certificate_names_the_setting() -> Result<()> {
    require_secure_stack()?;
    let stack = TestStack::new("secure_cql_ca", 1).await?;
    let output = init_with(
        &stack,
        &[(
            "SESSIONLOG_CQL__TLS_CA_FILE",
            "/etc/ssl/certs/ca-certificates.crt",
        )],
    )?;
    refused_naming(&output, "cql.tls_ca_file")
}
