//! Three ingest processes behind a round-robin client, 1,000 sessions, and instances killed
//! with `kill -9` and restarted while the harnesses write: every event some instance
//! acknowledged is accepted exactly once, at the position it was acknowledged at, in seq
//! order, and no instance answered 2xx for an event the fold rejects.
//!
//! The client is the load balancer: it sends each request to the next instance, and retries
//! one that got no answer (the instance died) or a 503 on the next, with the same body, as a
//! harness behind a balancer would.

use anyhow::{Context, Result, bail, ensure};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_producer::EventLog;
use sessionlog_schemas::SessionId;
use sessionlog_testkit::ingest::{presenting_writer_token, remember_writer_token, user_request};
use sessionlog_testkit::producer::fold_topic;
use sessionlog_testkit::{ServedProcess, TestStack, free_address};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use uuid::Uuid;

const INSTANCES: usize = 3;
const SESSIONS: usize = 1_000;
/// Appended events per session, besides its start and its end, two per request.
const EVENTS: u64 = 6;
const CONCURRENT_HARNESSES: usize = 50;
/// How long one request may keep being retried across instances.
const REQUEST_DEADLINE: Duration = Duration::from_secs(90);
/// How long one attempt at one instance may take before the harness tries the next, as a
/// harness with a client timeout would: without it an attempt that never completes (seen once
/// in CI, with no connection open) held its harness, and the whole test, past any deadline.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// The instances, by address; `None` while one is down.
struct Fleet {
    addresses: Vec<String>,
    processes: Mutex<Vec<Option<ServedProcess>>>,
    next: AtomicUsize,
    http: reqwest::Client,
    /// 503 answers seen (retried): an outage of an instance's servers, not a failure.
    unavailable: AtomicUsize,
}

/// One event some instance acknowledged.
#[derive(Debug)]
struct Ack {
    session: SessionId,
    seq: u64,
    event_id: Option<Uuid>,
    offset: i64,
}

impl Fleet {
    async fn start(stack: &TestStack) -> Result<Arc<Self>> {
        let mut addresses = Vec::new();
        let mut processes = Vec::new();
        for _ in 0..INSTANCES {
            let address = free_address()?;
            processes.push(Some(
                ServedProcess::start_at(stack, "ingest", &address).await?,
            ));
            addresses.push(address);
        }
        Ok(Arc::new(Self {
            addresses,
            processes: Mutex::new(processes),
            next: AtomicUsize::new(0),
            http: sessionlog_testkit::auth::client()?,
            unavailable: AtomicUsize::new(0),
        }))
    }

    /// Sends `body` to the next instance, and on to the following ones while none answers or
    /// one answers 503; the first other answer.
    async fn post(&self, path: &str, body: &Value) -> Result<(StatusCode, Value)> {
        let started = Instant::now();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.addresses.len();
            let url = format!("http://{}/v1{path}", self.addresses[i]);
            let attempt = async {
                let request = presenting_writer_token(self.http.post(&url).json(body), path);
                let response = request.send().await.ok()?;
                let status = response.status();
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    self.unavailable.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                // A connection cut mid-answer by a kill: no answer, try the next one.
                let answer = response.json::<Value>().await.ok()?;
                remember_writer_token(&answer);
                Some((status, answer))
            };
            // An attempt that times out is a request with no answer, like a cut connection:
            // the same request goes to the next instance.
            if let Ok(Some(answered)) = tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
                return Ok(answered);
            }
            if started.elapsed() > REQUEST_DEADLINE {
                bail!("no instance answered POST {path} within {REQUEST_DEADLINE:?}");
            }
            tokio::task::yield_now().await;
        }
    }

    /// Kills instance `i` with SIGKILL and starts it again at the same address.
    async fn kill_and_restart(&self, stack: &TestStack, i: usize) -> Result<()> {
        let killed = self.processes.lock().await[i].take();
        drop(killed); // ChildGuard: kill (SIGKILL) and reap.
        let restarted = ServedProcess::start_at(stack, "ingest", &self.addresses[i]).await?;
        self.processes.lock().await[i] = Some(restarted);
        Ok(())
    }
}

