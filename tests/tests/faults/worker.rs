//! The Rust `Worker` through a broker restart (`scripts/stack kill|start kafka-2` on the
//! 3-broker cluster): the worker running before the fault keeps running through it (a lost
//! connection is no reason to stop), and takes a session whose harness died while the broker
//! was down, once the wake component wakes it.
//!
//! One test in this file on purpose: it kills a shared broker, which no other test of this
//! binary may see (the faults binary runs them one at a time). The test's topics are
//! replicated three times (two in sync), so the cluster keeps serving them meanwhile.

use crate::brokers::{Restart, stack as broker};
use anyhow::{Context, Result, bail, ensure};
use sessionlog_log::{WakeReason, topic};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::Recovery;
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_schemas::{SessionId, TerminalOutcome, value_subject};
use sessionlog_tests::{ChildGuard, TestStack, sessionlog_bin, wait_for};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const AGENT: &str = "fault-worker-agent";

/// The session a worker took within two minutes (a wake after a lease's TTL, once the broker
/// is back), or why not.
async fn taken_within(taken: &mut mpsc::UnboundedReceiver<Work>, what: &str) -> Result<Work> {
    match tokio::time::timeout(Duration::from_secs(120), taken.recv()).await {
        Ok(Some(work)) => Ok(work),
        Ok(None) => bail!("the worker stopped before it took {what}"),
        Err(_) => bail!("the worker took no session within 120 s: {what}"),
    }
}

/// A session of the agent whose harness holds a lease; dropping the writer is its death.
async fn harness(log: &Arc<EventLog>) -> Result<SessionWriter> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), AGENT, None).await?;
    writer.hold_lease("harness").await?;
    writer.user_request("keep going").await?;
    Ok(writer)
}

/// Takes the session the worker took next, checks it is `session`, and ends it (so it is not
/// woken again).
async fn finish(
    taken: &mut mpsc::UnboundedReceiver<Work>,
    session: SessionId,
    what: &str,
) -> Result<()> {
    let work = taken_within(taken, what).await?;
    ensure!(work.wake.session_id == session, "{what}: {:?}", work.wake);
    ensure!(
        work.wake.reason == WakeReason::LeaseExpired,
        "{:?}",
        work.wake
    );
    let mut writer = work
        .bundle
        .writer
        .context("a Rust worker gets the writer")?;
    writer.close(TerminalOutcome::Completed, None).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_runs_through_a_broker_restart_and_takes_a_session_whose_harness_died_then()
-> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    let mut stack = TestStack::new("fworker", 3).await?;
    // Topics that survive one broker of three: replicated three times, two in sync.
    let kafka = &mut stack.settings.kafka;
    kafka.topic = format!("{}-r3", kafka.topic);
    kafka.dead_letter_topic = format!("{}-dlq", kafka.topic);
    (kafka.replication_factor, kafka.min_insync_replicas) = (3, 2);
    let brokers = topic::live_brokers(kafka).await?;
    if brokers.len() < 3 {
        bail!("needs the 3-broker stack (`scripts/stack up --brokers 3`), found {brokers:?}");
    }
    topic::ensure_topics(kafka).await?;
    let subject = value_subject(&kafka.topic);
    stack
        .settings
        .registry
        .client()?
        .register_all_versions(&subject)
        .await?;
    stack.settings.lease.ttl_ms = 1_500;
    let _projector = stack.spawn_projector()?;
    let mut wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);

    // One worker for the whole test, sending what it takes to the test.
    let (sender, mut taken) = mpsc::unbounded_channel();
    let handler = move |work: Work| {
        let sender = sender.clone();
        async move {
            let _ = sender.send(work);
        }
    };
    let worker = tokio::spawn(
        Worker::new(Arc::clone(&recovery), AGENT, "worker-through")
            .run(handler, std::future::pending()),
    );

    // Before the fault: the worker takes a session whose harness died.
    let warm_up = harness(&log).await?.session_id();
    finish(&mut taken, warm_up, "the warm-up session").await?;

    let doomed = harness(&log).await?;
    let session = doomed.session_id();
    let mut restart = Restart { needed: true };
    tokio::task::spawn_blocking(|| broker("kill")).await??;
    // The harness dies while the broker is down: its lease lapses unrenewed.
    drop(doomed);
    back_again(&stack).await?;
    restart.needed = false;
    // The wake component's own outage handling is `faults::wake`'s to prove; here it is
    // started again if it stopped (as its supervisor would), so the wake reaches the worker.
    if wake.0.try_wait()?.is_some() {
        eprintln!("the wake component stopped during the restart; starting it again");
        wake = spawn_wake(&stack)?;
    }

    // The same worker, still running, takes it.
    let took = finish(
        &mut taken,
        session,
        "the session whose harness died meanwhile",
    )
    .await;
    if worker.is_finished() {
        let ended = worker.await?;
        bail!("the worker stopped during the broker's restart: {ended:?}");
    }
    drop(wake);
    took
}

/// `sessionlog wake` in the test's corner, re-waking after a second.
fn spawn_wake(stack: &TestStack) -> Result<ChildGuard> {
    Ok(ChildGuard(
        Command::new(sessionlog_bin()?)
            .arg("wake")
            .envs(stack.env())
            .env("SESSIONLOG_CONFIG", "/dev/null")
            .env("SESSIONLOG_WAKE__REWAKE_AFTER_MS", "1000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("spawning `sessionlog wake`")?,
    ))
}

/// Starts the killed broker and waits until the cluster lists it again. A broker that recovers
/// many partitions after a kill on a loaded machine may take longer than `scripts/stack start`
/// waits for it: the cluster's answer is what counts.
async fn back_again(stack: &TestStack) -> Result<()> {
    if let Err(e) = tokio::task::spawn_blocking(|| broker("start")).await? {
        eprintln!("{e:#}; waiting for the cluster to list it");
    }
    let kafka = stack.settings.kafka.clone();
    wait_for(
        "the restarted broker to rejoin the cluster",
        Duration::from_secs(600),
        || {
            let kafka = kafka.clone();
            async move { Ok((topic::live_brokers(&kafka).await?.len() >= 3).then_some(())) }
        },
    )
    .await
}
