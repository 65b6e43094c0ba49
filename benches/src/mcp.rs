//! MCP benchmark, against the running stack (`scripts/stack up`): how fast `sessionlog mcp`
//! hands a model its session's history.
//!
//! It writes one session of `--events` user requests (the needle, `needle-2`, is seq 2's text
//! only, so a search for it must go to the session's start), has a `sessionlog project` process
//! project them, and serves them with `sessionlog mcp --session ID` (authentication on). Each
//! round then measures, in alternating order:
//!
//! 1. `history_read` of 100 events at a random place over MCP (ours), against reading the same
//!    range in process with `Recovery::events` (the reference: the read the tool is built on):
//!    p50 and p99 of `--requests` requests each (goal: ours p99 ≤ 50 ms);
//! 2. `history_search` with the default 1 s budget: what it took (goal: within the budget, plus
//!    the HTTP round trip) and the events it scanned per second; then the same search followed
//!    by its cursor to the session's start with 10 s budgets: the whole session's scan rate, and
//!    that the needle is found exactly once.
//!
//! `cargo run --release -p sessionlog-benches --bin sessionlog-bench -- mcp --rounds 3`

use crate::{Latencies, Spread, Watched, free_address, print_table, wait_ready};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{EventRange, Recovery};
use sessionlog_schemas::{Content, SessionEvent};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog mcp: history_read and history_search vs the reads under them")]
pub struct Args {
    /// Rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Events of the session (at least 200).
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// history_read requests per reader per round.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
}

