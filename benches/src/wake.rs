//! Waking a fleet whose harnesses all died at once (issue 43, "Wake").
//!
//! `--sessions` sessions of one agent are written, each a start event and `--events` events,
//! each writer holding a lease with a short TTL (`--ttl-ms`). A `sessionlog project` process
//! projects them and a `sessionlog wake` process watches their leases. `--workers` workers
//! (`sessionlog_recovery::worker::Worker`, each with its own `Recovery`) run in this process
//! for the agent, as a fleet of harness hosts would.
//!
//! Each round the harnesses die at once: every writer is dropped, so its renewals stop and its
//! lease lapses within the TTL. The wake component writes a wake for each session whose lease
//! lapsed, and the workers take them. A worker's handler records the claim and hands the
//! writer (holding its new lease) back to the bench, which keeps it alive: the next round drops
//! them all at once again, a fresh "fleet dies". Before the fleet, the same round measures the
//! reference: a few sessions whose harness dies alone, one after another.
//!
//! Every round prints the sessions taken and missing, the time from each lease's expiry (the
//! wake's `caused_at`) to its claim (p50/p99/max, split at the wake record's `woken_at`), the
//! total from the first expiry to the last claim, and the wakes the component wrote (from its
//! `/metrics`); then the medians and their spread, against the goal: p99 at most 2 s after
//! expiry, all sessions within 15 s.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo build --release -p sessionlog-benches -p sessionlog-cli
//! target/release/sessionlog-bench wake --sessions 1000 --rounds 3
//! ```

use crate::resume::Counters;
use crate::{Latencies, Spread, Watched, print_table};
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::Recovery;
use sessionlog_recovery::worker::{Work, Worker};
use sessionlog_schemas::{Content, Micros, SessionEvent, SessionId, now_micros};
use sessionlog_testkit::{free_address, wait_ready};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog: a fleet of sessions whose harnesses died at once, woken and taken")]
pub struct Args {
    /// Sessions whose harnesses die at once each round.
    #[arg(long, default_value_t = 1_000)]
    sessions: usize,
    /// Events per session after its start event.
    #[arg(long, default_value_t = 5)]
    events: usize,
    /// `[lease] ttl_ms` of every writer and service of the run.
    #[arg(long, default_value_t = 5_000)]
    ttl_ms: u64,
    /// Workers (each its own `Recovery`, a member of the agent's worker group).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Sessions each worker takes at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Rounds: each kills every harness again.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Sessions whose harness dies alone, one after another, in each round before the fleet:
    /// the reference.
    #[arg(long, default_value_t = 3)]
    singles: usize,
    /// Seconds after the harnesses die before a session not taken counts as missing.
    #[arg(long, default_value_t = 60)]
    deadline_secs: u64,
    /// Keep the run's keyspace and topics (by default they are dropped at the end).
    #[arg(long)]
    keep: bool,
    /// Start the workers after the sessions are written, so that their tails of the log hold
    /// none of the sessions' starts and every rebuild reads the partition (workers started
    /// after the fleet they serve, or a fleet busy enough that a tail's memory does not reach
    /// back to the sessions' checkpoints). By default the workers run first, as long-running
    /// workers do, and their tails hold the sessions.
    #[arg(long)]
    late_workers: bool,
}

/// The agent of every session: its workers form one group on the wake topic.
const AGENT: &str = "bench-wake";
/// Sessions dropped and taken before the first round, so that the wake component's and the
/// workers' group assignments are settled before anything is measured.
const WARM_UP: usize = 12;
/// `sessionlog_wake::observe::WAKES`, the wake component's counter of records written.
const WAKES_METRIC: &str = "sessionlog_wake_records_total";

/// One session taken by a worker.
struct Claim {
    session: SessionId,
    /// The lease's expiry (the wake's `caused_at`).
    caused_at: Micros,
    /// When the wake component wrote the wake.
    woken_at: Micros,
    /// When the worker's handler got the session: claimed, its new lease held.
    claimed_at: Micros,
}

/// The writers the workers took, holding their leases: the harnesses of the next round.
type Holders = HashMap<SessionId, SessionWriter>;
type Claims = mpsc::UnboundedReceiver<(Claim, Option<SessionWriter>)>;

