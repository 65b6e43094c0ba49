//! Helpers for the projector's tests: a load of realistic sessions, raw records, waiting for
//! the projection to catch up with the log, replaying and comparing keyspaces.

use crate::{ChildGuard, TestStack, wait_for, wait_for_every};
use anyhow::{Context, Result, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_producer::{EventLog, ProducerOptions, SessionWriter};
use sessionlog_projector::replay::{Replay, ReplayOptions, ReplaySummary};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, EventEnvelope, ResultSource, SessionEvent, SessionId,
    TerminalOutcome,
};
use sessionlog_session::SessionState;
use sessionlog_store::{ProjectionStore, verify};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Connects to the log of `stack`.
pub async fn event_log(stack: &TestStack) -> Result<Arc<EventLog>> {
    Ok(Arc::new(
        EventLog::connect(&stack.settings, ProducerOptions::default()).await?,
    ))
}

/// The store of `stack`'s keyspace (which [`TestStack::new`] created), opened read-only as
/// operators' commands open it.
pub async fn store(stack: &TestStack) -> Result<ProjectionStore> {
    Ok(ProjectionStore::open(&stack.settings.cql).await?)
}

/// Starts `sessionlog project` whose ended sessions' rows expire after `ttl_secs`
/// (`[retention] ended_session_ttl_secs`).
pub fn spawn_projector_expiring(stack: &TestStack, ttl_secs: u64) -> Result<ChildGuard> {
    let mut expiring = stack.clone();
    expiring.settings.retention.ended_session_ttl_secs = Some(u32::try_from(ttl_secs)?);
    spawn_projector_with(&expiring, &[])
}

/// Starts `sessionlog project` with extra arguments (e.g. `--listen`).
pub fn spawn_projector_with(stack: &TestStack, extra: &[&str]) -> Result<ChildGuard> {
    let child = stack
        .command(&["project", "--group", &stack.group])?
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .context("spawning `sessionlog project`")?;
    Ok(ChildGuard(child))
}

/// Microseconds since the Unix epoch, as events carry time.
pub use sessionlog_schemas::now_micros;

/// A hand-built envelope, for events a well-behaved writer would refuse to send.
pub fn envelope(session: SessionId, seq: u64, epoch: u64, event: SessionEvent) -> EventEnvelope {
    EventEnvelope::new(session, seq, epoch, event)
}

/// Sends raw bytes to `stack`'s topic under `key`; returns `(partition, offset)`.
pub async fn send_raw(stack: &TestStack, key: &str, payload: &[u8]) -> Result<(i32, i64)> {
    let producer: FutureProducer = stack.settings.kafka.producer_config().create()?;
    let record = FutureRecord::to(&stack.settings.kafka.topic)
        .key(key)
        .payload(payload);
    let delivered = producer
        .send(record, Timeout::After(Duration::from_secs(30)))
        .await
        .map_err(|(e, _)| e)?;
    Ok((delivered.partition, delivered.offset))
}

/// A dead-lettered record: its headers by name.
pub type DeadLetterHeaders = BTreeMap<String, String>;

/// Every record of `stack`'s dead-letter topic, as its headers.
pub async fn dead_letters(stack: &TestStack) -> Result<Vec<DeadLetterHeaders>> {
    let topic = stack.settings.kafka.dead_letter_topic.clone();
    every_record(stack, &topic, |message| {
        let mut headers = BTreeMap::new();
        if let Some(hs) = message.headers() {
            for h in hs.iter() {
                let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                headers.insert(h.key.to_string(), value.into_owned());
            }
        }
        headers
    })
    .await
}

