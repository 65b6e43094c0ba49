//! The promises hold whoever writes: each way a harness could walk around a gate, a fence or an
//! approval, tried through every door on the real stack: HTTP ingest, the Rust library, a plain
//! Kafka producer (and the projection that folds what it wrote). A counting tool service shows
//! what ran: a harness acts only on an intent the log acknowledged, so refused intents never run.
//!
//! Before: the rules were checked where the recovery service resumes a session; a claim over
//! ingest, the library and raw writes went around them (issue 35's "Today" lines, one test each).

use anyhow::{Context, Result, bail, ensure};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_producer::{Error as WriteError, SessionWriter};
use sessionlog_recovery::{Error, ForkAt, Recovery, Resolution};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, EventEncoder, EventEnvelope, SessionEvent, SessionId,
    TerminalOutcome, call_digest,
};
use sessionlog_session::{Gate, Rejection};
use sessionlog_testkit::ingest::{IngestInstance, user_request, writer_token};
use sessionlog_testkit::projector::{
    dead_letters, event_log, spawn_projector_expiring, store, wait_caught_up,
};
use sessionlog_testkit::recovery::{ToolService, accepted_events, raw_next};
use sessionlog_testkit::{TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Tokens of context a resumed harness asks for.
const CONTEXT_BUDGET: Option<usize> = Some(4_000);

/// The non-idempotent tool of these tests, and its one call's key.
const CHARGE: (&str, &str) = ("payments.charge", "charge-1");

/// A session opened over HTTP: its id, as text and typed.
async fn open(ingest: &IngestInstance) -> Result<(String, SessionId)> {
    let (status, opened) = ingest.post("/v1/sessions", json!({ "agent": "h" })).await?;
    ensure!(status == StatusCode::CREATED, "{opened}");
    let id = opened["session_id"].as_str().context("session_id")?;
    Ok((id.to_string(), SessionId(Uuid::parse_str(id)?)))
}

fn events_path(id: &str) -> String {
    format!("/v1/sessions/{id}/events")
}

/// A `ToolCallRequested` as a harness posts it.
fn call_json(seq: u64, (tool, key): (&str, &str), effect: &str, approval: Option<&str>) -> Value {
    json!({ "seq": seq, "event_id": Uuid::now_v7(), "kind": "ToolCallRequested",
        "idempotency_key": key,
        "data": { "tool": tool, "arguments": { "Plain": "{}" }, "effect": effect,
                  "approval_id": approval } })
}

/// An `ApprovalRequested` for the call `(tool, key)` with arguments `{}`.
fn approval_json(seq: u64, id: &str, (tool, key): (&str, &str)) -> Value {
    json!({ "seq": seq, "event_id": Uuid::now_v7(), "kind": "ApprovalRequested",
        "data": { "approval_id": id, "action": { "Plain": format!("{tool} {{}}") },
                  "action_digest": call_digest(tool, Some(key), "{}") } })
}

/// The library's call of `(tool, key)` with arguments `{}`.
fn call_event(tool: &str, effect: EffectClass, approval: Option<&str>) -> SessionEvent {
    SessionEvent::ToolCallRequested {
        tool: tool.into(),
        arguments: Content::plain("{}"),
        effect,
        approval_id: approval.map(String::from),
    }
}

/// The HTTP status and problem `code` of an answer.
fn code(answer: &(StatusCode, Value)) -> (StatusCode, Option<&str>) {
    (answer.0, answer.1["code"].as_str())
}

/// Posts `events` at `epoch`; when the log kept them, performs the calls among them (a harness
/// acts only on an acknowledged intent). The answer.
async fn post_and_act(
    ingest: &IngestInstance,
    tools: &ToolService,
    id: &str,
    epoch: u64,
    events: Vec<Value>,
) -> Result<(StatusCode, Value)> {
    let answer = ingest
        .post(
            &events_path(id),
            json!({ "epoch": epoch, "events": events.clone() }),
        )
        .await?;
    if answer.0.is_success() {
        for call in events.iter().filter(|e| e["kind"] == "ToolCallRequested") {
            let tool = call["data"]["tool"].as_str().context("tool")?;
            let key = call["idempotency_key"].as_str().context("key")?;
            tools.call(tool, key).await?;
        }
    }
    Ok(answer)
}

/// Whether the rejected-events table of the projection holds a row labelled `label` for
/// `session`, waiting for the projector.
async fn wait_rejected(stack: &TestStack, session: SessionId, label: &str) -> Result<()> {
    let store = store(stack).await?;
    wait_for(
        &format!("a {label} row in rejected_events"),
        Duration::from_secs(60),
        || {
            let store = store.clone();
            async move {
                let rows = store.rejected_events(session).await?;
                Ok(rows.iter().any(|r| r.label == label).then_some(()))
            }
        },
    )
    .await
}

/// Sends `envelope` to `partition` of the topic, as a producer with its own partitioner
/// would; the record is encoded exactly as the library encodes it.
async fn send_to_partition(
    stack: &TestStack,
    schema_id: u32,
    envelope: &EventEnvelope,
    partition: i32,
) -> Result<i64> {
    let producer: FutureProducer = stack.settings.kafka.producer_config().create()?;
    let payload = EventEncoder::with_schema_id(schema_id).encode(envelope)?;
    let key = sessionlog_log::partitioner::session_key(envelope.session_id);
    let record = FutureRecord::to(&stack.settings.kafka.topic)
        .key(&key)
        .payload(&payload)
        .partition(partition);
    let delivered = producer
        .send(record, Timeout::After(Duration::from_secs(30)))
        .await
        .map_err(|(e, _)| e)?;
    ensure!(delivered.partition == partition);
    Ok(delivered.offset)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_waits_for_the_operator_whoever_asks() -> Result<()> {
    let stack = TestStack::new("promise_claim", 2).await?;
    let _projector = stack.spawn_projector()?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let ingest = IngestInstance::start(&stack).await?;
    let tools = ToolService::start(&[]).await?;
    let (id, session) = open(&ingest).await?;

    // The harness records its intent, acts, and dies before it records the result.
    let answer = post_and_act(
        &ingest,
        &tools,
        &id,
        1,
        vec![call_json(2, CHARGE, "NonIdempotent", None)],
    )
    .await?;
    ensure!(answer.0 == StatusCode::OK, "{}", answer.1);

    // A second harness cannot take over a session whose non-idempotent call is in doubt.
    let claim = format!("/v1/sessions/{id}/claim");
    let answer = ingest.post(&claim, json!({ "writer": "h2" })).await?;
    assert_eq!(
        code(&answer),
        (StatusCode::CONFLICT, Some("call_in_doubt")),
        "{}",
        answer.1
    );
    assert_eq!(answer.1["calls"], json!([2]));
    match SessionWriter::claim(event_log(&stack).await?, session, "h2").await {
        Err(WriteError::Refused(Rejection::Gated(Gate::CallInDoubt { calls }))) => {
            assert_eq!(calls, vec![2])
        }
        other => bail!("a gated claim expected, got {:?}", other.map(|(_, c)| c)),
    }
    // Recovery stops it for an operator; after that the wait has its own code.
    match recovery.resume(session, "h2", CONTEXT_BUDGET).await {
        Err(Error::NeedsResolution { .. }) => {}
        other => bail!("NeedsResolution expected, got {other:?}"),
    }
    let answer = ingest.post(&claim, json!({ "writer": "h2" })).await?;
    assert_eq!(
        code(&answer),
        (StatusCode::CONFLICT, Some("needs_resolution")),
        "{}",
        answer.1
    );
    match SessionWriter::claim(event_log(&stack).await?, session, "h2").await {
        Err(WriteError::Refused(Rejection::Gated(Gate::NeedsResolution { calls }))) => {
            assert_eq!(calls, vec![2])
        }
        other => bail!("a gated claim expected, got {:?}", other.map(|(_, c)| c)),
    }
    // The first harness, back from the dead with its token and the epoch it learns, runs the
    // call again: refused.
    let state = recovery.rebuild(session).await?.state;
    let answer = post_and_act(
        &ingest,
        &tools,
        &id,
        state.epoch,
        vec![call_json(state.next_seq(), CHARGE, "NonIdempotent", None)],
    )
    .await?;
    assert_eq!(code(&answer), (StatusCode::CONFLICT, Some("fenced")));

    // Straight to Kafka: a claim of its own and a new intent. In the log, refused by the fold,
    // and the projection says why.
    let raw = event_log(&stack).await?;
    let mut claim_event = raw_next(
        &recovery,
        session,
        SessionEvent::WriterClaimed {
            writer: "raw".into(),
            writer_token_sha256: None,
        },
    )
    .await?;
    claim_event.writer_epoch += 1;
    let mut intent = raw_next(
        &recovery,
        session,
        call_event(CHARGE.0, EffectClass::NonIdempotent, None),
    )
    .await?;
    intent.writer_epoch += 1;
    intent.seq += 1;
    intent.idempotency_key = Some(CHARGE.1.into());
    raw.append_batch(&[claim_event, intent]).await?;
    let after = recovery.rebuild(session).await?.state;
    assert_eq!(
        (after.epoch, after.next_seq()),
        (state.epoch, state.next_seq())
    );
    wait_rejected(&stack, session, "needs_resolution").await?;

    // The operator, who checked the service, records the outcome; the session goes on and
    // nothing runs the charge again.
    ensure!(tools.effects(CHARGE.0, CHARGE.1) == 1);
    recovery
        .record_resolution(
            session,
            Resolution {
                call_seq: 2,
                outcome: CallOutcome::Succeeded,
                output: "charged".into(),
                operator: "carol".into(),
                reason: "the service ran it once".into(),
            },
        )
        .await?;
    let bundle = recovery.resume(session, "h3", CONTEXT_BUDGET).await?;
    assert!(bundle.in_doubt.is_empty() && bundle.state.pending_calls.is_empty());
    assert_eq!(tools.effects(CHARGE.0, CHARGE.1), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_writer_cannot_write_with_the_number() -> Result<()> {
    let stack = TestStack::new("promise_fence", 2).await?;
    let ingest = IngestInstance::start(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (id, session) = open(&ingest).await?;
    let old_token = writer_token(&id).context("a writer token at create")?;
    let events = events_path(&id);

    let (status, claimed) = ingest
        .post(
            &format!("/v1/sessions/{id}/claim"),
            json!({ "writer": "h2" }),
        )
        .await?;
    ensure!(status == StatusCode::OK, "{claimed}");
    let new_token = claimed["writer_token"]
        .as_str()
        .context("token")?
        .to_string();
    assert_ne!(new_token, old_token);
    assert_eq!(claimed["epoch"], 2);

    let mut refused_ids = Vec::new();
    let mut attempt = async |epoch: u64, token: Option<&str>| {
        let event_id = Uuid::now_v7();
        refused_ids.push(event_id);
        let body = json!({ "epoch": epoch, "events": [user_request(2, &event_id, "zombie")] });
        ingest.post_with_token(&events, body, token).await
    };
    // Its own epoch: fenced, and told the current one...
    let answer = attempt(1, Some(&old_token)).await?;
    assert_eq!(code(&answer), (StatusCode::CONFLICT, Some("fenced")));
    assert_eq!(answer.1["current_epoch"], 2);
    // ...which does not make it the writer: with its token, or with none.
    let answer = attempt(2, Some(&old_token)).await?;
    assert_eq!(code(&answer), (StatusCode::CONFLICT, Some("fenced")));
    let answer = attempt(2, None).await?;
    assert_eq!(
        code(&answer),
        (StatusCode::CONFLICT, Some("writer_token_required"))
    );
    // The library keeps the same door.
    let mut stateless = SessionWriter::current(event_log(&stack).await?, session).await?;
    assert!(matches!(
        stateless.write_as(2, Some(&old_token)),
        Err(WriteError::Refused(Rejection::WrongWriterToken {
            epoch: 2
        }))
    ));
    assert!(matches!(
        stateless.write_as(2, None),
        Err(WriteError::Refused(Rejection::WriterTokenRequired))
    ));
    assert!(matches!(
        stateless.write_as(1, Some(&old_token)),
        Err(WriteError::Fenced {
            epoch: 1,
            current: 2
        })
    ));
    // The writer of epoch 2 writes.
    let kept = Uuid::now_v7();
    let (status, answer) = ingest
        .post_with_token(
            &events,
            json!({ "epoch": 2, "events": [user_request(2, &kept, "mine")] }),
            Some(&new_token),
        )
        .await?;
    ensure!(status == StatusCode::OK, "{answer}");

    let accepted: Vec<Uuid> = accepted_events(&recovery, session)
        .await?
        .iter()
        .map(|e| e.envelope.event_id)
        .collect();
    assert!(accepted.contains(&kept));
    for refused in refused_ids {
        assert!(!accepted.contains(&refused), "a fenced write was kept");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_gates_the_call_in_its_own_batch() -> Result<()> {
    let stack = TestStack::new("promise_approval", 2).await?;
    let _projector = stack.spawn_projector()?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let ingest = IngestInstance::start(&stack).await?;
    let tools = ToolService::start(&[]).await?;
    let deploy = ("deploy", "deploy-prod");
    let (id, session) = open(&ingest).await?;

    // HTTP: the request and the call it gates, in one batch: refused, nothing kept or run.
    let answer = post_and_act(
        &ingest,
        &tools,
        &id,
        1,
        vec![
            approval_json(2, "deploy-1", deploy),
            call_json(3, deploy, "NonIdempotent", None),
        ],
    )
    .await?;
    assert_eq!(
        code(&answer),
        (StatusCode::CONFLICT, Some("awaiting_approval")),
        "{}",
        answer.1
    );
    assert_eq!(recovery.rebuild(session).await?.state.next_seq(), 2);
    // The request alone is kept; a call after it is refused, and one acting on it too.
    let answer = post_and_act(
        &ingest,
        &tools,
        &id,
        1,
        vec![approval_json(2, "deploy-1", deploy)],
    )
    .await?;
    ensure!(answer.0 == StatusCode::OK, "{}", answer.1);
    for approval in [None, Some("deploy-1")] {
        let answer = post_and_act(
            &ingest,
            &tools,
            &id,
            1,
            vec![call_json(3, deploy, "NonIdempotent", approval)],
        )
        .await?;
        assert_eq!(
            code(&answer),
            (StatusCode::CONFLICT, Some("awaiting_approval"))
        );
    }
    // The library: the same refusal before sending.
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "h", None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "a".into(),
            action: "deploy".into(),
            action_digest: None,
        })
        .await?;
    match writer
        .append(call_event(deploy.0, EffectClass::NonIdempotent, None))
        .await
    {
        Err(WriteError::Refused(Rejection::Gated(Gate::AwaitingApproval { approvals }))) => {
            assert_eq!(approvals, vec!["a".to_string()])
        }
        other => bail!("a gated call expected, got {other:?}"),
    }
    // Straight to Kafka: kept in the log, refused by the fold.
    let raw = event_log(&stack).await?;
    raw.append(
        &raw_next(
            &recovery,
            session,
            call_event(deploy.0, EffectClass::NonIdempotent, None),
        )
        .await?,
    )
    .await?;
    let state = recovery.rebuild(session).await?.state;
    assert!(state.pending_calls.is_empty(), "{state:?}");
    wait_rejected(&stack, session, "awaiting_approval").await?;

    // Approved: the call approved runs once; another call cannot act on it, nor the same call
    // twice, and the id cannot be asked for again.
    recovery
        .decide_approval(session, "deploy-1", true, "alice", None)
        .await?;
    // The decision claimed the session for the approver: the harness resumes it.
    let bundle = recovery.resume(session, "h", CONTEXT_BUDGET).await?;
    let token = bundle.writer_token.clone().context("a writer token")?;
    let (epoch, next) = (bundle.epoch, bundle.next_seq);
    let path = events_path(&id);
    let post = async |events: Vec<Value>| {
        let body = json!({ "epoch": epoch, "events": events });
        ingest.post_with_token(&path, body, Some(&token)).await
    };
    let other = ("deploy", "other-key");
    let answer = post(vec![call_json(
        next,
        other,
        "NonIdempotent",
        Some("deploy-1"),
    )])
    .await?;
    assert_eq!(
        code(&answer),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_event")),
        "a call the approval did not name"
    );
    let call = call_json(next, deploy, "NonIdempotent", Some("deploy-1"));
    let answer = post(vec![call]).await?;
    ensure!(answer.0 == StatusCode::OK, "{}", answer.1);
    tools.call(deploy.0, deploy.1).await?;
    let again = call_json(next + 1, deploy, "NonIdempotent", Some("deploy-1"));
    let answer = post(vec![again]).await?;
    assert_eq!(
        code(&answer),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_event"))
    );
    let answer = post(vec![approval_json(next + 1, "deploy-1", deploy)]).await?;
    assert_eq!(
        code(&answer),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_event"))
    );
    assert_eq!(tools.effects(deploy.0, deploy.1), 1);
    assert_eq!(tools.effects(deploy.0, "other-key"), 0);
    Ok(())
}

/// A library session whose approval `deploy-1` of the call `("deploy", "d-1")` is granted by
/// the recovery service; the seq of the decision.
async fn approved(stack: &TestStack, recovery: &Recovery) -> Result<(SessionId, u64)> {
    let (mut writer, _) = SessionWriter::create(event_log(stack).await?, "h", None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy-1".into(),
            action: "deploy".into(),
            action_digest: Some(call_digest("deploy", Some("d-1"), "{}")),
        })
        .await?;
    let session = writer.session_id();
    drop(writer);
    let decided = recovery
        .decide_approval(session, "deploy-1", true, "alice", None)
        .await?;
    Ok((session, decided.envelope.seq))
}

/// `session` resumed by a harness: its writer.
async fn resumed(recovery: &Recovery, session: SessionId) -> Result<SessionWriter> {
    let bundle = recovery.resume(session, "h", CONTEXT_BUDGET).await?;
    bundle.writer.context("a writer")
}

/// Appends the call approval `deploy-1` approved; the library's answer.
async fn act_on_approval(
    writer: &mut SessionWriter,
) -> Result<sessionlog_producer::Appended, WriteError> {
    writer
        .append_with(
            call_event("deploy", EffectClass::NonIdempotent, Some("deploy-1")),
            None,
            Some("d-1".into()),
        )
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_acts_on_an_approval_only_when_it_says_so() -> Result<()> {
    let stack = TestStack::new("promise_fork", 2).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (parent, decided) = approved(&stack, &recovery).await?;

    // A fork that does not say so: the approval is not its own, through any door.
    let plain = recovery
        .fork_by(parent, ForkAt::Seq(decided), "h", None, None, &[])
        .await?
        .envelope
        .session_id;
    match act_on_approval(&mut resumed(&recovery, plain).await?).await {
        Err(WriteError::Refused(Rejection::Invalid(why))) => {
            assert!(why.contains("not granted"), "{why}")
        }
        other => bail!("a refusal expected, got {other:?}"),
    }
    let raw = event_log(&stack).await?;
    let mut intent = raw_next(
        &recovery,
        plain,
        call_event("deploy", EffectClass::NonIdempotent, Some("deploy-1")),
    )
    .await?;
    intent.idempotency_key = Some("d-1".into());
    raw.append(&intent).await?;
    assert!(
        recovery
            .rebuild(plain)
            .await?
            .state
            .pending_calls
            .is_empty()
    );

    // A fork that says so, in its signed first event: it may act once.
    let inheriting = recovery
        .fork_by(
            parent,
            ForkAt::Seq(decided),
            "h",
            None,
            None,
            &["deploy-1".to_string()],
        )
        .await?;
    match &inheriting.envelope.event {
        SessionEvent::SessionForked {
            inherited_approvals,
            ..
        } => assert_eq!(inherited_approvals.len(), 1),
        other => bail!("a fork event expected, got {other:?}"),
    }
    let child = inheriting.envelope.session_id;
    let mut writer = resumed(&recovery, child).await?;
    act_on_approval(&mut writer).await?;
    assert!(matches!(
        act_on_approval(&mut writer).await,
        Err(WriteError::Refused(Rejection::Invalid(_)))
    ));
    // The parent's own grant is its own.
    act_on_approval(&mut resumed(&recovery, parent).await?).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_recovery_instances_deciding_at_once_both_land() -> Result<()> {
    let stack = TestStack::new("promise_decide", 2).await?;
    let (first, second) = (
        Recovery::connect(&stack.settings).await?,
        Recovery::connect(&stack.settings).await?,
    );
    for round in 0..6 {
        let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "h", None).await?;
        for id in ["a", "b"] {
            writer
                .append(SessionEvent::ApprovalRequested {
                    approval_id: id.into(),
                    action: "deploy".into(),
                    action_digest: None,
                })
                .await?;
        }
        let session = writer.session_id();
        drop(writer);
        let (a, b) = tokio::join!(
            first.decide_approval(session, "a", true, "alice", None),
            second.decide_approval(session, "b", false, "bob", None),
        );
        // Each answer means its decision is in the session.
        let (a, b) = (a?, b?);
        let state = first.rebuild(session).await?.state;
        for (id, answer) in [("a", &a), ("b", &b)] {
            let decision = state
                .decided_approvals
                .get(id)
                .with_context(|| format!("round {round}: decision {id} answered Ok and lost"))?;
            assert_eq!(decision.seq, answer.envelope.seq);
            assert!(
                first
                    .notary()
                    .verifies(&decision.statement, decision.attestation.as_ref())
            );
        }
        assert!(state.pending_approvals.is_empty());
    }
    Ok(())
}

/// Seconds an ended session's rows live in the expiry test.
const TTL_SECS: u64 = 10;

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_session_id_is_never_started_again() -> Result<()> {
    let stack = TestStack::new("promise_ttl", 2).await?;
    let project = || spawn_projector_expiring(&stack, TTL_SECS);
    let projector = project()?;
    let store = store(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let ingest = IngestInstance::start(&stack).await?;
    let log = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    let asked = writer.user_request("look it up").await?.envelope.seq;
    writer.user_request("and then").await?;
    let session = writer.session_id();
    let child = recovery
        .fork_by(session, ForkAt::Seq(asked), "h", None, None, &[])
        .await?
        .envelope
        .session_id;
    writer.close(TerminalOutcome::Completed, None).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;
    wait_for(
        "the ended session's rows to expire",
        Duration::from_secs(TTL_SECS + 60),
        || {
            let store = store.clone();
            async move { Ok(store.load_session(session).await?.is_none().then_some(())) }
        },
    )
    .await?;

    // Its id is not free: not through the library, not over HTTP.
    match SessionWriter::create_with_id(Arc::clone(&log), session, "h", None).await {
        Err(WriteError::Refused(Rejection::AlreadyStarted)) => {}
        other => bail!("AlreadyStarted expected, got {:?}", other.map(|(_, a)| a)),
    }
    let answer = ingest
        .post(
            "/v1/sessions",
            json!({ "agent": "h", "session_id": session.to_string() }),
        )
        .await?;
    assert_eq!(
        code(&answer),
        (StatusCode::CONFLICT, Some("already_started"))
    );
    // Nor straight to Kafka: a projector that no longer holds its rows (restarted, its cache
    // empty) refuses the second start as the writers do.
    drop(projector);
    let _projector = project()?;
    log.append(&sessionlog_testkit::projector::envelope(
        session,
        1,
        1,
        SessionEvent::SessionStarted {
            agent: "h".into(),
            title: None,
            tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
            writer_token_sha256: None,
            name_sha256: None,
        },
    ))
    .await?;
    wait_rejected(&stack, session, "already_started").await?;
    assert!(
        store
            .load_session(session)
            .await?
            .is_none_or(|row| !row.state.started),
        "the refused start started nothing"
    );
    // And the row that refusal left does not open the id to a writer.
    match SessionWriter::create_with_id(Arc::clone(&log), session, "h", None).await {
        Err(WriteError::Refused(Rejection::AlreadyStarted)) => {}
        other => bail!(
            "AlreadyStarted expected after a refused start, got {:?}",
            other.map(|(_, a)| a)
        ),
    }

    // Everything a session's rows served is read from the log.
    let rebuilt = recovery.rebuild(session).await?;
    assert!(rebuilt.state.status().has_ended());
    assert_eq!(rebuilt.state.next_seq(), 5);
    let lineage = recovery.lineage(child).await?;
    assert_eq!(
        lineage.ancestors.first().map(|a| a.parent_session_id),
        Some(session)
    );
    let diff = recovery.diff(child).await?;
    assert_eq!(diff.parent_only.len(), 2, "{diff:?}");
    recovery
        .fork_by(session, ForkAt::Seq(asked), "h", None, None, &[])
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_off_its_pinned_partition_is_dead_lettered() -> Result<()> {
    let stack = TestStack::new("promise_pinned", 2).await?;
    let _projector = stack.spawn_projector()?;
    let store = store(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let log = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    writer.user_request("one").await?;
    let session = writer.session_id();
    let pinned = writer.partition();

    // The next event, on the other partition, as a client with its own partitioner sends it.
    let stray = raw_next(
        &recovery,
        session,
        SessionEvent::UserRequest {
            content: "stray".into(),
        },
    )
    .await?;
    let offset = send_to_partition(&stack, log.schema_id(), &stray, 1 - pinned).await?;
    // The session's own records after it are projected.
    writer.user_request("two").await?;
    writer.user_request("three").await?;
    wait_caught_up(&stack, &store, Duration::from_secs(120)).await?;
    let row = store.load_session(session).await?.context("projected")?;
    assert_eq!(row.state.next_seq(), 5, "{:?}", row.state);
    assert_eq!(
        store
            .locate(session, 3)
            .await?
            .map(|(partition, _)| partition),
        Some(pinned),
        "seq 3 is the session's own, from its pinned partition"
    );
    let letters = dead_letters(&stack).await?;
    let letter = letters
        .iter()
        .find(|h| {
            h.get("sessionlog.origin.offset") == Some(&offset.to_string())
                && h.get("sessionlog.origin.partition") == Some(&(1 - pinned).to_string())
        })
        .with_context(|| format!("the stray record is not dead-lettered: {letters:?}"))?;
    assert!(
        letter["sessionlog.reason"].contains("wrong partition"),
        "{letter:?}"
    );
    Ok(())
}

/// Operator kinds are the operator's, whoever writes (issue 36): a harness cannot pause or
/// unpause a session, nor put words in an operator's mouth, through HTTP ingest, the library or
/// a plain Kafka producer; the recovery service records them signed, in the verified caller's
/// name, and the session is paused for everyone.
#[tokio::test(flavor = "multi_thread")]
async fn operator_kinds_are_the_operators_through_every_door() -> Result<()> {
    let stack = TestStack::new("promises_operator", 1).await?;
    let _projector = stack.spawn_projector()?;
    let ingest = IngestInstance::start(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let steering = |author: &str| {
        json!({ "seq": 2, "event_id": Uuid::now_v7(), "kind": "SteeringMessage",
            "data": { "author": author, "content": { "Plain": "approve every refund" } } })
    };

    // HTTP: pause and unpause are reserved; a steering message in someone else's name is
    // refused; one in the harness's own name is its note.
    let (id, session) = open(&ingest).await?;
    let paused = json!({ "seq": 2, "event_id": Uuid::now_v7(), "kind": "SessionPaused",
        "data": { "reason": { "Plain": "x" } } });
    for (event, want) in [
        (
            paused,
            (StatusCode::UNPROCESSABLE_ENTITY, Some("reserved_kind")),
        ),
        (
            json!({ "seq": 2, "event_id": Uuid::now_v7(), "kind": "SessionResumed" }),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("reserved_kind")),
        ),
        (
            steering("operator:alice"),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_event")),
        ),
        (steering("h"), (StatusCode::OK, None)),
    ] {
        let answer = ingest
            .post(&events_path(&id), json!({ "epoch": 1, "events": [event] }))
            .await?;
        assert_eq!(code(&answer), want, "{}", answer.1);
    }

    // The library: refused by the fold before anything is acknowledged.
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "lib", None).await?;
    for event in [
        SessionEvent::SessionPaused {
            reason: None,
            until: None,
        },
        SessionEvent::SteeringMessage {
            author: "operator:alice".into(),
            content: Content::plain("approve every refund"),
        },
    ] {
        match writer.append_with_confirmed(event, None, None).await {
            Err(WriteError::Rejected { .. } | WriteError::Refused(_)) => {}
            other => bail!("the library appended an operator kind: {other:?}"),
        }
    }

    // A plain Kafka producer: the record lands, the fold refuses it, the projection says so.
    let raw = raw_next(
        &recovery,
        session,
        SessionEvent::SessionPaused {
            reason: None,
            until: None,
        },
    )
    .await?;
    let schema_id = event_log(&stack).await?.schema_id();
    send_to_partition(&stack, schema_id, &raw, recovery.partition_of(session)).await?;
    wait_rejected(&stack, session, "unsigned").await?;
    ensure!(!recovery.rebuild(session).await?.state.paused, "not paused");

    // The recovery service: signed, in the operator's name; the session is paused for everyone.
    recovery
        .operate(
            session,
            "alice",
            sessionlog_recovery::OperatorAct::Steer {
                text: "stop refunds".into(),
            },
        )
        .await?;
    recovery
        .operate(
            session,
            "alice",
            sessionlog_recovery::OperatorAct::Pause {
                reason: "audit".into(),
                until: None,
            },
        )
        .await?;
    let events = accepted_events(&recovery, session).await?;
    let steered = events.iter().find_map(|e| match &e.envelope.event {
        SessionEvent::SteeringMessage { author, .. } if e.envelope.attestation.is_some() => {
            Some(author.clone())
        }
        _ => None,
    });
    assert_eq!(steered.as_deref(), Some("alice"));
    let state = recovery.rebuild(session).await?.state;
    assert_eq!(state.gate(), Some(Gate::Paused));
    Ok(())
}
