//! `sessionlog export-otlp` against a real trace server: Arize Phoenix, started by
//! `scripts/stack up --with-traces`. The example session and a tool-calling session are
//! exported and read back through Phoenix's own span API: every span present, with its
//! GenAI name and attributes, its parent and its duration. A re-export from the middle of a
//! session rebuilds it first and gives the same ids, which Phoenix keeps once; content goes
//! out only when asked for, and never for an erased session, even one erased while the export
//! is behind with its texts already opened. A running export serves its readiness (Kafka and
//! the receiver) and metrics with `--listen`.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use sessionlog_cli::example::run_example_session;
use sessionlog_export::{ExportOptions, span_id, trace_id};
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{Seq, SessionId, TerminalOutcome};
use sessionlog_testkit::projector::{event_log, store};
use sessionlog_testkit::traces::{started_at, tool_session};
use sessionlog_testkit::{ChildGuard, TestStack, free_address, metric_value, wait_for};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Phoenix's address, from the stack's environment.
pub(crate) fn phoenix() -> Result<(String, String)> {
    let url = std::env::var("SESSIONLOG_PHOENIX_URL");
    let endpoint = std::env::var("SESSIONLOG_OTLP_ENDPOINT");
    match (url, endpoint) {
        (Ok(url), Ok(endpoint)) => Ok((url, endpoint)),
        _ => bail!(
            "SESSIONLOG_PHOENIX_URL and SESSIONLOG_OTLP_ENDPOINT are not set: start the stack with \
             `scripts/stack up --with-traces` and source .stack/stack.env (scripts/test does both)"
        ),
    }
}

/// Runs `sessionlog export-otlp` in `stack`'s corner, as consumer group `group` (a suffix),
/// until it has caught up; its summary.
pub(crate) fn export(
    stack: &TestStack,
    endpoint: &str,
    project: &str,
    group: &str,
    extra: &[&str],
) -> Result<Value> {
    let output = stack
        .command(&[])?
        .args([
            "--json",
            "export-otlp",
            "--until-caught-up",
            "--endpoint",
            endpoint,
        ])
        .args(["--group", &format!("{}-otlp-{group}", stack.group)])
        .args(["--service-name", project])
        .args(extra)
        .env(
            "SESSIONLOG_PRIVACY__ENCRYPT",
            stack.settings.privacy.encrypt.to_string(),
        )
        // As in docker-compose, whose shared environment names recovery's signing key while
        // the export's container does not mount it: the export reads no signing key.
        .env(
            "SESSIONLOG_RECOVERY__SIGNING_KEY_FILE",
            "/nonexistent/sessionlog/recovery-key.pem",
        )
        .output()?;
    ensure!(
        output.status.success(),
        "export-otlp failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).context("export-otlp --json prints its summary")
}

/// Every span Phoenix holds in `project`, as it answers them (one entry per stored span).
pub(crate) async fn phoenix_spans(url: &str, project: &str) -> Result<Vec<Value>> {
    let http = reqwest::Client::new();
    let mut spans = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut address = reqwest::Url::parse(&format!("{url}/v1/projects/{project}/spans"))?;
        address.query_pairs_mut().append_pair("limit", "1000");
        if let Some(cursor) = &cursor {
            address.query_pairs_mut().append_pair("cursor", cursor);
        }
        let response = http.get(address).send().await?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            // The project appears with its first span.
            return Ok(spans);
        }
        let page: Value = response.error_for_status()?.json().await?;
        spans.extend(
            page["data"]
                .as_array()
                .context("Phoenix answers data[]")?
                .iter()
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
            _ => return Ok(spans),
        }
    }
}

/// Waits until Phoenix holds at least `count` spans in `project`; them by span id (hex),
/// failing if it holds any id twice.
async fn wait_for_spans(url: &str, project: &str, count: usize) -> Result<BTreeMap<String, Value>> {
    let spans = wait_for(
        &format!("Phoenix to hold {count} spans in project {project}"),
        Duration::from_secs(60),
        || async {
            let spans = phoenix_spans(url, project).await?;
            Ok((spans.len() >= count).then_some(spans))
        },
    )
    .await?;
    let mut by_id = BTreeMap::new();
    for span in spans {
        let id = span["context"]["span_id"]
            .as_str()
            .context("span_id")?
            .to_string();
        if let Some(earlier) = by_id.insert(id.clone(), span) {
            bail!("Phoenix holds span {id} twice: {earlier:#}");
        }
    }
    Ok(by_id)
}

