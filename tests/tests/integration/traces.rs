//! A session's trace for analytics consumers: the span tree the projector writes, served by
//! `GET /v1/sessions/{id}/trace` from a `serve-recovery` process and drawn by
//! `sessionlog trace`, each span traced back to the log offsets of its events.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use sessionlog_http::auth::Grant;
use sessionlog_log::Role;
use sessionlog_schemas::SessionId;
use sessionlog_testkit::projector::{now_micros, store};
use sessionlog_testkit::traces::{started_at, tool_session};
use sessionlog_testkit::{ServedProcess, TestStack, wait_for};
use std::time::Duration;

/// Runs `sessionlog` with `args` in `stack`'s corner.
fn cli(stack: &TestStack, args: &[&str]) -> Result<std::process::Output> {
    stack.sessionlog(args)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_calling_session_reads_back_as_a_span_tree_and_usage_over_http_and_the_cli()
-> Result<()> {
    let stack = TestStack::new("traces", 2).await?;
    let _projector = stack.spawn_projector()?;
    let written = tool_session(&stack).await?;
    let id = written.session.to_string();
    let store = store(&stack).await?;
    // The session's span is closed by its last event: once it is, every span is written.
    wait_for(
        "the session span to close",
        Duration::from_secs(60),
        || async {
            let spans = store.spans(written.session).await?;
            Ok(spans
                .iter()
                .any(|s| s.span_kind == "session" && s.end_seq.is_some())
                .then_some(()))
        },
    )
    .await?;

    // The bucket count is the keyspace's: another one is refused, saying what to do.
    store.fix_trace_day_buckets(16).await?;
    let refused = store.fix_trace_day_buckets(8).await;
    let Err(sessionlog_store::Error::TraceDayBucketsDiffer {
        stored: 16,
        wanted: 8,
        ..
    }) = refused
    else {
        anyhow::bail!("another bucket count was not refused: {refused:?}");
    };

    let service = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = sessionlog_testkit::auth::client()?;
    let get = |path: String| {
        let (http, base) = (http.clone(), service.base.clone());
        async move {
            let response = http.get(format!("{base}{path}")).send().await?;
            let status = response.status().as_u16();
            let body: Value = response.json().await.context("a JSON body")?;
            Ok::<_, anyhow::Error>((status, body))
        }
    };
    let (status, trace) = get(format!("/v1/sessions/{id}/trace")).await?;
    ensure!(status == 200, "{status} {trace}");
    assert_eq!(trace["session_id"], id.as_str());
    assert_eq!(trace["span_count"], 5, "{trace:#}");
    let roots = trace["spans"].as_array().context("spans")?;
    assert_eq!(roots.len(), 1, "one root: {trace:#}");
    let root = &roots[0];
    assert_eq!(
        (&root["span_kind"], &root["name"], &root["outcome"]),
        (
            &Value::from("session"),
            &Value::from("planner"),
            &Value::from("completed")
        )
    );
    assert_eq!(root["tokens_in"], 1_200, "the session's totals on its span");
    assert_eq!(root["cost_micros"], 4_500);
    assert_eq!(root["close_offset"], written.end.position.offset);
    assert_eq!(root["log_partition"], written.end.position.partition);
    let under_root: Vec<(&str, &str)> = root["children"]
        .as_array()
        .context("children")?
        .iter()
        .map(|c| {
            (
                c["span_kind"].as_str().unwrap_or(""),
                c["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        under_root,
        [("model_call", "model-x"), ("steering", "steering")]
    );
    let model = &root["children"][0];
    assert_eq!(model["span_seq"], written.model.envelope.seq);
    assert_eq!(model["open_offset"], written.model.position.offset);
    assert_eq!(model["close_offset"], written.model.position.offset);
    assert_eq!(
        model["duration_us"],
        written.model.envelope.occurred_at - started_at(&written.model)
    );
    let tools = model["children"]
        .as_array()
        .context("the model call's tools")?;
    assert_eq!(tools.len(), 2, "{model:#}");
    for ((request, result), (tool, outcome)) in written
        .calls
        .iter()
        .zip([("grep", "succeeded"), ("read", "failed")])
    {
        let span = tools
            .iter()
            .find(|t| t["span_seq"] == request.envelope.seq)
            .with_context(|| format!("no span for {tool}"))?;
        assert_eq!(
            (span["name"].as_str(), span["outcome"].as_str()),
            (Some(tool), Some(outcome))
        );
        assert_eq!(span["parent_seq"], written.model.envelope.seq);
        assert_eq!(span["open_offset"], request.position.offset);
        assert_eq!(span["close_offset"], result.position.offset);
        assert_eq!(
            span["duration_us"],
            result.envelope.occurred_at - request.envelope.occurred_at
        );
    }
    let steering = &root["children"][1];
    assert_eq!(steering["open_offset"], written.steering.position.offset);
    assert!(
        !trace.to_string().contains("someone"),
        "who steered is not in the trace"
    );

    // Bad input: a problem, never a 500; an unknown session is a 404.
    let (status, problem) = get("/v1/sessions/not-a-uuid/trace".into()).await?;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("bad_session_id"))
    );
    let (status, problem) = get(format!("/v1/sessions/{}/trace", SessionId::new())).await?;
    assert_eq!(
        (status, problem["code"].as_str()),
        (404, Some("unknown_session"))
    );

    // The CLI reads the same tree from the projection, and draws it.
    let json = cli(&stack, &["trace", &id, "--json"])?;
    ensure!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let printed: Value = serde_json::from_slice(&json.stdout)?;
    assert_eq!(printed, trace, "the CLI's --json is the API's answer");
    let drawn = cli(&stack, &["trace", &id])?;
    ensure!(
        drawn.status.success(),
        "{}",
        String::from_utf8_lossy(&drawn.stderr)
    );
    let text = String::from_utf8(drawn.stdout)?;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2 + 5,
        "a title, a header and a line per span:\n{text}"
    );
    assert!(lines[2].starts_with("session planner") && lines[2].contains("completed"));
    assert!(lines[3].starts_with("  model_call model-x") && lines[3].contains("1200/300"));
    assert!(lines[4].starts_with("    tool_call grep") && lines[4].contains("succeeded"));
    assert!(lines[5].starts_with("    tool_call read") && lines[5].contains("failed"));
    assert!(lines[6].starts_with("  steering steering"));
    let unknown = cli(&stack, &["trace", &SessionId::new().to_string()])?;
    assert!(!unknown.status.success(), "an unknown session is an error");

    // Usage from the rollups: the same calls, by model, tool, agent and day.
    let day = sessionlog_session::trace::day_of(started_at(&written.model));
    let usage = |by: &str| get(format!("/v1/usage?from={day}&to={day}&by={by}"));
    let (status, by_model) = usage("model").await?;
    ensure!(status == 200, "{status} {by_model}");
    let line = &by_model["lines"][0];
    assert_eq!(
        by_model["lines"].as_array().map(Vec::len),
        Some(1),
        "{by_model}"
    );
    assert_eq!(
        (&line["key"], &line["calls"]),
        (&Value::from("model-x"), &Value::from(1))
    );
    assert_eq!(
        (&line["tokens_in"], &line["tokens_out"]),
        (&Value::from(1_200), &Value::from(300))
    );
    assert_eq!(line["cost_micros"], 4_500);
    let p50 = line["latency_p50_us"].as_f64().context("a median")?;
    let exact = (written.model.envelope.occurred_at - started_at(&written.model)) as f64;
    assert!(
        (p50 - exact).abs() / exact < 0.03,
        "median {p50} against {exact}"
    );
    let (_, by_tool) = usage("tool").await?;
    let tools: Vec<(&str, u64, u64)> = by_tool["lines"]
        .as_array()
        .context("lines")?
        .iter()
        .map(|l| {
            let n = |f: &str| l[f].as_u64().unwrap_or(u64::MAX);
            (l["key"].as_str().unwrap_or(""), n("calls"), n("errors"))
        })
        .collect();
    assert_eq!(tools, [("grep", 1, 0), ("read", 1, 1)]);
    let (_, by_agent) = usage("agent").await?;
    let agent = &by_agent["lines"][0];
    assert_eq!(
        (&agent["key"], &agent["calls"]),
        (&Value::from("planner"), &Value::from(3))
    );
    assert_eq!(
        (&agent["errors"], &agent["cost_micros"]),
        (&Value::from(1), &Value::from(4_500))
    );
    let (_, by_day) = usage("day").await?;
    assert_eq!(
        (&by_day["lines"][0]["key"], &by_day["lines"][0]["calls"]),
        (&Value::from(day.as_str()), &Value::from(3))
    );
    for (query, code) in [
        (format!("by=model&to={day}"), "bad_query"),
        (format!("from={day}&by=cost"), "bad_query"),
        (format!("from={day}&colour=red"), "bad_query"),
        ("from=yesterday".into(), "bad_range"),
        ("from=2026-01-02&to=2026-01-01".into(), "bad_range"),
        ("from=2020-01-01&to=2026-01-01".into(), "bad_range"),
    ] {
        let (status, problem) = get(format!("/v1/usage?{query}")).await?;
        assert_eq!(
            (status, problem["code"].as_str()),
            (400, Some(code)),
            "{query}: {problem}"
        );
    }
    // Every session's spans by time: all of this one's, in start order, a page at a time.
    let rfc3339 = |micros: i64| -> Result<String> {
        let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)?;
        Ok(time.format(&time::format_description::well_known::Rfc3339)?)
    };
    let (from, to) = (
        rfc3339(written.start.envelope.occurred_at - 60_000_000)?,
        rfc3339(now_micros() + 60_000_000)?,
    );
    let spans_of = |query: String| {
        let get = &get;
        let (from, to) = (from.clone(), to.clone());
        async move {
            let (status, page) = get(format!("/v1/spans?from={from}&to={to}&{query}")).await?;
            ensure!(status == 200, "{query}: {status} {page}");
            Ok::<_, anyhow::Error>(page)
        }
    };
    let all = spans_of(String::new()).await?;
    let names = |page: &Value| -> Vec<String> {
        page["spans"]
            .as_array()
            .map(|spans| {
                spans
                    .iter()
                    .map(|s| s["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        names(&all),
        ["planner", "model-x", "grep", "read", "steering"],
        "{all:#}"
    );
    assert!(all["next_cursor"].is_null(), "one page holds them");
    let starts: Vec<i64> = all["spans"]
        .as_array()
        .context("spans")?
        .iter()
        .filter_map(|s| s["start_us"].as_i64())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "by start: {starts:?}"
    );
    let mut paged = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let page = spans_of(format!("limit=2{cursor}")).await?;
        paged.extend(names(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(paged, names(&all), "pages of two add up to the whole");
    let every = names(&all);
    for (filter, want) in [
        ("tool=grep", vec!["grep"]),
        ("model=model-x", vec!["model-x"]),
        ("outcome=failed", vec!["read"]),
        ("agent=planner", every.iter().map(String::as_str).collect()),
        ("agent=someone-else", vec![]),
    ] {
        assert_eq!(names(&spans_of(filter.into()).await?), want, "{filter}");
    }
    for (query, code) in [
        (format!("to={to}"), "bad_query"),
        (format!("from=yesterday&to={to}"), "bad_range"),
        (format!("from={to}&to={from}"), "bad_range"),
        (
            "from=2026-01-01T00:00:00Z&to=2026-06-01T00:00:00Z".into(),
            "bad_range",
        ),
        (format!("from={from}&limit=0"), "bad_limit"),
        (format!("from={from}&limit=lots"), "bad_limit"),
        (format!("from={from}&cursor=abc"), "bad_cursor"),
        (format!("from={from}&colour=red"), "bad_query"),
    ] {
        let (status, problem) = get(format!("/v1/spans?{query}")).await?;
        assert_eq!(
            (status, problem["code"].as_str()),
            (400, Some(code)),
            "{query}: {problem}"
        );
    }

    // Another tenant's credential sees none of it; the session's own tenant sees it all.
    for (tenant, calls) in [("globex", None), ("default", Some(3))] {
        let token = sessionlog_testkit::auth::mint(&Grant {
            tenant: Some(tenant.into()),
            ..Grant::new("someone", &Role::ALL, Duration::from_secs(600))
        })?;
        let report: Value = sessionlog_testkit::auth::client_with(&token)?
            .get(format!("{}/v1/usage?from={day}&by=agent", service.base))
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(
            report["lines"][0]["calls"].as_u64(),
            calls,
            "{tenant}: {report}"
        );
    }
    let json = cli(&stack, &["usage", "--from", &day, "--by", "tool", "--json"])?;
    ensure!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    assert_eq!(serde_json::from_slice::<Value>(&json.stdout)?, by_tool);
    let table = cli(&stack, &["usage", "--from", &day, "--by", "agent"])?;
    let table = String::from_utf8(table.stdout)?;
    let total = table.lines().last().unwrap_or_default();
    assert!(
        total.starts_with("TOTAL") && total.contains(" 3 "),
        "{table}"
    );
    Ok(())
}