/// Every record of `topic` (all partitions, from the start to the end it had when the read
/// began), as `map` makes of it, read with its own consumer that commits nothing. Returned in
/// (partition, offset) order: a consumer interleaves partitions as fetches arrive, so two reads
/// of an unchanged topic would otherwise compare unequal.
pub async fn every_record<T: Send + 'static>(
    stack: &TestStack,
    topic: &str,
    map: impl Fn(&rdkafka::message::BorrowedMessage<'_>) -> T + Send + 'static,
) -> Result<Vec<T>> {
    let kafka = stack.settings.kafka.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka
            .client_config()
            .set("group.id", "sessionlog-test-topic-reader")
            .set("enable.auto.commit", "false")
            .create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let mut ends = BTreeMap::new();
        let mut assignment = TopicPartitionList::new();
        for p in metadata.topics().iter().flat_map(|t| t.partitions()) {
            let (low, high) = consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(10))?;
            if high > low {
                ends.insert(p.id(), high);
                assignment.add_partition_offset(&topic, p.id(), Offset::Offset(low))?;
            }
        }
        consumer.assign(&assignment)?;
        let mut out = Vec::new();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while ends
            .iter()
            .any(|(p, end)| next.get(p).copied().unwrap_or(0) < *end)
        {
            if std::time::Instant::now() > deadline {
                bail!("timed out reading {topic}");
            }
            let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let message = message?;
            next.insert(message.partition(), message.offset() + 1);
            out.push(((message.partition(), message.offset()), map(&message)));
        }
        out.sort_by_key(|(at, _)| *at);
        Ok(out.into_iter().map(|(_, record)| record).collect())
    })
    .await?
}

/// Waits until `keyspace`'s stored progress reaches the end of every partition of the topic.
pub async fn wait_caught_up(
    stack: &TestStack,
    store: &ProjectionStore,
    limit: Duration,
) -> Result<()> {
    wait_projected(&stack.settings, store, limit, Duration::from_millis(100)).await?;
    Ok(())
}

/// Waits, checking every `every`, until `store`'s progress reaches what `settings`' topic holds
/// now on every partition; returns how long it took.
pub async fn wait_projected(
    settings: &Settings,
    store: &ProjectionStore,
    limit: Duration,
    every: Duration,
) -> Result<Duration> {
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    let ends = partition_ends(&reader, settings.kafka.partitions).await?;
    wait_applied_through(store, &settings.kafka.topic, &ends, limit, every).await
}

/// The end (the next offset to be written) of each of `partitions` partitions of `reader`'s
/// topic.
pub async fn partition_ends(
    reader: &PartitionReader,
    partitions: i32,
) -> Result<BTreeMap<i32, i64>> {
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        ends.insert(p, reader.watermarks(p).await?.1);
    }
    Ok(ends)
}

/// Waits, checking every `every`, until the projector's stored progress on `topic` reaches
/// `ends` on every partition; returns how long it took.
pub async fn wait_applied_through(
    store: &ProjectionStore,
    topic: &str,
    ends: &BTreeMap<i32, i64>,
    limit: Duration,
    every: Duration,
) -> Result<Duration> {
    let started = Instant::now();
    wait_for_every(
        &format!("the projection of {topic} to reach {ends:?}"),
        limit,
        every,
        || async {
            let progress = store.load_progress(topic).await?;
            let done = ends
                .iter()
                .all(|(p, end)| progress.get(p).copied().unwrap_or(0) >= *end);
            Ok(done.then_some(()))
        },
    )
    .await?;
    Ok(started.elapsed())
}

/// Replays `stack`'s topic from the beginning into `keyspace`.
pub async fn replay_into(stack: &TestStack, keyspace: &str) -> Result<ReplaySummary> {
    let mut settings = stack.settings.clone();
    settings.cql.keyspace = keyspace.to_string();
    let replay = Replay::plan(&settings, ReplayOptions::default()).await?;
    Ok(replay.run(Arc::new(AtomicU64::new(0))).await?)
}

/// Fails with the differing rows unless the two keyspaces hold the same derived tables.
pub async fn assert_same_tables(store: &ProjectionStore, left: &str, right: &str) -> Result<()> {
    let comparison = verify::compare(store, left, right).await?;
    if !comparison.equal() {
        let diffs: Vec<String> = comparison
            .tables
            .iter()
            .filter(|t| !t.equal())
            .map(|t| {
                format!(
                    "{}: {} vs {} rows, {} differ; only left {:?}; only right {:?}",
                    t.left.table,
                    t.left.rows,
                    t.right.rows,
                    t.differing_rows,
                    t.only_left,
                    t.only_right
                )
            })
            .collect();
        bail!("{left} and {right} differ:\n{}", diffs.join("\n"));
    }
    Ok(())
}

