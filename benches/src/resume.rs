//! A thousand resumes at once: a fleet restart, through the recovery service.
//!
//! `--sessions` sessions (spread over every partition) are written, each a start event,
//! `--events` events, a checkpoint and a `--tail` of events after it; a `sessionlog project`
//! process projects them. Then a `sessionlog serve-recovery` process (authentication on, as
//! shipped) is asked to resume every session at once over HTTP, as harnesses restarting together
//! would. Each round resumes them all again (each resume claims the next epoch, so a round is a
//! fleet restart of the round before), after a reference measured in the same round: a few
//! sessions resumed one at a time, alone on the service.
//!
//! Every round prints the total time, per-resume p50/p99, the failures by status, log records
//! read per resume and the read amplification (records read ÷ events folded, from the service's
//! own `/metrics`), and the service's peak resident memory; then the medians and their spread.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo build --release -p sessionlog-benches -p sessionlog-cli
//! target/release/sessionlog-bench resume --sessions 1000 --rounds 3
//! ```

use crate::{Latencies, Spread, Watched, print_table};
use anyhow::{Result, bail};
use futures::StreamExt;
use sessionlog_log::Settings;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_testkit::{free_address, wait_ready};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog: resuming a fleet of sessions at once through the recovery service")]
pub struct Args {
    /// Sessions resumed at once.
    #[arg(long, default_value_t = 1_000)]
    sessions: usize,
    /// Events per session before its checkpoint (after its start event).
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// Events per session after its checkpoint: what each resume folds from the log.
    #[arg(long, default_value_t = 10)]
    tail: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Rounds: each resumes every session again.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Sessions resumed one at a time in each round, before the fleet: the reference.
    #[arg(long, default_value_t = 20)]
    singles: usize,
    /// Seconds a resume may take before the bench counts it as failed.
    #[arg(long, default_value_t = 120)]
    request_timeout_secs: u64,
    /// The service's `[producer] readers` (its default when not given).
    #[arg(long)]
    readers: Option<usize>,
    /// The service's `[recovery] max_concurrent_resumes` (its default when not given).
    #[arg(long)]
    max_concurrent_resumes: Option<usize>,
    /// Keep the run's keyspace and topics (by default they are dropped at the end).
    #[arg(long)]
    keep: bool,
}

/// One round's figures.
struct Round {
    single_p50: Duration,
    total: Duration,
    p50: Duration,
    p99: Duration,
    failed: BTreeMap<String, usize>,
    records_per_resume: f64,
    amplification: f64,
    peak_mib: f64,
    /// Mean milliseconds per phase of [`PHASES`] in the fleet.
    phases: Phases,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.sessions == 0 || args.rounds == 0 {
        bail!("--sessions and --rounds must be at least 1");
    }
    let mut run = crate::ServiceRun::prepare("resume", args.partitions).await?;

    let projector = Watched::spawn(run.command(&["project"])?)?;

    let sessions = write_sessions(&run.settings, &args).await?;
    let took = crate::wait_projected(&run.settings, &run.store).await?;
    eprintln!("projected ({:.1} s)", took.as_secs_f64());

    // The service's own settings, given to it alone (the writes above used the defaults).
    if let Some(readers) = args.readers {
        run.settings.producer.readers = readers;
    }
    if let Some(limit) = args.max_concurrent_resumes {
        run.settings.recovery.max_concurrent_resumes = limit;
    }
    let listen = free_address()?;
    let service = Watched::spawn(run.command(&["serve-recovery", "--listen", &listen])?)?;
    let base = format!("http://{listen}");
    let http = run.client(
        args.sessions,
        Duration::from_secs(args.request_timeout_secs),
    )?;
    wait_ready(&http, &base).await?;

    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        rounds.push(measure(round, &args, &http, &base, &sessions, &service).await?);
    }
    report(&args, &rounds);
    drop(service);
    drop(projector);
    if !args.keep {
        run.drop().await?;
    }
    Ok(())
}

/// Writes the sessions, 64 at a time: start, `--events`, a checkpoint, `--tail`.
async fn write_sessions(settings: &Settings, args: &Args) -> Result<Vec<SessionId>> {
    let log = Arc::new(EventLog::from_settings(settings).await?);
    let started = Instant::now();
    let request = |seq: usize| SessionEvent::UserRequest {
        content: Content::plain(format!(
            "request {seq}: what is the weather like in Lisbon?"
        )),
    };
    let mut written = futures::stream::iter(0..args.sessions)
        .map(|_| {
            let log = Arc::clone(&log);
            async move {
                let (mut writer, _) = SessionWriter::create(log, "bench", Some("resume")).await?;
                writer
                    .append_batch((0..args.events).map(request).collect())
                    .await?;
                writer.checkpoint(None).await?;
                writer
                    .append_batch((0..args.tail).map(request).collect())
                    .await?;
                anyhow::Ok(writer.session_id())
            }
        })
        .buffer_unordered(64);
    let mut sessions = Vec::with_capacity(args.sessions);
    while let Some(session) = written.next().await {
        sessions.push(session?);
        if sessions.len() % 100 == 0 {
            eprintln!(
                "written {} / {} sessions ({:.1} s)",
                sessions.len(),
                args.sessions,
                started.elapsed().as_secs_f64()
            );
        }
    }
    log.flush(Duration::from_secs(30)).await?;
    Ok(sessions)
}

