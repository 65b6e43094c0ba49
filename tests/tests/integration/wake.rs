//! The wake component and workers on the real stack: a harness killed with `kill -9` mid-call
//! is picked up by a worker within the lease's TTL plus 5 s and its run finished with one
//! effect per call; a decided approval, a pause that ran out and steering wake a worker; two workers
//! woken for one session: one runs it, the other is told "already taken".

use anyhow::{Context, Result, bail, ensure};
use sessionlog_log::{Wake, WakeReason, wake::WAKE_VERSION};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_recovery::{Error as RecoveryError, OperatorAct, Recovery};
use sessionlog_schemas::{SessionEvent, TerminalOutcome, now_micros};
use sessionlog_tests::recovery::{Step, ToolService, accepted_events, run_harness_until};
use sessionlog_tests::{ChildGuard, TestStack, sessionlog_bin};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A lease lapses 1.5 s after its last renewal: short enough to watch, long enough for
/// renewals every 500 ms.
const TTL_MS: u64 = 1_500;

async fn stack(name: &str) -> Result<TestStack> {
    let mut stack = TestStack::new(name, 3).await?;
    stack.settings.lease.ttl_ms = TTL_MS;
    Ok(stack)
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

/// A worker of `agent` in this process, sending each session it takes to the returned channel
/// (and handing the taken writer to it, so the test decides how the run ends).
fn spawn_worker(
    recovery: Arc<Recovery>,
    agent: &str,
    name: &str,
) -> (
    mpsc::UnboundedReceiver<(Work, Instant)>,
    tokio::task::JoinHandle<()>,
) {
    let (taken, receive) = mpsc::unbounded_channel();
    let worker = Worker::new(recovery, agent, name).concurrency(4);
    let task = tokio::spawn(async move {
        let handler = move |work: Work| {
            let taken = taken.clone();
            async move {
                let _ = taken.send((work, Instant::now()));
            }
        };
        if let Err(e) = worker.run(handler, std::future::pending()).await {
            eprintln!("worker stopped: {e:#}");
        }
    });
    (receive, task)
}

/// The next session the worker took, within `limit`.
async fn next_taken(
    taken: &mut mpsc::UnboundedReceiver<(Work, Instant)>,
    limit: Duration,
    what: &str,
) -> Result<(Work, Instant)> {
    match tokio::time::timeout(limit, taken.recv()).await {
        Ok(Some(work)) => Ok(work),
        Ok(None) => bail!("the worker stopped before {what}"),
        Err(_) => bail!("no worker took the session within {limit:?}: {what}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_harness_killed_mid_call_is_finished_by_a_worker_within_its_ttl_plus_5s_with_one_effect()
-> Result<()> {
    let mut stack = stack("wake_killed").await?;
    let service = ToolService::start(&["deploy"]).await?;
    stack
        .settings
        .recovery
        .resolvers
        .insert("deploy".into(), service.resolver_url("deploy"));
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    // The harness's agent is the tool harness's; the worker serves it.
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "tool-harness", "worker-a");

    // The call ran; its result was never recorded: the harness is killed there (kill -9).
    let killed = run_harness_until(
        env!("CARGO_BIN_EXE_tool_harness"),
        &stack,
        &service,
        "deploy",
        "idempotent",
        Step::BeforeResult,
    )
    .await?;
    let killed_at = Instant::now();
    ensure!(
        service.effects("deploy", &killed.key) == 1,
        "the call ran once"
    );

    let (work, took_at) = next_taken(
        &mut taken,
        Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        "the killed harness's session",
    )
    .await?;
    let within = took_at - killed_at;
    ensure!(
        work.wake.session_id == killed.session,
        "the worker took another session: {:?}",
        work.wake
    );
    ensure!(work.wake.reason == WakeReason::LeaseExpired);
    ensure!(
        within <= Duration::from_millis(TTL_MS) + Duration::from_secs(5),
        "taken {within:?} after the kill: more than the lease's TTL plus 5 s"
    );
    // The resolver found the effect: its result is recorded, nothing is left to run again.
    ensure!(
        work.bundle.in_doubt.is_empty(),
        "{:?}",
        work.bundle.in_doubt
    );
    ensure!(work.bundle.resolved.len() == 1, "the outcome was recorded");
    let mut writer = work
        .bundle
        .writer
        .context("a Rust worker gets the writer")?;
    writer.close(TerminalOutcome::Completed, None).await?;
    ensure!(
        service.effects("deploy", &killed.key) == 1,
        "the effect happened once"
    );
    let ended = accepted_events(&recovery, killed.session)
        .await?
        .iter()
        .any(|e| matches!(e.envelope.event, SessionEvent::SessionEnded { .. }));
    ensure!(ended, "the worker finished the run");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_decided_while_no_harness_runs_wakes_a_worker() -> Result<()> {
    let stack = stack("wake_approval").await?;
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(log, "approvals-agent", None).await?;
    let session = writer.session_id();
    writer.hold_lease("harness").await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy".into(),
            action: "deploy to production".into(),
            action_digest: None,
        })
        .await?;
    // The harness stops while it waits: nobody runs the session now.
    writer.release_lease().await?;
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "approvals-agent", "worker-b");
    // The component may still be joining: a lapsed lease would not wake this session (it
    // waits for a person), so only the decision can.
    let decided = recovery
        .decide_approval(session, "deploy", true, "alice", None)
        .await?;
    let (work, _) = next_taken(&mut taken, Duration::from_secs(30), "the decided session").await?;
    ensure!(work.wake.session_id == session);
    ensure!(work.wake.reason == WakeReason::ApprovalDecided);
    ensure!(work.wake.epoch == decided.envelope.writer_epoch);
    ensure!(
        work.bundle.epoch > decided.envelope.writer_epoch,
        "the worker claimed after the decision"
    );
    ensure!(work.bundle.state.pending_approvals.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_with_until_wakes_a_worker_at_its_time_and_the_worker_lifts_it() -> Result<()> {
    let stack = stack("wake_pause").await?;
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(log, "pausing-agent", None).await?;
    let session = writer.session_id();
    writer.user_request("wait until later").await?;
    writer.release_lease().await?;
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "pausing-agent", "worker-c");
    let until = now_micros() + 3_000_000;
    recovery
        .operate(
            session,
            "alice",
            OperatorAct::Pause {
                reason: "until later".into(),
                until: Some(until),
            },
        )
        .await?;
    let (work, _) = next_taken(&mut taken, Duration::from_secs(30), "the paused session").await?;
    let claimed = now_micros();
    ensure!(work.wake.session_id == session);
    ensure!(work.wake.reason == WakeReason::PauseElapsed);
    ensure!(work.wake.caused_at == until, "the cause is the pause's end");
    ensure!(claimed >= until, "woken before its time");
    ensure!(
        !work
            .bundle
            .writer
            .as_ref()
            .context("writer")?
            .state()
            .paused,
        "the worker lifted the pause"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_woken_for_one_session_one_runs_it_and_the_other_is_told_already_taken()
-> Result<()> {
    let stack = stack("wake_twice").await?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "twin-agent", None).await?;
    let session = writer.session_id();
    writer.user_request("run me once").await?;
    let epoch = writer.state().epoch;
    drop(writer);
    // The same wake twice (a duplicate, or two instances' before a rebalance settled).
    let wake = Wake {
        version: WAKE_VERSION,
        session_id: session,
        agent: "twin-agent".into(),
        tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
        reason: WakeReason::LeaseExpired,
        epoch,
        cause_offset: None,
        caused_at: now_micros(),
        woken_at: now_micros(),
    };
    log.put_wake(&wake).await?;
    log.put_wake(&wake).await?;
    let take = |name: &'static str| {
        let recovery = Arc::clone(&recovery);
        async move { recovery.take(session, name, epoch, None).await }
    };
    let (a, b) = tokio::join!(take("worker-1"), take("worker-2"));
    let (ran, refused) = match (a, b) {
        (Ok(ran), Err(refused)) | (Err(refused), Ok(ran)) => (ran, refused),
        (Ok(_), Ok(_)) => bail!("both workers took the session"),
        (Err(a), Err(b)) => bail!("neither took it: {a:#} / {b:#}"),
    };
    ensure!(ran.epoch == epoch + 1);
    ensure!(
        matches!(refused, RecoveryError::AlreadyTaken { .. }),
        "the other is told already taken, not {refused:#}"
    );
    // A later duplicate of the wake finds it taken too, and the winner still writes.
    let late = recovery.take(session, "worker-3", epoch, None).await;
    ensure!(
        matches!(late, Err(RecoveryError::AlreadyTaken { .. })),
        "{late:?}"
    );
    let mut writer = ran.writer.context("writer")?;
    writer.user_request("still mine").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn steering_for_a_session_nobody_runs_wakes_a_worker() -> Result<()> {
    let stack = stack("wake_steer").await?;
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(log, "steered-agent", None).await?;
    let session = writer.session_id();
    writer.user_request("wait for directions").await?;
    writer.release_lease().await?;
    drop(writer);
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "steered-agent", "worker-d");
    let steered = recovery
        .operate(
            session,
            "alice",
            OperatorAct::Steer {
                text: "try the other route".into(),
            },
        )
        .await?;
    let (work, _) = next_taken(&mut taken, Duration::from_secs(30), "the steered session").await?;
    ensure!(work.wake.session_id == session);
    ensure!(work.wake.reason == WakeReason::Steering);
    ensure!(work.wake.cause_offset == Some(steered.position.offset));
    ensure!(work.bundle.epoch > steered.envelope.writer_epoch);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_dead_between_its_claim_and_its_own_lease_leaves_a_session_woken_again()
-> Result<()> {
    let stack = stack("wake_claimed").await?;
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(log, "claimed-agent", None).await?;
    let session = writer.session_id();
    writer.user_request("keep going").await?;
    let epoch = writer.state().epoch;
    drop(writer);
    // A worker takes the session (the claim is in the log) and dies before it holds the
    // lease itself: nothing of it renews anything.
    let taken = recovery.take(session, "doomed-worker", epoch, None).await?;
    ensure!(taken.epoch == epoch + 1);
    drop(taken);
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "claimed-agent", "worker-e");
    let (work, _) = next_taken(
        &mut taken,
        Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        "the session its dead worker claimed",
    )
    .await?;
    ensure!(work.wake.session_id == session);
    ensure!(work.wake.reason == WakeReason::LeaseExpired);
    ensure!(
        work.wake.epoch == epoch + 1,
        "the dead worker's epoch: {:?}",
        work.wake
    );
    ensure!(work.bundle.epoch == epoch + 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operators_unpause_wakes_a_worker_for_the_harness_the_pause_fenced() -> Result<()> {
    let stack = stack("wake_unpause").await?;
    let _projector = stack.spawn_projector()?;
    let _wake = spawn_wake(&stack)?;
    let recovery = Arc::new(Recovery::connect(&stack.settings).await?);
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, _) = SessionWriter::create(log, "unpaused-agent", None).await?;
    let session = writer.session_id();
    writer.hold_lease("harness").await?;
    writer.user_request("work until told to stop").await?;
    let (mut taken, _worker) = spawn_worker(Arc::clone(&recovery), "unpaused-agent", "worker-f");
    // The pause fences the harness; it stops (its lease lapses while paused: no wake).
    let pause = OperatorAct::Pause {
        reason: "hold on".into(),
        until: None,
    };
    recovery.operate(session, "alice", pause).await?;
    drop(writer);
    let unpaused = recovery
        .operate(session, "alice", OperatorAct::Unpause)
        .await?;
    let (work, _) = next_taken(&mut taken, Duration::from_secs(30), "the unpaused session").await?;
    ensure!(work.wake.session_id == session);
    ensure!(work.wake.reason == WakeReason::Unpaused, "{:?}", work.wake);
    ensure!(work.wake.cause_offset == Some(unpaused.position.offset));
    ensure!(!work.bundle.state.paused);
    Ok(())
}