/// A minimal MCP client over Streamable HTTP (what a model's client sends).
struct Client {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    async fn connect(http: reqwest::Client, base: &str) -> Result<Self> {
        let mut client = Self {
            http,
            url: format!("{base}/mcp"),
            session: None,
            next_id: 1,
        };
        client
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "sessionlog-bench", "version": "0"}}),
            )
            .await?;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    async fn send(&mut self, body: Value) -> Result<String> {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(id) = &self.session {
            request = request.header("mcp-session-id", id);
        }
        let response = request.send().await?;
        ensure!(
            response.status().is_success(),
            "MCP answered {}",
            response.status()
        );
        if let Some(id) = response.headers().get("mcp-session-id") {
            self.session = Some(id.to_str()?.to_string());
        }
        Ok(response.text().await?)
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let text = self
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        let message = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .chain(std::iter::once(text.as_str()))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m["id"] == json!(id))
            .with_context(|| format!("{method}: no answer"))?;
        ensure!(message.get("error").is_none(), "{method}: {message}");
        Ok(message["result"].clone())
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Result<Value> {
        let result = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await?;
        let text = result["content"][0]["text"].as_str().context("no text")?;
        ensure!(result["isError"] != json!(true), "{tool}: {text}");
        Ok(serde_json::from_str(text)?)
    }
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.events < 200 || args.rounds == 0 || args.requests == 0 {
        bail!("--events must be at least 200, --rounds and --requests at least 1");
    }
    let run = crate::ServiceRun::prepare("mcp", args.partitions).await?;
    let (bin, settings, store, auth, env) =
        (&run.bin, &run.settings, &run.store, &run.auth, &run.env);
    let projector = Watched::spawn(crate::sessionlog_command(bin, &["project"], env))?;

    let log = Arc::new(EventLog::from_settings(settings).await?);
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "bench", None).await?;
    let started = Instant::now();
    while writer.state().last_seq < args.events {
        let next = writer.state().last_seq + 1;
        let batch: Vec<SessionEvent> = (next..=(next + 127).min(args.events))
            .map(|seq| SessionEvent::UserRequest {
                content: Content::plain(format!("turn needle-{seq} of the benchmark")),
            })
            .collect();
        writer.append_batch(batch).await?;
    }
    let session = writer.session_id();
    let last = writer.state().last_seq;
    let took = crate::wait_projected(settings, store).await?;
    eprintln!(
        "{last} events written in {:.1} s, projected {:.1} s later",
        started.elapsed().as_secs_f64() - took.as_secs_f64(),
        took.as_secs_f64()
    );

    let listen = free_address()?;
    let mut serve = crate::sessionlog_command(
        bin,
        &[
            "mcp",
            "--session",
            &session.to_string(),
            "--listen",
            &listen,
        ],
        env,
    );
    // The server's log, kept so that a failed request (a JSON-RPC error) can be explained.
    let server_log = std::env::temp_dir().join(format!("sessionlog-bench-mcp-{session}.log"));
    serve.stderr(
        std::fs::File::create(&server_log)
            .with_context(|| format!("creating {}", server_log.display()))?,
    );
    eprintln!("the MCP server logs to {}", server_log.display());
    let service = Watched::spawn(serve)?;
    let base = format!("http://{listen}");
    let http = auth.client(4, Duration::from_secs(60))?;
    wait_ready(&http, &base).await?;
    let mut client = Client::connect(http, &base).await?;
    let recovery = Recovery::connect_reader(settings).await?;

    let mut rows = Vec::new();
    let (mut read_p99s, mut scan_rates, mut within) = (Vec::new(), Vec::new(), true);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random_from = || {
        // xorshift: a place for each read, the same sequence every run.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        1 + state % (last - 99)
    };
    for round in 1..=args.rounds {
        let ours_first = round % 2 == 1;
        let (mut ours, mut reference) = (Latencies::default(), Latencies::default());
        for pass in 0..2 {
            for _ in 0..args.requests {
                let from = random_from();
                let to = from + 99;
                let started = Instant::now();
                let count = if (pass == 0) == ours_first {
                    let page = client
                        .call("history_read", json!({"from_seq": from, "to_seq": to}))
                        .await
                        .with_context(|| {
                            format!("history_read {from}..={to}; see {}", server_log.display())
                        })?;
                    ours.record(started.elapsed());
                    page["seqs"].as_array().map_or(0, Vec::len)
                } else {
                    let range = EventRange {
                        from_seq: Some(from),
                        to_seq: Some(to),
                        ..EventRange::default()
                    };
                    let page = recovery.events(session, range).await?;
                    reference.record(started.elapsed());
                    page.events.len()
                };
                ensure!(count == 100, "a read of 100 events answered {count}");
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let (ours_p50, ours_p99) = (ms(ours.percentile(50.0)), ms(ours.percentile(99.0)));
        let (ref_p50, ref_p99) = (
            ms(reference.percentile(50.0)),
            ms(reference.percentile(99.0)),
        );
        read_p99s.push(ours_p99);

        let started = Instant::now();
        let first = client
            .call("history_search", json!({"query": "needle-2 of"}))
            .await?;
        let search_ms = ms(started.elapsed());
        within &= search_ms <= 1_000.0 + 100.0;
        let scanned = first["events_scanned"].as_u64().unwrap_or_default();
        let budget_rate = scanned as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut hits: Vec<u64> = Vec::new();
        let mut scanned_all = 0;
        let mut cursor = Value::Null;
        loop {
            let page = client
                .call(
                    "history_search",
                    json!({"query": "needle-2 of", "cursor": cursor, "budget_ms": 10_000}),
                )
                .await?;
            scanned_all += page["events_scanned"].as_u64().unwrap_or_default();
            hits.extend(
                page["hits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h["seq"].as_u64()),
            );
            cursor = page["next_cursor"].clone();
            if cursor.is_null() {
                break;
            }
        }
        ensure!(hits == [2], "the needle was found at {hits:?}");
        let whole_rate = scanned_all as f64 / started.elapsed().as_secs_f64();
        scan_rates.push(whole_rate);
        let row = vec![
            round.to_string(),
            format!("{ours_p50:.1}"),
            format!("{ours_p99:.1}"),
            format!("{ref_p50:.1}"),
            format!("{ref_p99:.1}"),
            format!("{search_ms:.0}"),
            scanned.to_string(),
            format!("{budget_rate:.0}"),
            format!("{:.1}", started.elapsed().as_secs_f64()),
            format!("{whole_rate:.0}"),
        ];
        println!("round {}", row.join("  "));
        rows.push(row);
    }
    print_table(
        &[
            "round",
            "read p50 ms",
            "read p99 ms",
            "events() p50 ms",
            "events() p99 ms",
            "search ms",
            "scanned",
            "scanned/s",
            "full scan s",
            "full scanned/s",
        ],
        &rows,
    );
    let p99 = Spread::of(&read_p99s);
    println!(
        "history_read of 100 events: p99 median {:.1} ms (range {:.1}-{:.1}); goal ≤ 50 ms: {}",
        p99.median,
        p99.min,
        p99.max,
        if p99.median <= 50.0 { "met" } else { "not met" }
    );
    println!(
        "history_search over {last} events: answered within its 1 s budget (+100 ms for HTTP) \
         every round: {}; events scanned/s over the whole session: median {}",
        if within { "met" } else { "not met" },
        Spread::of(&scan_rates)
    );
    drop(service);
    drop(projector);
    Ok(())
}
