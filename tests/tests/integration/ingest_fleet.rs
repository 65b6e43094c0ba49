//! Ingest as a fleet: several instances on one stack, any of them serving any session, and
//! no 2xx for an event the fold rejects. Each test names the hole it closes.

use anyhow::{Context, Result, ensure};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_producer::EventLog;
use sessionlog_schemas::{CURRENT_SCHEMA_VERSION, Content, EventEnvelope, SessionEvent, SessionId};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::ingest::{IngestInstance, user_request};
use sessionlog_testkit::producer::fold_topic;
use std::collections::HashSet;
use uuid::Uuid;

/// Every event some instance answered 2xx for (by offset) is accepted by the fold.
async fn every_acknowledged_offset_is_accepted(log: &EventLog, offsets: &[i64]) -> Result<()> {
    let accepted: HashSet<i64> = fold_topic(log)
        .await?
        .values()
        .flat_map(|h| h.verdicts.iter())
        .filter(|(_, v)| v.is_accepted())
        .map(|(a, _)| a.position.offset)
        .collect();
    for offset in offsets {
        ensure!(
            accepted.contains(offset),
            "an instance answered 2xx for the event at offset {offset}, which the fold rejected"
        );
    }
    Ok(())
}

fn offset(answer: &Value) -> Result<i64> {
    answer["offset"]
        .as_i64()
        .or_else(|| answer["event"]["offset"].as_i64())
        .with_context(|| format!("an offset in {answer}"))
}

fn offsets(answer: &Value) -> Vec<i64> {
    answer["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["offset"].as_i64())
        .collect()
}

/// Before: a second create of an ended session answered 201 and an append after it 200, and
/// the fold rejected both; an instance that had not created the session did the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_created_once_whichever_instance_is_asked() -> Result<()> {
    let stack = TestStack::new("fleetcreate", 1).await?;
    let (a, b) = (
        IngestInstance::start(&stack).await?,
        IngestInstance::start(&stack).await?,
    );
    let session = SessionId::new();
    let create = json!({ "agent": "h", "session_id": session });
    let (status, opened) = a.post("/v1/sessions", create.clone()).await?;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let mut acknowledged = vec![offset(&opened)?];
    let (status, closed) = a
        .post(
            &format!("/v1/sessions/{session}/close"),
            json!({ "epoch": 1, "outcome": "Completed" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{closed}");
    acknowledged.push(offset(&closed)?);

    for (instance, name) in [(&a, "the creator"), (&b, "another instance")] {
        let (status, answer) = instance.post("/v1/sessions", create.clone()).await?;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::CONFLICT, Some("already_started")),
            "a second create on {name}: {answer}"
        );
        let (status, answer) = instance
            .post(
                &format!("/v1/sessions/{session}/events"),
                json!({ "epoch": 1, "events": [user_request(3, &Uuid::now_v7(), "after the end")] }),
            )
            .await?;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::CONFLICT, Some("session_ended")),
            "an append after the end on {name}: {answer}"
        );
    }

    // Two instances racing to create one id: one wins, the other hears 409.
    let raced = SessionId::new();
    let create = json!({ "agent": "h", "session_id": raced });
    let (first, second) = tokio::join!(
        a.post("/v1/sessions", create.clone()),
        b.post("/v1/sessions", create.clone())
    );
    let mut statuses = vec![];
    for (status, answer) in [first?, second?] {
        if status == StatusCode::CREATED {
            acknowledged.push(offset(&answer)?);
        }
        statuses.push((status, answer["code"].as_str().map(String::from)));
    }
    statuses.sort_by_key(|(s, _)| s.as_u16());
    assert_eq!(
        statuses,
        vec![
            (StatusCode::CREATED, None),
            (StatusCode::CONFLICT, Some("already_started".into()))
        ]
    );
    every_acknowledged_offset_is_accepted(&a.log, &acknowledged).await
}