/// One round's figures.
struct Round {
    single_p50: Duration,
    taken: usize,
    missing: usize,
    /// Claims of sessions not dropped this round, or of one taken twice.
    stray: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    wake_p50: Duration,
    wake_p99: Duration,
    claim_p50: Duration,
    claim_p99: Duration,
    /// From the first lease's expiry to the last claim.
    total: Duration,
    /// From the harnesses' death (the drop) to the last claim.
    from_death: Duration,
    /// From the first lease's expiry to the last.
    expiry_spread: Duration,
    /// Wakes written for the fleet, first and repeated, by the component's counter.
    wakes: f64,
    rewakes: f64,
    /// CPU seconds each process group used from the drop to the last claim, and the machine's
    /// busy share over that time.
    cpu: crate::cpu::Used,
    /// Mean milliseconds per phase of a take ([`crate::resume::PHASES`]), from the workers'
    /// own metrics over the fleet's takes.
    phases: crate::resume::Phases,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.sessions == 0 || args.rounds == 0 || args.workers == 0 {
        bail!("--sessions, --rounds and --workers must be at least 1");
    }
    if args.ttl_ms == 0 {
        bail!("--ttl-ms must be more than 0: without leases nothing lapses");
    }
    // The workers' takes time their phases through the `metrics` facade: recorded here, so
    // each round can say where a take's time went.
    let recorder = sessionlog_http::metrics::install(&[]);
    let render_metrics = move || recorder.render();
    let mut run = crate::ServiceRun::prepare("wake", args.partitions).await?;
    run.settings.lease.ttl_ms = args.ttl_ms;
    let (settings, store) = (&run.settings, &run.store);

    let projector = Watched::spawn(run.command(&["project"])?)?;
    let listen = free_address()?;
    let waker = Watched::spawn(run.command(&["wake", "--listen", &listen])?)?;
    let base = format!("http://{listen}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    wait_ready(&http, &base).await?;

    let (sent, mut claims) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let mut workers = tokio::task::JoinSet::new();
    let log = Arc::new(EventLog::from_settings(settings).await?);
    let mut holders = if args.late_workers {
        write_sessions(&log, args.sessions + WARM_UP, &args).await?
    } else {
        Holders::new()
    };
    for i in 0..args.workers {
        let recovery = Arc::new(
            Recovery::connect(settings)
                .await
                .context("connecting a worker's recovery")?,
        );
        let sent = sent.clone();
        let mut stopped = stopped.clone();
        let worker =
            Worker::new(recovery, AGENT, format!("bench-worker-{i}")).concurrency(args.concurrency);
        workers.spawn(worker.run(
            move |work: Work| {
                let sent = sent.clone();
                async move {
                    let claim = Claim {
                        session: work.wake.session_id,
                        caused_at: work.wake.caused_at,
                        woken_at: work.wake.woken_at,
                        claimed_at: now_micros(),
                    };
                    // The writer goes on holding its lease until the bench drops it.
                    let _ = sent.send((claim, work.bundle.writer));
                }
            },
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        ));
    }
    drop(sent);

    if !args.late_workers {
        holders = write_sessions(&log, args.sessions + WARM_UP, &args).await?;
    }
    let mut sessions: Vec<SessionId> = holders.keys().copied().collect();
    let warm_up: Vec<SessionId> = sessions.split_off(args.sessions);
    let took = crate::wait_projected(settings, store).await?;
    eprintln!("projected ({:.1} s)", took.as_secs_f64());

    eprintln!("warming up: {WARM_UP} harnesses die, until every one is taken");
    let (taken, _) = die_and_take(
        &warm_up,
        &mut holders,
        &mut claims,
        Duration::from_millis(args.ttl_ms) + Duration::from_secs(120),
    )
    .await;
    if taken.len() < warm_up.len() {
        bail!(
            "warm-up: {} of {} sessions taken within {} s after their harnesses died: is the \
             wake component running?",
            taken.len(),
            warm_up.len(),
            args.ttl_ms / 1000 + 120
        );
    }
    check_workers(&mut workers)?;

    let groups = vec![
        ("bench (workers)", vec![std::process::id()]),
        ("wake", vec![waker.child.id()]),
        ("projector", vec![projector.child.id()]),
        ("kafka", crate::cpu::stack_pids("kafka-")),
        ("cassandra", crate::cpu::stack_pids("cassandra")),
        ("registry", crate::cpu::stack_pids("registry")),
    ];
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        crate::wait_projected(settings, store).await?;
        let place = Place {
            metrics: &render_metrics,
            sessions: &sessions,
            holders: &mut holders,
            claims: &mut claims,
            http: &http,
            base: &base,
            groups: &groups,
        };
        rounds.push(measure(round, &args, place).await?);
        check_workers(&mut workers)?;
    }
    report(&args, &rounds);

