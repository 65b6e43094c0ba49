//! A framework's own state in the log, as the Python LangGraph checkpointer keeps it: a
//! `FrameworkStateSaved` appended through ingest is sealed in every byte of the topic, reads back
//! opened by range reads (`kinds=FrameworkStateSaved,EventRetracted`), is withdrawn by an
//! `EventRetracted`, and is inherited by a fork made over HTTP into a child id the caller chose
//! (`copy_thread`), which a second fork into the same id cannot take.

use anyhow::{Context, Result, ensure};
use rdkafka::message::Message;
use reqwest::Client;
use serde_json::{Value, json};
use sessionlog_testkit::ingest::{IngestInstance, user_request};
use sessionlog_testkit::projector::{every_record, store, wait_caught_up};
use sessionlog_testkit::{ServedProcess, TestStack};
use std::time::Duration;

const CATCH_UP: Duration = Duration::from_secs(120);

/// A `FrameworkStateSaved` event of an append request.
fn saved(seq: u64, key: &str, state: &str) -> Value {
    json!({
        "seq": seq,
        "event_id": uuid::Uuid::now_v7(),
        "kind": "FrameworkStateSaved",
        "data": { "framework": "langgraph", "key": key, "state": { "Plain": state } },
    })
}

/// A LangGraph checkpoint as the checkpointer serialises one: JSON around a base64 blob, tens
/// of KB (well under `[producer] max_event_bytes`), with `canary` inside.
fn checkpoint_state(canary: &str) -> String {
    let blob = "gAWVAAAAAAAAAAB9lCiMCG1lc3NhZ2VzlF2UdS4=".repeat(1_000);
    json!({"v": 1, "id": canary, "channel_values": {"messages": blob, "note": canary}}).to_string()
}

/// GETs `path` from `base` and answers the status and the JSON body.
async fn get(http: &Client, base: &str, path: &str) -> Result<(u16, Value)> {
    let response = http.get(format!("{base}{path}")).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.context("a JSON body")?))
}

