//! HTTP ingest benchmark: a fleet of sessions appending one event per request through
//! `sessionlog ingest` instances (each 2xx a confirmed append: the fold accepted the event),
//! against the same load appended through the library and answered at Kafka's ack, in the same
//! run.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo build --release -p sessionlog-cli -p sessionlog-benches
//! target/release/sessionlog-bench ingest --sessions 1000 --events 20 --rounds 4
//! target/release/sessionlog-bench ingest --sessions 10000 --rate 5000 --duration 30 --rounds 3
//! ```
//!
//! Each round runs both sides, alternating which goes first: `acked` (one `EventLog` in this
//! process, `SessionWriter::append` per event, every session a task) and `http` (`--instances`
//! ingest processes, each session's requests sent to one of them, as a load balancer with
//! session affinity does). Closed loop by default: each session sends its next event when the
//! last was answered. With `--rate R` an open loop: each session sends at its share of R
//! events a second whatever the answers do, and latency counts from when a request was due.
//! The bench prints every round, the median ratio http ÷ acked of throughput and its spread,
//! and each side's p99. A second table says where the cores went: CPU microseconds per event
//! spent by this process (the load generator, and on the acked side the library), the ingest
//! instances, the brokers (the native stack's, from `$SESSIONLOG_STACK_DIR/run`) and everything
//! else on the machine, and how busy the machine was.
//!
//! With `--url` the bench drives ingest instances something else started (a token with the
//! harness role in `$SESSIONLOG_TOKEN`), HTTP side only: no run topic, no acked side. It is how
//! another client's bench compares itself with this load generator against the same ingest
//! (clients/typescript/scripts/bench); `--seconds` then makes each round a closed loop of a fixed
//! length instead of a fixed count of events.

use crate::cpu::{Meter, Used};
use crate::{Latencies, ServiceRun, Spread, Watched, print_table};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent};
use sessionlog_testkit::free_address;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
#[command(about = "sessionlog HTTP ingest (confirmed) vs the library's acked appends")]
pub struct Args {
    /// Sessions appending at once.
    #[arg(long, default_value_t = 1_000)]
    sessions: usize,
    /// Events each session appends per side and round (closed loop).
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// Open loop: events a second over every session; `--events` then follows from
    /// `--duration`.
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds of open-loop load per side with `--rate`.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Ingest processes the sessions are spread over.
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// Bytes of text in each event.
    #[arg(long, default_value_t = 512)]
    text_bytes: usize,
    /// Partitions of the run's topic.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Rounds, alternating which side goes first.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Also run `sessionlog project` on the run's topic, as a deployment does.
    #[arg(long)]
    with_projector: bool,
    /// Keep the run's topic and keyspace.
    #[arg(long)]
    keep: bool,
    /// Drive these running ingest instances (base URLs) instead of starting any: HTTP side only,
    /// with the token in `$SESSIONLOG_TOKEN`.
    #[arg(long)]
    url: Vec<String>,
    /// With `--url`: each round is a closed loop of this many seconds (every session sends until
    /// then) instead of `--events` events a session.
    #[arg(long, requires = "url", conflicts_with = "rate")]
    seconds: Option<f64>,
}

/// One side's figures in one round.
struct Figures {
    events: usize,
    failed: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu: Used,
}

impl Figures {
    fn throughput(&self) -> f64 {
        self.events as f64 / self.seconds
    }

    fn of(events: usize, failed: usize, seconds: f64, mut latencies: Latencies, cpu: Used) -> Self {
        Self {
            events,
            failed,
            seconds,
            p50_ms: latencies.percentile(50.0).as_secs_f64() * 1e3,
            p99_ms: latencies.percentile(99.0).as_secs_f64() * 1e3,
            cpu,
        }
    }

    /// The CPU row of this side: microseconds per event by group, the rest, and how busy the
    /// machine was.
    fn cpu_row(&self, round: usize, side: &str) -> Vec<String> {
        let per_event = |seconds: f64| format!("{:.0}", seconds * 1e6 / self.events.max(1) as f64);
        let mut row = vec![round.to_string(), side.to_string()];
        row.extend(self.cpu.groups.iter().map(|(_, s)| per_event(*s)));
        row.push(per_event(self.cpu.rest()));
        row.push(per_event(self.cpu.machine_busy));
        row.push(format!("{:.0}", self.cpu.busy_share() * 100.0));
        row
    }
}

/// The schedule of one session: when each of its events is due, from the side's start.
fn due_times(args: &Args, session: usize) -> Vec<Option<Duration>> {
    match args.rate {
        None => vec![None; args.events],
        Some(rate) => {
            // Each session sends every sessions/rate seconds, the sessions staggered evenly.
            let interval = Duration::from_secs_f64(args.sessions as f64 / rate.max(1) as f64);
            let offset = interval.mul_f64(session as f64 / args.sessions as f64);
            let count = (args.duration as f64 / interval.as_secs_f64())
                .floor()
                .max(1.0) as usize;
            (0..count)
                .map(|i| Some(offset + interval.mul_f64(i as f64)))
                .collect()
        }
    }
}