    let _ = stop.send(true);
    while let Some(ended) = workers.join_next().await {
        ended??;
    }
    drop(holders);
    drop(waker);
    drop(projector);
    if !args.keep {
        run.drop().await?;
    }
    Ok(())
}

/// Fails when a worker stopped before it was told to.
fn check_workers(
    workers: &mut tokio::task::JoinSet<sessionlog_recovery::Result<()>>,
) -> Result<()> {
    if let Some(ended) = workers.try_join_next() {
        ended?.context("a worker stopped")?;
        bail!("a worker stopped before the end");
    }
    Ok(())
}

/// Writes `count` sessions of [`AGENT`], 64 at a time, each a start and `--events` events, each
/// writer holding a lease.
async fn write_sessions(log: &Arc<EventLog>, count: usize, args: &Args) -> Result<Holders> {
    let started = Instant::now();
    let request = |seq: usize| SessionEvent::UserRequest {
        content: Content::plain(format!(
            "request {seq}: what is the weather like in Lisbon?"
        )),
    };
    let mut written = futures::stream::iter(0..count)
        .map(|_| {
            let log = Arc::clone(log);
            async move {
                let (mut writer, _) = SessionWriter::create(log, AGENT, Some("wake")).await?;
                writer
                    .append_batch((0..args.events).map(request).collect())
                    .await?;
                writer.hold_lease("bench-harness").await?;
                anyhow::Ok(writer)
            }
        })
        .buffer_unordered(64);
    let mut holders = HashMap::with_capacity(count);
    while let Some(writer) = written.next().await {
        let writer = writer?;
        holders.insert(writer.session_id(), writer);
        if holders.len() % 200 == 0 {
            eprintln!(
                "written {} / {count} sessions ({:.1} s)",
                holders.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    log.flush(Duration::from_secs(30)).await?;
    Ok(holders)
}

/// Drops the writers of `sessions` at once (their harnesses die) and collects the claims until
/// every one of them was taken or `limit` passed. Returns the claims of `sessions`, the drop's
/// time, and keeps every writer taken in `holders`; the second value counts the other claims
/// (stray or repeated).
async fn die_and_take(
    sessions: &[SessionId],
    holders: &mut Holders,
    claims: &mut Claims,
    limit: Duration,
) -> (Vec<Claim>, usize) {
    let dying: Vec<SessionWriter> = sessions.iter().filter_map(|s| holders.remove(s)).collect();
    drop(dying);
    let deadline = tokio::time::Instant::now() + limit;
    let mut waiting: HashSet<SessionId> = sessions.iter().copied().collect();
    let mut taken = Vec::with_capacity(sessions.len());
    let mut stray = 0;
    while !waiting.is_empty() {
        let Ok(Some((claim, writer))) = tokio::time::timeout_at(deadline, claims.recv()).await
        else {
            break;
        };
        if let Some(writer) = writer {
            holders.insert(claim.session, writer);
        }
        if waiting.remove(&claim.session) {
            taken.push(claim);
        } else {
            stray += 1;
        }
    }
    (taken, stray)
}

/// What a round works on.
struct Place<'a> {
    sessions: &'a [SessionId],
    holders: &'a mut Holders,
    claims: &'a mut Claims,
    http: &'a reqwest::Client,
    base: &'a str,
    /// The processes whose CPU time is measured, by name.
    groups: &'a [(&'static str, Vec<u32>)],
    /// Renders this process's metrics (the workers' take phases).
    metrics: &'a (dyn Fn() -> String + Sync),
}

