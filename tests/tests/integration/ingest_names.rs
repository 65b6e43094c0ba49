//! A session's name through a log that fails for a moment: ingest over an in-memory log
//! (whose reads a test can fail) and the real names table in Cassandra.

use anyhow::{Result, ensure};
use reqwest::Client;
use serde_json::{Value, json};
use sessionlog_ingest::Ingest;
use sessionlog_producer::ProducerOptions;
use sessionlog_producer::testing::{Fault, MemoryLog, Operation};
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::TestStack;
use std::sync::Arc;
use tokio::sync::oneshot;

/// An ingest instance writing to `memory`, with `stack`'s names table; stops when dropped.
struct MemoryIngest {
    base: String,
    _stop: oneshot::Sender<()>,
}

impl MemoryIngest {
    async fn start(stack: &TestStack, memory: &MemoryLog) -> Result<Self> {
        let store = ProjectionStore::open_checked(&stack.settings).await?;
        let log = memory
            .event_log(ProducerOptions::default())
            .with_projection(store);
        let ingest = Ingest::new(
            Arc::new(log),
            stack.settings.ingest.clone(),
            Arc::new(sessionlog_http::Access::from_settings(&stack.settings.auth).await?),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = ingest
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self { base, _stop: stop })
    }

    async fn create(&self, http: &Client, name: &str) -> Result<(u16, Value)> {
        let answer = http
            .post(format!("{}/v1/sessions", self.base))
            .json(&json!({ "agent": "a", "name": name }))
            .send()
            .await?;
        Ok((answer.status().as_u16(), answer.json().await?))
    }
}

/// A create of a name a started session holds reads the log twice over (its own start, then
/// whose the session is); a read that fails for a moment at any point of it answers 503 and
/// frees nothing: the name stays the session's, and the next create of it is told so.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_failing_for_a_moment_during_a_named_create_never_frees_the_name() -> Result<()> {
    let stack = TestStack::new("ingest_names", 2).await?;
    let http = sessionlog_testkit::auth::client()?;
    let mut unavailable = 0;
    // Fail the k-th read of the second create, for each k its reads reach; a fresh log each
    // time, so a fault planned past its last read dies with it.
    for k in 0..8 {
        let memory = MemoryLog::new(2).without_tail();
        let ingest = MemoryIngest::start(&stack, &memory).await?;
        let name = format!("thread:transient-{k}-{}", uuid::Uuid::now_v7());
        let (status, first) = ingest.create(&http, &name).await?;
        ensure!(status == 201, "the first create: {status} {first}");
        let holder = first["session_id"].clone();

        memory.fail_after(Operation::Read, k, Fault::Transient);
        let (status, second) = ingest.create(&http, &name).await?;
        match status {
            503 => unavailable += 1,
            409 => ensure!(
                second["code"] == "name_taken" && second["session_id"] == holder,
                "read {k} failed: {second}"
            ),
            other => anyhow::bail!("read {k} failed: the second create answered {other}: {second}"),
        }
        // A fault planned past the second create's last read fails the next one's instead:
        // that create answers 503 too, and its retry is what says whose the name is.
        let (mut status, mut third) = ingest.create(&http, &name).await?;
        if status == 503 {
            (status, third) = ingest.create(&http, &name).await?;
        }
        ensure!(
            status == 409 && third["code"] == "name_taken" && third["session_id"] == holder,
            "read {k} failed and the name was freed: a later create answered {status} {third}"
        );
    }
    ensure!(unavailable > 0, "no injected failure reached the create");
    Ok(())
}
