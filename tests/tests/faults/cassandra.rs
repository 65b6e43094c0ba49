//! Cassandra stopped for 30 seconds during a load: the projector backs off (its `/health`
//! says so), resumes when the store is back, and loses nothing.
//!
//! One test in this file on purpose: it stops the shared Cassandra, which no other test of
//! this binary may see (the faults binary runs them one at a time).

use anyhow::{Context, Result};
use sessionlog_testkit::projector::{
    assert_projected, assert_same_tables, event_log, replay_into, run_load, spawn_projector_with,
    store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, repo_root, wait_for};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts Cassandra again however the test ends.
struct RestartCassandra;

impl Drop for RestartCassandra {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/stack"))
            .args(["start", "cassandra"])
            .status();
    }
}

async fn health(address: &str) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(
            format!("GET /health HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

#[tokio::test(flavor = "multi_thread")]
async fn cassandra_outage_of_30_seconds_loses_nothing() -> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    let mut stack = TestStack::new("fcass", 3).await?;
    // The key store is in the stopped Cassandra too, and a writer uses its session's key for
    // only `key_cache_secs` after the store last answered about it: the load's writers keep
    // writing through the outage only with a key cache longer than the load. This test is
    // about the projector; tests/tests/integration/privacy.rs has the writers' side.
    stack.settings.privacy.key_cache_secs = 600;
    let live = store(&stack).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut projector = spawn_projector_with(&stack, &["--listen", &listen])?;
    let log = event_log(&stack).await?;
    let load = tokio::spawn(run_load(log, 12, 60, Duration::from_millis(1_000)));
    wait_for(
        "the projector to apply some of the load",
        Duration::from_secs(60),
        || {
            let live = live.clone();
            let topic = stack.settings.kafka.topic.clone();
            async move {
                Ok((live.load_progress(&topic).await?.values().sum::<i64>() > 50).then_some(()))
            }
        },
    )
    .await?;

    let stack_script = repo_root().join("scripts/stack");
    let restart = RestartCassandra;
    let stopped = std::process::Command::new(&stack_script)
        .args(["stop", "cassandra"])
        .status()
        .context("scripts/stack stop cassandra")?;
    assert!(stopped.success());
    let outage = Instant::now();
    wait_for(
        "/health to report the store outage",
        Duration::from_secs(60),
        || {
            let listen = listen.clone();
            async move {
                Ok(health(&listen)
                    .await?
                    .starts_with("HTTP/1.1 503")
                    .then_some(()))
            }
        },
    )
    .await?;
    // The outage itself lasts 30 seconds: that is what the test is about, not a wait.
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(outage.elapsed())).await;
    projector.assert_running()?;
    drop(restart);

    let load = load.await??;
    wait_caught_up(&stack, &live, Duration::from_secs(240)).await?;
    projector.assert_running()?;
    let healthy = health(&listen).await?;
    assert!(healthy.starts_with("HTTP/1.1 200"), "{healthy}");
    assert_projected(&live, &load).await?;
    let clean = format!("{}_clean", live.keyspace());
    replay_into(&stack, &clean).await?;
    assert_same_tables(&live, live.keyspace(), &clean).await
}
