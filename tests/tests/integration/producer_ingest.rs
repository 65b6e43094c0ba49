//! The HTTP ingest service on the real stack, from a plain HTTP client: a round trip with
//! durable offsets and idempotent retries, and a 4xx problem (RFC 9457) for each bad input.

use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::ingest::{IngestInstance as Service, user_request};
use sessionlog_testkit::producer::fold_topic;

/// Limits small enough for the size tests to reach.
fn limit_sizes(stack: &mut TestStack) {
    stack.settings.producer.max_event_bytes = 32 * 1024;
    stack.settings.ingest.max_body_bytes = 256 * 1024;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_http_client_appends_a_session_with_durable_offsets_and_idempotent_retries()
-> Result<()> {
    let mut stack = TestStack::new("pingest", 2).await?;
    limit_sizes(&mut stack);
    let service = Service::start(&stack).await?;

    let (status, opened) = service
        .post(
            "/v1/sessions",
            json!({ "agent": "python-harness", "title": "over http" }),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let session = opened["session_id"]
        .as_str()
        .context("session id")?
        .to_string();
    assert_eq!(
        (opened["epoch"].as_u64(), opened["next_seq"].as_u64()),
        (Some(1), Some(2))
    );

    let ids: Vec<_> = (0..3).map(|_| uuid::Uuid::now_v7()).collect();
    let batch = json!({ "epoch": 1, "events": [
        user_request(2, &ids[0], "first"),
        { "seq": 3, "event_id": ids[1], "kind": "ToolCallRequested",
          "data": { "tool": "shell", "arguments": { "Plain": "ls" }, "effect": "Pure" },
          "idempotency_key": "call-1" },
        { "seq": 4, "event_id": ids[2], "kind": "ToolCallResult", "causation_id": ids[1],
          "data": { "call_seq": 3, "outcome": "Succeeded", "output": { "Plain": "a b" },
                    "source": "Executed", "recorded_by": null, "note": null } },
    ]});
    let path = format!("/v1/sessions/{session}/events");
    let (status, first) = service.post(&path, batch.clone()).await?;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["next_seq"], 5);
    // The same request again: nothing new is written, and the answer names the first writes.
    let (status, retry) = service.post(&path, batch).await?;
    assert_eq!(status, StatusCode::OK, "{retry}");
    for (a, b) in first["events"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(retry["events"].as_array().into_iter().flatten())
    {
        assert_eq!(a["offset"], b["offset"]);
        assert_eq!(
            (a["duplicate"].as_bool(), b["duplicate"].as_bool()),
            (Some(false), Some(true))
        );
    }

    let (status, checkpoint) = service
        .post(
            &format!("/v1/sessions/{session}/checkpoint"),
            json!({ "epoch": 1, "workspace_revision": "git:abc" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{checkpoint}");
    let (status, closed) = service
        .post(
            &format!("/v1/sessions/{session}/close"),
            json!({ "epoch": 1, "outcome": "Completed" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{closed}");

    // The log holds exactly what the answers said, where they said.
    let histories = fold_topic(&service.log).await?;
    let history = histories.values().next().context("one session")?;
    assert_eq!(histories.len(), 1);
    assert_eq!(history.state.session_id.to_string(), session);
    assert_eq!(history.verdicts.len(), 6, "no duplicate was written");
    assert!(history.verdicts.iter().all(|(_, v)| v.is_accepted()));
    assert!(
        history
            .state
            .last_checkpoint
            .as_ref()
            .is_some_and(|c| c.verified())
    );
    assert_eq!(history.state.status().as_str(), "completed");
    let mut answered: Vec<i64> = vec![opened["event"]["offset"].as_i64().unwrap_or(-1)];
    answered.extend(
        first["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["offset"].as_i64()),
    );
    answered.extend([
        checkpoint["offset"].as_i64().unwrap_or(-1),
        closed["offset"].as_i64().unwrap_or(-1),
    ]);
    let logged: Vec<i64> = history
        .verdicts
        .iter()
        .map(|(a, _)| a.position.offset)
        .collect();
    assert_eq!(answered, logged);
    let ids_logged: Vec<_> = history.verdicts[1..4]
        .iter()
        .map(|(a, _)| a.envelope.event_id)
        .collect();
    assert_eq!(ids_logged, ids, "the client's event ids");

    let (status, doc) = service.get("/v1/openapi.json").await?;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&doc)?;
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/sessions/{session_id}/events"]["post"].is_object());
    let (status, health) = service.get("/health").await?;
    assert_eq!(status, StatusCode::OK, "{health}");
    let (status, metrics) = service.get("/metrics").await?;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("sessionlog_ingest_requests_total"),
        "{metrics}"
    );
    // Every ingest metric is described, so that a scraper shows what it means.
    for name in [
        sessionlog_ingest::REQUESTS_TOTAL,
        sessionlog_ingest::EVENTS_TOTAL,
        sessionlog_ingest::CACHED_SESSIONS,
        sessionlog_ingest::IN_FLIGHT,
    ] {
        assert!(
            metrics.contains(&format!("# HELP {name} ")),
            "{name}: {metrics}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_4xx_with_a_json_body_that_says_what_is_wrong() -> Result<()> {
    let mut stack = TestStack::new("pingbad", 1).await?;
    limit_sizes(&mut stack);
    let service = Service::start(&stack).await?;
    let (_, opened) = service
        .post("/v1/sessions", json!({ "agent": "bad-input" }))
        .await?;
    let session = opened["session_id"]
        .as_str()
        .context("session id")?
        .to_string();
    let path = format!("/v1/sessions/{session}/events");
    let id = uuid::Uuid::now_v7();

    let large = "x".repeat(40 * 1024);
    let cases: Vec<(&str, StatusCode, &str, String)> = vec![
        ("malformed JSON", StatusCode::BAD_REQUEST, "malformed_json", "{\"epoch\": 1, \"events\": [".into()),
        ("missing field", StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", json!({ "events": [] }).to_string()),
        ("unknown kind", StatusCode::UNPROCESSABLE_ENTITY, "unknown_kind",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "TeleportRequested", "data": {} }] }).to_string()),
        ("reserved kind", StatusCode::UNPROCESSABLE_ENTITY, "reserved_kind",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "WriterClaimed", "data": { "writer": "me" } }] }).to_string()),
        ("a harness's own decision", StatusCode::UNPROCESSABLE_ENTITY, "reserved_kind",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "ApprovalDecided", "data": {
                "approval_id": "a1", "approved": true, "decided_by": "me", "reason": null } }] }).to_string()),
        ("a harness's own erasure", StatusCode::UNPROCESSABLE_ENTITY, "reserved_kind",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "SessionErased", "data": {
                "requested_by": "me", "reason": "r" } }] }).to_string()),
        ("a harness's own operator result", StatusCode::UNPROCESSABLE_ENTITY, "reserved_kind",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "ToolCallResult", "data": {
                "call_seq": 1, "outcome": "Succeeded", "output": { "Plain": "x" }, "source": "Operator",
                "recorded_by": "me", "note": null } }] }).to_string()),
        ("wrong seq", StatusCode::CONFLICT, "wrong_seq",
            json!({ "epoch": 1, "events": [user_request(5, &id, "skips ahead")] }).to_string()),
        ("an epoch never claimed", StatusCode::CONFLICT, "unknown_epoch",
            json!({ "epoch": 7, "events": [user_request(2, &id, "wrong epoch")] }).to_string()),
        ("event too large", StatusCode::PAYLOAD_TOO_LARGE, "too_large",
            json!({ "epoch": 1, "events": [user_request(2, &id, &large)] }).to_string()),
        ("body too large", StatusCode::PAYLOAD_TOO_LARGE, "too_large",
            json!({ "epoch": 1, "events": [user_request(2, &id, &"y".repeat(300 * 1024))] }).to_string()),
        ("number out of range", StatusCode::UNPROCESSABLE_ENTITY, "invalid_event",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "ModelResponse", "data": {
                "model": "m", "tokens_in": u64::MAX, "tokens_out": 1, "cost_micros": 1,
                "started_at": 0, "content": { "Plain": "x" } } }] }).to_string()),
        ("result for no call", StatusCode::UNPROCESSABLE_ENTITY, "invalid_event",
            json!({ "epoch": 1, "events": [{ "seq": 2, "kind": "ToolCallResult", "data": {
                "call_seq": 1, "outcome": "Failed", "output": { "Plain": "?" }, "source": "Executed",
                "recorded_by": null, "note": null } }] }).to_string()),
    ];
    for (what, status, code, body) in cases {
        let (got, answer) = service.post_raw(&path, body).await?;
        assert_eq!(got, status, "{what}: {answer}");
        assert_eq!(answer["code"], code, "{what}: {answer}");
        assert!(
            answer["detail"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {answer}"
        );
    }

    let (got, answer) = service
        .post(
            "/v1/sessions/not-a-uuid/events",
            json!({ "epoch": 1, "events": [] }),
        )
        .await?;
    assert_eq!(
        (got, answer["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_session_id"))
    );
    let elsewhere = uuid::Uuid::now_v7();
    let (got, answer) = service
        .post(
            &format!("/v1/sessions/{elsewhere}/events"),
            json!({ "epoch": 1, "events": [] }),
        )
        .await?;
    assert_eq!(
        (got, answer["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_session"))
    );
    let (got, answer) = service
        .post(
            &format!("/v1/sessions/{elsewhere}/claim"),
            json!({ "writer": "w" }),
        )
        .await?;
    assert_eq!(
        (got, answer["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_session"))
    );

    // A claim through the service fences the epoch it handed out before.
    let (got, claimed) = service
        .post(
            &format!("/v1/sessions/{session}/claim"),
            json!({ "writer": "second" }),
        )
        .await?;
    assert_eq!(got, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["epoch"], 2);
    let (got, answer) = service
        .post(
            &path,
            json!({ "epoch": 1, "events": [user_request(2, &id, "old epoch")] }),
        )
        .await?;
    assert_eq!(
        (got, answer["code"].as_str()),
        (StatusCode::CONFLICT, Some("fenced")),
        "{answer}"
    );
    assert_eq!(answer["current_epoch"], 2);

    // None of it reached the log: start and claim only.
    let histories = fold_topic(&service.log).await?;
    assert_eq!(
        histories.values().map(|h| h.verdicts.len()).sum::<usize>(),
        2
    );
    Ok(())
}