/// Before: instance A kept answering 200 for epoch 1 after B claimed epoch 2, and the fold
/// rejected every one of those events as a zombie write.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_fenced_by_a_claim_on_another_instance_gets_409() -> Result<()> {
    let stack = TestStack::new("fleetfence", 1).await?;
    let (a, b) = (
        IngestInstance::start(&stack).await?,
        IngestInstance::start(&stack).await?,
    );
    let (status, opened) = a.post("/v1/sessions", json!({ "agent": "h" })).await?;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let session = opened["session_id"].as_str().context("id")?.to_string();
    let events = format!("/v1/sessions/{session}/events");
    let (status, answer) = a
        .post(
            &events,
            json!({ "epoch": 1, "events": [user_request(2, &Uuid::now_v7(), "one")] }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let mut acknowledged = vec![offset(&opened)?];
    acknowledged.extend(offsets(&answer));
    let first_token = opened["writer_token"]
        .as_str()
        .context("writer token")?
        .to_string();

    let (status, claimed) = b
        .post(
            &format!("/v1/sessions/{session}/claim"),
            json!({ "writer": "b" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["epoch"], 2);
    acknowledged.push(offset(&claimed)?);

    // The old writer, on the instance that served it, with its own token and an intent it
    // would act on.
    let call = json!({ "seq": 3, "event_id": Uuid::now_v7(), "kind": "ToolCallRequested",
        "data": { "tool": "shell", "arguments": { "Plain": "rm -rf build" }, "effect": "Pure" } });
    let (status, answer) = a
        .post_with_token(
            &events,
            json!({ "epoch": 1, "events": [call] }),
            Some(&first_token),
        )
        .await?;
    assert_eq!(
        (
            status,
            answer["code"].as_str(),
            answer["current_epoch"].as_u64()
        ),
        (StatusCode::CONFLICT, Some("fenced"), Some(2)),
        "{answer}"
    );

    // The new epoch is served by any instance, including the one that never claimed it.
    let (status, answer) = a
        .post(
            &events,
            json!({ "epoch": 2, "events": [user_request(3, &Uuid::now_v7(), "two")] }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    acknowledged.extend(offsets(&answer));
    let (status, answer) = b
        .post(
            &events,
            json!({ "epoch": 2, "events": [user_request(4, &Uuid::now_v7(), "three")] }),
        )
        .await?;
    assert_eq!(
        status,
        StatusCode::OK,
        "B's memory of the session is behind A's write: {answer}"
    );
    acknowledged.extend(offsets(&answer));
    let (status, answer) = b
        .post(
            &events,
            json!({ "epoch": 3, "events": [user_request(5, &Uuid::now_v7(), "x")] }),
        )
        .await?;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::CONFLICT, Some("unknown_epoch")),
        "{answer}"
    );
    every_acknowledged_offset_is_accepted(&a.log, &acknowledged).await
}

/// Before: a retry on an instance that had not written the events, or after a restart, or of a
/// batch part of which reached the log before a failure, got 409 `seq_conflict` (and the rest
/// of the batch was never written).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_is_answered_with_first_positions_by_any_instance() -> Result<()> {
    let stack = TestStack::new("fleetretry", 2).await?;
    let a = IngestInstance::start(&stack).await?;
    let (status, opened) = a.post("/v1/sessions", json!({ "agent": "h" })).await?;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let session: SessionId = serde_json::from_value(opened["session_id"].clone())?;
    let events = format!("/v1/sessions/{session}/events");
    let ids: Vec<Uuid> = (0..6).map(|_| Uuid::now_v7()).collect();
    let first_batch = json!({ "epoch": 1, "events": [
        user_request(2, &ids[0], "a"), user_request(3, &ids[1], "b")] });
    let (status, first) = a.post(&events, first_batch.clone()).await?;
    assert_eq!(status, StatusCode::OK, "{first}");

    // Another instance, and a restarted one, answer the retry with the first positions.
    let b = IngestInstance::start(&stack).await?;
    let (status, retry) = b.post(&events, first_batch).await?;
    assert_eq!(status, StatusCode::OK, "{retry}");
    assert_eq!(offsets(&retry), offsets(&first));
    assert!(
        retry["events"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| e["duplicate"] == true),
        "{retry}"
    );

    // A batch of four whose first two reached the log before the answer was lost: written
    // here straight to the log, as a producer that failed on the third would leave them.
    let partial: Vec<EventEnvelope> = [(4, ids[2]), (5, ids[3])]
        .into_iter()
        .map(|(seq, event_id)| EventEnvelope {
            event_id,
            session_id: session,
            seq,
            writer_epoch: 1,
            occurred_at: sessionlog_schemas::now_micros(),
            causation_id: None,
            idempotency_key: None,
            schema_version: CURRENT_SCHEMA_VERSION,
            event: SessionEvent::UserRequest {
                content: Content::plain(format!("part {seq}")),
            },
            attestation: None,
        })
        .collect();
    let written = a.log.append_batch(&partial).await?;
    let whole = json!({ "epoch": 1, "events": [
        user_request(4, &ids[2], "part 4"), user_request(5, &ids[3], "part 5"),
        user_request(6, &ids[4], "c"), user_request(7, &ids[5], "d")] });
    let (status, answer) = a.post(&events, whole).await?;
    assert_eq!(status, StatusCode::OK, "the retried batch: {answer}");
    let answered = answer["events"].as_array().context("events")?;
    let duplicates: Vec<bool> = answered.iter().map(|e| e["duplicate"] == true).collect();
    assert_eq!(duplicates, [true, true, false, false], "{answer}");
    assert_eq!(
        offsets(&answer)[..2],
        written.iter().map(|p| p.offset).collect::<Vec<_>>()[..]
    );
    assert_eq!(answer["next_seq"], 8);

    let mut acknowledged = vec![offset(&opened)?];
    acknowledged.extend(offsets(&first));
    acknowledged.extend(offsets(&answer));
    every_acknowledged_offset_is_accepted(&a.log, &acknowledged).await
}