/// One round: the reference (a few resumes one at a time), then every session at once.
async fn measure(
    round: usize,
    args: &Args,
    http: &reqwest::Client,
    base: &str,
    sessions: &[SessionId],
    service: &Watched,
) -> Result<Round> {
    let writer = format!("bench-round-{round}");
    let mut singles = Latencies::default();
    for session in sessions.iter().take(args.singles) {
        let (latency, outcome) = resume(http, base, *session, &writer).await;
        if let Err(why) = outcome {
            bail!("round {round}: a single resume failed: {why}");
        }
        singles.record(latency);
    }
    let rest = &sessions[args.singles.min(sessions.len())..];
    let before = Counters::scrape(http, base).await?;
    service.reset_peak();
    eprintln!("round {round}: resuming {} sessions at once", rest.len());
    let started = Instant::now();
    let outcomes = futures::future::join_all(
        rest.iter()
            .map(|session| resume(http, base, *session, &writer)),
    )
    .await;
    let total = started.elapsed();
    let peak_mib = service.peak_mib();
    let after = Counters::scrape(http, base).await?;
    let mut latencies = Latencies::default();
    let mut failed = BTreeMap::new();
    for (latency, outcome) in outcomes {
        match outcome {
            Ok(()) => latencies.record(latency),
            Err(why) => *failed.entry(why).or_insert(0) += 1,
        }
    }
    let resumed = latencies.len().max(1) as f64;
    let read = after.records_read - before.records_read;
    let folded = after.events_folded - before.events_folded;
    let figures = Round {
        single_p50: singles.percentile(50.0),
        total,
        p50: latencies.percentile(50.0),
        p99: latencies.percentile(99.0),
        failed,
        records_per_resume: read / resumed,
        amplification: if folded > 0.0 { read / folded } else { 0.0 },
        peak_mib,
        phases: after.since(&before),
    };
    eprintln!(
        "round {round}: {} resumed in {:.2} s, p99 {:.0} ms, {} failed",
        latencies.len(),
        total.as_secs_f64(),
        figures.p99.as_secs_f64() * 1e3,
        figures.failed.values().sum::<usize>()
    );
    Ok(figures)
}

/// Resumes one session; the error is what the bench counts failures by (status and code).
async fn resume(
    http: &reqwest::Client,
    base: &str,
    session: SessionId,
    writer: &str,
) -> (Duration, Result<(), String>) {
    let started = Instant::now();
    let answer = http
        .post(format!("{base}/v1/sessions/{session}/resume"))
        .json(&serde_json::json!({ "writer": writer }))
        .send()
        .await;
    let outcome = match answer {
        Ok(answer) if answer.status().is_success() => match answer.bytes().await {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("reading the bundle: {e}")),
        },
        Ok(answer) => {
            let status = answer.status().as_u16();
            let problem: serde_json::Value = answer.json().await.unwrap_or_default();
            let code = problem["code"].as_str().unwrap_or("?").to_string();
            Err(format!("{status} {code}"))
        }
        Err(e) if e.is_timeout() => Err("timed out".into()),
        Err(e) => Err(format!("no answer: {e}")),
    };
    (started.elapsed(), outcome)
}

/// The phases of a resume the service times (see `RESUME_PHASE_SECONDS`).
pub(crate) const PHASES: [&str; 5] = ["wait_turn", "wait_reader", "rebuild", "claim", "bundle"];

/// Prints `title` and a table of each round's mean milliseconds per phase of [`PHASES`].
pub(crate) fn print_phases<'a>(title: &str, rounds: impl Iterator<Item = &'a Phases>) {
    println!("\n{title}");
    let rows: Vec<Vec<String>> = rounds
        .enumerate()
        .map(|(i, phases)| {
            let mut row = vec![(i + 1).to_string()];
            row.extend(phases.ms.iter().map(|ms| format!("{ms:.1}")));
            row.push(format!("{:.0} of {:.0}", phases.from_tail, phases.rebuilds));
            row
        })
        .collect();
    let mut header = vec!["round"];
    header.extend(PHASES);
    header.push("rebuilds read from the tail");
    print_table(&header, &rows);
}

/// Where resumes' time went over a stretch, and how their rebuilds read.
pub(crate) struct Phases {
    /// Mean milliseconds per phase of [`PHASES`].
    ms: [f64; PHASES.len()],
    /// Rebuilds done.
    rebuilds: f64,
    /// Of them, those the process's tail of the log held (read from memory, no reader).
    from_tail: f64,
}