/// An attribute of a span as Phoenix answers it: a flat dotted key, or nested objects.
fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    let attributes = &span["attributes"];
    attributes.get(key).or_else(|| {
        key.split('.')
            .try_fold(attributes, |value, part| value.get(part))
    })
}

/// Asserts each of `expected` is an attribute of `span` with that value.
fn has_attributes<const N: usize>(span: &Value, expected: [(&str, Value); N]) {
    for (key, value) in expected {
        assert_eq!(attribute(span, key), Some(&value), "{key} in {span:#}");
    }
}

/// The span Phoenix holds for the span `seq` opened in `session`.
fn span_of(spans: &BTreeMap<String, Value>, session: SessionId, seq: Seq) -> Result<&Value> {
    let id = span_id(session, seq).to_string();
    let span = spans
        .get(&id)
        .with_context(|| format!("no span {id} (seq {seq} of {session}) in Phoenix"))?;
    ensure!(
        span["context"]["trace_id"] == trace_id(session).to_string().as_str(),
        "span {id} is in another trace: {span:#}"
    );
    Ok(span)
}

/// Microseconds since the epoch of one of Phoenix's RFC 3339 times.
fn micros(value: &Value, key: &str) -> Result<i64> {
    let text = value[key]
        .as_str()
        .with_context(|| format!("{key} in {value}"))?;
    let nanos = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .with_context(|| format!("{key} {text:?}"))?
        .unix_timestamp_nanos();
    Ok(i64::try_from(nanos / 1_000)?)
}

