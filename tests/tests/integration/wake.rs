//! The wake component and workers on the real stack: a harness killed with `kill -9` mid-call
//! is picked up by a worker within the lease's TTL plus 5 s and its run finished with one
//! effect per call; a decided approval, a pause that ran out and steering wake a worker; two
//! workers woken for one session: one runs it, the other is told "already taken"; a timed
//! pause ends whatever came first, and a fenced writer's rejected end changes nothing; a wake
//! read late does not fence a live harness.

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;
use sessionlog_log::WakeReason;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_recovery::{Error as RecoveryError, OperatorAct, Recovery};
use sessionlog_schemas::{SessionEvent, SessionId, TerminalOutcome, now_micros};
use sessionlog_testkit::ingest::IngestInstance;
use sessionlog_testkit::recovery::{Step, ToolService, accepted_events, run_harness_until};
use sessionlog_testkit::wake::{lease_wake, spawn_wake};
use sessionlog_testkit::{ChildGuard, TestStack, wait_for};
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

/// A test's corner with the projector and the wake component running, and a recovery service
/// and a log of its own in this process.
struct Corner {
    stack: TestStack,
    recovery: Arc<Recovery>,
    log: Arc<EventLog>,
    _services: Vec<ChildGuard>,
}

impl Corner {
    async fn start(name: &str) -> Result<Self> {
        let stack = stack(name).await?;
        let services = vec![stack.spawn_projector()?, spawn_wake(&stack)?];
        Self::with(stack, services).await
    }

    /// A corner without the projector and the wake component: for wakes written by hand.
    async fn bare(name: &str) -> Result<Self> {
        Self::with(stack(name).await?, Vec::new()).await
    }

    async fn with(stack: TestStack, services: Vec<ChildGuard>) -> Result<Self> {
        Ok(Self {
            recovery: Arc::new(Recovery::connect(&stack.settings).await?),
            log: Arc::new(EventLog::from_settings(&stack.settings).await?),
            stack,
            _services: services,
        })
    }

    /// A session of `agent` asked `request`, its harness holding a lease when `leased`.
    async fn harness(&self, agent: &str, request: &str, leased: bool) -> Result<SessionWriter> {
        let (mut writer, _) = SessionWriter::create(Arc::clone(&self.log), agent, None).await?;
        if leased {
            writer.hold_lease("harness").await?;
        }
        writer.user_request(request).await?;
        Ok(writer)
    }

    /// A worker of `agent` named `name` in this process ([`spawn_worker`]).
    fn worker(&self, agent: &str, name: &str) -> (Taken, tokio::task::JoinHandle<()>) {
        spawn_worker(Arc::clone(&self.recovery), agent, name)
    }
}

/// What a worker took, with when.
type Taken = mpsc::UnboundedReceiver<(Work, Instant)>;

/// `writer`'s harness asks for the approval `deploy`.
async fn request_approval(writer: &mut SessionWriter) -> Result<()> {
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy".into(),
            action: "deploy to production".into(),
            action_digest: None,
        })
        .await?;
    Ok(())
}

