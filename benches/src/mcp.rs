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
//! Then, on a second session of `--large-events` events of `--large-bytes` of text each (1,000
//! of about 1 MB: a framework's saved states), each round starts a server for it and measures
//! one `history_search` with the default 1 s budget for a text only seq 2 has: what it took
//! against its budget (goal: within it plus 10 %) and the server's resident memory above what
//! it held ready and idle just before (goal: at most 64 MiB); then the same search followed by
//! its cursor to the start (10 s budgets), with the memory above idle over the whole of it.
//!
//! `cargo run --release -p sessionlog-benches --bin sessionlog-bench -- mcp --rounds 3`
//! (`--large-only` for the second part alone, `--large-events 0` for the first alone)

use crate::{Latencies, Spread, Watched, print_table};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{EventRange, Recovery};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_testkit::{free_address, wait_ready};
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
    /// Events of the session of large events (0: no large search).
    #[arg(long, default_value_t = 1000)]
    large_events: u64,
    /// Bytes of text of each large event (with its envelope, under `[producer]
    /// max_event_bytes`, 1,000,000 by default).
    #[arg(long, default_value_t = 990_000)]
    large_bytes: usize,
    /// Only the large search: skip the history_read rounds and the long session.
    #[arg(long)]
    large_only: bool,
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

/// The budget of a search that does not name one, and the slack the goal gives it (10 %).
const DEFAULT_BUDGET_MS: f64 = 1_000.0;
/// The resident memory one search may add to the server's, MiB.
const SEARCH_MEMORY_GOAL_MIB: f64 = 64.0;
/// What the large session holds (a search asks for it: the default kinds leave it out).
const LARGE_KINDS: [&str; 1] = ["FrameworkStateSaved"];

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.events < 200 || args.rounds == 0 || args.requests == 0 {
        bail!("--events must be at least 200, --rounds and --requests at least 1");
    }
    if args.large_only && args.large_events == 0 {
        bail!("--large-only needs --large-events above 0");
    }
    let run = crate::ServiceRun::prepare("mcp", args.partitions).await?;
    let (settings, store) = (&run.settings, &run.store);
    let projector = Watched::spawn(run.command(&["project"])?)?;
    let log = Arc::new(EventLog::from_settings(settings).await?);
    let long = if args.large_only {
        None
    } else {
        let turn = |seq| SessionEvent::UserRequest {
            content: Content::plain(format!("turn needle-{seq} of the benchmark")),
        };
        Some(write_session(&log, args.events, 128, turn).await?)
    };
    let large = if args.large_events > 0 {
        // A framework's saved state (a LangGraph checkpoint): events this large as turns stop
        // the projector (it writes a turn's text to its view, and a batch of turns of 1 MB is
        // a CQL request over the 16 MiB the store takes).
        let state = |seq| SessionEvent::FrameworkStateSaved {
            framework: "langgraph".into(),
            key: format!("checkpoint::{seq}"),
            state: Content::plain(large_text(seq, args.large_bytes)),
        };
        Some(write_session(&log, args.large_events, 8, state).await?)
    } else {
        None
    };
    let started = Instant::now();
    crate::wait_projected(settings, store).await?;
    eprintln!(
        "projected {:.1} s after the last write",
        started.elapsed().as_secs_f64()
    );
    if let Some((session, last)) = long {
        read_and_search(&run, &args, session, last).await?;
    }
    if let Some((session, last)) = large {
        large_search(&run, &args, session, last).await?;
    }
    drop(projector);
    // A gigabyte of large events is not left behind.
    run.drop().await
}

/// Writes a session of `events` events (seq 1 is its start), `event(seq)` each, `per_batch`
/// an append; its id and last seq.
async fn write_session(
    log: &Arc<EventLog>,
    events: u64,
    per_batch: u64,
    event: impl Fn(u64) -> SessionEvent,
) -> Result<(SessionId, u64)> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), "bench", None).await?;
    let started = Instant::now();
    while writer.state().last_seq < events {
        let next = writer.state().last_seq + 1;
        let batch: Vec<SessionEvent> = (next..=(next + per_batch - 1).min(events))
            .map(&event)
            .collect();
        writer.append_batch(batch).await?;
    }
    let last = writer.state().last_seq;
    eprintln!(
        "{last} events written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok((writer.session_id(), last))
}

