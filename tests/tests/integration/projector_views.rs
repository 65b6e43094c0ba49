//! Trace spans, the context view and partition progress, as the projector process writes
//! them; and its `/metrics` and `/health` endpoints.

use anyhow::{Context, Result};
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{CallOutcome, Content, EffectClass, ResultSource, SessionEvent};
use sessionlog_session::context::RECENT_TURNS;
use sessionlog_testkit::projector::{
    assert_same_tables, event_log, replay_into, spawn_projector_with, store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plain HTTP/1.1 GET: status line and body.
async fn http_get(address: &str, path: &str) -> Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("status line")?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_context_view_progress_and_metrics() -> Result<()> {
    let stack = TestStack::new("pviews", 2).await?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut projector = spawn_projector_with(&stack, &["--listen", &listen])?;
    let log = event_log(&stack).await?;
    let store = store(&stack).await?;

    let (mut writer, _) = SessionWriter::create(log.clone(), "agent", Some("views")).await?;
    let session = writer.session_id();
    writer.user_request("find the bug").await?;
    writer
        .append(SessionEvent::PlanUpdated {
            plan: Content::plain("1. read 2. fix"),
        })
        .await?;
    let model = writer
        .append(SessionEvent::ModelResponse {
            model: "model-x".into(),
            tokens_in: 1200,
            tokens_out: 300,
            cost_micros: 4_500,
            started_at: sessionlog_testkit::projector::now_micros() - 250_000,
            content: Content::plain("let me look"),
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            provider: None,
        })
        .await?;
    let done_call = writer
        .append(SessionEvent::ToolCallRequested {
            tool: "grep".into(),
            arguments: Content::plain("bug"),
            effect: EffectClass::Pure,
            approval_id: None,
        })
        .await?;
    let result = writer
        .append(SessionEvent::ToolCallResult {
            call_seq: done_call.envelope.seq,
            outcome: CallOutcome::Failed,
            output: Content::plain("no match"),
            source: ResultSource::Executed,
            recorded_by: None,
            note: None,
        })
        .await?;
    let open_call = writer
        .append(SessionEvent::ToolCallRequested {
            tool: "deploy".into(),
            arguments: Content::plain("prod"),
            effect: EffectClass::NonIdempotent,
            approval_id: None,
        })
        .await?;
    writer.checkpoint(None).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    projector.assert_running()?;

    let spans = store.spans(session).await?;
    let kinds: Vec<(&str, &str)> = spans
        .iter()
        .map(|r| (r.span_kind.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("session", "agent"),
            ("model_call", "model-x"),
            ("tool_call", "grep"),
            ("tool_call", "deploy")
        ],
        "{spans:?}"
    );
    let root = &spans[0];
    assert_eq!((root.span_seq, root.parent_seq), (1, None));
    assert_eq!((root.end_us, root.outcome.as_str()), (None, "running"));
    let m = &spans[1];
    let SessionEvent::ModelResponse { started_at, .. } = model.envelope.event else {
        unreachable!("appended a model response")
    };
    assert_eq!(m.span_seq, model.envelope.seq as i64);
    assert_eq!(m.parent_seq, Some(1), "a model call hangs off the session");
    assert_eq!(
        (m.start_us, m.end_us),
        (started_at, Some(model.envelope.occurred_at))
    );
    assert_eq!(m.duration_us, Some(model.envelope.occurred_at - started_at));
    assert_eq!(
        (m.tokens_in, m.cost_micros, m.outcome.as_str()),
        (Some(1200), Some(4_500), "ok")
    );
    // Both ends of a model call are its one event.
    let at =
        |a: &sessionlog_producer::Appended| (Some(a.position.partition), Some(a.position.offset));
    assert_eq!((m.log_partition, m.open_offset), at(&model));
    assert_eq!(m.close_offset, at(&model).1);
    let t = &spans[2];
    assert_eq!(t.span_seq, done_call.envelope.seq as i64);
    assert_eq!(
        t.parent_seq,
        Some(model.envelope.seq as i64),
        "a tool call hangs off the model call before it"
    );
    assert_eq!(
        (t.start_us, t.end_us),
        (
            done_call.envelope.occurred_at,
            Some(result.envelope.occurred_at)
        )
    );
    assert_eq!(t.outcome, "failed");
    assert_eq!((t.log_partition, t.open_offset), at(&done_call));
    assert_eq!(
        t.close_offset,
        at(&result).1,
        "closed by its result's offset"
    );
    let open = &spans[3];
    assert_eq!(
        (open.end_us, open.close_offset, open.outcome.as_str()),
        (None, None, "pending")
    );
    assert_eq!(open.open_offset, at(&open_call).1);

    let search = |from_us, to_us, limit| sessionlog_store::SpanSearch {
        from_us,
        to_us,
        after: None,
        limit,
        tenant: None,
    };
    let end = open_call.envelope.occurred_at + 1;
    // The calls: the session's own span may start before or after the model call's (which
    // says it began 250 ms before it was recorded).
    let calls = |r: &sessionlog_store::DaySpanRow| r.span_kind != "session";
    let by_day = store
        .spans_between(&search(started_at, end, 100), calls)
        .await?
        .spans;
    let names: Vec<&str> = by_day.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["model-x", "grep", "deploy"],
        "the calls by start time, from the model call's start on"
    );
    assert!(by_day.iter().all(|r| r.agent.as_deref() == Some("agent")));
    assert!(
        by_day
            .iter()
            .all(|r| r.tenant.as_deref() == Some("default"))
    );
    let capped = store
        .spans_between(&search(started_at, end, 2), calls)
        .await?
        .spans;
    assert_eq!(capped, by_day[..2], "the first two of the same read");
    let after = sessionlog_store::SpanSearch {
        after: Some(by_day[0].order_key()),
        ..search(started_at, end, 100)
    };
    let rest = store.spans_between(&after, calls).await?.spans;
    assert_eq!(rest, by_day[1..], "after the first, the others");
    let grep = store
        .spans_between(&search(started_at, end, 100), |r| r.name == "grep")
        .await?
        .spans;
    assert_eq!(grep, by_day[1..2], "kept by the filter");
    let wide = store
        .spans_between(&search(i64::MIN, i64::MAX, 2), |_| true)
        .await;
    assert!(
        matches!(wide, Err(sessionlog_store::Error::SpanRangeTooWide { .. })),
        "{wide:?}"
    );

    let view = store
        .context_view_row(session)
        .await?
        .context("context view row")?;
    let (left_out, last_seq) = (view.left_out, view.last_seq);
    // The plan and the unresolved calls are the session's state's (the view row no longer
    // repeats them); a sealed plan opens for a reader with the key.
    let stored = store
        .load_session(session)
        .await?
        .context("session row")?
        .state;
    let stored_plan = stored.plan.clone().context("the state's plan")?;
    // The row stores the state compactly (no field a new session has as it is, none its
    // columns hold) and reads back as the fold's state, byte for byte in canonical form.
    assert_eq!(stored.canonical_json(), writer.state().canonical_json());
    let (state_json,): (Option<String>,) = store
        .cql()
        .query_unpaged(
            format!(
                "SELECT state_json FROM {}.sessions WHERE session_id = ?",
                store.keyspace()
            ),
            (session.0,),
        )
        .await?
        .into_rows_result()?
        .first_row()?;
    let state_json = state_json.context("a stored state")?;
    let as_stored: serde_json::Value = serde_json::from_str(&state_json)?;
    for held_elsewhere in ["session_id", "writer", "last_seq", "updated_at", "paused"] {
        assert!(as_stored.get(held_elsewhere).is_none(), "{state_json}");
    }
    assert!(state_json.len() < stored.canonical_json().len());
    let opener = log
        .keyring()
        .context("tests run encrypted")?
        .opener(session)
        .await?;
    assert_eq!(opener.text(&stored_plan).readable(), Some("1. read 2. fix"));
    assert_eq!(last_seq, writer.state().last_seq as i64);
    let window = store.load_context(session).await?.context("context view")?;
    assert!(
        window.recent.iter().all(|t| t.text.is_none() && t.sealed),
        "the projection holds no plain text: {window:?}"
    );
    let texts = sessionlog_testkit::opened_texts(&log, session, &window).await?;
    assert_eq!(
        texts,
        ["find the bug", "let me look", "bug", "no match", "prod"]
    );
    let unresolved = sessionlog_session::context::ContextWindow::unresolved_calls(&stored);
    assert_eq!(unresolved.len(), 1);
    assert_eq!(unresolved[0].seq, open_call.envelope.seq);
    assert_eq!(unresolved[0].tool, "deploy");
    // Stored without its zero counts (see store/src/stored.rs).
    let left_out: serde_json::Value = serde_json::from_str(&left_out)?;
    assert!(left_out.get("truncated_turns").is_none(), "{left_out}");
    assert_eq!(left_out["by_kind"]["Checkpoint"], 1);
    assert_eq!(left_out["by_kind"]["PlanUpdated"], 1);
    assert_eq!(left_out["by_kind"]["SessionStarted"], 1);

    let progress = store.load_progress(&stack.settings.kafka.topic).await?;
    let partition = writer.last_position().context("appended")?.partition;
    assert_eq!(
        progress.get(&partition),
        Some(&(writer.last_position().context("appended")?.offset + 1))
    );

    let events = writer.state().last_seq;
    let metrics = wait_for(
        "metrics to count the session",
        Duration::from_secs(30),
        || {
            let listen = listen.clone();
            async move {
                let (status, body) = http_get(&listen, "/metrics").await?;
                Ok((status == 200
                    && body.contains(&format!("sessionlog_projector_applied_total {events}"))
                    && body.contains("sessionlog_projector_lag_records"))
                .then_some(body))
            }
        },
    )
    .await?;
    assert!(
        metrics.contains(&format!("sessionlog_projector_consumed_total {events}")),
        "{metrics}"
    );
    assert!(
        metrics.contains("sessionlog_projector_apply_seconds_bucket"),
        "{metrics}"
    );
    for path in ["/health", "/health/ready"] {
        let (status, health) = http_get(&listen, path).await?;
        assert_eq!(status, 200, "{path}: {health}");
        assert!(health.contains("\"status\":\"ready\""), "{health}");
        assert!(health.contains("\"lag_records\""), "{health}");
    }
    let (status, live) = http_get(&listen, "/health/live").await?;
    assert_eq!(status, 200, "{live}");
    Ok(())
}