/// A worker of `agent` in this process, sending each session it takes to the returned channel
/// (and handing the taken writer to it, so the test decides how the run ends).
fn spawn_worker(
    recovery: Arc<Recovery>,
    agent: &str,
    name: &str,
) -> (Taken, tokio::task::JoinHandle<()>) {
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
async fn next_taken(taken: &mut Taken, limit: Duration, what: &str) -> Result<(Work, Instant)> {
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
    let corner = Corner::start("wake_approval").await?;
    let mut writer = corner.harness("approvals-agent", "deploy it", true).await?;
    let session = writer.session_id();
    request_approval(&mut writer).await?;
    // The harness stops while it waits: nobody runs the session now.
    writer.release_lease().await?;
    let (mut taken, _worker) = corner.worker("approvals-agent", "worker-b");
    // The component may still be joining: a lapsed lease would not wake this session (it
    // waits for a person), so only the decision can.
    let decided = corner
        .recovery
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
    let corner = Corner::start("wake_pause").await?;
    let writer = corner
        .harness("pausing-agent", "wait until later", false)
        .await?;
    let session = writer.session_id();
    let (mut taken, _worker) = corner.worker("pausing-agent", "worker-c");
    let until = pause_for(&corner.recovery, session, Duration::from_secs(3)).await?;
    let work = taken_after_pause(&corner, &mut taken, session, until).await?;
    ensure!(
        work.wake.reason == WakeReason::PauseElapsed,
        "{:?}",
        work.wake
    );
    ensure!(work.wake.caused_at == until, "the cause is the pause's end");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_woken_for_one_session_one_runs_it_and_the_other_is_told_already_taken()
-> Result<()> {
    let corner = Corner::bare("wake_twice").await?;
    let (recovery, log) = (&corner.recovery, &corner.log);
    let writer = corner.harness("twin-agent", "run me once", false).await?;
    let session = writer.session_id();
    let epoch = writer.state().epoch;
    drop(writer);
    // The same wake twice (a duplicate, or two instances' before a rebalance settled).
    let wake = lease_wake(session, "twin-agent", epoch, now_micros());
    log.put_wake(&wake).await?;
    log.put_wake(&wake).await?;
    let take = |name: &'static str| {
        let recovery = Arc::clone(recovery);
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
    let corner = Corner::start("wake_steer").await?;
    let writer = corner
        .harness("steered-agent", "wait for directions", false)
        .await?;
    let session = writer.session_id();
    drop(writer);
    let (mut taken, _worker) = corner.worker("steered-agent", "worker-d");
    let steered = steer(&corner.recovery, session, "try the other route").await?;
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
    let corner = Corner::start("wake_claimed").await?;
    let writer = corner.harness("claimed-agent", "keep going", false).await?;
    let session = writer.session_id();
    let epoch = writer.state().epoch;
    drop(writer);
    // A worker takes the session (the claim is in the log) and dies before it holds the
    // lease itself: nothing of it renews anything.
    let taken = corner
        .recovery
        .take(session, "doomed-worker", epoch, None)
        .await?;
    ensure!(taken.epoch == epoch + 1);
    drop(taken);
    let (mut taken, _worker) = corner.worker("claimed-agent", "worker-e");
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
    let corner = Corner::start("wake_unpause").await?;
    let recovery = &corner.recovery;
    let writer = corner
        .harness("unpaused-agent", "work until told to stop", true)
        .await?;
    let session = writer.session_id();
    let (mut taken, _worker) = corner.worker("unpaused-agent", "worker-f");
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

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lease_expired_wake_read_late_is_refused_and_the_live_harness_goes_on() -> Result<()>
{
    let corner = Corner::bare("wake_stale").await?;
    let mut writer = corner.harness("stale-agent", "keep going", true).await?;
    let session = writer.session_id();
    let held = sessionlog_log::lease::read_lease(
        &corner.stack.settings.kafka,
        session,
        corner.stack.settings.kafka.partitions,
    )
    .await?
    .context("the harness holds a lease")?;
    let epoch = writer.state().epoch;
    // A wake for a lapse of this epoch's lease, read late: the harness renewed since (it holds
    // a live lease now), as a worker group new to the topic replays a day of wakes.
    let stale = lease_wake(session, "stale-agent", epoch, held.renewed_at);
    corner.log.put_wake(&stale).await?;
    let taken = corner
        .recovery
        .take(session, "late-worker", stale.epoch, None)
        .await;
    ensure!(
        matches!(taken, Err(RecoveryError::AlreadyTaken { .. })),
        "a live harness's session is not taken for a stale wake: {taken:?}"
    );
    // Nothing fenced it: it goes on at its epoch.
    writer.user_request("still mine").await?;
    writer.checkpoint(None).await?;
    ensure!(writer.state().epoch == epoch, "{}", writer.state().epoch);
    Ok(())
}

/// A pause of `session` by an operator, lapsing `after` from now; answers its `until`.
async fn pause_for(recovery: &Recovery, session: SessionId, after: Duration) -> Result<i64> {
    let until = now_micros() + i64::try_from(after.as_micros())?;
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
    Ok(until)
}

/// An operator's steering message to `session`.
async fn steer(
    recovery: &Recovery,
    session: SessionId,
    text: &str,
) -> Result<sessionlog_producer::Appended> {
    let act = OperatorAct::Steer { text: text.into() };
    Ok(recovery.operate(session, "bob", act).await?)
}

/// The session the worker took next, once its pause ran out at `until`: `session`, running
/// under the worker, its pause lifted exactly once in the log.
async fn taken_after_pause(
    corner: &Corner,
    taken: &mut Taken,
    session: SessionId,
    until: i64,
) -> Result<Work> {
    let (work, _) = next_taken(taken, Duration::from_secs(30), "the paused session").await?;
    ensure!(work.wake.session_id == session, "{:?}", work.wake);
    ensure!(now_micros() >= until, "woken before its time");
    let state = work.bundle.writer.as_ref().context("writer")?.state();
    ensure!(!state.paused, "the worker lifted the pause");
    ensure!(state.pending_approvals.is_empty(), "nothing waits");
    ensure!(state.terminal.is_none(), "still running");
    let lifted = accepted_events(&corner.recovery, session)
        .await?
        .iter()
        .filter(|e| matches!(e.envelope.event, SessionEvent::SessionResumed {}))
        .count();
    ensure!(lifted == 1, "the pause was lifted {lifted} times");
    Ok(work)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_pause_an_operator_steered_during_is_lifted_and_its_session_runs_under_a_worker()
-> Result<()> {
    let corner = Corner::start("wake_pause_steer").await?;
    let writer = corner
        .harness("steered-pause-agent", "work until told to stop", true)
        .await?;
    let session = writer.session_id();
    let (mut taken, _worker) = corner.worker("steered-pause-agent", "worker-g");
    // The pause fences the harness, which stops; an operator steers while it lasts (a later
    // signed claim than the pause's).
    let until = pause_for(&corner.recovery, session, Duration::from_secs(3)).await?;
    drop(writer);
    let steered = steer(&corner.recovery, session, "when you are back, go on").await?;
    let work = taken_after_pause(&corner, &mut taken, session, until).await?;
    ensure!(
        work.bundle.epoch > steered.envelope.writer_epoch,
        "taken after the steering's claim"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_pause_that_ran_out_while_an_approval_waited_is_lifted_once_it_is_decided()
-> Result<()> {
    let corner = Corner::start("wake_pause_approval").await?;
    let mut writer = corner
        .harness("paused-approval-agent", "deploy it", true)
        .await?;
    let session = writer.session_id();
    request_approval(&mut writer).await?;
    writer.release_lease().await?;
    drop(writer);
    let (mut taken, _worker) = corner.worker("paused-approval-agent", "worker-h");
    let until = pause_for(&corner.recovery, session, Duration::from_secs(2)).await?;
    // The pause runs out while the approval still waits; the decision comes after.
    wait_for("the pause's end", Duration::from_secs(10), || async {
        Ok((now_micros() > until).then_some(()))
    })
    .await?;
    let decided = corner
        .recovery
        .decide_approval(session, "deploy", true, "alice", None)
        .await?;
    let work = taken_after_pause(&corner, &mut taken, session, until).await?;
    ensure!(work.bundle.epoch > decided.envelope.writer_epoch);
    Ok(())
}

/// Whether the projection holds a rejected `SessionEnded` of `session`.
async fn a_rejected_end(stack: &TestStack, session: SessionId) -> Result<Option<()>> {
    let store = sessionlog_store::ProjectionStore::open(&stack.settings.cql).await?;
    Ok(store
        .rejected_events(session)
        .await?
        .iter()
        .any(|r| r.kind == "SessionEnded")
        .then_some(()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_fenced_by_a_timed_pause_closes_and_the_pause_still_ends_and_wakes_a_worker()
-> Result<()> {
    let corner = Corner::start("wake_fenced_close").await?;
    let mut writer = corner
        .harness("fenced-close-agent", "work until told to stop", true)
        .await?;
    let session = writer.session_id();
    let (mut taken, _worker) = corner.worker("fenced-close-agent", "worker-i");
    let until = pause_for(&corner.recovery, session, Duration::from_secs(4)).await?;
    // The harness does not know it was fenced: its end lands in the log, and the fold
    // rejects it.
    let closed = writer.close(TerminalOutcome::Completed, None).await;
    ensure!(
        matches!(closed, Err(sessionlog_producer::Error::Fenced { .. })),
        "{closed:?}"
    );
    wait_for(
        "the rejected end in the projection",
        Duration::from_secs(30),
        || a_rejected_end(&corner.stack, session),
    )
    .await?;
    let work = taken_after_pause(&corner, &mut taken, session, until).await?;
    ensure!(
        work.wake.reason == WakeReason::PauseElapsed,
        "{:?}",
        work.wake
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_writer_fenced_by_a_timed_pause_closes_and_the_pause_still_ends_and_wakes_a_worker()
-> Result<()> {
    let corner = Corner::start("wake_fenced_http").await?;
    let ingest = IngestInstance::start(&corner.stack).await?;
    let (status, created) = ingest
        .post("/v1/sessions", json!({"agent": "fenced-http-agent"}))
        .await?;
    ensure!(status == reqwest::StatusCode::CREATED, "{status} {created}");
    let id = created["session_id"].as_str().context("id")?.to_string();
    let session: SessionId = id.parse()?;
    let (status, lease) = ingest
        .post(&format!("/v1/sessions/{id}/lease"), json!({"epoch": 1}))
        .await?;
    ensure!(status == reqwest::StatusCode::OK, "{status} {lease}");
    let (mut taken, _worker) = corner.worker("fenced-http-agent", "worker-j");
    let until = pause_for(&corner.recovery, session, Duration::from_secs(4)).await?;
    let (status, refused) = ingest
        .post(
            &format!("/v1/sessions/{id}/close"),
            json!({"epoch": 1, "outcome": "Completed"}),
        )
        .await?;
    ensure!(
        status == reqwest::StatusCode::CONFLICT,
        "{status} {refused}"
    );
    ensure!(refused["code"] == "fenced", "{refused}");
    let work = taken_after_pause(&corner, &mut taken, session, until).await?;
    ensure!(
        work.wake.reason == WakeReason::PauseElapsed,
        "{:?}",
        work.wake
    );
    Ok(())
}
