//! Trace read benchmark, against the running stack (`scripts/stack up`): how fast the
//! recovery service answers analytics consumers.
//!
//! It writes one session of `--spans` spans (a root, model calls and the tool calls they ask
//! for) and `--days` sessions of `--calls-per-day` model calls, one session per UTC day back
//! from today, has a `sessionlog project` process project them, and serves them with
//! `sessionlog serve-recovery` (authentication on). Each round then measures, in alternating
//! order:
//!
//! 1. `GET /v1/sessions/{id}/trace` of the big session (ours) against reading the same span
//!    rows straight from CQL through the store (the reference: the floor the route builds on):
//!    p50 and p99 of `--requests` requests each, and the ratio of the p99s (goal: ours ≤ 50 ms);
//! 2. `GET /v1/usage` over the `--days` days by model (ours, from the rollups) against paging
//!    `GET /v1/spans` over the same days and adding the model calls up (the reference: what a
//!    client did without rollups). Both must count the same calls; the ratio of their medians
//!    shows the rollups answer without scanning spans.
//!
//! `cargo run --release -p sessionlog-benches --bin sessionlog-bench -- trace-read --rounds 5`

use crate::{Latencies, Spread, Watched, print_table};
use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use serde_json::Value;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, ResultSource, SessionEvent, SessionId, TerminalOutcome,
};
use sessionlog_testkit::{free_address, wait_ready};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog serve-recovery: trace and usage reads vs the reads under them")]
pub struct Args {
    /// Rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Spans of the big session (at least 3).
    #[arg(long, default_value_t = 1_000)]
    spans: usize,
    /// Trace requests per reader per round.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Days of usage.
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Model calls per day.
    #[arg(long, default_value_t = 200)]
    calls_per_day: usize,
    /// Usage requests per round (the span scans are a fifth of it, at least one).
    #[arg(long, default_value_t = 20)]
    usage_requests: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Keep the run's topic and keyspace.
    #[arg(long)]
    keep: bool,
}

