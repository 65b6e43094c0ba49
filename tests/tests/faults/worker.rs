//! The Rust `Worker` through a broker restart (`scripts/stack kill|start kafka-2` on the
//! 3-broker cluster): the worker running before the fault keeps running through it (a lost
//! connection is no reason to stop), and takes a session whose harness died while the broker
//! was down, once the wake component wakes it.
//!
//! One test in this file on purpose: it kills a shared broker, which no other test of this
//! binary may see (the faults binary runs them one at a time). The test's topics are
//! replicated three times (two in sync), so the cluster keeps serving them meanwhile.

use crate::brokers::{Restart, back_again, stack as broker};
use crate::wake::{finish, harness, replicated_stack};
use anyhow::{Result, bail};
use sessionlog_producer::EventLog;
use sessionlog_recovery::Recovery;
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_testkit::wake::spawn_wake;
use std::sync::Arc;
use tokio::sync::mpsc;

const AGENT: &str = "fault-worker-agent";

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_runs_through_a_broker_restart_and_takes_a_session_whose_harness_died_then()
-> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    // Topics that survive one broker of three: replicated three times, two in sync.
    let stack = replicated_stack("fworker").await?;
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
    let warm_up = harness(&log, AGENT).await?.session_id();
    finish(&mut taken, warm_up, "the warm-up session").await?;

    let doomed = harness(&log, AGENT).await?;
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
