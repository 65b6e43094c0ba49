//! The schema v1 → v2 upgrade (docs/design.md section 2, "Upgrading from v1"): a topic where
//! records of the previous release (schema v1, framed with v1's registry id) and of this one
//! (v2) are interleaved, and one session starts under v1 and goes on under v2, projects with no
//! dead letters, rebuilds and replays to the same state and tables.

use anyhow::{Context, Result, ensure};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use sessionlog_log::{PartitionReader, partitioner};
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_recovery::{Recovery, StartPoint};
use sessionlog_schemas::avro::schema_version;
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, CallOutcome, Content, EffectClass, EventEnvelope, ForkPoint,
    ResultSource, SessionEvent, SessionId, TerminalOutcome, encode_body_for_version, frame,
    unframe, value_subject,
};
use sessionlog_session::SessionState;
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::TestStack;
use sessionlog_testkit::producer::read_topic;
use sessionlog_testkit::projector::{
    assert_same_tables, dead_letters, envelope, event_log, now_micros, store, wait_caught_up,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A harness of the previous release: it writes schema v1 bodies framed with the id the
/// registry gave v1, to the session's partition, and folds what it writes as that release's
/// writer did. Nothing it writes is sealed: that release had no encryption.
struct V1Writer {
    producer: FutureProducer,
    topic: String,
    partitions: i32,
    schema_id: u32,
    state: SessionState,
    /// Every envelope written, with its position.
    written: Vec<(EventEnvelope, (i32, i64))>,
}

impl V1Writer {
    async fn start(stack: &TestStack, schema_id: u32, first: SessionEvent) -> Result<Self> {
        let mut state = SessionState::empty(SessionId::new());
        state.epoch = 1;
        let mut writer = Self {
            producer: stack.settings.kafka.producer_config().create()?,
            topic: stack.settings.kafka.topic.clone(),
            partitions: stack.settings.kafka.partitions,
            schema_id,
            state,
            written: Vec::new(),
        };
        writer.append(first).await?;
        Ok(writer)
    }

    fn session(&self) -> SessionId {
        self.state.session_id
    }

    async fn append(&mut self, event: SessionEvent) -> Result<(i32, i64)> {
        let session = self.session();
        let mut e = envelope(session, self.state.last_seq + 1, self.state.epoch, event);
        e.schema_version = 1;
        let verdict = self.state.apply(&e);
        ensure!(
            verdict.is_accepted(),
            "the v1 writer's own fold refused seq {}: {verdict:?}",
            e.seq
        );
        let body = encode_body_for_version(1, &e)?;
        let key = partitioner::session_key(session);
        let payload = frame(self.schema_id, &body);
        let record = FutureRecord::to(&self.topic)
            .key(&key)
            .partition(partitioner::partition_for(session, self.partitions))
            .payload(&payload);
        let delivered = self
            .producer
            .send(record, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| e)?;
        let position = (delivered.partition, delivered.offset);
        self.written.push((e, position));
        Ok(position)
    }

    async fn checkpoint(&mut self) -> Result<(i32, i64)> {
        let state_digest = self.state.digest();
        self.append(SessionEvent::Checkpoint {
            state_digest,
            workspace_revision: Some("rev-v1".into()),
        })
        .await
    }

    fn envelopes(&self) -> Vec<EventEnvelope> {
        self.written.iter().map(|(e, _)| e.clone()).collect()
    }
}

fn model_response(text: &str, cache: u64, provider: Option<&str>) -> SessionEvent {
    SessionEvent::ModelResponse {
        model: "test-model".into(),
        tokens_in: 120,
        tokens_out: 30,
        cost_micros: 250,
        started_at: now_micros(),
        content: Content::plain(text),
        cache_read_tokens: cache,
        cache_creation_tokens: cache / 2,
        provider: provider.map(String::from),
    }
}

/// Folds `events` from an empty state, failing on any event the fold does not accept.
fn fold(session: SessionId, events: &[EventEnvelope]) -> Result<SessionState> {
    let mut state = SessionState::empty(session);
    for e in events {
        let verdict = state.apply(e);
        ensure!(
            verdict.is_accepted(),
            "session {session} seq {} (v{}): {verdict:?}",
            e.seq,
            e.schema_version
        );
    }
    Ok(state)
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_and_v2_records_interleaved_project_recover_and_replay_identically() -> Result<()> {
    let stack = TestStack::new("upgrade", 2).await?;
    let subject = value_subject(&stack.settings.kafka.topic);
    let v1 = schema_version(1).context("schema v1 is kept")?;
    // Registering a schema the subject already has answers its existing id: v1's id.
    let v1_id = stack
        .settings
        .registry
        .client()?
        .register(&subject, v1.text)
        .await?;
    let log = event_log(&stack).await?;
    let v2_id = log.schema_id();
    assert_ne!(v1_id, v2_id, "v1 and v2 must have their own registry ids");
    // The current writer is v3 since context summaries; v3 only adds a union branch, so
    // what this test calls v2 records are the current writer's (summaries included).
    const { assert!(CURRENT_SCHEMA_VERSION >= 2) };
    let mut projector = stack.spawn_projector()?;

    // Interleaved on the topic: an old session entirely v1, a new one entirely v2, and one
    // that the previous release starts and an upgraded harness takes over.
    let mut old =
        V1Writer::start(&stack, v1_id, v1_start("old-agent", Some("an old session"))).await?;
    let (mut new, new_start) = SessionWriter::create_in(
        log.clone(),
        SessionId::new(),
        "new-agent",
        Some("a new session"),
        "acme",
    )
    .await?;
    let mut new_written: Vec<Appended> = vec![new_start];
    let mut mixed = V1Writer::start(
        &stack,
        v1_id,
        v1_start("mixed-agent", Some("started before the upgrade")),
    )
    .await?;
    old.append(SessionEvent::UserRequest {
        content: Content::plain("old: fix the build"),
    })
    .await?;
    new_written.push(new.user_request("new: write the docs").await?);
    mixed
        .append(SessionEvent::UserRequest {
            content: Content::plain("mixed: first request, under v1"),
        })
        .await?;
    old.append(model_response("old: looking", 0, None)).await?;
    new_written.push(
        new.append(model_response("new: writing", 64, Some("anthropic")))
            .await?,
    );
    new_written.push(
        new.append(SessionEvent::ContextSummarized {
            first_seq: 2,
            last_seq: 3,
            summarized_by: "summariser".into(),
            summary: Content::plain("new: asked for docs, writing them"),
        })
        .await?,
    );
    mixed
        .append(model_response("mixed: answer under v1", 0, None))
        .await?;
    old.append(SessionEvent::ToolCallRequested {
        tool: "shell".into(),
        arguments: Content::plain(r#"{"cmd":"make"}"#),
        effect: EffectClass::Idempotent,
        approval_id: None,
    })
    .await?;
    let call_seq = old.state.last_seq;
    old.append(SessionEvent::ToolCallResult {
        call_seq,
        outcome: CallOutcome::Succeeded,
        output: Content::plain("built"),
        source: ResultSource::Executed,
        recorded_by: None,
        note: None,
    })
    .await?;
    mixed.checkpoint().await?;
    let mixed_v1_checkpoint_seq = mixed.state.last_seq;
    new_written.push(
        new.append(SessionEvent::ApprovalRequested {
            approval_id: "publish".into(),
            action: "publish the docs".into(),
            action_digest: None,
        })
        .await?,
    );
    old.append(SessionEvent::ApprovalRequested {
        approval_id: "deploy".into(),
        action: "deploy to staging".into(),
        action_digest: None,
    })
    .await?;
    old.append(SessionEvent::ApprovalDecided {
        approval_id: "deploy".into(),
        approved: true,
        decided_by: "carol".into(),
        reason: Some("looks right".into()),
        action_digest: None,
        request_seq: None,
    })
    .await?;
    old.append(SessionEvent::SteeringMessage {
        author: "bob".into(),
        content: Content::plain("old: mind the flaky test"),
    })
    .await?;
    old.append(SessionEvent::PlanUpdated {
        plan: Content::plain("old: 1. build 2. deploy"),
    })
    .await?;
    let old_checkpoint = old.checkpoint().await?;
    let old_checkpoint_seq = old.state.last_seq;

    // The upgraded harness takes the mixed session over: it reads the v1 records back through
    // the registry, claims epoch 2 and goes on in v2 (sealed, with v2's new fields).
    let (mut upgraded, claim) =
        SessionWriter::claim(log.clone(), mixed.session(), "upgraded-harness").await?;
    ensure!(
        upgraded.state().canonical_json()
            == fold(
                mixed.session(),
                &[mixed.envelopes(), vec![claim.envelope.clone()]].concat()
            )?
            .canonical_json(),
        "the upgraded writer's fold of the v1 prefix differs from the v1 writer's"
    );
    let mut mixed_v2: Vec<Appended> = vec![claim];
    mixed_v2.push(
        upgraded
            .user_request("mixed: second request, under v2")
            .await?,
    );
    mixed_v2.push(
        upgraded
            .append(model_response(
                "mixed: answer under v2",
                512,
                Some("openai"),
            ))
            .await?,
    );

    // The old release keeps writing (writers upgrade last): its session pauses, forks, ends.
    old.append(SessionEvent::SessionPaused {
        reason: Some("waiting for review".into()),
        until: None,
    })
    .await?;
    old.append(SessionEvent::SessionResumed {}).await?;
    let mut fork = V1Writer::start(
        &stack,
        v1_id,
        SessionEvent::SessionForked {
            fork_point: ForkPoint {
                parent_session_id: old.session(),
                parent_seq: old_checkpoint_seq,
                parent_partition: old_checkpoint.0,
                parent_offset: old_checkpoint.1,
            },
            agent: "fork-agent".into(),
            tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
            forked_by: None,
            inherited_approvals: Vec::new(),
            writer_token_sha256: None,
        },
    )
    .await?;
    fork.append(SessionEvent::UserRequest {
        content: Content::plain("fork: try another way"),
    })
    .await?;
    old.append(SessionEvent::SessionEnded {
        outcome: TerminalOutcome::Completed,
        reason: Some("deployed".into()),
    })
    .await?;

    mixed_v2.push(
        upgraded
            .append(SessionEvent::SessionPaused {
                reason: Some("lunch".into()),
                until: None,
            })
            .await?,
    );
    mixed_v2.push(upgraded.append(SessionEvent::SessionResumed {}).await?);
    mixed_v2.push(upgraded.checkpoint(Some("rev-v2".into())).await?);
    mixed_v2.push(
        upgraded
            .close(TerminalOutcome::Completed, Some("done under v2".into()))
            .await?,
    );
    new_written.push(new.checkpoint(None).await?);
    new_written.push(
        new.close(TerminalOutcome::Cancelled, Some("superseded".into()))
            .await?,
    );

    // What each session's history is: the envelopes as their writers wrote them.
    let as_written = |appended: &[Appended]| -> Vec<EventEnvelope> {
        appended.iter().map(|a| a.envelope.clone()).collect()
    };
    let histories: BTreeMap<SessionId, Vec<EventEnvelope>> = [
        (old.session(), old.envelopes()),
        (fork.session(), fork.envelopes()),
        (new.session_id(), as_written(&new_written)),
        (
            mixed.session(),
            [mixed.envelopes(), as_written(&mixed_v2)].concat(),
        ),
    ]
    .into();
    let expected: BTreeMap<SessionId, SessionState> = histories
        .iter()
        .map(|(s, events)| Ok((*s, fold(*s, events)?)))
        .collect::<Result<_>>()?;
    ensure!(
        expected[&mixed.session()].canonical_json() == upgraded.state().canonical_json(),
        "the mixed session's fold differs from its upgraded writer's"
    );
    ensure!(
        expected[&new.session_id()].canonical_json() == new.state().canonical_json(),
        "the v2 session's fold differs from its writer's"
    );

    // The topic really holds both versions, interleaved on a partition, and each record reads
    // back through the registry as exactly the envelope written.
    let reader = PartitionReader::new(&stack.settings.kafka, &stack.settings.kafka.topic)?;
    let mut ids_by_partition: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
    for partition in 0..stack.settings.kafka.partitions {
        reader
            .read_to_end(partition, 0, |record| {
                if let Some(payload) = record.payload.as_deref()
                    && let Ok((id, _)) = unframe(payload)
                {
                    ids_by_partition.entry(partition).or_default().push(id);
                }
            })
            .await?;
    }
    let interleaved = ids_by_partition
        .values()
        .any(|ids| ids.windows(2).any(|w| w[0] != w[1]) && ids.contains(&v1_id));
    assert!(
        interleaved,
        "no partition mixes v1 ({v1_id}) and v2 ({v2_id}) records: {ids_by_partition:?}"
    );
    let v1_records: usize = ids_by_partition
        .values()
        .map(|ids| ids.iter().filter(|id| **id == v1_id).count())
        .sum();
    assert_eq!(
        v1_records,
        old.written.len() + fork.written.len() + mixed.written.len()
    );
    let mut read_back: BTreeMap<SessionId, Vec<EventEnvelope>> = BTreeMap::new();
    for appended in read_topic(&log).await? {
        read_back
            .entry(appended.envelope.session_id)
            .or_default()
            .push(appended.envelope);
    }
    assert_eq!(
        read_back, histories,
        "the topic read back differs from what was written"
    );

    // The projector: everything projected, nothing dead-lettered or rejected, every
    // checkpoint (v1's and v2's) verified.
    let live = store(&stack).await?;
    wait_caught_up(&stack, &live, Duration::from_secs(120)).await?;
    projector.assert_running()?;
    let letters = dead_letters(&stack).await?;
    assert!(letters.is_empty(), "dead letters: {letters:?}");
    for (session, state) in &expected {
        let projected = live
            .load_session(*session)
            .await?
            .with_context(|| format!("session {session} is not projected"))?;
        assert_eq!(
            projected.state.canonical_json(),
            state.canonical_json(),
            "session {session}: projected state differs from the fold of its events"
        );
        let rejected = live.rejected_events(*session).await?;
        assert!(
            rejected.is_empty(),
            "session {session}: rejected {:?}",
            rejected
                .iter()
                .map(|r| (r.seq, &r.kind, &r.reason))
                .collect::<Vec<_>>()
        );
        let checkpoints = live.checkpoints(*session).await?;
        let declared = histories[session]
            .iter()
            .filter(|e| matches!(e.event, SessionEvent::Checkpoint { .. }))
            .count();
        assert_eq!(checkpoints.len(), declared, "session {session}");
        for row in &checkpoints {
            assert!(
                row.verified,
                "session {session}: checkpoint at seq {} does not verify",
                row.seq
            );
        }
    }
    assert_eq!(
        expected[&new.session_id()].tenant,
        "acme",
        "the v2 session keeps its tenant"
    );
    assert_eq!(
        expected[&mixed.session()].tenant,
        sessionlog_schemas::DEFAULT_TENANT,
        "a session started under v1 reads as the default tenant"
    );

    // Recovery rebuilds each session, from a checkpoint where there is one, to the same fold.
    let recovery = Recovery::connect(&stack.settings).await?;
    for (session, state) in &expected {
        let rebuilt = recovery.rebuild(*session).await?;
        assert_eq!(
            rebuilt.state.canonical_json(),
            state.canonical_json(),
            "session {session}: rebuilt state differs from the fold of its events (from {:?})",
            rebuilt.start
        );
    }

    // The v1 checkpoints' stored states are where rebuilds start: the old session's latest,
    // and the mixed session's v1 one, from which the rebuild folds its v1 and v2 records.
    let old_rebuilt = recovery.rebuild(old.session()).await?;
    assert!(
        matches!(old_rebuilt.start, StartPoint::Checkpoint { seq, .. } if seq == old_checkpoint_seq),
        "the old session's rebuild started at {:?}, not its v1 checkpoint",
        old_rebuilt.start
    );
    let from_v1 = recovery
        .rebuild_with(mixed.session(), Some(mixed_v1_checkpoint_seq), |_, _| {})
        .await?;
    assert!(
        matches!(from_v1.start, StartPoint::Checkpoint { seq, .. } if seq == mixed_v1_checkpoint_seq),
        "{:?}",
        from_v1.start
    );
    assert_eq!(
        from_v1.state.canonical_json(),
        expected[&mixed.session()].canonical_json(),
        "the mixed session rebuilt from its v1 checkpoint differs from the fold of its events"
    );

    // `sessionlog replay` into a fresh keyspace: the same tables as the live projector's.
    drop(projector);
    let live_ks = live.keyspace().to_string();
    let fresh = format!("{live_ks}_replayed");
    let replay = stack
        .command(&[])?
        .args(["replay", "--keyspace", &fresh])
        .output()
        .context("running sessionlog replay")?;
    assert!(
        replay.status.success(),
        "sessionlog replay failed: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_same_tables(&live, &live_ks, &fresh).await?;
    let replayed = ProjectionStore::open(&{
        let mut cql = stack.settings.cql.clone();
        cql.keyspace = fresh.clone();
        cql
    })
    .await?;
    let sessions: BTreeSet<SessionId> = expected.keys().copied().collect();
    for session in sessions {
        let row = replayed
            .load_session(session)
            .await?
            .with_context(|| format!("session {session} is not in the replayed keyspace"))?;
        assert_eq!(
            row.state.canonical_json(),
            expected[&session].canonical_json()
        );
    }
    Ok(())
}

/// A start v1 can carry: a plain title, the default tenant.
fn v1_start(agent: &str, title: Option<&str>) -> SessionEvent {
    SessionEvent::SessionStarted {
        agent: agent.into(),
        title: title.map(Content::from),
        tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
        writer_token_sha256: None,
        name_sha256: None,
    }
}
