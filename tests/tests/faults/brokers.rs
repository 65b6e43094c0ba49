//! Broker faults on the 3-broker cluster (`scripts/stack up --brokers 3`): a broker is killed
//! with SIGKILL while 100,000 events are appended, and every acknowledged event must be in
//! the topic exactly once in the accepted history; then it is restarted while another 100,000
//! are appended, and the same must hold.
//!
//! One test on purpose, in the faults binary, which runs its tests one at a time: a dead broker
//! would break any other test's replication-1 topics on it.

use anyhow::{Context, Result, bail};
use sessionlog_log::{Settings, topic};
use sessionlog_producer::{Appended, Error, EventLog, SessionWriter};
use sessionlog_schemas::{Content, EventEnvelope, SessionEvent, SessionId};
use sessionlog_testkit::producer::fold_topic;
use sessionlog_testkit::{TestStack, repo_root, wait_for};
use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SESSIONS: usize = 400;
const EVENTS_PER_SESSION: usize = 250;
const BATCH: usize = 25;
const VICTIM: &str = "kafka-2";

/// Runs `scripts/stack <verb> kafka-2`.
pub(crate) fn stack(verb: &str) -> Result<()> {
    let status = Command::new(repo_root().join("scripts/stack"))
        .args([verb, VICTIM])
        .status()
        .with_context(|| format!("running scripts/stack {verb} {VICTIM}"))?;
    if !status.success() {
        bail!("scripts/stack {verb} {VICTIM} exited with {status}");
    }
    Ok(())
}

/// Starts the killed broker again however the test ends, so other tests find the cluster whole.
pub(crate) struct Restart {
    pub(crate) needed: bool,
}

impl Drop for Restart {
    fn drop(&mut self) {
        if self.needed
            && let Err(e) = stack("start")
        {
            eprintln!("could not restart {VICTIM}: {e:#}");
        }
    }
}