/// About `bytes` of text: `large-needle-{seq}.` then words (seq 2's needle is in no other).
fn large_text(seq: u64, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "the", "tool", "returned", "rows", "of", "output", "with", "status", "ok", "and",
        "warnings", "about", "harbour", "traffic", "in", "Oslo",
    ];
    let mut text = format!("large-needle-{seq}.");
    let mut state = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while text.len() < bytes {
        // xorshift: the same words every run.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push(' ');
        text.push_str(WORDS[(state % 16) as usize]);
    }
    text.truncate(bytes);
    text
}

/// `sessionlog mcp --session ID` on a free port, logging to a file named on stderr; the
/// process and a client connected to it.
async fn serve(run: &crate::ServiceRun, session: SessionId) -> Result<(Watched, Client, String)> {
    let listen = free_address()?;
    let mut serve = run.command(&[
        "mcp",
        "--session",
        &session.to_string(),
        "--listen",
        &listen,
    ])?;
    // The server's log, kept so that a failed request (a JSON-RPC error) can be explained.
    let server_log = std::env::temp_dir().join(format!("sessionlog-bench-mcp-{session}.log"));
    serve.stderr(
        std::fs::File::create(&server_log)
            .with_context(|| format!("creating {}", server_log.display()))?,
    );
    eprintln!("the MCP server logs to {}", server_log.display());
    let service = Watched::spawn(serve)?;
    let base = format!("http://{listen}");
    let http = run.client(4, Duration::from_secs(60))?;
    wait_ready(&http, &base).await?;
    let client = Client::connect(http, &base).await?;
    Ok((service, client, server_log.display().to_string()))
}

/// The `history_read` rounds and the search over the long session.
async fn read_and_search(
    run: &crate::ServiceRun,
    args: &Args,
    session: SessionId,
    last: u64,
) -> Result<()> {
    let (service, mut client, server_log) = serve(run, session).await?;
    let recovery = Recovery::connect_reader(&run.settings).await?;
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
                            format!("history_read {from}..={to}; see {}", server_log)
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
        within &= search_ms <= DEFAULT_BUDGET_MS + 100.0;
        let scanned = first["events_scanned"].as_u64().unwrap_or_default();
        let budget_rate = scanned as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let (hits, scanned_all) =
            search_to_start(&mut client, json!({"query": "needle-2 of"})).await?;
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
    Ok(())
}

/// One round of the large search: the 1 s search, then the whole session by its cursor.
struct LargeRound {
    search_ms: f64,
    server_ms: u64,
    scanned: u64,
    idle_mib: f64,
    above_idle_mib: f64,
    full_s: f64,
    full_scanned: u64,
    full_above_idle_mib: f64,
}