/// Each event of a range read as (session_id, seq, kind, key of a saved state).
fn listed(page: &Value) -> Result<Vec<(String, u64, String, String)>> {
    page["events"]
        .as_array()
        .context("no events")?
        .iter()
        .map(|e| {
            Ok((
                e["session_id"].as_str().context("session_id")?.to_string(),
                e["seq"].as_u64().context("seq")?,
                e["kind"].as_str().context("kind")?.to_string(),
                e["event"]["FrameworkStateSaved"]["key"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect()
}

/// How many records the test's topic holds.
async fn records(stack: &TestStack) -> Result<usize> {
    Ok(every_record(stack, &stack.settings.kafka.topic, |_| ())
        .await?
        .len())
}

#[tokio::test(flavor = "multi_thread")]
async fn langgraph_state_is_sealed_read_back_retracted_and_inherited_by_a_chosen_fork() -> Result<()>
{
    let stack = TestStack::new("fw_state", 2).await?;
    let _projector = stack.spawn_projector()?;
    let ingest = IngestInstance::start(&stack).await?;
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = sessionlog_testkit::auth::client()?;

    let (status, created) = ingest
        .post("/v1/sessions", json!({"agent": "langgraph"}))
        .await?;
    ensure!(status == 201, "create: {status} {created}");
    let parent = created["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    let events = format!("/v1/sessions/{parent}/events");
    let append =
        |events_json: Vec<Value>| ingest.post(&events, json!({"epoch": 1, "events": events_json}));

    let canary = format!("CANARY-langgraph-{}", uuid::Uuid::now_v7());
    let state = checkpoint_state(&canary);
    let (key2, key4) = (
        "checkpoint::1ef4f797-0001",
        "writes::1ef4f797-0001:task-1:0",
    );
    let (status, answer) = append(vec![
        saved(2, key2, &state),
        user_request(3, &uuid::Uuid::now_v7(), "what the graph was asked"),
        saved(4, key4, r#"{"channel":"messages","value":"aGk="}"#),
    ])
    .await?;
    ensure!(status == 200, "the saved states: {status} {answer}");

    // Without a framework or a key nobody could find it again: refused, nothing appended.
    for (framework, key) in [("", "checkpoint::x"), ("langgraph", "")] {
        let mut event = saved(5, key, "{}");
        event["data"]["framework"] = json!(framework);
        let (status, problem) = append(vec![event]).await?;
        ensure!(
            status == 422 && problem["code"] == "invalid_event",
            "framework {framework:?}, key {key:?}: {status} {problem}"
        );
    }
    // The pending write withdrawn (prune, delete_thread): accepted at seq 5, still free.
    let (status, answer) = append(vec![json!({
        "seq": 5,
        "event_id": uuid::Uuid::now_v7(),
        "kind": "EventRetracted",
        "data": {"retracted_seq": 4, "retracted_by": "langgraph:prune"},
    })])
    .await?;
    ensure!(status == 200, "the retraction: {status} {answer}");

    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, CATCH_UP).await?;

    // Read back by kinds, opened: the whole state under its key, and the retraction.
    let (status, page) = get(
        &http,
        &recovery.base,
        &format!("/v1/sessions/{parent}/events?kinds=FrameworkStateSaved,EventRetracted"),
    )
    .await?;
    ensure!(status == 200, "range read: {status} {page}");
    let read: Vec<(u64, String, String)> = listed(&page)?
        .into_iter()
        .map(|(_, seq, kind, key)| (seq, kind, key))
        .collect();
    let expected = [
        (2, "FrameworkStateSaved".to_string(), key2.to_string()),
        (4, "FrameworkStateSaved".to_string(), key4.to_string()),
        (5, "EventRetracted".to_string(), String::new()),
    ];
    ensure!(read == expected, "range read: {read:?}");
    let first = &page["events"][0];
    ensure!(
        first["event"]["FrameworkStateSaved"]["state"] == json!({"Plain": state}),
        "the state read back differs: {}",
        first["event"]["FrameworkStateSaved"]["state"]
            .to_string()
            .chars()
            .take(200)
            .collect::<String>()
    );
    ensure!(
        first["unopened"].as_object().is_none_or(|u| u.is_empty()),
        "unopened: {}",
        first["unopened"]
    );
    ensure!(
        page["events"][2]["event"]["EventRetracted"]["retracted_seq"] == 4,
        "{}",
        page["events"][2]
    );

    // No byte of the topic holds the state in plain text: ingest sealed it.
    let topic = &stack.settings.kafka.topic;
    let hits = every_record(&stack, topic, {
        let canary = canary.clone().into_bytes();
        move |message| {
            let value = message.payload().unwrap_or_default();
            value.windows(canary.len()).any(|w| w == canary.as_slice())
        }
    })
    .await?;
    ensure!(!hits.is_empty(), "{topic} has records");
    ensure!(
        !hits.iter().any(|&hit| hit),
        "a record of {topic} holds the state in plain text"
    );

    // copy_thread: a fork over HTTP into the child id the caller chose.
    let child = uuid::Uuid::now_v7().to_string();
    let fork = |session_id: &str| {
        http.post(format!("{}/v1/sessions/{parent}/fork", recovery.base))
            .json(&json!({"at_seq": 5, "agent": "langgraph", "session_id": session_id}))
            .send()
    };
    let response = fork(&child).await?;
    let status = response.status().as_u16();
    let forked: Value = response.json().await?;
    ensure!(status == 200, "fork: {status} {forked}");
    ensure!(
        forked["session_id"] == child.as_str()
            && forked["event"]["session_id"] == child.as_str()
            && forked["event"]["seq"] == 1,
        "forked into another session: {forked}"
    );
    ensure!(
        forked["event"]["event"]["SessionForked"]["fork_point"]["parent_session_id"]
            == parent.as_str(),
        "{forked}"
    );

    // The child's inherited range read holds the parent's saved states (and their retraction).
    wait_caught_up(&stack, &store, CATCH_UP).await?;
    let (status, page) = get(
        &http,
        &recovery.base,
        &format!(
            "/v1/sessions/{child}/events?kinds=FrameworkStateSaved,EventRetracted&inherited=true"
        ),
    )
    .await?;
    ensure!(status == 200, "inherited range read: {status} {page}");
    let inherited: Vec<(String, u64, String)> = listed(&page)?
        .into_iter()
        .map(|(session, seq, _, key)| (session, seq, key))
        .collect();
    ensure!(
        inherited
            == [
                (parent.clone(), 2, key2.to_string()),
                (parent.clone(), 4, key4.to_string()),
                (parent.clone(), 5, String::new()),
            ],
        "inherited: {inherited:?}"
    );
    ensure!(
        page["events"][0]["event"]["FrameworkStateSaved"]["state"] == json!({"Plain": state}),
        "the inherited state does not open"
    );

    // The same fork again, or a fork into the parent's own id: 409, and nothing written.
    let before = records(&stack).await?;
    for taken in [&child, &parent] {
        let response = fork(taken).await?;
        let status = response.status().as_u16();
        let problem: Value = response.json().await?;
        ensure!(
            status == 409 && problem["code"] == "already_started",
            "a fork into {taken}: {status} {problem}"
        );
    }
    let after = records(&stack).await?;
    ensure!(
        before == after,
        "a refused fork wrote {} record(s)",
        after - before
    );

    // `sessionlog fork --child ID` does the same from the command line.
    let cli_child = uuid::Uuid::now_v7().to_string();
    for attempt in ["fresh", "taken"] {
        let output = stack
            .command(&[])?
            .args([
                "--json", "fork", &parent, "--at-seq", "2", "--child", &cli_child,
            ])
            .output()?;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        match attempt {
            "fresh" => {
                let printed: Value = serde_json::from_str(&stdout)
                    .with_context(|| format!("sessionlog fork: {stdout} {stderr}"))?;
                ensure!(
                    output.status.success() && printed["session_id"] == cli_child.as_str(),
                    "sessionlog fork --child: {} {stdout} {stderr}",
                    output.status
                );
            }
            _ => ensure!(
                !output.status.success() && format!("{stdout}{stderr}").contains("already"),
                "sessionlog fork --child into a taken id: {} {stdout} {stderr}",
                output.status
            ),
        }
    }
    Ok(())
}