/// One round: the reference (harnesses dying alone, one after another), then the fleet.
async fn measure(round: usize, args: &Args, place: Place<'_>) -> Result<Round> {
    let Place {
        sessions,
        holders,
        claims,
        http,
        base,
        groups,
        metrics,
    } = place;
    let limit = Duration::from_millis(args.ttl_ms) + Duration::from_secs(args.deadline_secs);
    let (singles, fleet) = sessions.split_at(args.singles.min(sessions.len()));
    let mut alone = Latencies::default();
    for session in singles {
        let (taken, _) = die_and_take(std::slice::from_ref(session), holders, claims, limit).await;
        let Some(claim) = taken.first() else {
            bail!(
                "round {round}: a session whose harness died alone was not taken within {limit:?}"
            );
        };
        alone.record(micros(claim.claimed_at - claim.caused_at));
    }

    let before = wakes_written(http, base).await?;
    eprintln!("round {round}: {} harnesses die at once", fleet.len());
    let meter = crate::cpu::Meter::start(groups.to_vec());
    let phases_before = Counters::parse(&metrics());
    let died_at = now_micros();
    let (taken, stray) = die_and_take(fleet, holders, claims, limit).await;
    let cpu = meter.read();
    let phases = Counters::parse(&metrics()).since(&phases_before);
    // Every session taken was woken, but the component's counter is read over HTTP and may
    // trail its writes: wait (with a deadline) until it counts at least one wake per session.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let after = wakes_written(http, base).await?;
        if after.0 - before.0 >= taken.len() as f64 || std::time::Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let (mut expiry_to_claim, mut expiry_to_wake, mut wake_to_claim) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for claim in &taken {
        expiry_to_claim.record(micros(claim.claimed_at - claim.caused_at));
        expiry_to_wake.record(micros(claim.woken_at - claim.caused_at));
        wake_to_claim.record(micros(claim.claimed_at - claim.woken_at));
    }
    let first_expiry = taken.iter().map(|c| c.caused_at).min().unwrap_or(died_at);
    let last_expiry = taken.iter().map(|c| c.caused_at).max().unwrap_or(died_at);
    let last_claim = taken.iter().map(|c| c.claimed_at).max().unwrap_or(died_at);
    let figures = Round {
        single_p50: alone.percentile(50.0),
        taken: taken.len(),
        missing: fleet.len() - taken.len(),
        stray,
        p50: expiry_to_claim.percentile(50.0),
        p99: expiry_to_claim.percentile(99.0),
        max: expiry_to_claim.max(),
        wake_p50: expiry_to_wake.percentile(50.0),
        wake_p99: expiry_to_wake.percentile(99.0),
        claim_p50: wake_to_claim.percentile(50.0),
        claim_p99: wake_to_claim.percentile(99.0),
        total: micros(last_claim - first_expiry),
        from_death: micros(last_claim - died_at),
        expiry_spread: micros(last_expiry - first_expiry),
        wakes: after.0 - before.0,
        rewakes: after.1 - before.1,
        cpu,
        phases,
    };
    eprintln!(
        "round {round}: {} taken, {} missing, {} stray; expiry→claim p50 {:.0} ms, p99 {:.0} ms, \
         max {:.0} ms; first expiry → last claim {:.2} s; {} wakes ({} repeated); alone p50 {:.0} ms",
        figures.taken,
        figures.missing,
        figures.stray,
        ms(figures.p50),
        ms(figures.p99),
        ms(figures.max),
        figures.total.as_secs_f64(),
        figures.wakes,
        figures.rewakes,
        ms(figures.single_p50),
    );
    Ok(figures)
}