/// Waits until `due` (from `start`), returning when the request counts from.
async fn wait_due(start: Instant, due: Option<Duration>) -> Instant {
    match due {
        Some(due) => {
            tokio::time::sleep_until((start + due).into()).await;
            start + due
        }
        None => Instant::now(),
    }
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.sessions == 0 || args.rounds == 0 || args.instances == 0 {
        bail!("--sessions, --rounds and --instances must be at least 1");
    }
    if !args.url.is_empty() {
        return run_external(args).await;
    }
    let run = ServiceRun::prepare("ingest", args.partitions).await?;
    let _projector = match args.with_projector {
        true => Some(Watched::spawn(run.command(&["project"])?)?),
        false => None,
    };
    let mut instances = Vec::new();
    let mut bases = Vec::new();
    let http = run.client(args.sessions, Duration::from_secs(60))?;
    for _ in 0..args.instances {
        let listen = free_address()?;
        instances.push(Watched::spawn(
            run.command(&["ingest", "--listen", &listen])?,
        )?);
        let base = format!("http://{listen}");
        sessionlog_testkit::wait_ready(&http, &base).await?;
        bases.push(base);
    }
    let log = Arc::new(EventLog::from_settings(&run.settings).await?);
    let text = "x".repeat(args.text_bytes);
    let groups = vec![
        ("bench", vec![std::process::id()]),
        ("ingest", instances.iter().map(|i| i.child.id()).collect()),
        ("brokers", crate::cpu::stack_pids("kafka-")),
    ];
    eprintln!(
        "{} sessions, {} ingest instance(s), {}{}",
        args.sessions,
        args.instances,
        match args.rate {
            Some(rate) => format!("open loop at {rate} events/s for {} s", args.duration),
            None => format!("closed loop, {} events each", args.events),
        },
        if args.with_projector {
            ", projector running"
        } else {
            ""
        }
    );

    let mut rows = Vec::new();
    let mut cpu_rows = Vec::new();
    let mut ratios = Vec::new();
    for round in 1..=args.rounds {
        let http_first = round % 2 == 0;
        let (acked, over_http) = if http_first {
            let h = http_side(&args, &http, &bases, &text, &groups).await?;
            let a = acked_side(&args, &log, &text, &groups).await?;
            (a, h)
        } else {
            let a = acked_side(&args, &log, &text, &groups).await?;
            let h = http_side(&args, &http, &bases, &text, &groups).await?;
            (a, h)
        };
        cpu_rows.push(acked.cpu_row(round, "acked"));
        cpu_rows.push(over_http.cpu_row(round, "http"));
        let ratio = over_http.throughput() / acked.throughput();
        ratios.push(ratio);
        let row = vec![
            round.to_string(),
            if http_first {
                "http, acked"
            } else {
                "acked, http"
            }
            .to_string(),
            format!("{:.0}", acked.throughput()),
            format!("{:.0}", over_http.throughput()),
            format!("{ratio:.3}"),
            format!("{:.1}", acked.p50_ms),
            format!("{:.1}", acked.p99_ms),
            format!("{:.1}", over_http.p50_ms),
            format!("{:.1}", over_http.p99_ms),
            format!(
                "{}/{}",
                over_http.failed,
                over_http.events + over_http.failed
            ),
        ];
        eprintln!("round {round}: {}", row.join(" | "));
        rows.push(row);
    }
    print_table(
        &[
            "round",
            "order",
            "acked ev/s",
            "http ev/s",
            "http ÷ acked",
            "acked p50 ms",
            "acked p99 ms",
            "http p50 ms",
            "http p99 ms",
            "http failed",
        ],
        &rows,
    );
    let mut cpu_header = vec!["round", "side"];
    cpu_header.extend(groups.iter().map(|(name, _)| *name));
    cpu_header.extend(["rest", "machine", "machine busy %"]);
    println!("CPU µs per event (bench: the load generator, and the library on the acked side)");
    print_table(&cpu_header, &cpu_rows);
    let spread = Spread::of(&ratios);
    println!(
        "median http ÷ acked {:.3} (range {:.3}–{:.3}) over {} rounds",
        spread.median, spread.min, spread.max, args.rounds
    );
    drop(instances);
    if !args.keep {
        run.drop().await?;
    }
    Ok(())
}

