//! Console benchmark, against the running stack (`scripts/stack up`): how fast `sessionlog
//! console` answers its two heaviest pages, against the recovery API reads they are built on.
//!
//! It writes `--sessions` sessions (100,000 by default: each a start, over 10 agents) and one
//! session of `--events` user requests with a checkpoint every 1,000 (as a harness writes them),
//! has a `sessionlog project` process project them, and serves them with `sessionlog console`
//! and `sessionlog serve-recovery` (authentication on; the console logged in once with an
//! operator's token, as a person does). Each round then measures, in alternating order, p50 and
//! p99 of `--requests` requests each:
//!
//! 1. the sessions list (`GET /sessions`: the newest 50 of the last 7 days) against `GET
//!    /v1/spans?limit=50` over the same days on recovery (the reference: the read the list is
//!    built on, as JSON);
//! 2. the long session's page (`GET /sessions/{id}`: its header, from a rebuild, and its first
//!    100 events) against `GET /v1/sessions/{id}` then `GET /v1/sessions/{id}/events?limit=100`
//!    on recovery (the reference: the same two reads, as JSON).
//!
//! It prints every round, the median ratios and their spread, and the pages' weight (goal: each
//! page's p99 ≤ 100 ms; a page < 200 KB before content).
//!
//! `cargo run --release -p sessionlog-benches --bin sessionlog-bench -- console --rounds 3`

use crate::{Latencies, Spread, Watched, print_table};
use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use reqwest::header::{COOKIE, SET_COOKIE};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_testkit::{free_address, wait_ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(
    about = "sessionlog console: the sessions list and a long session's page vs the API reads under them"
)]
pub struct Args {
    /// Rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Sessions to list.
    #[arg(long, default_value_t = 100_000)]
    sessions: u64,
    /// Events of the long session (at least 200).
    #[arg(long, default_value_t = 10_000)]
    events: u64,
    /// Requests per page and side per round.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Sessions created at once while writing.
    #[arg(long, default_value_t = 32)]
    writers: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
}

