//! Privacy: every sensitive field is sealed before it reaches Kafka, and erasing a session
//! destroys its data key, so its texts are gone from every byte of the topic, the dead letters
//! and every table, while other sessions still open theirs; a process holding the key stops
//! using it within `[privacy] key_cache_secs` of an erasure made elsewhere.

use anyhow::{Context, Result};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, TryStreamExt};
use rdkafka::message::Message;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_keys::{
    DataKeyStore, ErasureReceipt, HeldKey, Keyring, StoredKey, Text, WrappedKey,
};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{ForkAt, OperatorAct, Recovery};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, CallOutcome, Content, EffectClass, EventEnvelope, ResultSource,
    SessionEvent, SessionId, TerminalOutcome, frame, unframe,
};
use sessionlog_testkit::auth::client;
use sessionlog_testkit::projector::{dead_letters, event_log, send_raw, store, wait_caught_up};
use sessionlog_testkit::recovery::accepted_events;
use sessionlog_testkit::{ChildGuard, ServedProcess, TestStack, wait_for};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The header a harness presents its writer token in.
const WRITER_TOKEN: &str = sessionlog_ingest::WRITER_TOKEN_HEADER;

/// What every canary starts with: no byte sequence of the stack may hold it in plain text.
const CANARY: &str = "CANARY-";

fn canary(tag: &str, field: &str) -> String {
    format!("{CANARY}{tag}-{field}")
}

/// A session written through the library with every sensitive field set to a canary, its
/// approval decided through recovery (which seals the decision's reason too), ended with one.
async fn library_session(log: &Arc<EventLog>, recovery: &Recovery, tag: &str) -> Result<SessionId> {
    let c = |field: &str| Content::plain(canary(tag, field));
    let (mut writer, _) =
        SessionWriter::create(Arc::clone(log), "agent", Some(&canary(tag, "title"))).await?;
    let session = writer.session_id();
    writer
        .append(SessionEvent::UserRequest {
            content: c("request"),
        })
        .await?;
    writer
        .append(SessionEvent::ModelResponse {
            model: "model-x".into(),
            tokens_in: 10,
            tokens_out: 5,
            cost_micros: 7,
            started_at: 1,
            content: c("response"),
            cache_read_tokens: 3,
            cache_creation_tokens: 1,
            provider: Some("provider-y".into()),
        })
        .await?;
    let call = writer
        .append(SessionEvent::ToolCallRequested {
            tool: "grep".into(),
            arguments: c("arguments"),
            effect: EffectClass::Pure,
            approval_id: None,
        })
        .await?;
    writer
        .append(SessionEvent::ToolCallResult {
            call_seq: call.envelope.seq,
            outcome: CallOutcome::Succeeded,
            output: c("output"),
            source: ResultSource::Executed,
            recorded_by: None,
            note: Some(c("note")),
        })
        .await?;
    writer
        .append(SessionEvent::PlanUpdated { plan: c("plan") })
        .await?;
    writer.checkpoint(None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "a1".into(),
            action: c("action"),
            action_digest: None,
        })
        .await?;
    recovery
        .decide_approval(session, "a1", true, "bob", Some(canary(tag, "decision")))
        .await?;
    // An operator's hand: pause, unpause and steering, signed by the service in their name.
    for act in [
        OperatorAct::Pause {
            reason: canary(tag, "pause"),
            until: None,
        },
        OperatorAct::Unpause,
        OperatorAct::Steer {
            text: canary(tag, "steering"),
        },
    ] {
        recovery.operate(session, "alice", act).await?;
    }
    let (mut writer, _) = SessionWriter::claim(Arc::clone(log), session, "harness-2").await?;
    writer
        .close(TerminalOutcome::Completed, Some(canary(tag, "end")))
        .await?;
    Ok(session)
}