/// One harness: creates its session, appends `EVENTS` events two at a time, closes it. Returns
/// every event an instance acknowledged.
async fn harness(fleet: Arc<Fleet>, session: SessionId) -> Result<Vec<Ack>> {
    let mut acks = Vec::new();
    let mut ack = |answer: &Value| -> Result<()> {
        acks.push(Ack {
            session,
            seq: answer["seq"].as_u64().context("seq")?,
            event_id: answer["event_id"].as_str().and_then(|s| s.parse().ok()),
            offset: answer["offset"].as_i64().context("offset")?,
        });
        Ok(())
    };
    let (status, opened) = fleet
        .post(
            "/sessions",
            &json!({ "agent": "chaos", "session_id": session }),
        )
        .await?;
    let epoch = match (status, opened["code"].as_str()) {
        (StatusCode::CREATED, _) => {
            ack(&opened["event"])?;
            opened["epoch"].as_u64().context("epoch")?
        }
        // The create was written, and the instance died before answering: take it over.
        (StatusCode::CONFLICT, Some("already_started")) => {
            let (status, claimed) = fleet
                .post(
                    &format!("/sessions/{session}/claim"),
                    &json!({ "writer": "chaos" }),
                )
                .await?;
            ensure!(
                status == StatusCode::OK,
                "claim after a lost create: {claimed}"
            );
            claimed["epoch"].as_u64().context("epoch")?
        }
        _ => bail!("create answered {status}: {opened}"),
    };
    let path = format!("/sessions/{session}/events");
    for first in (2..2 + EVENTS).step_by(2) {
        let ids = [Uuid::now_v7(), Uuid::now_v7()];
        let body = json!({ "epoch": epoch, "events": [
            user_request(first, &ids[0], "a"), user_request(first + 1, &ids[1], "b")] });
        let (status, answer) = fleet.post(&path, &body).await?;
        ensure!(
            status == StatusCode::OK,
            "append answered {status}: {answer}"
        );
        for event in answer["events"].as_array().context("events")? {
            ack(event)?;
        }
    }
    let (status, closed) = fleet
        .post(
            &format!("/sessions/{session}/close"),
            &json!({ "epoch": epoch, "outcome": "Completed" }),
        )
        .await?;
    match (status, closed["code"].as_str()) {
        (StatusCode::OK, _) => ack(&closed)?,
        // A close retried after the instance that wrote it died before answering.
        (StatusCode::CONFLICT, Some("session_ended")) => {}
        _ => bail!("close answered {status}: {closed}"),
    }
    Ok(acks)
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_ingest_instances_lose_nothing_acknowledged_and_acknowledge_nothing_rejected()
-> Result<()> {
    let stack = TestStack::new("chaos", 3).await?;
    let _projector = stack.spawn_projector()?;
    let fleet = Fleet::start(&stack).await?;

    let done = Arc::new(AtomicBool::new(false));
    let killer = {
        let (fleet, done) = (Arc::clone(&fleet), Arc::clone(&done));
        let stack_settings = stack.clone();
        tokio::spawn(async move {
            let mut kills = 0usize;
            while !done.load(Ordering::Relaxed) {
                // The pace of the faults, not a wait for anything: one kill a second or so.
                tokio::time::sleep(Duration::from_millis(700)).await;
                fleet
                    .kill_and_restart(&stack_settings, kills % INSTANCES)
                    .await?;
                kills += 1;
            }
            anyhow::Ok(kills)
        })
    };

    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    let mut acks = Vec::new();
    for chunk in sessions.chunks(CONCURRENT_HARNESSES) {
        let runs = chunk
            .iter()
            .map(|session| tokio::spawn(harness(Arc::clone(&fleet), *session)));
        for run in futures::future::join_all(runs).await {
            acks.extend(run??);
        }
    }
    done.store(true, Ordering::Relaxed);
    let kills = killer.await??;
    ensure!(
        kills >= 3,
        "only {kills} instances were killed during the run"
    );

    let log = EventLog::from_settings(&stack.settings).await?;
    let histories = fold_topic(&log).await?;
    ensure!(
        histories.len() == SESSIONS,
        "{} sessions in the log",
        histories.len()
    );
    // Per session: the accepted events by offset, and how often each event id was accepted.
    let mut accepted_at: HashMap<(SessionId, i64), (u64, Uuid)> = HashMap::new();
    let mut times_accepted: HashMap<Uuid, usize> = HashMap::new();
    for (session, history) in &histories {
        let mut last_seq = 0;
        for (appended, verdict) in &history.verdicts {
            if !verdict.is_accepted() {
                continue;
            }
            let e = &appended.envelope;
            if e.event.kind() != "WriterClaimed" {
                ensure!(
                    e.seq == last_seq + 1,
                    "session {session}: seq {} accepted after {last_seq}",
                    e.seq
                );
                last_seq = e.seq;
            }
            accepted_at.insert((*session, appended.position.offset), (e.seq, e.event_id));
            *times_accepted.entry(e.event_id).or_default() += 1;
        }
        ensure!(
            history.state.status().as_str() == "completed",
            "session {session} ended {}",
            history.state.status().as_str()
        );
    }
    for ack in &acks {
        let Some((seq, event_id)) = accepted_at.get(&(ack.session, ack.offset)) else {
            bail!("{ack:?} was acknowledged, and the fold did not accept it there");
        };
        ensure!(
            *seq == ack.seq,
            "{ack:?}: the fold accepted seq {seq} there"
        );
        if let Some(id) = ack.event_id {
            ensure!(
                id == *event_id,
                "{ack:?}: the fold accepted event {event_id} there"
            );
            ensure!(
                times_accepted.get(&id) == Some(&1),
                "{ack:?} accepted more than once"
            );
        }
    }
    eprintln!(
        "{} sessions, {} acknowledged events, {kills} kills, {} answers of 503 retried",
        SESSIONS,
        acks.len(),
        fleet.unavailable.load(Ordering::Relaxed)
    );
    Ok(())
}