/// The console's login cookie (served without TLS).
const LOGIN_COOKIE: &str = "sessionlog-console";
/// The login form's CSRF cookie.
const FORM_COOKIE: &str = "sessionlog-console-form";

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.events < 200 || args.rounds == 0 || args.requests == 0 || args.writers == 0 {
        bail!("--events must be at least 200; --rounds, --requests and --writers at least 1");
    }
    let run = crate::ServiceRun::prepare("console", args.partitions).await?;
    let (settings, store) = (&run.settings, &run.store);
    let projector = Watched::spawn(run.command(&["project"])?)?;
    let log = Arc::new(EventLog::from_settings(settings).await?);
    let started = Instant::now();
    create_sessions(&log, args.sessions, args.writers).await?;
    let long = long_session(&log, args.events).await?;
    eprintln!(
        "{} sessions and one of {} events written in {:.1} s",
        args.sessions,
        args.events,
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    crate::wait_projected(settings, store).await?;
    eprintln!(
        "projected {:.1} s after the last write",
        started.elapsed().as_secs_f64()
    );

    let (console_at, recovery_at) = (free_address()?, free_address()?);
    let console = Watched::spawn(run.command(&["console", "--listen", &console_at])?)?;
    let recovery = Watched::spawn(run.command(&["serve-recovery", "--listen", &recovery_at])?)?;
    let (console_base, recovery_base) = (
        format!("http://{console_at}"),
        format!("http://{recovery_at}"),
    );
    let api = run.client(4, Duration::from_secs(60))?;
    wait_ready(&api, &console_base).await?;
    wait_ready(&api, &recovery_base).await?;
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()?;
    let login = log_in(&browser, &console_base).await?;
    let page = |path: String| {
        let (browser, login) = (&browser, &login);
        async move {
            let answer = browser
                .get(path.as_str())
                .header(COOKIE, format!("{LOGIN_COOKIE}={login}"))
                .send()
                .await?;
            ensure!(answer.status().is_success(), "{path}: {}", answer.status());
            Ok::<usize, anyhow::Error>(answer.bytes().await?.len())
        }
    };
    let json = |path: String| {
        let api = &api;
        async move {
            let answer = api.get(path.as_str()).send().await?;
            ensure!(answer.status().is_success(), "{path}: {}", answer.status());
            Ok::<usize, anyhow::Error>(answer.bytes().await?.len())
        }
    };
    let week_ago = time::OffsetDateTime::now_utc() - time::Duration::days(7);
    let from = week_ago
        .format(&time::format_description::well_known::Rfc3339)
        .context("formatting the range's start")?;

    let (mut rows, mut list_p99, mut page_p99) = (Vec::new(), Vec::new(), Vec::new());
    let (mut list_ratio, mut page_ratio) = (Vec::new(), Vec::new());
    let (mut list_bytes, mut page_bytes) = (0, 0);
    for round in 1..=args.rounds {
        let ours_first = round % 2 == 1;
        let mut timed = Vec::new();
        for (name, ours, reference) in [
            (
                "list",
                vec![format!("{console_base}/sessions")],
                vec![format!("{recovery_base}/v1/spans?from={from}&limit=50")],
            ),
            (
                "session",
                vec![format!("{console_base}/sessions/{long}")],
                vec![
                    format!("{recovery_base}/v1/sessions/{long}"),
                    format!("{recovery_base}/v1/sessions/{long}/events?limit=100"),
                ],
            ),
        ] {
            let (mut o, mut r) = (Latencies::default(), Latencies::default());
            for pass in 0..2 {
                let console_turn = (pass == 0) == ours_first;
                for _ in 0..args.requests {
                    let began = Instant::now();
                    if console_turn {
                        let mut bytes = 0;
                        for path in &ours {
                            bytes += page(path.clone()).await?;
                        }
                        o.record(began.elapsed());
                        match name {
                            "list" => list_bytes = bytes,
                            _ => page_bytes = bytes,
                        }
                    } else {
                        for path in &reference {
                            json(path.clone()).await?;
                        }
                        r.record(began.elapsed());
                    }
                }
            }
            timed.push((name, o, r));
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let mut row = vec![round.to_string()];
        for (name, mut o, mut r) in timed {
            let (o50, o99, r50, r99) = (
                ms(o.percentile(50.0)),
                ms(o.percentile(99.0)),
                ms(r.percentile(50.0)),
                ms(r.percentile(99.0)),
            );
            let ratio = o99 / r99.max(f64::EPSILON);
            if name == "list" {
                list_p99.push(o99);
                list_ratio.push(ratio);
            } else {
                page_p99.push(o99);
                page_ratio.push(ratio);
            }
            row.extend([
                format!("{o50:.1} / {o99:.1}"),
                format!("{r50:.1} / {r99:.1}"),
                format!("{ratio:.2}"),
            ]);
        }
        rows.push(row);
    }
    println!(
        "\n{} sessions listed, a session of {} events (checkpoint every 1,000), {} requests a side a round: p50 / p99 ms",
        args.sessions, args.events, args.requests
    );
    print_table(
        &[
            "round",
            "list: console",
            "list: /v1/spans",
            "p99 ratio",
            "session page: console",
            "session: /v1 state + events",
            "p99 ratio",
        ],
        &rows,
    );
    println!(
        "sessions list p99 {} ms (goal ≤ 100), console/API {}; page {} bytes",
        Spread::of(&list_p99),
        Spread::of(&list_ratio),
        list_bytes
    );
    println!(
        "session page p99 {} ms (goal ≤ 100), console/API {}; page {} bytes (goal < 200 KB before content)",
        Spread::of(&page_p99),
        Spread::of(&page_ratio),
        page_bytes
    );
    drop((console, recovery, projector));
    run.drop().await
}

/// Logs in to the console at `base` as an operator, as the login form does; the login cookie.
async fn log_in(browser: &reqwest::Client, base: &str) -> Result<String> {
    let form = browser.get(format!("{base}/login")).send().await?;
    let csrf = cookie(&form, FORM_COOKIE).context("the login form set no CSRF cookie")?;
    let token = sessionlog_testkit::auth::token_with(
        "bench-operator",
        &[sessionlog_log::Role::Operator, sessionlog_log::Role::Reader],
        None,
        Duration::from_secs(3600),
    )?;
    // A JWT and a URL-safe base64 token need no escaping in a form body (checked, not assumed).
    let plain = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    ensure!(
        plain(&token) && plain(&csrf),
        "a token to escape in the login form"
    );
    let answer = browser
        .post(format!("{base}/login"))
        .header(COOKIE, format!("{FORM_COOKIE}={csrf}"))
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(format!("credential={token}&csrf={csrf}"))
        .send()
        .await?;
    cookie(&answer, LOGIN_COOKIE)
        .with_context(|| format!("the console did not log the bench in: {}", answer.status()))
}

/// The value of cookie `name` an answer sets.
fn cookie(answer: &reqwest::Response, name: &str) -> Option<String> {
    answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .filter_map(|pair| pair.split_once('='))
        .find(|(n, value)| *n == name && !value.is_empty())
        .map(|(_, value)| value.to_string())
}

/// Creates `count` sessions, `writers` at a time, over 10 agents.
async fn create_sessions(log: &Arc<EventLog>, count: u64, writers: usize) -> Result<()> {
    let made = AtomicU64::new(0);
    let started = Instant::now();
    let results: Vec<Result<()>> = futures::stream::iter(0..count)
        .map(|i| {
            let (log, made) = (Arc::clone(log), &made);
            async move {
                let agent = format!("bench-agent-{}", i % 10);
                SessionWriter::create(log, &agent, Some(&format!("listed session {i}"))).await?;
                let done = made.fetch_add(1, Ordering::Relaxed) + 1;
                if done % 10_000 == 0 {
                    eprintln!(
                        "{done} / {count} sessions created ({:.0}/s)",
                        done as f64 / started.elapsed().as_secs_f64()
                    );
                }
                Ok(())
            }
        })
        .buffer_unordered(writers)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The long session: `events` user requests, a checkpoint every 1,000; its id.
async fn long_session(log: &Arc<EventLog>, events: u64) -> Result<SessionId> {
    let (mut writer, _) =
        SessionWriter::create(Arc::clone(log), "bench-long", Some("a long session")).await?;
    while writer.state().last_seq < events {
        let next = writer.state().last_seq + 1;
        let batch: Vec<SessionEvent> = (next..(next + 100).min(events + 1))
            .map(|seq| SessionEvent::UserRequest {
                content: Content::plain(format!("turn {seq} of the long session")),
            })
            .collect();
        writer.append_batch(batch).await?;
        if writer.state().last_seq % 1_000 < 100 {
            writer.checkpoint(None).await?;
        }
    }
    Ok(writer.session_id())
}