const DAY_US: i64 = 86_400_000_000;

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.spans < 3 || args.rounds == 0 || args.days < 1 || args.days > 31 {
        bail!("--spans must be at least 3, --rounds at least 1, --days 1 to 31");
    }
    let run = crate::ServiceRun::prepare("traceread", args.partitions).await?;
    let (settings, store) = (&run.settings, &run.store);
    let projector = Watched::spawn(run.command(&["project"])?)?;

    let log = Arc::new(EventLog::from_settings(settings).await?);
    let big = big_session(&log, args.spans).await?;
    let calls = daily_sessions(&log, &args).await?;
    log.flush(Duration::from_secs(30)).await?;
    let took = crate::wait_projected(settings, store).await?;
    eprintln!("written and projected ({:.1} s)", took.as_secs_f64());

    let listen = free_address()?;
    let service = Watched::spawn(run.command(&["serve-recovery", "--listen", &listen])?)?;
    let base = format!("http://{listen}");
    let http = run.client(8, Duration::from_secs(60))?;
    wait_ready(&http, &base).await?;

    let today = sessionlog_session::trace::day_of(sessionlog_schemas::now_micros());
    let first = sessionlog_session::trace::day_of(
        sessionlog_schemas::now_micros() - (args.days - 1) * DAY_US,
    );
    let mut rows = Vec::new();
    let (mut trace_ratios, mut trace_p99s, mut usage_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        // Alternate which reader goes first, so neither always meets the warmer caches.
        let ours_first = round % 2 == 1;
        let (mut ours, mut reference) = (Latencies::default(), Latencies::default());
        for pass in 0..2 {
            if (pass == 0) == ours_first {
                for _ in 0..args.requests {
                    let started = Instant::now();
                    let answer = http
                        .get(format!("{base}/v1/sessions/{big}/trace"))
                        .send()
                        .await?;
                    ensure!(answer.status().is_success(), "trace: {}", answer.status());
                    let trace: Value = answer.json().await?;
                    ours.record(started.elapsed());
                    ensure!(
                        trace["span_count"] == args.spans,
                        "span_count {}",
                        trace["span_count"]
                    );
                }
            } else {
                for _ in 0..args.requests {
                    let started = Instant::now();
                    let spans = store.spans(big).await?;
                    reference.record(started.elapsed());
                    ensure!(spans.len() == args.spans, "{} span rows", spans.len());
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let (ours_p50, ours_p99) = (ms(ours.percentile(50.0)), ms(ours.percentile(99.0)));
        let (ref_p50, ref_p99) = (
            ms(reference.percentile(50.0)),
            ms(reference.percentile(99.0)),
        );
        trace_ratios.push(ours_p99 / ref_p99.max(0.001));
        trace_p99s.push(ours_p99);

        let (mut usage, mut scans) = (Latencies::default(), Latencies::default());
        let scan_count = (args.usage_requests / 5).max(1);
        for pass in 0..2 {
            if (pass == 0) == ours_first {
                for _ in 0..args.usage_requests {
                    let started = Instant::now();
                    let counted = usage_calls(&http, &base, &first, &today).await?;
                    usage.record(started.elapsed());
                    ensure!(
                        counted == calls,
                        "usage counts {counted} calls, {calls} were made"
                    );
                }
            } else {
                for _ in 0..scan_count {
                    let started = Instant::now();
                    let counted = scanned_calls(&http, &base, args.days).await?;
                    scans.record(started.elapsed());
                    ensure!(
                        counted == calls,
                        "the span scan counts {counted} calls, {calls} were made"
                    );
                }
            }
        }
        let (usage_p50, scan_p50) = (ms(usage.percentile(50.0)), ms(scans.percentile(50.0)));
        usage_ratios.push(usage_p50 / scan_p50.max(0.001));
        let row = vec![
            round.to_string(),
            format!("{ours_p50:.1}"),
            format!("{ours_p99:.1}"),
            format!("{ref_p50:.1}"),
            format!("{ref_p99:.1}"),
            format!("{:.2}", ours_p99 / ref_p99.max(0.001)),
            format!("{usage_p50:.1}"),
            format!("{scan_p50:.1}"),
            format!("{:.3}", usage_p50 / scan_p50.max(0.001)),
        ];
        println!("round {}", row.join("  "));
        rows.push(row);
    }
    print_table(
        &[
            "round",
            "trace p50 ms",
            "trace p99 ms",
            "CQL p50 ms",
            "CQL p99 ms",
            "p99 trace/CQL",
            "usage p50 ms",
            "span scan p50 ms",
            "usage/scan",
        ],
        &rows,
    );
    let p99 = Spread::of(&trace_p99s);
    println!(
        "GET /trace of {} spans: p99 median {:.1} ms (range {:.1}-{:.1}); goal ≤ 50 ms: {}",
        args.spans,
        p99.median,
        p99.min,
        p99.max,
        if p99.median <= 50.0 && args.spans >= 1_000 {
            "met"
        } else {
            "not met"
        }
    );
    println!("trace/CQL p99: median {}", Spread::of(&trace_ratios));
    println!(
        "usage over {} days ({calls} calls) / span scan, p50: median {}",
        args.days,
        Spread::of(&usage_ratios)
    );
    drop(service);
    drop(projector);
    if !args.keep {
        run.drop().await?;
    }
    Ok(())
}

/// A session of `spans` spans: the root, then model calls each asking for one tool call, the
/// last model call asking for none.
async fn big_session(log: &Arc<EventLog>, spans: usize) -> Result<SessionId> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), "bench-agent", None).await?;
    let mut events = Vec::new();
    let mut next_seq = writer.next_seq();
    let mut left = spans - 1;
    while left > 0 {
        events.push(model_call(sessionlog_schemas::now_micros()));
        next_seq += 1;
        left -= 1;
        if left > 0 {
            events.push(SessionEvent::ToolCallRequested {
                tool: "bench-tool".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::Pure,
                approval_id: None,
            });
            events.push(SessionEvent::ToolCallResult {
                call_seq: next_seq,
                outcome: CallOutcome::Succeeded,
                output: Content::plain("ok"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            });
            next_seq += 2;
            left -= 1;
        }
    }
    for chunk in events.chunks(128) {
        writer.append_batch(chunk.to_vec()).await?;
    }
    writer.close(TerminalOutcome::Completed, None).await?;
    Ok(writer.session_id())
}