/// `--url`: rounds of the HTTP side alone against instances something else runs; prints each
/// round's throughput (one `round N: http EV ev/s` line each, which other benches parse) and the
/// median.
async fn run_external(args: Args) -> Result<()> {
    let token = std::env::var("SESSIONLOG_TOKEN")
        .context("--url needs a token with the harness role in $SESSIONLOG_TOKEN")?;
    let http = reqwest::Client::builder()
        .default_headers(sessionlog_http::auth::bearer_headers(&token)?)
        .pool_max_idle_per_host(args.sessions)
        .timeout(Duration::from_secs(60))
        .build()?;
    let bases: Vec<String> = args
        .url
        .iter()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect();
    for base in &bases {
        sessionlog_testkit::wait_ready(&http, base).await?;
    }
    let text = "x".repeat(args.text_bytes);
    let groups = vec![("bench", vec![std::process::id()])];
    let mut throughputs = Vec::new();
    for round in 1..=args.rounds {
        let f = http_side(&args, &http, &bases, &text, &groups).await?;
        println!(
            "round {round}: http {:.0} ev/s ({} events in {:.1} s, p50 {:.1} ms, p99 {:.1} ms, {} answered 503)",
            f.throughput(),
            f.events,
            f.seconds,
            f.p50_ms,
            f.p99_ms,
            f.failed
        );
        throughputs.push(f.throughput());
    }
    let spread = Spread::of(&throughputs);
    println!(
        "median http {:.0} ev/s (range {:.0}–{:.0}) over {} rounds",
        spread.median, spread.min, spread.max, args.rounds
    );
    Ok(())
}

/// The library's side: one process appending every session's events, answered at the ack.
async fn acked_side(
    args: &Args,
    log: &Arc<EventLog>,
    text: &str,
    groups: &[(&'static str, Vec<u32>)],
) -> Result<Figures> {
    let mut writers = Vec::with_capacity(args.sessions);
    for _ in 0..args.sessions {
        writers.push(
            SessionWriter::create(Arc::clone(log), "bench", None)
                .await?
                .0,
        );
    }
    let meter = Meter::start(groups.to_vec());
    let start = Instant::now();
    let tasks: Vec<_> = writers
        .into_iter()
        .enumerate()
        .map(|(i, mut writer)| {
            let due = due_times(args, i);
            let text = text.to_string();
            tokio::spawn(async move {
                let mut latencies = Latencies::default();
                for due in due {
                    let from = wait_due(start, due).await;
                    let event = SessionEvent::UserRequest {
                        content: Content::plain(&text),
                    };
                    writer.append(event).await?;
                    latencies.record(from.elapsed());
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let mut all = Latencies::default();
    for task in tasks {
        for sample in task.await??.samples() {
            all.record(*sample);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Figures::of(all.len(), 0, seconds, all, meter.read()))
}

/// The HTTP side: every session created through an instance, then one event per request.
async fn http_side(
    args: &Args,
    http: &reqwest::Client,
    bases: &[String],
    text: &str,
    groups: &[(&'static str, Vec<u32>)],
) -> Result<Figures> {
    let mut sessions = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let base = &bases[i % bases.len()];
        let answer = http
            .post(format!("{base}/v1/sessions"))
            .json(&json!({ "agent": "bench" }))
            .send()
            .await?;
        ensure!(answer.status() == 201, "create: {}", answer.status());
        let opened: Value = answer.json().await?;
        let id = opened["session_id"].as_str().context("session_id")?;
        let token = opened["writer_token"].as_str().context("writer_token")?;
        sessions.push((format!("{base}/v1/sessions/{id}/events"), token.to_string()));
    }
    let meter = Meter::start(groups.to_vec());
    let start = Instant::now();
    let until = args.seconds.map(|s| start + Duration::from_secs_f64(s));
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, (url, token))| {
            let due = due_times(args, i);
            let http = http.clone();
            let text = text.to_string();
            tokio::spawn(async move {
                let mut latencies = Latencies::default();
                let mut failed = 0;
                // `--seconds`: a closed loop until then; else the schedule's events.
                let mut dues = due.into_iter();
                for n in 0.. {
                    let due = match until {
                        Some(until) if Instant::now() >= until => break,
                        Some(_) => None,
                        None => match dues.next() {
                            Some(due) => due,
                            None => break,
                        },
                    };
                    let from = wait_due(start, due).await;
                    let body = json!({ "epoch": 1, "events": [{
                        "seq": n + 2,
                        "event_id": uuid::Uuid::now_v7(),
                        "kind": "UserRequest",
                        "data": { "content": { "Plain": text } },
                    }]});
                    // A 503 (the tail behind, backpressure) is retried as a harness does: the
                    // same seq and event id, answered once the event is confirmed.
                    loop {
                        let answer = http
                            .post(&url)
                            .header("sessionlog-writer-token", &token)
                            .json(&body)
                            .send()
                            .await?;
                        match answer.status().as_u16() {
                            200 => break,
                            503 => {
                                failed += 1;
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            status => bail!("append: {status}: {}", answer.text().await?),
                        }
                    }
                    latencies.record(from.elapsed());
                }
                anyhow::Ok((latencies, failed))
            })
        })
        .collect();
    let mut all = Latencies::default();
    let mut failed = 0;
    for task in tasks {
        let (latencies, f) = task.await??;
        failed += f;
        for sample in latencies.samples() {
            all.record(*sample);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Figures::of(all.len(), failed, seconds, all, meter.read()))
}