/// The recovery service's read counters and phase timings, from its `/metrics`.
pub(crate) struct Counters {
    records_read: f64,
    events_folded: f64,
    /// Per phase of [`PHASES`]: seconds in total and how many times it ran.
    phases: [(f64, f64); PHASES.len()],
    rebuilds: f64,
    rebuilds_from_tail: f64,
}

impl Counters {
    async fn scrape(http: &reqwest::Client, base: &str) -> Result<Self> {
        Ok(Self::parse(
            &sessionlog_testkit::metrics_page(http, base).await?,
        ))
    }

    /// The counters in a Prometheus text page (a service's `/metrics`, or this process's own
    /// recorder rendered).
    pub(crate) fn parse(text: &str) -> Self {
        // The series of `name` whose labels include `label` ("" for all of them), summed.
        let sum_with = |name: &str, label: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l.contains(label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let sum = |name: &str| sum_with(name, "");
        let phase = |name: &str| {
            let series = sessionlog_recovery::observe::RESUME_PHASE_SECONDS;
            (
                sum(&format!("{series}_sum{{phase=\"{name}\"}}")),
                sum(&format!("{series}_count{{phase=\"{name}\"}}")),
            )
        };
        Self {
            records_read: sum(sessionlog_recovery::observe::RECORDS_READ),
            events_folded: sum(sessionlog_recovery::observe::EVENTS_FOLDED),
            phases: PHASES.map(phase),
            rebuilds: sum(sessionlog_recovery::observe::REBUILDS),
            rebuilds_from_tail: sum_with(sessionlog_recovery::observe::REBUILDS, "read=\"tail\""),
        }
    }

    /// The phases between `before` and `self`.
    pub(crate) fn since(&self, before: &Self) -> Phases {
        Phases {
            ms: std::array::from_fn(|i| {
                let seconds = self.phases[i].0 - before.phases[i].0;
                let count = self.phases[i].1 - before.phases[i].1;
                if count > 0.0 {
                    seconds / count * 1e3
                } else {
                    0.0
                }
            }),
            rebuilds: self.rebuilds - before.rebuilds,
            from_tail: self.rebuilds_from_tail - before.rebuilds_from_tail,
        }
    }
}

fn report(args: &Args, rounds: &[Round]) {
    let fleet = args.sessions.saturating_sub(args.singles);
    println!(
        "\n{fleet} sessions resumed at once per round ({} events, a checkpoint, {} after it; {} \
         partitions), after {} resumed one at a time (the reference)",
        args.events, args.tail, args.partitions, args.singles
    );
    let ms = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
    let rows: Vec<Vec<String>> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let failed = if r.failed.is_empty() {
                "0".to_string()
            } else {
                r.failed
                    .iter()
                    .map(|(why, n)| format!("{n}× {why}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                (i + 1).to_string(),
                format!("{:.2}", r.total.as_secs_f64()),
                ms(r.p50),
                ms(r.p99),
                ms(r.single_p50),
                format!("{:.2}", serial_ratio(r, fleet)),
                failed,
                format!("{:.1}", r.records_per_resume),
                format!("{:.2}", r.amplification),
                format!("{:.0}", r.peak_mib),
            ]
        })
        .collect();
    print_table(
        &[
            "round",
            "total s",
            "p50 ms",
            "p99 ms",
            "alone p50 ms",
            "total ÷ (n × alone)",
            "failed",
            "records/resume",
            "amplification",
            "service peak MiB",
        ],
        &rows,
    );
    print_phases(
        "where a resume's time goes in the fleet (mean ms per phase; rebuild includes wait_reader; wait_turn is before both)",
        rounds.iter().map(|r| &r.phases),
    );
    let spread = |f: &dyn Fn(&Round) -> f64| Spread::of(&rounds.iter().map(f).collect::<Vec<_>>());
    println!(
        "total s: median {} (goal: at most 10)",
        spread(&|r| r.total.as_secs_f64())
    );
    println!("p99 ms: median {}", spread(&|r| r.p99.as_secs_f64() * 1e3));
    println!(
        "total ÷ the same resumes one after another: median {} (1 = no faster than serial)",
        spread(&|r| serial_ratio(r, fleet))
    );
    println!(
        "read amplification: median {} (goal: at most 2)",
        spread(&|r| r.amplification)
    );
    println!(
        "service peak MiB: median {} (bounded by [recovery] max_concurrent_resumes)",
        spread(&|r| r.peak_mib)
    );
    println!(
        "failed resumes: {} (goal: none)",
        rounds
            .iter()
            .map(|r| r.failed.values().sum::<usize>())
            .sum::<usize>()
    );
}

/// The round's total against the same number of resumes run one after another at the
/// reference's median.
fn serial_ratio(round: &Round, fleet: usize) -> f64 {
    let serial = round.single_p50.as_secs_f64() * fleet.max(1) as f64;
    if serial > 0.0 {
        round.total.as_secs_f64() / serial
    } else {
        0.0
    }
}