/// The same through the ingest service's HTTP API.
async fn http_session(ingest: &ServedProcess, tag: &str) -> Result<SessionId> {
    let http = client()?;
    let c = |field: &str| canary(tag, field);
    let created: Value = http
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({"agent": "python-harness", "title": c("title")}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let session: SessionId = created["session_id"].as_str().context("id")?.parse()?;
    let token = created["writer_token"].as_str().context("writer token")?;
    let events = json!({"epoch": 1, "events": [
        {"seq": 2, "kind": "UserRequest", "data": {"content": {"Plain": c("request")}}},
        {"seq": 3, "kind": "ModelResponse", "data": {"model": "m", "tokens_in": 1, "tokens_out": 1,
            "cost_micros": 1, "started_at": 1, "content": {"Plain": c("response")}}},
        {"seq": 4, "kind": "ToolCallRequested", "data": {"tool": "shell",
            "arguments": {"Plain": c("arguments")}, "effect": "Pure"}},
        {"seq": 5, "kind": "ToolCallResult", "data": {"call_seq": 4, "outcome": "Failed",
            "output": {"Plain": c("output")}, "source": "Executed", "recorded_by": null, "note": c("note")}},
        // A harness's own note, in its own writer's name (an operator's comes through recovery).
        {"seq": 6, "kind": "SteeringMessage", "data": {"author": "python-harness", "content": {"Plain": c("steering")}}},
        {"seq": 7, "kind": "PlanUpdated", "data": {"plan": {"Plain": c("plan")}}},
        {"seq": 8, "kind": "ApprovalRequested", "data": {"approval_id": "a1", "action": c("action")}},
    ]});
    http.post(format!("{}/v1/sessions/{session}/events", ingest.base))
        .header(WRITER_TOKEN, token)
        .json(&events)
        .send()
        .await?
        .error_for_status()?;
    http.post(format!("{}/v1/sessions/{session}/checkpoint", ingest.base))
        .header(WRITER_TOKEN, token)
        .json(&json!({"epoch": 1}))
        .send()
        .await?
        .error_for_status()?;
    http.post(format!("{}/v1/sessions/{session}/close", ingest.base))
        .header(WRITER_TOKEN, token)
        .json(&json!({"epoch": 1, "outcome": "Cancelled", "reason": c("end")}))
        .send()
        .await?
        .error_for_status()?;
    Ok(session)
}

/// Every record of `topic` as its bytes: key, value and header values.
async fn every_record(stack: &TestStack, topic: &str) -> Result<Vec<Vec<u8>>> {
    sessionlog_testkit::projector::every_record(stack, topic, |message| {
        let mut bytes = message.key().unwrap_or_default().to_vec();
        bytes.extend_from_slice(message.payload().unwrap_or_default());
        if let Some(headers) = message.headers() {
            use rdkafka::message::Headers;
            for h in headers.iter() {
                bytes.extend_from_slice(h.value.unwrap_or_default());
            }
        }
        bytes
    })
    .await
}

/// Checks that the topic and the dead letters (a re-framed record among them) have records and
/// that none holds `text` in plain bytes.
async fn assert_no_record_holds(stack: &TestStack, text: &str) -> Result<()> {
    assert!(
        !dead_letters(stack).await?.is_empty(),
        "the re-framed record is dead-lettered"
    );
    for topic in [
        &stack.settings.kafka.topic,
        &stack.settings.kafka.dead_letter_topic,
    ] {
        let records = every_record(stack, topic).await?;
        assert!(!records.is_empty(), "{topic} has records");
        let hits = records
            .iter()
            .filter(|r| r.windows(text.len()).any(|w| w == text.as_bytes()))
            .count();
        assert_eq!(
            hits, 0,
            "{hits} record(s) of {topic} hold {text} in plain text"
        );
    }
    Ok(())
}

/// Every value of every row of every table of every keyspace but the system ones, as text
/// (blobs as their bytes, lossily), and how many tables were read. Tests running beside this
/// one create and drop keyspaces meanwhile: a table listed in the schema that the node no
/// longer (or does not yet) serve is passed over, and the test's own keyspaces are checked to
/// have been read.
async fn every_row(cql: &scylla::client::session::Session) -> Result<(Vec<String>, Vec<String>)> {
    use scylla::value::{CqlValue, Row};
    fn flatten(value: &CqlValue, out: &mut String) {
        match value {
            CqlValue::Text(s) | CqlValue::Ascii(s) => out.push_str(s),
            CqlValue::Blob(b) => out.push_str(&String::from_utf8_lossy(b)),
            CqlValue::List(items) | CqlValue::Set(items) => {
                items.iter().for_each(|v| flatten(v, out))
            }
            CqlValue::Map(pairs) => pairs.iter().for_each(|(k, v)| {
                flatten(k, out);
                flatten(v, out);
            }),
            other => out.push_str(&format!("{other:?}")),
        }
        out.push('\u{1}');
    }
    let tables: Vec<(String, String)> = cql
        .query_unpaged(
            "SELECT keyspace_name, table_name FROM system_schema.tables",
            (),
        )
        .await?
        .into_rows_result()?
        .rows::<(String, String)>()?
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    let mut read = Vec::new();
    for (keyspace, table) in tables.into_iter().filter(|(k, _)| !k.starts_with("system")) {
        let scan = async {
            let mut stream = cql
                .query_iter(format!("SELECT * FROM {keyspace}.{table}"), ())
                .await?
                .rows_stream::<Row>()?;
            let mut found = Vec::new();
            while let Some(row) = stream.try_next().await? {
                let mut text = format!("{keyspace}.{table}: ");
                for value in row.columns.iter().flatten() {
                    flatten(value, &mut text);
                }
                found.push(text);
            }
            anyhow::Ok(found)
        };
        match scan.await {
            Ok(found) => {
                rows.extend(found);
                read.push(format!("{keyspace}.{table}"));
            }
            Err(e)
                if format!("{e:#}").contains("does not exist")
                    || format!("{e:#}").contains("unconfigured table") => {}
            Err(e) => return Err(e),
        }
    }
    Ok((rows, read))
}

/// Every sensitive text of `session`'s events, opened as recovery opens them, by event kind.
async fn opened_texts(recovery: &Recovery, session: SessionId) -> Result<Vec<(String, Text)>> {
    let opener = recovery.opener(session, false).await?;
    let mut texts = Vec::new();
    for event in accepted_events(recovery, session).await? {
        let mut sealed = event.envelope.clone();
        sessionlog_keys::sensitive_fields(&mut sealed.event, |field, content| {
            texts.push((
                format!("{} {field}", event.envelope.event.kind()),
                opener.text(content),
            ));
        });
    }
    Ok(texts)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_erased_sessions_canaries_are_nowhere_and_the_others_still_open() -> Result<()> {
    let stack = TestStack::new("privacy", 2).await?;
    let _projector = stack.spawn_projector()?;
    let ingest = ServedProcess::start(&stack, "ingest").await?;
    let recovery_service = ServedProcess::start(&stack, "serve-recovery").await?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    let erased_lib = library_session(&log, &recovery, "A").await?;
    let erased_http = http_session(&ingest, "B").await?;
    let kept = library_session(&log, &recovery, "C").await?;
    let kept_http = http_session(&ingest, "D").await?;

    // A harness may not bring its own ciphertext: only the service's seals open.
    let http = client()?;
    let created: Value = http
        .post(format!("{}/v1/sessions", ingest.base))
        .json(&json!({"agent": "a"}))
        .send()
        .await?
        .json()
        .await?;
    let refused = http
        .post(format!(
            "{}/v1/sessions/{}/events",
            ingest.base,
            created["session_id"].as_str().context("id")?
        ))
        .header(
            WRITER_TOKEN,
            created["writer_token"].as_str().context("writer token")?,
        )
        .json(
            &json!({"epoch": 1, "events": [{"seq": 2, "kind": "UserRequest", "data": {"content":
            {"Sealed": {"key_id": "dk1:2:content", "nonce": "AQ==", "ciphertext": "Ag=="}}}}]}),
        )
        .send()
        .await?;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused.json::<Value>().await?["code"], "sealed_content");

    // Erase one through the library, one through the HTTP endpoint.
    let receipt = recovery.erase(erased_lib, "dpo", "request 42").await?;
    assert_eq!(receipt.requested_by, "dpo");
    assert!(receipt.destroyed_kek_id.is_some(), "{receipt:?}");
    let answered: Value = http
        .post(format!(
            "{}/v1/sessions/{erased_http}/erase",
            recovery_service.base
        ))
        .json(&json!({"reason": "request 43"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(answered["reason"], "request 43");
    assert_eq!(answered["requested_by"], "test");
    // Erasing again answers the same receipt and appends nothing.
    let again = recovery.erase(erased_lib, "someone else", "again").await?;
    assert_eq!(again, receipt);

    // A sealed record the projector cannot decode: dead-lettered as it arrived.
    let (partition, offset) = {
        let events = accepted_events(&recovery, kept).await?;
        let request = events
            .iter()
            .find(|e| matches!(e.envelope.event, SessionEvent::UserRequest { .. }))
            .context("a request")?;
        (recovery.partition_of(kept), request.offset)
    };
    let reader =
        sessionlog_log::PartitionReader::new(&stack.settings.kafka, &stack.settings.kafka.topic)?;
    let mut payload = None;
    reader
        .read_range(partition, offset, offset + 1, &mut |r| payload = r.payload)
        .await?;
    let payload = payload.context("the record")?;
    let (_, body) = unframe(&payload)?;
    send_raw(&stack, &kept.to_string(), &frame(987_654_321, body)).await?;

    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(90)).await?;
    wait_for("both erasures projected", Duration::from_secs(60), || {
        let store = store.clone();
        async move {
            let a = store.session_status(erased_lib).await?;
            let b = store.session_status(erased_http).await?;
            Ok((a.as_deref() == Some("erased") && b.as_deref() == Some("erased")).then_some(()))
        }
    })
    .await?;
    // No byte of the topic, the dead letters or any table holds a canary in plain text: not the
    // erased sessions' (their keys are gone), and not the others' either (sealed at rest).
    assert_no_record_holds(&stack, CANARY).await?;
    let keys = sessionlog_store::KeyTable::open(&stack.settings).await?;
    let (rows, read) = every_row(keys.cql()).await?;
    for keyspace in [
        &stack.settings.cql.keyspace,
        &stack.settings.privacy.keyspace,
    ] {
        assert!(
            read.iter().any(|t| t.starts_with(&format!("{keyspace}."))),
            "{keyspace} was not read"
        );
    }
    assert!(
        rows.iter()
            .any(|r| r.starts_with(&format!("{}.", stack.settings.cql.keyspace)))
    );
    let hits: Vec<&String> = rows.iter().filter(|r| r.contains(CANARY)).collect();
    assert!(hits.is_empty(), "rows hold canaries: {hits:?}");

    // The erased sessions' texts read as erased; the others' open, every field of them.
    for session in [erased_lib, erased_http] {
        let texts = opened_texts(&recovery, session).await?;
        assert!(texts.len() >= 9, "{texts:?}");
        assert!(texts.iter().all(|(_, t)| *t == Text::Erased), "{texts:?}");
        let status = recovery.erasure_status(session).await?;
        assert!(
            status.erased_in_log && status.data_key == "destroyed",
            "{status:?}"
        );
        assert_eq!(status.projected_status.as_deref(), Some("erased"));
    }
    for (session, tag, fields) in [
        (
            kept,
            "C",
            &[
                "title",
                "request",
                "response",
                "arguments",
                "output",
                "note",
                "steering",
                "plan",
                "pause",
                "action",
                "decision",
                "end",
            ][..],
        ),
        (
            kept_http,
            "D",
            &[
                "title",
                "request",
                "response",
                "arguments",
                "output",
                "note",
                "steering",
                "plan",
                "action",
                "end",
            ][..],
        ),
    ] {
        let texts = opened_texts(&recovery, session).await?;
        let readable: Vec<&str> = texts.iter().filter_map(|(_, t)| t.readable()).collect();
        for field in fields {
            assert!(
                readable.contains(&canary(tag, field).as_str()),
                "{field} of {tag}: {texts:?}"
            );
        }
        assert_eq!(readable.len(), texts.len(), "every text opens: {texts:?}");
    }
    // And the service answers them opened.
    let view: Value = http
        .get(format!("{}/v1/sessions/{kept_http}", recovery_service.base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(view["rebuilt"]["state"]["title"], canary("D", "title"));
    let status: Value = http
        .get(format!(
            "{}/v1/sessions/{erased_http}/erasure",
            recovery_service.base
        ))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(status["data_key"], "destroyed");
    assert_eq!(status["receipt"]["reason"], "request 43");
    Ok(())
}

/// Each session has its own key: erasing a fork leaves its parent readable; erasing a parent
/// makes the prefix its forks inherit read as erased while their own events stay readable.
#[tokio::test(flavor = "multi_thread")]
async fn erasing_a_parent_or_a_fork_reaches_exactly_its_own_events() -> Result<()> {
    let stack = TestStack::new("privacy_forks", 1).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (mut parent, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let prefix = parent.user_request("parent before the fork").await?;
    let parent_id = parent.session_id();
    let at = ForkAt::Seq(prefix.envelope.seq);
    let kept_fork = recovery
        .fork(parent_id, at, "branch")
        .await?
        .envelope
        .session_id;
    let erased_fork = recovery
        .fork(parent_id, at, "branch")
        .await?
        .envelope
        .session_id;
    for child in [kept_fork, erased_fork] {
        let (mut writer, _) =
            SessionWriter::claim(Arc::clone(&log), child, "branch-harness").await?;
        writer.user_request(&format!("own text of {child}")).await?;
    }
    parent.user_request("parent after the fork").await?;

    let readable = |texts: Vec<(String, Text)>| -> Vec<String> {
        texts
            .into_iter()
            .filter_map(|(_, t)| t.readable().map(String::from))
            .collect()
    };
    recovery.erase(erased_fork, "dpo", "fork only").await?;
    assert_eq!(
        readable(opened_texts(&recovery, parent_id).await?),
        ["parent before the fork", "parent after the fork"],
        "erasing a fork leaves its parent"
    );
    assert_eq!(
        readable(opened_texts(&recovery, erased_fork).await?),
        Vec::<String>::new()
    );

    recovery.erase(parent_id, "dpo", "parent").await?;
    // The prefix the kept fork inherits is the parent's events: erased with the parent.
    assert!(
        opened_texts(&recovery, parent_id)
            .await?
            .iter()
            .all(|(_, t)| *t == Text::Erased)
    );
    assert_eq!(
        readable(opened_texts(&recovery, kept_fork).await?),
        [format!("own text of {kept_fork}")],
        "the fork's own events stay readable"
    );
    let diff = recovery.diff(kept_fork).await?;
    assert!(diff.child_only.iter().any(|e| matches!(&e.envelope.event,
        SessionEvent::UserRequest { content } if content.as_plain() == Some(&format!("own text of {kept_fork}")))));
    assert!(diff.parent_only.iter().all(|e| !matches!(&e.envelope.event,
        SessionEvent::UserRequest { content } if content.as_plain().is_some_and(|t| !t.is_empty()))));
    Ok(())
}

/// The key store as one process reaches it: the real key table, until the test cuts this
/// process off from it (every other process still reaches it).
struct CutOff {
    table: sessionlog_store::KeyTable,
    cut: AtomicBool,
}

impl CutOff {
    /// The error a cut-off store answers, as a store the driver cannot reach does.
    fn down<T: Send + 'static>(&self) -> Option<BoxFuture<'static, sessionlog_keys::Result<T>>> {
        self.cut.load(Ordering::SeqCst).then(|| {
            async {
                Err(sessionlog_keys::Error::Store(
                    "cut off from the key store".into(),
                ))
            }
            .boxed()
        })
    }
}

impl DataKeyStore for CutOff {
    fn create(
        &self,
        session: SessionId,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<StoredKey>> {
        self.down()
            .unwrap_or_else(|| self.table.create(session, key))
    }
    fn insert_fresh(
        &self,
        session: SessionId,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<()>> {
        self.down()
            .unwrap_or_else(|| self.table.insert_fresh(session, key))
    }
    fn get(&self, session: SessionId) -> BoxFuture<'_, sessionlog_keys::Result<Option<StoredKey>>> {
        self.down().unwrap_or_else(|| self.table.get(session))
    }
    fn destroy(&self, receipt: ErasureReceipt) -> BoxFuture<'_, sessionlog_keys::Result<()>> {
        self.down().unwrap_or_else(|| self.table.destroy(receipt))
    }
    fn receipt(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, sessionlog_keys::Result<Option<ErasureReceipt>>> {
        self.down().unwrap_or_else(|| self.table.receipt(session))
    }
    fn live_keys(&self) -> BoxStream<'_, sessionlog_keys::Result<(SessionId, WrappedKey)>> {
        self.table.live_keys()
    }
    fn rewrap(
        &self,
        session: SessionId,
        old: WrappedKey,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<bool>> {
        self.down()
            .unwrap_or_else(|| self.table.rewrap(session, old, key))
    }
}

/// A request of `session` at `seq` holding `text`, plain, as a writer hands it to be sealed.
fn request(session: SessionId, seq: u64, text: &str) -> EventEnvelope {
    EventEnvelope {
        event_id: uuid::Uuid::now_v7(),
        session_id: session,
        seq,
        writer_epoch: 1,
        occurred_at: sessionlog_schemas::now_micros(),
        causation_id: None,
        idempotency_key: None,
        schema_version: CURRENT_SCHEMA_VERSION,
        event: SessionEvent::UserRequest {
            content: Content::plain(text),
        },
        attestation: None,
    }
}

/// Erases `session` with `sessionlog erase`: another process, with a key cache of its own.
fn erase_elsewhere(stack: &TestStack, session: SessionId) -> Result<()> {
    let output = stack.sessionlog(&["erase", &session.to_string(), "--reason", "key ttl"])?;
    anyhow::ensure!(
        output.status.success(),
        "erase: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The promise of `[privacy] key_cache_secs`: a process that holds a session's data key (an
/// ingest instance's key cache and a writer's hold, the recovery service's cache) stops opening
/// and sealing with it within that time of an erasure made elsewhere, also when it cannot
/// reach the key store to learn of the erasure.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_held_stops_opening_and_sealing_within_key_cache_secs_of_an_erasure_elsewhere()
-> Result<()> {
    let mut stack = TestStack::new("privacy_key_ttl", 1).await?;
    stack.settings.privacy.key_cache_secs = 2;
    let ttl = Duration::from_secs(2);
    let is_erased = |result: &Result<(), sessionlog_producer::Error>| {
        matches!(
            result,
            Err(sessionlog_producer::Error::Keys(
                sessionlog_keys::Error::Erased(_)
            ))
        )
    };

    // What an ingest instance holds (its log's key cache, a writer's hold) and what the
    // recovery service holds (its key cache), each having opened or sealed the session's text.
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = writer.session_id();
    let written = writer.user_request(&canary("ttl", "request")).await?;
    let opened = recovery
        .opener(session, false)
        .await?
        .open_event(&written.envelope);
    assert!(opened.1.is_empty(), "{:?}", opened.1);
    // Locked by each probe below, which borrows it across its awaits.
    let held = tokio::sync::Mutex::new(HeldKey::default());
    log.seal_held(&mut *held.lock().await, &mut [request(session, 3, "held")])
        .await?;

    erase_elsewhere(&stack, session)?;
    // Within the TTL (and a margin for the probe's own round trips) every one of them refuses.
    wait_for(
        "ingest and recovery to stop using the key",
        ttl + Duration::from_secs(2),
        || {
            let (log, recovery, written, held) = (&log, &recovery, &written, &held);
            async move {
                let opened = recovery
                    .opener(session, false)
                    .await?
                    .open_event(&written.envelope)
                    .1;
                let by_hold = log
                    .seal_held(&mut *held.lock().await, &mut [request(session, 3, "x")])
                    .await;
                let by_cache = log.seal(&mut [request(session, 3, "x")]).await;
                Ok((opened == [("content", Text::Erased)]
                    && is_erased(&by_hold)
                    && is_erased(&by_cache))
                .then_some(()))
            }
        },
    )
    .await?;

    // A process cut off from the key store cannot learn of the erasure: it stops using the
    // key all the same once the store's last answer about it is older than the TTL.
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let other = writer.session_id();
    let written = writer.user_request(&canary("ttl", "cut")).await?;
    let store = Arc::new(CutOff {
        table: sessionlog_store::KeyTable::open(&stack.settings).await?,
        cut: AtomicBool::new(false),
    });
    let keyring = Keyring::from_settings(
        &stack.settings.privacy,
        Arc::clone(&store) as Arc<dyn DataKeyStore>,
    )?
    .context("encryption is on")?;
    let held = tokio::sync::Mutex::new(HeldKey::default());
    keyring
        .seal_held(&mut *held.lock().await, &mut [request(other, 3, "held")])
        .await?;
    let opened = keyring.opener(other).await?.open_event(&written.envelope);
    assert!(opened.1.is_empty(), "{:?}", opened.1);
    store.cut.store(true, Ordering::SeqCst);
    erase_elsewhere(&stack, other)?;
    wait_for(
        "a process cut off from the key store to stop using the key",
        // A seal tries the store a few times (about two seconds) before it fails.
        ttl + Duration::from_secs(5),
        || {
            let (keyring, written, held) = (&keyring, &written, &held);
            async move {
                let sealed = keyring
                    .seal_held(&mut *held.lock().await, &mut [request(other, 3, "x")])
                    .await;
                let opened = match keyring.opener(other).await {
                    Ok(opener) => opener.open_event(&written.envelope).1.is_empty(),
                    Err(_) => false,
                };
                Ok((sealed.is_err() && !opened).then_some(()))
            }
        },
    )
    .await?;
    // Once the store answers again, the erasure is what it says.
    store.cut.store(false, Ordering::SeqCst);
    let opened = keyring.opener(other).await?.open_event(&written.envelope).1;
    assert_eq!(opened, [("content", Text::Erased)]);
    Ok(())
}

/// The filter the processes a redaction test starts log with: our crates at debug, so that a
/// text logged anywhere they log would be found.
const DEBUG_LOGS: &str = "info,sessionlog_recovery=debug,sessionlog_mcp=debug,\
    sessionlog_projector=debug,sessionlog_keys=debug,sessionlog_producer=debug,\
    sessionlog_export=debug,sessionlog_store=debug";

/// `sessionlog <args>` in `stack`'s corner with its stdout and stderr written to `log`.
fn spawn_logged(stack: &TestStack, args: &[&str], log: &std::path::Path) -> Result<ChildGuard> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = stack
        .command(args)?
        .env("RUST_LOG", DEBUG_LOGS)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("spawning sessionlog {args:?}"))?;
    Ok(ChildGuard(child))
}

/// `sessionlog <command> ... --listen <free address>` logging to `log`, once its `/health`
/// answers 200.
async fn served_logged(
    stack: &TestStack,
    command: &[&str],
    log: &std::path::Path,
) -> Result<ServedProcess> {
    let listen = sessionlog_testkit::free_address()?;
    let mut args = command.to_vec();
    args.extend(["--listen", listen.as_str()]);
    let mut process = spawn_logged(stack, &args, log)?;
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    wait_for(
        &format!("`sessionlog {command:?}` to answer /health"),
        Duration::from_secs(60),
        || {
            let exited = process.assert_running();
            let request = http.get(format!("{base}/health")).send();
            async move {
                exited?;
                Ok(request.await.ok().filter(|r| r.status() == 200).map(|_| ()))
            }
        },
    )
    .await?;
    Ok(ServedProcess { base, process })
}

/// The texts of `session`'s history (inherited with `inherited`) as `recovery` answers them:
/// each event's fields as JSON, and what did not open, by seq.
async fn history_texts(
    recovery: &Recovery,
    session: SessionId,
    inherited: bool,
) -> Result<Vec<(u64, String, std::collections::BTreeMap<String, String>)>> {
    let page = recovery
        .events(
            session,
            sessionlog_recovery::EventRange {
                inherited,
                limit: Some(1000),
                ..Default::default()
            },
        )
        .await?;
    page.events
        .into_iter()
        .map(|e| Ok((e.seq, serde_json::to_string(&e.event)?, e.unopened)))
        .collect()
}

/// Redaction (issue 54), the erase canary test extended: a canary in one tool output of a
/// session with several others (each with its own canary) is redacted; that canary is then in
/// no byte of the topic or the dead letters, no row of any keyspace, no log of a process the
/// test started, no span the OTLP export sent to Phoenix, no MCP answer and no output of the
/// Python client, and every reader shows the field as redacted with its reason; every other
/// canary still reads back, the checkpoint taken before stays verified, and the session
/// resumes and forks (a fork made before the redaction and one made after both read the field
/// as redacted: one key).
#[tokio::test(flavor = "multi_thread")]
async fn a_redacted_output_reads_as_redacted_everywhere_and_the_rest_still_reads() -> Result<()> {
    let stack = TestStack::new("redaction", 1).await?;
    let logs = sessionlog_testkit::served::scratch_dir()?.join(format!("logs-{}", stack.group));
    std::fs::create_dir_all(&logs)?;
    let _projector = spawn_logged(
        &stack,
        &["project", "--group", &stack.group],
        &logs.join("project.log"),
    )?;
    let recovery_service =
        served_logged(&stack, &["serve-recovery"], &logs.join("recovery.log")).await?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let session = writer.session_id();
    let mut outputs = Vec::new();
    for i in 0..3 {
        let tag = format!("R{i}");
        let call = writer
            .append(SessionEvent::ToolCallRequested {
                tool: "grep".into(),
                arguments: Content::plain(canary(&tag, "arguments")),
                effect: EffectClass::Pure,
                approval_id: None,
            })
            .await?;
        let result = writer
            .append(SessionEvent::ToolCallResult {
                call_seq: call.envelope.seq,
                outcome: CallOutcome::Succeeded,
                output: Content::plain(canary(&tag, "output")),
                source: ResultSource::Executed,
                recorded_by: None,
                note: Some(Content::plain(canary(&tag, "note"))),
            })
            .await?;
        outputs.push(result.envelope.seq);
    }
    let checkpoint = writer.checkpoint(None).await?;
    let target = outputs[1];
    let secret = canary("R1", "output");
    let why = "a credential the tool printed";
    // A fork made before the redaction inherits the output; it must read as redacted after.
    let fork_before = recovery
        .fork(session, ForkAt::Seq(target), "before")
        .await?
        .envelope
        .session_id;

    // A redaction needs a reason through every door, the library's too (the CLI and the
    // console call it): a blank one is refused and destroys nothing.
    let blank = recovery
        .redact(session, target, "output", "test", "  ")
        .await;
    assert!(
        matches!(blank, Err(sessionlog_recovery::Error::NotRedactable { .. })),
        "a blank reason: {blank:?}"
    );
    let nobody = recovery.redact(session, target, "output", " ", why).await;
    assert!(
        matches!(
            nobody,
            Err(sessionlog_recovery::Error::NotRedactable { .. })
        ),
        "no operator: {nobody:?}"
    );
    anyhow::ensure!(
        opened_texts(&recovery, session)
            .await?
            .iter()
            .any(|(_, text)| matches!(text, Text::Plain(t) if t.contains(&secret))),
        "a refused redaction destroyed the field's key"
    );

    let http = client()?;
    let receipt: Value = http
        .post(format!(
            "{}/v1/sessions/{session}/redactions",
            recovery_service.base
        ))
        .json(&json!({"seq": target, "field": "output", "reason": why}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(receipt["key_destroyed"], true, "{receipt}");
    assert_eq!(receipt["key_id"], format!("dk2g:{target}:output"));
    assert_eq!(receipt["requested_by"], "test");
    // Redacting again (through the library) answers the same receipt.
    let again = recovery
        .redact(session, target, "output", "someone else", "again")
        .await?;
    assert_eq!(serde_json::to_value(&again)?, receipt);
    // The session's redactions, listed over HTTP, are that receipt.
    let listed: Value = http
        .get(format!(
            "{}/v1/sessions/{session}/redactions",
            recovery_service.base
        ))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(listed, json!([receipt]));
    // Not redactable: a field the event does not have; an unknown field.
    for (field, code) in [("content", "not_redactable"), ("tool", "not_redactable")] {
        let refused = http
            .post(format!(
                "{}/v1/sessions/{session}/redactions",
                recovery_service.base
            ))
            .json(&json!({"seq": target, "field": field, "reason": "x"}))
            .send()
            .await?;
        assert_eq!(
            refused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}"
        );
        assert_eq!(refused.json::<Value>().await?["code"], code);
    }
    let fork_after = recovery
        .fork(session, ForkAt::Seq(target), "after")
        .await?
        .envelope
        .session_id;

    // The library's readers: every text but the redacted one opens.
    let rebuilt = recovery.rebuild(session).await?;
    assert_eq!(
        rebuilt.state.redactions().collect::<Vec<_>>(),
        [(target, "output".to_string(), why.to_string())]
    );
    let opener = recovery.opener_for(session, &rebuilt.state, false).await?;
    let mut readable = Vec::new();
    for event in accepted_events(&recovery, session).await? {
        let (opened, unopened) = opener.open_event(&event.envelope);
        let mut opened = opened;
        sessionlog_keys::sensitive_fields(&mut opened.event, |_, c| {
            if let Content::Plain(t) = c
                && !t.is_empty()
            {
                readable.push(t.clone());
            }
        });
        if event.envelope.seq == target {
            assert_eq!(unopened, [("output", Text::Redacted(why.into()))]);
        } else {
            assert!(unopened.is_empty(), "{unopened:?}");
        }
    }
    let mut expected: Vec<String> = (0..3)
        .flat_map(|i| {
            let tag = format!("R{i}");
            ["arguments", "output", "note"].map(|f| canary(&tag, f))
        })
        .filter(|c| *c != secret)
        .collect();
    expected.sort();
    readable.sort();
    assert_eq!(readable, expected, "every other canary reads back");

    // A reader in another process, with the key as the store holds it now: nothing it holds
    // opens the redacted output, even without being told of the redaction.
    let other = sessionlog_store::keyring(&stack.settings)
        .await?
        .context("encryption is on")?;
    let result = accepted_events(&recovery, session)
        .await?
        .into_iter()
        .find(|e| e.envelope.seq == target)
        .context("the redacted event")?;
    let sessionlog_keys::KeyState::Live(key) = other.key(session).await? else {
        anyhow::bail!("the session's key is live");
    };
    let SessionEvent::ToolCallResult {
        output:
            Content::Sealed {
                key_id,
                nonce,
                ciphertext,
            },
        ..
    } = &result.envelope.event
    else {
        anyhow::bail!("a sealed output");
    };
    assert_eq!(key.open(session, key_id, nonce, ciphertext), None);
    assert!(key.redaction(target, "output").is_some());

    // The redacted record sent again in a frame the projector cannot decode: dead-lettered
    // as it arrived (its output still sealed under the destroyed key).
    let mut payload = None;
    sessionlog_log::PartitionReader::new(&stack.settings.kafka, &stack.settings.kafka.topic)?
        .read_range(
            recovery.partition_of(session),
            result.offset,
            result.offset + 1,
            &mut |r| payload = r.payload,
        )
        .await?;
    let payload = payload.context("the redacted record")?;
    let (_, body) = unframe(&payload)?;
    send_raw(&stack, &session.to_string(), &frame(987_654_321, body)).await?;

    // The recovery service's history answer: the redacted canary is not in it, the others are.
    let body = wait_for(
        "the history to list the redaction",
        Duration::from_secs(60),
        || async {
            let body = http
                .get(format!(
                    "{}/v1/sessions/{session}/events",
                    recovery_service.base
                ))
                .send()
                .await?
                .text()
                .await?;
            Ok(body.contains("PayloadRedacted").then_some(body))
        },
    )
    .await?;
    assert!(!body.contains(&secret), "the redacted canary in an answer");
    assert!(body.contains(&format!("redacted: {why}")));
    for c in &expected {
        assert!(body.contains(c.as_str()), "{c} missing from the history");
    }

    // Both forks read the inherited output as redacted (one key, the parent's), through the
    // inherited history and the context view, and the other canaries they inherit.
    for fork in [fork_before, fork_after] {
        let texts = history_texts(&recovery, fork, true).await?;
        let redacted = texts
            .iter()
            .find(|(seq, _, unopened)| *seq == target && !unopened.is_empty())
            .with_context(|| format!("fork {fork}: the inherited output {texts:?}"))?;
        assert_eq!(redacted.2["output"], format!("redacted: {why}"));
        let all = format!("{texts:?}");
        assert!(!all.contains(&secret), "fork {fork}: {all}");
        assert!(all.contains(&canary("R0", "output")), "fork {fork}: {all}");
        let view = serde_json::to_string(&recovery.context_view(fork, None).await?)?;
        assert!(!view.contains(&secret), "fork {fork}'s view: {view}");
    }
    let view = serde_json::to_string(&recovery.context_view(session, None).await?)?;
    assert!(!view.contains(&secret), "the session's view: {view}");
    assert!(view.contains(&format!("[redacted: {why}]")), "{view}");

    // MCP: the tools read the output as redacted with its reason, and the others as written.
    let mcp = served_logged(
        &stack,
        &["mcp", "--session", &session.to_string()],
        &logs.join("mcp.log"),
    )
    .await?;
    let mut model =
        crate::mcp::Client::connect(&mcp.base, &crate::mcp::reader_token(session)?).await?;
    let mut answers = String::new();
    for (tool, arguments) in [
        ("history_read", json!({})),
        ("call_lookup", json!({"seq": target})),
        ("history_search", json!({"query": "CANARY"})),
    ] {
        let answer = model.call(tool, arguments).await?;
        answers.push_str(&answer.to_string());
    }
    assert!(!answers.contains(&secret), "an MCP answer: {answers}");
    assert!(answers.contains(&format!("redacted: {why}")), "{answers}");
    assert!(answers.contains(&canary("R2", "output")), "{answers}");

    // The Python client: the same, as a program using it prints it.
    let python = tokio::process::Command::new(sessionlog_testkit::python_env()?)
        .env(
            "PYTHONPATH",
            sessionlog_testkit::repo_root().join("clients/python/src"),
        )
        .args([
            "-c",
            "import json, sys\n\
             from sessionlog import Client\n\
             with Client(recovery_url=sys.argv[1], token=sys.argv[2]) as c:\n\
             \x20   for e in c.events(sys.argv[3]):\n\
             \x20       print(json.dumps({'seq': e.seq, 'data': e.data, 'unopened': e.unopened}))\n",
            &recovery_service.base,
            &sessionlog_testkit::auth::token("python", &[sessionlog_log::Role::Reader])?,
            &session.to_string(),
        ])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), python)
        .await
        .context("the Python client did not finish within 120 s")??;
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!printed.contains(&secret), "the Python client printed it");
    assert!(printed.contains(&format!("redacted: {why}")), "{printed}");
    assert!(printed.contains(&canary("R0", "note")), "{printed}");

    // The OTLP export with content, to Phoenix: the other texts go out, the redacted one not.
    let (phoenix_url, endpoint) = crate::otlp_export::phoenix()?;
    let project = format!("redaction-{}", stack.group);
    let summary = crate::otlp_export::export(
        &stack,
        &endpoint,
        &project,
        "redaction",
        &["--with-content"],
    )?;
    let spans = wait_for(
        "Phoenix to hold the session's spans with their content",
        Duration::from_secs(60),
        || async {
            let spans = serde_json::to_string(
                &crate::otlp_export::phoenix_spans(&phoenix_url, &project).await?,
            )?;
            Ok(spans.contains(&canary("R2", "output")).then_some(spans))
        },
    )
    .await
    .with_context(|| format!("export summary {summary}"))?;
    assert!(!spans.contains(&secret), "a span sent to Phoenix holds it");

    // No byte of the topic or the dead letters, no row of any keyspace holds it.
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(90)).await?;
    assert_no_record_holds(&stack, &secret).await?;
    let (rows, read) = every_row(
        sessionlog_store::KeyTable::open(&stack.settings)
            .await?
            .cql(),
    )
    .await?;
    for keyspace in [
        &stack.settings.cql.keyspace,
        &stack.settings.privacy.keyspace,
    ] {
        assert!(
            read.iter().any(|t| t.starts_with(&format!("{keyspace}."))),
            "{keyspace} was not read"
        );
    }
    let hits: Vec<&String> = rows.iter().filter(|r| r.contains(&secret)).collect();
    assert!(hits.is_empty(), "rows hold the redacted canary: {hits:?}");

    // The checkpoint taken before stays verified (the fold ran on ciphertext), and the
    // session resumes.
    let checkpoint_seq = checkpoint.envelope.seq;
    wait_for(
        "a rebuild from the checkpoint taken before the redaction",
        Duration::from_secs(60),
        || async {
            let rebuilt = recovery.rebuild(session).await?;
            Ok(matches!(
                rebuilt.start,
                sessionlog_recovery::StartPoint::Checkpoint { seq, .. } if seq == checkpoint_seq
            )
            .then_some(()))
        },
    )
    .await?;
    let bundle = recovery.resume(session, "harness-2", None).await?;
    assert!(bundle.state.redaction(target, "output").is_some());
    let resumed = serde_json::to_string(&bundle.context)?;
    assert!(!resumed.contains(&secret), "the resumed context: {resumed}");
    assert!(resumed.contains(&canary("R2", "output")), "{resumed}");

    // Nor any log of the processes this test started (at debug).
    drop((mcp, recovery_service, _projector));
    let mut logged = 0;
    for entry in std::fs::read_dir(&logs)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        logged += text.len();
        assert!(
            !text.contains(&secret),
            "{} logs the redacted canary",
            path.display()
        );
    }
    assert!(
        logged > 0,
        "the processes' logs were captured in {}",
        logs.display()
    );
    assert!(
        !summary.to_string().contains(&secret),
        "the export's summary: {summary}"
    );
    Ok(())
}

/// A session of one tool call per tag, each output a canary: the session and the outputs' seqs.
async fn tool_outputs(log: &Arc<EventLog>, tags: &[&str]) -> Result<(SessionId, Vec<u64>)> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), "agent", None).await?;
    let mut outputs = Vec::new();
    for tag in tags {
        let call = writer
            .append(SessionEvent::ToolCallRequested {
                tool: "grep".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Pure,
                approval_id: None,
            })
            .await?;
        let result = writer
            .append(SessionEvent::ToolCallResult {
                call_seq: call.envelope.seq,
                outcome: CallOutcome::Succeeded,
                output: Content::plain(canary(tag, "output")),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            })
            .await?;
        outputs.push(result.envelope.seq);
    }
    Ok((writer.session_id(), outputs))
}

