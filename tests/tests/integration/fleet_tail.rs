//! Confirmations from the process's tail of the log, and the bound on what a catch-up reads
//! when the projection is behind: a fast 503 `projection_behind` with the lag, never a read of
//! everything the projector left.

use anyhow::{Context, Result, ensure};
use reqwest::StatusCode;
use serde_json::json;
use sessionlog_log::{LogTail, ProducerSettings, Start, TailOptions};
use sessionlog_producer::{Error, EventLog, SessionWriter};
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_testkit::ingest::{IngestInstance, user_request};
use sessionlog_testkit::projector::{store, wait_caught_up};
use sessionlog_testkit::{TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

fn request(text: &str) -> SessionEvent {
    SessionEvent::UserRequest {
        content: Content::plain(text),
    }
}

/// Writes `count` events of fresh sessions (acknowledged, not confirmed) to the stack's topic.
async fn other_sessions(log: &Arc<EventLog>, count: usize) -> Result<()> {
    let mut writers = Vec::new();
    for _ in 0..count.div_ceil(10) {
        writers.push(
            SessionWriter::create(Arc::clone(log), "other", None)
                .await?
                .0,
        );
    }
    for (i, writer) in writers.iter_mut().enumerate() {
        for n in 0..9 {
            writer.append(request(&format!("other {i}.{n}"))).await?;
        }
    }
    Ok(())
}

/// Before: a claim or cold append on a partition the projector had left behind read every
/// record after its position (200,000 records: 5.3 s), however long that took.
#[tokio::test(flavor = "multi_thread")]
async fn a_catch_up_past_the_unprojected_limit_answers_projection_behind_unless_the_tail_holds_it()
-> Result<()> {
    let mut stack = TestStack::new("tailbound", 1).await?;
    stack.settings.producer.max_unprojected_records = 50;
    let projection = store(&stack).await?;

    // The projector applies the session's start, then stops.
    let mut projector = stack.spawn_projector()?;
    let warm = IngestInstance::start(&stack).await?;
    let (status, opened) = warm.post("/v1/sessions", json!({ "agent": "h" })).await?;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let session: SessionId = opened["session_id"]
        .as_str()
        .context("session_id")?
        .parse()?;
    let path = format!("/v1/sessions/{session}/events");
    let first = json!({ "epoch": 1, "events": [user_request(2, &Uuid::now_v7(), "one")] });
    let (status, answer) = warm.post(&path, first).await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    wait_caught_up(&stack, &projection, Duration::from_secs(60)).await?;
    let progress = projection
        .load_progress(&stack.settings.kafka.topic)
        .await?
        .get(&0)
        .copied()
        .context("partition 0's progress")?;
    // The warm instance's tail holds the partition from before the projector's position.
    let log = Arc::clone(&warm.log);
    wait_for("the warm instance's tail", Duration::from_secs(30), || {
        let held = log.tail_start(0).is_some_and(|start| start <= progress);
        async move { Ok(held.then_some(())) }
    })
    .await?;
    projector.0.kill()?;
    projector.0.wait()?;

    // 200 records the projector will not apply; a second session among them.
    let library = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut second, _) = SessionWriter::create(Arc::clone(&library), "h", None).await?;
    other_sessions(&library, 200).await?;
    second.append(request("late")).await?;

    // A cold instance (its tail starts now) catches the session up from the projection: 200
    // unprojected records are past the limit of 50, so it answers at once, with the lag.
    let cold = IngestInstance::start(&stack).await?;
    let next = json!({ "epoch": 1, "events": [user_request(3, &Uuid::now_v7(), "two")] });
    let response = reqwest_post(&cold, &path, &next).await?;
    assert_eq!(
        response.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        response.1
    );
    assert_eq!(response.1["code"], "projection_behind", "{}", response.1);
    let lag = response.1["lag"].as_i64().context("lag")?;
    ensure!(
        lag >= 200,
        "the lag is what the projector left: {}",
        response.1
    );
    assert_eq!(response.1["limit"], 50);
    assert_eq!(response.2.as_deref(), Some("1"), "Retry-After");

    // The warm instance's tail holds those records: its cached writer and a cold catch-up of
    // the second session read them from memory, and answer.
    let (status, answer) = warm.post(&path, next).await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let late = json!({ "epoch": 1, "events": [user_request(3, &Uuid::now_v7(), "after")] });
    let (status, answer) = warm
        .post_with_token(
            &format!("/v1/sessions/{}/events", second.session_id()),
            late,
            second.token().map(|t| t.as_str()),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{answer}");

    // A resume rebuilds the session from the index and reads what is beyond it: refused too.
    let mut settings = stack.settings.clone();
    settings.producer.max_unprojected_records = 50;
    let recovery = Recovery::connect(&settings).await?;
    match recovery.resume(session, "resumer", None).await {
        Err(sessionlog_recovery::Error::Producer(Error::ProjectionBehind {
            unprojected,
            limit,
            ..
        })) => {
            ensure!(unprojected >= 200 && limit == 50, "{unprojected} / {limit}");
        }
        other => anyhow::bail!("a resume past the limit: {:?}", other.map(|_| ())),
    }

    // Once the projector catches up, the cold instance answers the same request.
    let _projector = stack.spawn_projector()?;
    wait_caught_up(&stack, &projection, Duration::from_secs(60)).await?;
    let again = json!({ "epoch": 1, "events": [user_request(4, &Uuid::now_v7(), "three")] });
    let (status, answer) = cold.post(&path, again).await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    Ok(())
}

/// POSTs as the harness holding the session's writer token; the status, the JSON answer and
/// the `Retry-After` header.
async fn reqwest_post(
    instance: &IngestInstance,
    path: &str,
    body: &serde_json::Value,
) -> Result<(StatusCode, serde_json::Value, Option<String>)> {
    let request = sessionlog_testkit::auth::client()?
        .post(format!("{}{path}", instance.base))
        .json(body);
    let request = sessionlog_testkit::ingest::presenting_writer_token(request, path);
    let response = request.send().await?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((status, response.json().await?, retry_after))
}

/// A tail answers a read only for what it holds, waits for records not yet written, and says
/// it is behind when they do not come within the wait, rather than answering short.
#[tokio::test(flavor = "multi_thread")]
async fn a_tail_waits_for_records_and_answers_only_for_what_it_holds() -> Result<()> {
    let stack = TestStack::new("tailread", 1).await?;
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let (mut writer, start) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
    let kafka = &stack.settings.kafka;
    let options = TailOptions {
        bytes: 1 << 20,
        ..TailOptions::from(&ProducerSettings::default())
    };
    let tail = LogTail::start(kafka, &kafka.topic, 1, &options, Duration::from_secs(30)).await?;
    let key = writer.session_id().to_string();
    let from = start.position.offset + 1;
    let positioned = wait_for(
        "the tail to position itself",
        Duration::from_secs(30),
        || {
            let read = tail.first_held(0);
            async move { Ok(read) }
        },
    )
    .await?;
    assert_eq!(positioned, from, "a tail starts at the partition's end");
    // Before the start: not the tail's to answer.
    let wait = Duration::from_secs(10);
    let before = tail
        .read(0, 0, Some(from), key.as_bytes(), wait, Start::AskTheLog)
        .await?;
    assert!(before.is_none(), "{before:?}");

    // A read of records not yet written waits for them.
    let reading = {
        let key = key.clone();
        let tail = &tail;
        async move {
            tail.read(
                0,
                from,
                Some(from + 3),
                key.as_bytes(),
                wait,
                Start::AskTheLog,
            )
            .await
        }
    };
    let writing = async {
        writer.append(request("a")).await?;
        other_sessions(&log, 10).await?;
        anyhow::Ok(())
    };
    let (read, written) = tokio::join!(reading, writing);
    written?;
    let (records, next) = read?.context("the tail holds the range")?;
    assert_eq!(next, from + 3);
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets,
        vec![from],
        "only the session's record in the range"
    );

    // Records that never come: behind, after the wait.
    let end = log.high_watermark(0).await?;
    match tail
        .read(
            0,
            from,
            Some(end + 5),
            key.as_bytes(),
            Duration::from_millis(200),
            Start::Held,
        )
        .await
    {
        Err(sessionlog_log::Error::TailBehind { behind, .. }) => ensure!(behind >= 5, "{behind}"),
        other => anyhow::bail!("a read past the end: {other:?}"),
    }
    Ok(())
}