fn micros(m: Micros) -> Duration {
    Duration::from_micros(m.max(0).unsigned_abs())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The wake component's lease-expiry wakes written so far, first and repeated, from its
/// `/metrics`.
async fn wakes_written(http: &reqwest::Client, base: &str) -> Result<(f64, f64)> {
    let text = sessionlog_testkit::metrics_page(http, base).await?;
    let sum = |repeat: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with(WAKES_METRIC)
                    && l.contains("reason=\"lease_expired\"")
                    && l.contains(&format!("repeat=\"{repeat}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Ok((sum("false"), sum("true")))
}

fn report(args: &Args, rounds: &[Round]) {
    let fleet = args.sessions.saturating_sub(args.singles);
    println!(
        "\n{fleet} sessions whose harnesses die at once per round ({} events each; lease TTL {} \
         ms; {} workers × {} at once, started {} the sessions were written; {} partitions), \
         after {} dying alone (the reference)",
        args.events,
        args.ttl_ms,
        args.workers,
        args.concurrency,
        if args.late_workers { "after" } else { "before" },
        args.partitions,
        args.singles
    );
    let ms = |d: Duration| format!("{:.0}", ms(d));
    let rows: Vec<Vec<String>> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                r.taken.to_string(),
                r.missing.to_string(),
                r.stray.to_string(),
                ms(r.p50),
                ms(r.p99),
                ms(r.max),
                format!("{:.2}", r.total.as_secs_f64()),
                ms(r.single_p50),
                format!("{:.2}", ratio(r)),
                format!("{:.0}", r.wakes),
                format!("{:.0}", r.rewakes),
            ]
        })
        .collect();
    print_table(
        &[
            "round",
            "taken",
            "missing",
            "stray",
            "p50 ms",
            "p99 ms",
            "max ms",
            "total s",
            "alone p50 ms",
            "p99 ÷ alone",
            "wakes",
            "repeated",
        ],
        &rows,
    );
    println!(
        "\nwhere the time goes (expiry → wake record → claim; total s is first expiry → last claim)"
    );
    let rows: Vec<Vec<String>> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                ms(r.wake_p50),
                ms(r.wake_p99),
                ms(r.claim_p50),
                ms(r.claim_p99),
                format!("{:.2}", r.expiry_spread.as_secs_f64()),
                format!("{:.2}", r.from_death.as_secs_f64()),
            ]
        })
        .collect();
    print_table(
        &[
            "round",
            "expiry→wake p50 ms",
            "p99 ms",
            "wake→claim p50 ms",
            "p99 ms",
            "expiries spread s",
            "death → last claim s",
        ],
        &rows,
    );
    println!(
        "\nwhere the cores went from the drop to the last claim (CPU seconds; the machine has {} \
         cores)",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let mut header = vec!["round"];
    if let Some(first) = rounds.first() {
        header.extend(first.cpu.groups.iter().map(|(name, _)| *name));
    }
    header.extend(["rest", "machine busy", "CPU ms per take"]);
    let rows: Vec<Vec<String>> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![(i + 1).to_string()];
            row.extend(r.cpu.groups.iter().map(|(_, s)| format!("{s:.1}")));
            row.push(format!("{:.1}", r.cpu.rest()));
            row.push(format!("{:.0}%", r.cpu.busy_share() * 100.0));
            row.push(format!(
                "{:.1}",
                r.cpu.machine_busy * 1e3 / r.taken.max(1) as f64
            ));
            row
        })
        .collect();
    print_table(&header, &rows);
    crate::resume::print_phases(
        "where a take's time went (mean ms per phase, the workers' own timings; rebuild includes wait_reader)",
        rounds.iter().map(|r| &r.phases),
    );
    let spread = |f: &dyn Fn(&Round) -> f64| Spread::of(&rounds.iter().map(f).collect::<Vec<_>>());
    println!(
        "expiry → claim p50 ms: median {}",
        spread(&|r| r.p50.as_secs_f64() * 1e3)
    );
    println!(
        "expiry → claim p99 ms: median {} (goal: at most 2000)",
        spread(&|r| r.p99.as_secs_f64() * 1e3)
    );
    println!(
        "first expiry → last claim s: median {} (goal: at most 15)",
        spread(&|r| r.total.as_secs_f64())
    );
    println!(
        "alone p50 ms: median {}; fleet p99 ÷ alone: median {}",
        spread(&|r| r.single_p50.as_secs_f64() * 1e3),
        spread(&ratio)
    );
    println!(
        "missing: {} (goal: none); repeated wakes: {}",
        rounds.iter().map(|r| r.missing).sum::<usize>(),
        rounds.iter().map(|r| r.rewakes).sum::<f64>()
    );
}

/// The fleet's p99 against the reference's median.
fn ratio(round: &Round) -> f64 {
    let alone = round.single_p50.as_secs_f64();
    if alone > 0.0 {
        round.p99.as_secs_f64() / alone
    } else {
        0.0
    }
}