/// A reader process that cached the session's key (`key_cache_secs` of an hour) reads a field
/// redacted by another process as redacted as soon as the redaction is projected, not an hour
/// later: the key it cached still derives the field's own key, so its readers go by the
/// redactions the session's state records. `sessionlog redact --status` then lists it.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_holding_a_cached_key_reads_a_redaction_made_elsewhere_as_redacted() -> Result<()>
{
    let mut stack = TestStack::new("redaction_cache", 1).await?;
    stack.settings.privacy.key_cache_secs = 3_600;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let reader = Recovery::connect(&stack.settings).await?;
    let (session, outputs) = tool_outputs(&log, &["K0", "K1"]).await?;
    let (target, secret, why) = (outputs[1], canary("K1", "output"), "a token in the output");
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(90)).await?;
    // The reader reads the session: its key is cached now, for an hour.
    let before = format!("{:?}", history_texts(&reader, session, false).await?);
    assert!(before.contains(&secret), "{before}");

    // Another process redacts it.
    let out = stack.sessionlog(&[
        "redact",
        &session.to_string(),
        "--seq",
        &target.to_string(),
        "--field",
        "output",
        "--reason",
        why,
        "--by",
        "alice",
    ])?;
    anyhow::ensure!(
        out.status.success(),
        "redact: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The key this reader cached still opens the field: only the redaction's record stops it.
    let result = accepted_events(&reader, session)
        .await?
        .into_iter()
        .find(|e| e.envelope.seq == target)
        .context("the redacted event")?;
    let stale = reader
        .opener(session, false)
        .await?
        .open_event(&result.envelope);
    assert!(
        stale.1.is_empty(),
        "the cached key is the one before: {:?}",
        stale.1
    );
    // Every reader of this process goes by the record: the history once it is projected, the
    // context view, a rebuild opened for reading.
    let texts = wait_for(
        "the reader's history to show the redaction",
        Duration::from_secs(60),
        || async {
            let texts = history_texts(&reader, session, false).await?;
            Ok(format!("{texts:?}")
                .contains("PayloadRedacted")
                .then_some(texts))
        },
    )
    .await?;
    let all = format!("{texts:?}");
    assert!(!all.contains(&secret), "a cached key read it: {all}");
    assert!(all.contains(&format!("redacted: {why}")), "{all}");
    assert!(all.contains(&canary("K0", "output")), "{all}");
    let view = serde_json::to_string(&reader.context_view(session, None).await?)?;
    assert!(!view.contains(&secret), "{view}");
    assert!(view.contains(&format!("[redacted: {why}]")), "{view}");
    let rebuilt = reader.rebuild(session).await?;
    let opened = reader
        .opener_for(session, &rebuilt.state, false)
        .await?
        .open_event(&result.envelope)
        .1;
    assert_eq!(opened, [("output", Text::Redacted(why.into()))]);

    // `sessionlog redact --status` lists it: seq, field, who, why, when, which key.
    let out = stack.sessionlog(&["--json", "redact", &session.to_string(), "--status"])?;
    anyhow::ensure!(
        out.status.success(),
        "redact --status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    let listed = listed.as_array().context("a list of receipts")?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let r = &listed[0];
    assert_eq!(
        (
            &r["seq"],
            &r["field"],
            &r["requested_by"],
            &r["reason"],
            &r["key_id"],
            &r["key_destroyed"]
        ),
        (
            &json!(target),
            &json!("output"),
            &json!("alice"),
            &json!(why),
            &json!(format!("dk2g:{target}:output")),
            &json!(true)
        )
    );
    assert!(r["redacted_at"].as_i64().is_some_and(|t| t > 0), "{r}");
    assert_eq!(r["redaction_seq"], json!(rebuilt.state.last_seq), "{r}");
    Ok(())
}

/// The fold refuses a redaction without a reason whoever writes it: one sent straight to
/// Kafka, signed with the service's own key (so only its reason is wrong), is in the log and
/// changes nothing, for recovery and for the projector; the field still reads, and a
/// redaction with a reason still goes through.
#[tokio::test(flavor = "multi_thread")]
async fn a_redaction_without_a_reason_sent_straight_to_kafka_is_refused_by_the_fold() -> Result<()>
{
    let stack = TestStack::new("redaction_raw", 1).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (session, outputs) = tool_outputs(&log, &["W0"]).await?;
    let target = outputs[0];
    let mut raw = sessionlog_testkit::recovery::raw_next(
        &recovery,
        session,
        SessionEvent::PayloadRedacted {
            redacted_seq: target,
            field: "output".into(),
            redacted_by: "mallory".into(),
            reason: " ".into(),
            redacted_at: sessionlog_schemas::now_micros(),
            key_id: format!("dk2g:{target}:output"),
            key_destroyed: false,
        },
    )
    .await?;
    recovery.notary().attest(&mut raw)?;
    log.append(&raw).await?;

    // In the log, and refused by the fold: recovery's rebuild and the projector's state.
    let mut verdict = None;
    let rebuilt = recovery
        .rebuild_with(session, Some(0), |e, _| {
            if e.envelope.event_id == raw.event_id {
                verdict = Some(e.accepted);
            }
        })
        .await?;
    assert_eq!(verdict, Some(false), "read from the log, and rejected");
    assert_eq!(rebuilt.state.redactions().count(), 0);
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(90)).await?;
    let projected = store.session_state(session).await?.context("projected")?;
    assert_eq!(projected.redactions().count(), 0);
    let texts = opened_texts(&recovery, session).await?;
    assert!(
        texts
            .iter()
            .any(|(_, t)| t.readable() == Some(canary("W0", "output").as_str())),
        "{texts:?}"
    );
    // A redaction with a reason, through the service's library, still goes through.
    let receipt = recovery
        .redact(session, target, "output", "alice", "a key in the output")
        .await?;
    assert!(receipt.key_destroyed, "{receipt:?}");
    Ok(())
}