/// A model call that started at `started_at`.
fn model_call(started_at: i64) -> SessionEvent {
    SessionEvent::ModelResponse {
        model: "bench-model".into(),
        tokens_in: 500,
        tokens_out: 80,
        cost_micros: 600,
        started_at,
        content: Content::plain("answer"),
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        provider: None,
    }
}

/// One session per day back from today, each of `calls_per_day` model calls started that day
/// (a call counts on the day it started). Returns every model call made, the big session's
/// included (today's).
async fn daily_sessions(log: &Arc<EventLog>, args: &Args) -> Result<u64> {
    let now = sessionlog_schemas::now_micros();
    let mut written = futures::stream::iter(0..args.days)
        .map(|day| {
            let log = Arc::clone(log);
            async move {
                let (mut writer, _) =
                    SessionWriter::create(log, "bench-agent", Some("daily")).await?;
                // An hour into the day's UTC span, minus the days back: inside that day.
                let start = (now - day * DAY_US).div_euclid(DAY_US) * DAY_US + 3_600_000_000;
                let events = (0..args.calls_per_day)
                    .map(|i| model_call(start + i64::try_from(i).unwrap_or_default()))
                    .collect::<Vec<_>>();
                for chunk in events.chunks(128) {
                    writer.append_batch(chunk.to_vec()).await?;
                }
                writer.close(TerminalOutcome::Completed, None).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8);
    while let Some(done) = written.next().await {
        done?;
    }
    let days = u64::try_from(args.days)?;
    let big = u64::try_from(args.spans / 2)?;
    Ok(days * u64::try_from(args.calls_per_day)? + big)
}

/// Model calls over `first..=last` from `GET /v1/usage?by=model`.
async fn usage_calls(http: &reqwest::Client, base: &str, first: &str, last: &str) -> Result<u64> {
    let answer = http
        .get(format!("{base}/v1/usage?from={first}&to={last}&by=model"))
        .send()
        .await?;
    ensure!(answer.status().is_success(), "usage: {}", answer.status());
    let usage: Value = answer.json().await?;
    Ok(usage["lines"]
        .as_array()
        .context("lines")?
        .iter()
        .filter_map(|line| line["calls"].as_u64())
        .sum())
}

/// Model calls over the last `days` days, by paging every span of them through `/v1/spans`.
async fn scanned_calls(http: &reqwest::Client, base: &str, days: i64) -> Result<u64> {
    let now = sessionlog_schemas::now_micros();
    let from = (now - (days - 1) * DAY_US).div_euclid(DAY_US) * DAY_US;
    let rfc3339 = |us: i64| -> Result<String> {
        let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000)?;
        Ok(time.format(&time::format_description::well_known::Rfc3339)?)
    };
    let (from, to) = (rfc3339(from)?, rfc3339(now + 1_000_000)?);
    let mut cursor: Option<String> = None;
    let mut calls = 0;
    loop {
        let mut address = reqwest::Url::parse(&format!("{base}/v1/spans"))?;
        address
            .query_pairs_mut()
            .append_pair("from", &from)
            .append_pair("to", &to)
            .append_pair("model", "bench-model")
            .append_pair("limit", "1000");
        if let Some(cursor) = &cursor {
            address.query_pairs_mut().append_pair("cursor", cursor);
        }
        let answer = http.get(address).send().await?;
        ensure!(answer.status().is_success(), "spans: {}", answer.status());
        let page: Value = answer.json().await?;
        calls += page["spans"]
            .as_array()
            .context("spans")?
            .iter()
            .filter(|span| span["span_kind"] == "model_call")
            .count() as u64;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(calls),
        }
    }
}
