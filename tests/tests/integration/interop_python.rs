//! A client we did not write reads our events: Confluent's Python `confluent-kafka` with its
//! AvroDeserializer, through the schema registry, from PyPI into a virtual environment that
//! `scripts/python-env` manages.

use anyhow::{Context, Result, bail};
use sessionlog_cli::example;
use sessionlog_producer::{EventLog, ProducerOptions};
use sessionlog_testkit::{TestStack, python_env, repo_root};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn confluent_python_deserializer_reads_our_events() -> Result<()> {
    let stack = TestStack::new("pyinterop", 1).await?;
    let log = Arc::new(EventLog::connect(&stack.settings, ProducerOptions::default()).await?);
    let schema_id = log.schema_id();
    let (_, appended) = example::run_example_session(log).await?;

    let reader = tokio::process::Command::new(python_env()?)
        .arg(repo_root().join("tests/python/read_session_events.py"))
        .args([
            &stack.settings.kafka.bootstrap,
            &stack.settings.registry.url,
            &stack.settings.kafka.topic,
            &appended.len().to_string(),
        ])
        .kill_on_drop(true)
        .output();
    // The reader gives up after 60 s of polling; a client stuck beyond that is a failure,
    // not a reason to hang the suite.
    let out = tokio::time::timeout(Duration::from_secs(180), reader)
        .await
        .context("the Python reader did not finish within 180 s")?
        .context("running the Python reader")?;
    if !out.status.success() {
        bail!(
            "Python reader failed ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let records: Vec<serde_json::Value> = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(records.len(), appended.len());
    for (record, a) in records.iter().zip(&appended) {
        let e = &a.envelope;
        assert_eq!(record["schema_id"], schema_id);
        assert_eq!(record["key"], e.session_id.to_string());
        assert_eq!(record["session_id"], e.session_id.to_string());
        assert_eq!(record["event_id"], e.event_id.to_string());
        assert_eq!(record["seq"], e.seq);
        assert_eq!(record["writer_epoch"], e.writer_epoch);
        assert_eq!(record["kind"], e.event.kind());
        assert_eq!(record["offset"], a.position.offset);
    }
    // Spot-check payload fields decoded by the other implementation.
    let response = records
        .iter()
        .find(|r| r["kind"] == "ModelResponse")
        .context("a model response")?;
    assert_eq!(response["event"]["model"], "example-model");
    assert_eq!(response["event"]["tokens_in"], 1250);
    Ok(())
}