/// What a load appended: each session's own fold, by session.
pub type LoadResult = BTreeMap<SessionId, SessionState>;

/// Appends `sessions` concurrent sessions of about `turns` turns each (a user request, a
/// model response, a tool call and its result, a plan update now and then, a checkpoint every
/// few turns, an end), pausing `pace` between turns so the load spreads over time.
pub async fn run_load(
    log: Arc<EventLog>,
    sessions: usize,
    turns: usize,
    pace: Duration,
) -> Result<LoadResult> {
    let appended = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..sessions)
        .map(|i| {
            let (log, appended) = (Arc::clone(&log), Arc::clone(&appended));
            tokio::spawn(async move {
                let (mut writer, _) =
                    SessionWriter::create(log, "load-agent", Some(&format!("load {i}"))).await?;
                for turn in 0..turns {
                    writer
                        .user_request(&format!("request {turn} of {i}"))
                        .await?;
                    let started_at = now_micros();
                    writer
                        .append(SessionEvent::ModelResponse {
                            model: "test-model".into(),
                            tokens_in: 100 + turn as u64,
                            tokens_out: 20,
                            cost_micros: 150,
                            started_at,
                            content: Content::plain(format!("answer {turn}")),
                            cache_read_tokens: 0,
                            cache_creation_tokens: 0,
                            provider: None,
                        })
                        .await?;
                    let call = writer
                        .append_with(
                            SessionEvent::ToolCallRequested {
                                tool: "search".into(),
                                arguments: Content::plain(format!("{{\"q\":{turn}}}")),
                                effect: EffectClass::Idempotent,
                                approval_id: None,
                            },
                            None,
                            Some(format!("{i}-{turn}")),
                        )
                        .await?;
                    writer
                        .append_with(
                            SessionEvent::ToolCallResult {
                                call_seq: call.envelope.seq,
                                outcome: CallOutcome::Succeeded,
                                output: Content::plain("found"),
                                source: ResultSource::Executed,
                                recorded_by: None,
                                note: None,
                            },
                            Some(call.envelope.event_id),
                            None,
                        )
                        .await?;
                    if turn % 4 == 0 {
                        writer
                            .append(SessionEvent::PlanUpdated {
                                plan: Content::plain(format!("plan v{turn}")),
                            })
                            .await?;
                    }
                    if turn % 5 == 4 {
                        writer.checkpoint(None).await?;
                    }
                    appended.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pace).await;
                }
                writer.close(TerminalOutcome::Completed, None).await?;
                Ok::<_, anyhow::Error>((writer.session_id(), writer.state().clone()))
            })
        })
        .collect();
    let mut result = BTreeMap::new();
    for task in tasks {
        let (session, state) = task.await??;
        result.insert(session, state);
    }
    Ok(result)
}

/// Checks every session of a load against the projection: state equal to the writer's fold.
pub async fn assert_projected(store: &ProjectionStore, load: &LoadResult) -> Result<()> {
    for (session, state) in load {
        let projected = store
            .load_session(*session)
            .await?
            .with_context(|| format!("session {session} is not projected"))?;
        if projected.state.canonical_json() != state.canonical_json() {
            bail!("session {session}: projected state differs from the writer's fold");
        }
    }
    Ok(())
}

/// Waits up to `limit` until `store`'s row of `session` has folded seq `last_seq`, and returns
/// the offset the row applied.
pub async fn wait_projected_through(
    store: &ProjectionStore,
    session: SessionId,
    last_seq: u64,
    limit: Duration,
) -> Result<i64> {
    wait_for(
        &format!("session {session} to be projected through seq {last_seq}"),
        limit,
        || async {
            Ok(store
                .load_session(session)
                .await?
                .filter(|row| row.state.last_seq >= last_seq)
                .map(|row| row.applied_offset))
        },
    )
    .await
}