/// The context view keeps the last turns as rows, one write each; erasing the session deletes
/// every turn row and keeps the window's skeleton without text, the same as a clean replay.
#[tokio::test(flavor = "multi_thread")]
async fn the_context_window_slides_and_erasure_removes_every_text() -> Result<()> {
    let stack = TestStack::new("pturns", 1).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let store = store(&stack).await?;
    let (mut writer, _) =
        SessionWriter::create(Arc::clone(&log), "agent", Some("erase me")).await?;
    let session = writer.session_id();
    let turns = RECENT_TURNS + 4;
    for n in 0..turns {
        writer.user_request(&format!("turn {n}")).await?;
    }
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    let window = store.load_context(session).await?.context("context view")?;
    let texts = sessionlog_testkit::opened_texts(&log, session, &window).await?;
    let expected: Vec<String> = (turns - RECENT_TURNS..turns)
        .map(|n| format!("turn {n}"))
        .collect();
    assert_eq!(
        texts, expected,
        "the last {RECENT_TURNS} turns, oldest first"
    );
    assert_eq!(window.left_out.evicted_turns, 4);

    writer
        .append(SessionEvent::SessionErased {
            requested_by: "dpo".into(),
            reason: "right to be forgotten".into(),
        })
        .await?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    let window = store.load_context(session).await?.context("context view")?;
    assert_eq!(window.recent.len(), RECENT_TURNS);
    assert!(
        window
            .recent
            .iter()
            .all(|t| t.text.is_none() && t.sealed_text.is_none()),
        "{window:?}"
    );
    assert!(window.left_out.erased);
    let ks = store.keyspace().to_string();
    let stored: Vec<(i64, Option<String>)> = store
        .context_turns(session)
        .await?
        .into_iter()
        .map(|t| (t.seq as i64, t.text))
        .collect();
    assert_eq!(
        stored.len(),
        RECENT_TURNS,
        "older turn rows are deleted too"
    );
    assert!(stored.iter().all(|(_, text)| text.is_none()), "{stored:?}");

    let clean = format!("{ks}_clean");
    replay_into(&stack, &clean).await?;
    assert_same_tables(&store, &ks, &clean).await
}