/// The span's duration in microseconds, from Phoenix's RFC 3339 times.
fn duration_us(span: &Value) -> Result<i64> {
    Ok(micros(span, "end_time")? - micros(span, "start_time")?)
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_export_to_phoenix_as_genai_spans_once_whatever_the_re_exports() -> Result<()> {
    let (url, endpoint) = phoenix()?;
    let stack = TestStack::new("otlp", 2).await?;
    let _projector = stack.spawn_projector()?;
    let (example, example_events) = run_example_session(event_log(&stack).await?).await?;
    let example = example.session_id();
    let tools = tool_session(&stack).await?;
    let project = stack
        .settings
        .kafka
        .topic
        .replace("session-events-t-", "otlp-");

    // First a re-export from the second tool call's result, as if the export had stopped
    // there: the tool-calling session is met mid-way and rebuilt from the log. Phoenix keeps
    // the first copy of a span id, so the read call and the session it holds are these.
    let (_, read_result) = &tools.calls[1];
    let from = format!(
        "{}:{}",
        read_result.position.partition, read_result.position.offset
    );
    let midway = export(
        &stack,
        &endpoint,
        &project,
        "midway",
        &["--from-offsets", &from],
    )?;
    assert!(midway["rebuilt_sessions"].as_u64() >= Some(1), "{midway:#}");
    assert_eq!(midway["partial_sessions"], 0, "{midway:#}");

    let summary = export(&stack, &endpoint, &project, "all", &[])?;
    // The example: session, model call, tool call; the other: session, model call, two
    // tool calls (its steering is an event on its session span).
    assert_eq!(summary["spans"], 7, "{summary:#}");
    let spans = wait_for_spans(&url, &project, 7).await?;
    assert_eq!(spans.len(), 7, "{spans:#?}");

    // The tool-calling session's tree, names and GenAI attributes.
    let session = tools.session;
    let root = span_of(&spans, session, 1)?;
    assert_eq!(root["name"], "invoke_agent planner");
    assert_eq!(root["parent_id"], Value::Null, "{root:#}");
    assert_eq!(
        attribute(root, "gen_ai.operation.name"),
        Some(&Value::from("invoke_agent"))
    );
    assert_eq!(
        duration_us(root)?,
        tools.end.envelope.occurred_at - tools.start.envelope.occurred_at
    );
    let model = span_of(&spans, session, tools.model.envelope.seq)?;
    let root_id = span_id(session, 1).to_string();
    assert_eq!(model["name"], "chat model-x");
    assert_eq!(model["parent_id"], root_id.as_str());
    has_attributes(
        model,
        [
            ("gen_ai.operation.name", Value::from("chat")),
            ("gen_ai.provider.name", Value::from("openai")),
            ("gen_ai.request.model", Value::from("model-x")),
            ("gen_ai.response.model", Value::from("model-x")),
            ("gen_ai.usage.input_tokens", Value::from(1_200)),
            ("gen_ai.usage.output_tokens", Value::from(300)),
            ("gen_ai.conversation.id", Value::from(session.to_string())),
            (
                "sessionlog.log.offset",
                Value::from(tools.model.position.offset),
            ),
        ],
    );
    assert_eq!(
        duration_us(model)?,
        tools.model.envelope.occurred_at - started_at(&tools.model)
    );
    let model_id = span_id(session, tools.model.envelope.seq).to_string();
    for ((request, result), (tool, failed)) in
        tools.calls.iter().zip([("grep", false), ("read", true)])
    {
        let span = span_of(&spans, session, request.envelope.seq)?;
        assert_eq!(span["name"], format!("execute_tool {tool}").as_str());
        assert_eq!(span["parent_id"], model_id.as_str(), "{span:#}");
        assert_eq!(
            attribute(span, "gen_ai.tool.name"),
            Some(&Value::from(tool))
        );
        assert_eq!(
            attribute(span, "gen_ai.tool.call.id"),
            Some(&Value::from(request.envelope.event_id.to_string()))
        );
        assert_eq!(
            attribute(span, "error.type").is_some(),
            failed,
            "error.type on failures only: {span:#}"
        );
        assert_eq!(
            span["status_code"]
                .as_str()
                .map(|s| s.eq_ignore_ascii_case("error")),
            Some(failed),
            "{span:#}"
        );
        assert_eq!(
            duration_us(span)?,
            result.envelope.occurred_at - request.envelope.occurred_at
        );
        // Without --with-content, no text leaves.
        assert!(
            attribute(span, "gen_ai.tool.call.arguments").is_none(),
            "{span:#}"
        );
    }
    // Steering is an event on the session span, at the time it was steered, naming its seq.
    let steering_seq = tools.steering.envelope.seq;
    assert!(
        span_of(&spans, session, steering_seq).is_err(),
        "steering is not a span of its own"
    );
    let events = root["events"].as_array().context("events of the root")?;
    ensure!(
        events.len() == 1 && events[0]["name"] == "steering",
        "{root:#}"
    );
    assert_eq!(
        attribute(&events[0], "sessionlog.event.seq"),
        Some(&Value::from(steering_seq)),
        "{root:#}"
    );
    assert_eq!(
        micros(&events[0], "timestamp")?,
        tools.steering.envelope.occurred_at
    );

    // The example session: its root, its model call (whose event names no provider) and the
    // tool call that hangs off it, each as long as the events say.
    let at = |seq: Seq| -> Result<&sessionlog_producer::Appended> {
        example_events
            .iter()
            .find(|a| a.envelope.seq == seq)
            .with_context(|| format!("example event {seq}"))
    };
    let (example_root, example_model, example_tool) = (
        span_of(&spans, example, 1)?,
        span_of(&spans, example, 3)?,
        span_of(&spans, example, 4)?,
    );
    let last = example_events.last().context("the example's end")?;
    assert_eq!(example_root["name"], "invoke_agent example-harness");
    assert_eq!(example_root["parent_id"], Value::Null);
    assert_eq!(
        attribute(example_root, "gen_ai.agent.name"),
        Some(&Value::from("example-harness"))
    );
    assert_eq!(
        duration_us(example_root)?,
        last.envelope.occurred_at - at(1)?.envelope.occurred_at
    );
    assert_eq!(example_model["name"], "chat example-model");
    assert_eq!(
        example_model["parent_id"],
        span_id(example, 1).to_string().as_str()
    );
    has_attributes(
        example_model,
        [
            ("gen_ai.operation.name", Value::from("chat")),
            ("gen_ai.provider.name", Value::from("unknown")),
            ("gen_ai.request.model", Value::from("example-model")),
            ("gen_ai.usage.input_tokens", Value::from(1_250)),
            ("gen_ai.usage.output_tokens", Value::from(310)),
            ("gen_ai.conversation.id", Value::from(example.to_string())),
        ],
    );
    assert_eq!(
        duration_us(example_model)?,
        at(3)?.envelope.occurred_at - started_at(at(3)?)
    );
    assert_eq!(example_tool["name"], "execute_tool shell");
    assert_eq!(
        example_tool["parent_id"],
        span_id(example, 3).to_string().as_str()
    );
    assert_eq!(
        duration_us(example_tool)?,
        at(5)?.envelope.occurred_at - at(4)?.envelope.occurred_at
    );

    // Everything again, and one more session after it, whose span arriving says Phoenix has
    // taken the re-sent ones before it: it still holds one copy of each.
    let (writer, _) = SessionWriter::create(event_log(&stack).await?, "closer", None).await?;
    let mut writer = writer;
    writer.close(TerminalOutcome::Completed, None).await?;
    let again = export(&stack, &endpoint, &project, "all", &["--from-beginning"])?;
    assert_eq!(again["spans"], 8, "{again:#}");
    let closer = span_id(writer.session_id(), 1).to_string();
    let after = wait_for(
        "the closer's span in Phoenix",
        Duration::from_secs(60),
        || async {
            let spans = phoenix_spans(&url, &project).await?;
            Ok(spans
                .iter()
                .any(|s| s["context"]["span_id"] == closer.as_str())
                .then_some(()))
        },
    )
    .await;
    after?;
    assert_eq!(wait_for_spans(&url, &project, 8).await?.len(), 8);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn content_goes_out_only_when_asked_and_never_for_an_erased_session() -> Result<()> {
    let (url, endpoint) = phoenix()?;
    // Sessions of their own: Phoenix keeps the first copy of a span id, in whatever project.
    // Without encryption, so that an erased session's texts are still readable in the log and
    // only the export's own check keeps them out.
    let mut stack = TestStack::new("otlp_content", 2).await?;
    stack.settings.privacy.encrypt = false;
    let _projector = stack.spawn_projector()?;
    let (example, _) = run_example_session(event_log(&stack).await?).await?;
    let example = example.session_id();
    let tools = tool_session(&stack).await?;
    let session = tools.session;
    let project = stack
        .settings
        .kafka
        .topic
        .replace("session-events-t-", "otlp-");
    let erased = stack
        .command(&[])?
        .args(["erase", &example.to_string(), "--reason", "otlp test"])
        .env("SESSIONLOG_PRIVACY__ENCRYPT", "false")
        .output()?;
    ensure!(
        erased.status.success(),
        "erase: {}",
        String::from_utf8_lossy(&erased.stderr)
    );
    let store = store(&stack).await?;
    wait_for(
        "the erasure to be projected",
        Duration::from_secs(60),
        || async {
            Ok((store.session_status(example).await?.as_deref() == Some("erased")).then_some(()))
        },
    )
    .await?;
    export(&stack, &endpoint, &project, "content", &["--with-content"])?;
    let spans = wait_for_spans(&url, &project, 7).await?;
    let grep = span_of(&spans, session, tools.calls[0].0.envelope.seq)?;
    assert_eq!(
        attribute(grep, "gen_ai.tool.call.arguments"),
        Some(&Value::from("{}"))
    );
    assert_eq!(
        attribute(grep, "gen_ai.tool.call.result"),
        Some(&Value::from("out"))
    );
    let said = attribute(
        span_of(&spans, session, tools.model.envelope.seq)?,
        "gen_ai.output.messages",
    );
    assert!(
        said.and_then(Value::as_str)
            .is_some_and(|m| m.contains("grep, then read")),
        "{said:?}"
    );
    for seq in [3, 4] {
        let span = span_of(&spans, example, seq)?;
        for key in [
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(
                attribute(span, key).is_none(),
                "{key} of an erased session: {span:#}"
            );
        }
    }
    Ok(())
}

/// Starts a long-running `sessionlog export-otlp --listen` to `endpoint` in `stack`'s corner;
/// its process and the address it serves `/metrics` and `/health` on.
fn running_export(stack: &TestStack, endpoint: &str, group: &str) -> Result<(ChildGuard, String)> {
    let listen = free_address()?;
    let child = stack
        .command(&[])?
        .args(["export-otlp", "--endpoint", endpoint, "--listen", &listen])
        .args(["--group", &format!("{}-otlp-{group}", stack.group)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("spawning sessionlog export-otlp")?;
    Ok((ChildGuard(child), format!("http://{listen}")))
}

/// `/health/ready` once it answers with `status`: its body.
async fn readiness(base: &str, status: u16) -> Result<Value> {
    let http = reqwest::Client::new();
    let url = format!("{base}/health/ready");
    wait_for(
        &format!("{url} to answer {status}"),
        Duration::from_secs(60),
        || {
            let request = http.get(&url).send();
            async move {
                match request.await {
                    Ok(answer) if answer.status() == status => Ok(Some(answer.json().await?)),
                    _ => Ok(None),
                }
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_export_serves_its_readiness_and_counts_what_it_sends() -> Result<()> {
    let (_, endpoint) = phoenix()?;
    let stack = TestStack::new("otlp_listen", 1).await?;
    let (mut export, base) = running_export(&stack, &endpoint, "listen")?;
    let ready = readiness(&base, 200).await?;
    ensure!(
        ready["checks"]["kafka"]["ok"] == true && ready["checks"]["receiver"]["ok"] == true,
        "{ready:#}"
    );

    // A session of 4 spans (session, model call, two tool calls; its steering is an event on
    // the session span) is sent and counted.
    tool_session(&stack).await?;
    let http = reqwest::Client::new();
    // The spans are counted as the receiver takes them, the records once the batch is
    // committed after that: wait for both (a page read in between had the spans alone).
    wait_for(
        "the export to count the session's spans and its records in /metrics",
        Duration::from_secs(90),
        || {
            let request = http.get(format!("{base}/metrics")).send();
            async move {
                let page = request.await?.text().await?;
                Ok(
                    (metric_value(&page, "sessionlog_export_spans_total") >= Some(4.0)
                        && metric_value(&page, "sessionlog_export_records_total") >= Some(7.0))
                    .then_some(()),
                )
            }
        },
    )
    .await?;
    export.assert_running()?;

    // An export whose receiver does not answer is not ready, and says why.
    let nowhere = format!("http://{}/v1/traces", free_address()?);
    let (_stuck, stuck_base) = running_export(&stack, &nowhere, "nowhere")?;
    let not_ready = readiness(&stuck_base, 503).await?;
    ensure!(
        not_ready["checks"]["receiver"]["ok"] == false
            && not_ready["checks"]["kafka"]["ok"] == true,
        "{not_ready:#}"
    );
    Ok(())
}

/// What every text of the erasure test starts with: the receiver must hold none of the erased
/// session's.
const CANARY: &str = "CANARY-";

/// A session whose every text is `{prefix}{field}`: a request, a model's answer (a span with
/// content), a tool call with arguments and a result (another), then its end.
async fn text_session(stack: &TestStack, prefix: &str) -> Result<SessionId> {
    use sessionlog_schemas::{CallOutcome, Content, EffectClass, ResultSource, SessionEvent};
    let text = |field: &str| Content::plain(format!("{prefix}{field}"));
    let (mut writer, _) = SessionWriter::create(event_log(stack).await?, "writer", None).await?;
    writer
        .append(SessionEvent::UserRequest {
            content: text("request"),
        })
        .await?;
    writer
        .append(SessionEvent::ModelResponse {
            model: "model-x".into(),
            tokens_in: 10,
            tokens_out: 5,
            cost_micros: 1,
            started_at: sessionlog_schemas::now_micros(),
            content: text("output"),
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            provider: None,
        })
        .await?;
    let call = writer
        .append(SessionEvent::ToolCallRequested {
            tool: "grep".into(),
            arguments: text("arguments"),
            effect: EffectClass::Pure,
            approval_id: None,
        })
        .await?;
    writer
        .append(SessionEvent::ToolCallResult {
            call_seq: call.envelope.seq,
            outcome: CallOutcome::Succeeded,
            output: text("result"),
            source: ResultSource::Executed,
            recorded_by: None,
            note: None,
        })
        .await?;
    writer.close(TerminalOutcome::Completed, None).await?;
    Ok(writer.session_id())
}

/// A receiver in front of Phoenix that holds the first request it gets until released, then
/// answers it 503, as a receiver in trouble does: the export stays behind, with a batch it
/// built and the log after it still to read, while the test acts. Every other request goes to
/// Phoenix as it came. Its endpoint, and the signals it was held and to let it go.
async fn holding_receiver(phoenix: String) -> Result<(String, Arc<Notify>, Arc<Notify>)> {
    let (held, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let http = reqwest::Client::new();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post({
            let (held, release) = (Arc::clone(&held), Arc::clone(&release));
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                use axum::http::StatusCode;
                if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    held.notify_one();
                    release.notified().await;
                    return (StatusCode::SERVICE_UNAVAILABLE, Vec::new());
                }
                let mut forward = http.post(&phoenix).body(body.to_vec());
                if let Some(kind) = headers.get("content-type").and_then(|v| v.to_str().ok()) {
                    forward = forward.header("content-type", kind);
                }
                match forward.send().await {
                    Ok(answer) => (
                        StatusCode::from_u16(answer.status().as_u16())
                            .unwrap_or(StatusCode::BAD_GATEWAY),
                        answer.bytes().await.map(|b| b.to_vec()).unwrap_or_default(),
                    ),
                    Err(_) => (StatusCode::BAD_GATEWAY, Vec::new()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{address}/v1/traces"), held, release))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_erasure_while_the_export_is_behind_keeps_the_sessions_text_from_the_receiver()
-> Result<()> {
    let (url, endpoint) = phoenix()?;
    // One partition: the erased session's records, then the kept one's, in that order. With
    // encryption on (the default): the export opens the texts with the session's data key.
    let stack = TestStack::new("otlp_erasure", 1).await?;
    ensure!(stack.settings.privacy.encrypt);
    let erased = text_session(&stack, &format!("{CANARY}erased-")).await?;
    let kept = text_session(&stack, "KEPT-").await?;
    let project = stack
        .settings
        .kafka
        .topic
        .replace("session-events-t-", "otlp-");

    // One record per batch: the export opens the erased session's texts with its key, sends
    // the model call's span (with its output) and is held there, its session's tool call
    // and end still to read.
    let (through, held, release) = holding_receiver(endpoint).await?;
    let options = ExportOptions {
        endpoint: through,
        group_id: format!("{}-otlp-erasure", stack.group),
        with_content: true,
        until_caught_up: true,
        service_name: project.clone(),
        batch_max: 1,
        request_timeout: Duration::from_secs(120),
        ..ExportOptions::default()
    };
    let settings = stack.settings.clone();
    let running = tokio::spawn(async move {
        sessionlog_export::export(&settings, options, std::future::pending()).await
    });
    tokio::time::timeout(Duration::from_secs(120), held.notified())
        .await
        .context("the export's first request never reached the receiver")?;

    // The erasure, by another process, while the export is behind.
    let output = stack.sessionlog(&["erase", &erased.to_string(), "--reason", "otlp behind"])?;
    ensure!(
        output.status.success(),
        "erase: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    release.notify_one();
    let summary = tokio::time::timeout(Duration::from_secs(180), running)
        .await
        .context("the export did not finish")???;
    assert_eq!(summary.spans, 6, "{summary:?}");
    // The model call's span, built with its output before the erasure and sent again after
    // it, went without it; the rest of the session was not opened again.
    assert_eq!(summary.content_withheld, 1, "{summary:?}");

    // Every span of both sessions arrived; none holds a text of the erased session, whose
    // spans keep their shape without their content, while the kept session's carry theirs.
    let spans = wait_for_spans(&url, &project, 6).await?;
    for (id, span) in &spans {
        let text = span.to_string();
        assert!(
            !text.contains(CANARY),
            "span {id} holds erased text: {span:#}"
        );
    }
    for seq in [1, 3, 4] {
        let span = span_of(&spans, erased, seq)?;
        for key in [
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(attribute(span, key).is_none(), "{key}: {span:#}");
        }
    }
    let said = attribute(span_of(&spans, kept, 3)?, "gen_ai.output.messages");
    assert!(
        said.and_then(Value::as_str)
            .is_some_and(|m| m.contains("KEPT-output")),
        "{said:?}"
    );
    assert_eq!(
        attribute(span_of(&spans, kept, 4)?, "gen_ai.tool.call.result"),
        Some(&Value::from("KEPT-result"))
    );
    Ok(())
}
