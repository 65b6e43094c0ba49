//! The wake component through a broker restart (`scripts/stack kill|start kafka-2` on the
//! 3-broker cluster): it keeps running, and a harness that dies while the broker is down is
//! still woken and taken by a worker once the broker is back.
//!
//! One test in this file on purpose: it kills a shared broker, which no other test of this
//! binary may see (the faults binary runs them one at a time). The test's topics are
//! replicated three times (two in sync), so the cluster keeps serving them meanwhile.

use crate::brokers::{Restart, back_again, stack as broker};
use anyhow::{Context, Result, bail, ensure};
use sessionlog_log::{WakeReason, topic};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::Recovery;
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_schemas::{SessionId, TerminalOutcome, value_subject};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::wake::spawn_wake;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

const AGENT: &str = "fault-wake-agent";

/// A test corner named `name` whose topics survive one broker of three: replicated three
/// times, two in sync; leases lapse 1.5 s after their last renewal.
pub(crate) async fn replicated_stack(name: &str) -> Result<TestStack> {
    let mut stack = TestStack::new(name, 3).await?;
    let kafka = &mut stack.settings.kafka;
    kafka.topic = format!("{}-r3", kafka.topic);
    kafka.dead_letter_topic = format!("{}-dlq", kafka.topic);
    kafka.replication_factor = 3;
    kafka.min_insync_replicas = 2;
    let brokers = topic::live_brokers(kafka).await?;
    if brokers.len() < 3 {
        bail!("needs the 3-broker stack (`scripts/stack up --brokers 3`), found {brokers:?}");
    }
    topic::ensure_topics(kafka).await?;
    stack
        .settings
        .registry
        .client()?
        .register_all_versions(&value_subject(&stack.settings.kafka.topic))
        .await?;
    stack.settings.lease.ttl_ms = 1_500;
    Ok(stack)
}

/// A worker of the agent in this process until the returned sender is dropped or used; each
/// session it takes goes to the receiver.
fn spawn_worker(
    recovery: Arc<Recovery>,
    name: &str,
) -> (mpsc::UnboundedReceiver<Work>, oneshot::Sender<()>) {
    let (taken, receive) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = Worker::new(recovery, AGENT, name);
    tokio::spawn(async move {
        let handler = move |work: Work| {
            let taken = taken.clone();
            async move {
                let _ = taken.send(work);
            }
        };
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = worker.run(handler, shutdown).await {
            eprintln!("worker stopped: {e:#}");
        }
    });
    (receive, stop)
}

/// A session of `agent` whose harness holds a lease; dropping the writer is its death.
pub(crate) async fn harness(log: &Arc<EventLog>, agent: &str) -> Result<SessionWriter> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), agent, None).await?;
    writer.hold_lease("harness").await?;
    writer.user_request("keep going").await?;
    Ok(writer)
}

/// The session a worker took within two minutes (a wake after a lease's TTL, once the broker
/// is back), or why not.
pub(crate) async fn taken_within(
    taken: &mut mpsc::UnboundedReceiver<Work>,
    what: &str,
) -> Result<Work> {
    match tokio::time::timeout(Duration::from_secs(120), taken.recv()).await {
        Ok(Some(work)) => Ok(work),
        Ok(None) => bail!("the worker stopped before it took {what}"),
        Err(_) => bail!("the worker took no session within 120 s: {what}"),
    }
}

/// Takes the session the worker took next, checks it is `session`, and ends it (so it is not
/// woken again).
pub(crate) async fn finish(
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
async fn a_harness_dead_during_a_broker_restart_is_still_woken_and_the_wake_component_keeps_running()
-> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    let stack = replicated_stack("fwake").await?;
    let _projector = stack.spawn_projector()?;
    let mut wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);

    // Before the fault: the component is up, and wakes a harness that dies.
    let (mut taken, stop) = spawn_worker(Arc::clone(&recovery), "worker-before");
    let warm_up = harness(&log, AGENT).await?.session_id();
    finish(&mut taken, warm_up, "the warm-up session").await?;
    let _ = stop.send(());

    let doomed = harness(&log, AGENT).await?;
    let session = doomed.session_id();
    let mut restart = Restart { needed: true };
    tokio::task::spawn_blocking(|| broker("kill")).await??;
    // The harness dies while the broker is down: its lease lapses unrenewed.
    drop(doomed);
    back_again(&stack).await?;
    restart.needed = false;
    wake.assert_running()
        .context("the wake component exited during the broker's restart")?;

    // A worker that starts now finds the wake the component wrote.
    let (mut taken, _stop) = spawn_worker(Arc::clone(&recovery), "worker-after");
    finish(
        &mut taken,
        session,
        "the session whose harness died meanwhile",
    )
    .await?;
    wake.assert_running()
        .context("the wake component exited after the broker's restart")?;
    Ok(())
}