/// Starts the killed broker and waits until the cluster lists it again. A broker that recovers
/// many partitions after a kill on a loaded machine may take longer than `scripts/stack start`
/// waits for it: the cluster's answer is what counts.
pub(crate) async fn back_again(stack: &TestStack) -> Result<()> {
    if let Err(e) = tokio::task::spawn_blocking(|| self::stack("start")).await? {
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

/// Appends `EVENTS_PER_SESSION` small events to each of `SESSIONS` new sessions, retrying the
/// same envelopes when an ack fails. Returns what was acknowledged, per session.
async fn append_round(
    log: &Arc<EventLog>,
    acked: &Arc<AtomicUsize>,
) -> Result<HashMap<SessionId, Vec<EventEnvelope>>> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..SESSIONS {
        let (log, acked) = (Arc::clone(log), Arc::clone(acked));
        tasks.spawn(async move {
            let (mut writer, start) = SessionWriter::create(log, "fault-test", None).await?;
            let mut written = vec![start.envelope];
            while writer.next_seq() <= EVENTS_PER_SESSION as u64 {
                let events = (0..BATCH)
                    .map(|_| SessionEvent::UserRequest {
                        content: Content::plain("e"),
                    })
                    .collect();
                let mut pending = writer.envelopes(events);
                let mut attempts = 0;
                while !pending.is_empty() {
                    attempts += 1;
                    match writer.append_envelopes(pending.clone()).await {
                        Ok(done) => {
                            acked.fetch_add(done.len(), Ordering::Relaxed);
                            written.extend(done.into_iter().map(|a: Appended| a.envelope));
                            pending.clear();
                        }
                        // The acked prefix is applied; retry the rest, same seqs and ids.
                        Err(Error::NotAcknowledged { .. }) if attempts < 5 => {
                            let next = writer.next_seq();
                            let (done, rest): (Vec<_>, Vec<_>) =
                                pending.into_iter().partition(|e| e.seq < next);
                            acked.fetch_add(done.len(), Ordering::Relaxed);
                            written.extend(done);
                            pending = rest;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Ok::<_, Error>((writer.session_id(), written))
        });
    }
    let mut out = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        let (session, written) = done??;
        out.insert(session, written);
    }
    Ok(out)
}

/// Every acknowledged event is in the accepted history exactly once, in order.
async fn check(log: &EventLog, appended: &HashMap<SessionId, Vec<EventEnvelope>>) -> Result<()> {
    let histories = fold_topic(log).await?;
    for (session, written) in appended {
        let history = histories.get(session).context("session in the topic")?;
        // By identity: the log holds the sealed form of what a retry prepared in plain text.
        let id = |e: &EventEnvelope| (e.seq, e.event_id, e.event.kind());
        let accepted: Vec<_> = history.accepted().into_iter().map(id).collect();
        let expected: Vec<_> = written.iter().map(id).collect();
        if accepted != expected {
            bail!(
                "session {session}: {} accepted, {} acknowledged; verdicts other than accepted: {:?}",
                accepted.len(),
                expected.len(),
                history
                    .verdicts
                    .iter()
                    .filter(|(_, v)| !v.is_accepted())
                    .map(|(a, v)| (a.envelope.seq, v.clone()))
                    .take(5)
                    .collect::<Vec<_>>()
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_events_survive_a_killed_and_a_restarted_broker_exactly_once() -> Result<()> {
    let _fault = crate::one_fault_at_a_time().await;
    let mut settings = Settings::load(None)?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    settings.kafka.topic = format!("t-faults_{}", &run[run.len() - 8..]);
    settings.kafka.dead_letter_topic = format!("{}-dlq", settings.kafka.topic);
    settings.kafka.partitions = 6;
    settings.kafka.replication_factor = 3;
    settings.kafka.min_insync_replicas = 2;
    let brokers = topic::live_brokers(&settings.kafka).await?;
    if brokers.len() < 3 {
        bail!("needs the 3-broker stack (`scripts/stack up --brokers 3`), found {brokers:?}");
    }
    topic::ensure_topics(&settings.kafka).await?;
    // Sealed, as every test writes (the key store is not what this test breaks).
    settings.privacy.kek_file = Some(sessionlog_testkit::auth::kek_file()?);
    sessionlog_store::KeyTable::create(&settings).await?;
    let log = Arc::new(EventLog::from_settings(&settings).await?);

    // Round 1: kill a broker once a fifth of the events are acknowledged.
    let acked = Arc::new(AtomicUsize::new(0));
    let mut restart = Restart { needed: false };
    let started = Instant::now();
    let killer = {
        let acked = Arc::clone(&acked);
        async move {
            wait_for(
                "a fifth of the events acknowledged",
                Duration::from_secs(120),
                || {
                    let n = acked.load(Ordering::Relaxed);
                    async move { Ok((n >= SESSIONS * EVENTS_PER_SESSION / 5).then_some(())) }
                },
            )
            .await?;
            tokio::task::spawn_blocking(|| stack("kill")).await??;
            Ok::<_, anyhow::Error>(())
        }
    };
    let (round_one, killed) = tokio::join!(append_round(&log, &acked), killer);
    restart.needed = true;
    // An append that failed explains a kill that never came: report it first.
    let round_one = round_one?;
    killed?;
    let total: usize = round_one.values().map(Vec::len).sum();
    assert!(total >= 100_000, "{total} events acknowledged");
    eprintln!(
        "round 1: {total} events acknowledged in {:?} with {VICTIM} killed",
        started.elapsed()
    );
    check(&log, &round_one).await?;

    // Round 2: restart the broker while appending as much again.
    let acked = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let restarter = tokio::task::spawn_blocking(|| stack("start"));
    let round_two = append_round(&log, &acked).await?;
    restarter.await??;
    restart.needed = false;
    let total: usize = round_two.values().map(Vec::len).sum();
    assert!(total >= 100_000, "{total} events acknowledged");
    eprintln!(
        "round 2: {total} events acknowledged in {:?} while {VICTIM} restarted",
        started.elapsed()
    );
    check(&log, &round_one).await?;
    check(&log, &round_two).await?;
    log.flush(Duration::from_secs(30)).await?;
    Ok(())
}