/// The searches over the session of large events, on a server of their own.
async fn large_search(
    run: &crate::ServiceRun,
    args: &Args,
    session: SessionId,
    last: u64,
) -> Result<()> {
    let query = "large-needle-2.";
    let mut rounds = Vec::new();
    let mut rows = Vec::new();
    for round in 1..=args.rounds {
        // A server of its own each round: what a search holds stays with the allocator after
        // it, so a second search in the same process would add little above that "idle".
        let (service, mut client, server_log) = serve(run, session).await?;
        let (idle, _) = reset_resident(&service)?;
        let started = Instant::now();
        let first = client
            .call(
                "history_search",
                json!({"query": query, "kinds": LARGE_KINDS}),
            )
            .await
            .with_context(|| format!("history_search; see {server_log}"))?;
        let search_ms = started.elapsed().as_secs_f64() * 1_000.0;
        let (_, peak) = service.resident_mib().context("the MCP server exited")?;

        let (full_idle, _) = reset_resident(&service)?;
        let started = Instant::now();
        let (hits, full_scanned) =
            search_to_start(&mut client, json!({"query": query, "kinds": LARGE_KINDS}))
                .await
                .with_context(|| format!("history_search; see {server_log}"))?;
        let full_s = started.elapsed().as_secs_f64();
        let (_, full_peak) = service.resident_mib().context("the MCP server exited")?;
        ensure!(hits == [2], "the needle was found at {hits:?}");
        let r = LargeRound {
            search_ms,
            server_ms: first["elapsed_ms"].as_u64().unwrap_or_default(),
            scanned: first["events_scanned"].as_u64().unwrap_or_default(),
            idle_mib: idle,
            above_idle_mib: peak - idle,
            full_s,
            full_scanned,
            full_above_idle_mib: full_peak - full_idle,
        };
        let row = vec![
            round.to_string(),
            format!("{:.0}", r.search_ms),
            r.server_ms.to_string(),
            r.scanned.to_string(),
            format!("{:.0}", r.idle_mib),
            format!("{:.1}", r.above_idle_mib),
            format!("{:.1}", r.full_s),
            r.full_scanned.to_string(),
            format!("{:.1}", r.full_above_idle_mib),
        ];
        println!("large round {}", row.join("  "));
        rows.push(row);
        rounds.push(r);
        drop(service);
    }
    print_table(
        &[
            "round",
            "search ms",
            "server ms",
            "scanned",
            "idle RSS MiB",
            "search RSS above idle MiB",
            "full scan s",
            "full scanned",
            "full scan RSS above idle MiB",
        ],
        &rows,
    );
    let of = |f: fn(&LargeRound) -> f64| Spread::of(&rounds.iter().map(f).collect::<Vec<_>>());
    let took = of(|r| r.search_ms);
    let above = of(|r| r.above_idle_mib);
    let full_above = of(|r| r.full_above_idle_mib);
    let budget_goal = DEFAULT_BUDGET_MS * 1.1;
    let met = |yes: bool| if yes { "met" } else { "not met" };
    println!(
        "history_search over {last} events of {} bytes: took {:.0} ms median (range {:.0}-{:.0}) \
         against its {DEFAULT_BUDGET_MS:.0} ms budget; goal ≤ {budget_goal:.0} ms every round: {}",
        args.large_bytes,
        took.median,
        took.min,
        took.max,
        met(took.max <= budget_goal),
    );
    println!(
        "the server's resident memory above idle during it: {:.1} MiB median (range \
         {:.1}-{:.1}); goal ≤ {SEARCH_MEMORY_GOAL_MIB:.0} MiB every round: {}; over the whole \
         session's search: {:.1} MiB (range {:.1}-{:.1})",
        above.median,
        above.min,
        above.max,
        met(above.max <= SEARCH_MEMORY_GOAL_MIB),
        full_above.median,
        full_above.min,
        full_above.max,
    );
    Ok(())
}

/// Follows the `history_search` of `arguments` by its cursor to the session's start, with 10 s
/// budgets: the seqs of its hits and the events it searched.
async fn search_to_start(client: &mut Client, arguments: Value) -> Result<(Vec<u64>, u64)> {
    let (mut hits, mut scanned, mut cursor) = (Vec::new(), 0, Value::Null);
    loop {
        let mut page_arguments = arguments.clone();
        page_arguments["cursor"] = cursor;
        page_arguments["budget_ms"] = json!(10_000);
        let page = client.call("history_search", page_arguments).await?;
        scanned += page["events_scanned"].as_u64().unwrap_or_default();
        hits.extend(
            page["hits"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h["seq"].as_u64()),
        );
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            return Ok((hits, scanned));
        }
    }
}

/// Starts a new high-water mark of the server's resident memory; what it holds now (MiB).
fn reset_resident(service: &Watched) -> Result<(f64, f64)> {
    service.reset_peak();
    service.resident_mib().context("the MCP server exited")
}
