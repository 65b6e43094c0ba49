//! Projector benchmark, against the running stack (`scripts/stack up`):
//!
//! 1. End-to-end lag: appends at `--rate` events/s for `--rounds` × `--duration` seconds across
//!    `--sessions` sessions (after `--warmup` seconds of the same load, not measured) while a
//!    `sessionlog project` process projects them (started, and waited for until it has projected
//!    a first session, before the load); for a sample of events, the
//!    time from the start of the append until the projector's stored progress passes it
//!    (written after the rows it covers). Each `--duration` of the load is one round: the
//!    bench prints every round's p50/p99 and the median p99 with its spread.
//! 2. Replay throughput, `--rounds` times, alternating which goes first: `sessionlog replay` of
//!    the same topic into a fresh keyspace, against a plain `scylla`-driver insert of the same
//!    rows (read back from a replayed keyspace) into another; prints every round, the median
//!    ratio and its spread.
//!
//! The projector's peak resident memory (VmHWM of the child process) is printed for both runs,
//! and, from its metrics, how many batches it wrote and how long each took to be durable.
//!
//! After the lag rounds it also prints what the live projector wrote per event applied, by
//! table: CQL statements (rows), cells and bytes of bound values, from its counters
//! (`sessionlog_projector_cql_{rows,cells,bytes}_total{table,op}`, over the whole run, warm-up
//! included) divided by the events it applied (`sessionlog_projector_applied_total`), and the
//! totals; beside them, the rows each table holds at the end per event: what the plain insert of
//! the replay comparison (2.) writes, one statement per stored row. The difference is what the
//! projector writes more than once (the session and context rows it rewrites each batch, a
//! span's opening and closing writes, progress and rollups) or writes and deletes.
//!
//! With `--encryption-rounds N` it measures what sealing costs instead: N rounds of the lag run
//! (1.) with `[privacy] encrypt` off and on, each on its own topic and keyspace, alternating
//! which goes first; every round, the median ratios (sealed / plain) and their spread.
//!
//! `cargo run --release -p sessionlog-benches --bin sessionlog-bench -- projector --duration 120`

use crate::{Latencies, Watched, drop_run, print_table};
use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_producer::{EventLog, ProducerOptions, SessionWriter};
use sessionlog_projector::observe;
use sessionlog_schemas::{Content, SessionEvent};
use sessionlog_store::ProjectionStore;
use sessionlog_store::verify::TABLES;
use sessionlog_testkit::projector::{partition_ends, wait_applied_through};
use sessionlog_testkit::stack;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

#[derive(Debug, clap::Args)]
#[command(
    about = "sessionlog project: end-to-end lag, and replay vs a plain insert of the same rows"
)]
pub struct Args {
    /// Seconds of load measured per round.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// Rounds: consecutive periods of `--duration` of the lag run, and replays against the
    /// plain insert, alternating which goes first.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Seconds of load before measuring: the servers' JIT compilers and the projector's
    /// caches warm up, so the figures describe the steady state, not a cold start.
    #[arg(long, default_value_t = 15)]
    warmup: u64,
    /// Events appended per second.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// Concurrent sessions the load spreads over.
    #[arg(long, default_value_t = 500)]
    sessions: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Lag samples per second.
    #[arg(long, default_value_t = 50)]
    samples: u64,
    /// Keep the run's keyspaces and topics (by default they are dropped at the end).
    #[arg(long)]
    keep: bool,
    /// Compare sealed with plain over this many rounds of the lag run (no replay).
    #[arg(long, default_value_t = 0)]
    encryption_rounds: usize,
    /// Compare fields sealed under their own keys with fields sealed under the session's one
    /// key (`[privacy] per_record_keys`) over this many rounds of the lag run (no replay).
    #[arg(long, default_value_t = 0)]
    key_rounds: usize,
}

/// One lag run's figures, for the encryption comparison.
struct LagRun {
    appended: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// A running `sessionlog project` and where its metrics are served.
struct Projector {
    process: Watched,
    metrics: String,
}

/// Starts `sessionlog project` and returns it with a log to load it through, once it has
/// projected a first session: its start (process, group join, first fetch) is not lag.
async fn start_projector(
    bin: &Path,
    settings: &Settings,
    store: &ProjectionStore,
) -> Result<(Projector, Arc<EventLog>)> {
    let listen = sessionlog_testkit::free_address()?;
    let started = Instant::now();
    let mut project = sessionlog_testkit::served::command_with(bin, settings)?;
    project.args(["project", "--listen", &listen]);
    let process = Watched::spawn(project)?;
    let log = Arc::new(EventLog::connect(settings, ProducerOptions::default()).await?);
    SessionWriter::create(Arc::clone(&log), "bench-probe", None).await?;
    crate::wait_projected(settings, store).await?;
    eprintln!(
        "projector projecting {:.1} s after its start",
        started.elapsed().as_secs_f64()
    );
    let metrics = format!("http://{listen}/metrics");
    Ok((Projector { process, metrics }, log))
}

impl Projector {
    /// Where the projector's time went over the whole run, from its own metrics: how many
    /// batches, how big, and how long each took from closing to its rows being durable.
    async fn batches(&self) -> Result<String> {
        let text = reqwest::get(&self.metrics).await?.text().await?;
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
        };
        let apply = observe::APPLY_SECONDS;
        let (Some(count), Some(sum), Some(consumed)) = (
            value(&format!("{apply}_count ")),
            value(&format!("{apply}_sum ")),
            value(&format!("{} ", observe::CONSUMED)),
        ) else {
            bail!(
                "{} does not show {apply} and {}",
                self.metrics,
                observe::CONSUMED
            );
        };
        let within = [0.025, 0.05, 0.1, 0.2]
            .iter()
            .filter_map(|le| {
                let n = value(&format!("{apply}_bucket{{le=\"{le}\"}} "))?;
                Some(format!("{:.0}% ≤ {} ms", 100.0 * n / count, le * 1e3))
            })
            .collect::<Vec<_>>()
            .join(", ");
        Ok(format!(
            "projector over the run: {count:.0} batches of {:.0} records on average; from a batch closing to its rows durable (its fold, the previous batch's writes, its own): mean {:.1} ms; {within}",
            consumed / count.max(1.0),
            sum / count.max(1.0) * 1e3,
        ))
    }

    /// What the projector wrote over the whole run, by table, from its own metrics.
    async fn written(&self) -> Result<Written> {
        let text = reqwest::get(&self.metrics).await?.text().await?;
        Written::parse(&text)
    }
}

/// What a projector wrote, from its metrics: CQL rows, cells and bytes by table and op, and
/// the events it applied.
#[derive(Debug, PartialEq)]
struct Written {
    /// Events the fold accepted and the projector applied.
    applied: f64,
    /// By (table, op): rows, cells, bytes.
    tables: BTreeMap<(String, String), [f64; 3]>,
}

impl Written {
    /// Reads it from a Prometheus text exposition.
    fn parse(text: &str) -> Result<Self> {
        let Some(applied) = samples(text, observe::APPLIED).first().map(|(_, v)| *v) else {
            bail!("no {} in the projector's metrics", observe::APPLIED);
        };
        let mut tables = BTreeMap::<(String, String), [f64; 3]>::new();
        let counters = [observe::CQL_ROWS, observe::CQL_CELLS, observe::CQL_BYTES];
        for (i, name) in counters.into_iter().enumerate() {
            for (labels, value) in samples(text, name) {
                let label = |key: &str| labels.get(key).copied().unwrap_or("?").to_string();
                tables.entry((label("table"), label("op"))).or_default()[i] += value;
            }
        }
        if tables.is_empty() {
            bail!("no {} in the projector's metrics", observe::CQL_ROWS);
        }
        Ok(Self { applied, tables })
    }
}

/// The samples of the metric `name` in a Prometheus text exposition, with their labels (values
/// without commas or escaped quotes, as the projector's are).
fn samples<'t>(text: &'t str, name: &str) -> Vec<(BTreeMap<&'t str, &'t str>, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value = value.parse::<f64>().ok()?;
            let rest = series.strip_prefix(name)?;
            let labels = match rest.strip_prefix('{') {
                Some(labels) => labels.strip_suffix('}')?,
                None if rest.is_empty() => "",
                None => return None,
            };
            let labels = labels
                .split(',')
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    Some((key.trim(), value.trim().trim_matches('"')))
                })
                .collect();
            Some((labels, value))
        })
        .collect()
}

/// Rows each derived table of `keyspace` holds, by table: what the plain insert writes. None
/// (and why, on stderr) if a count fails.
async fn stored_rows(store: &ProjectionStore, keyspace: &str) -> Option<BTreeMap<String, u64>> {
    let mut stored = BTreeMap::new();
    for table in TABLES {
        let count = async {
            let mut rows = store
                .cql()
                .query_iter(format!("SELECT COUNT(*) FROM {keyspace}.{table}"), ())
                .await?
                .rows_stream::<(i64,)>()?;
            let mut count = 0;
            while let Some((n,)) = rows.try_next().await? {
                count += n;
            }
            Ok::<_, anyhow::Error>(u64::try_from(count).unwrap_or_default())
        };
        match count.await {
            Ok(count) => stored.insert(table.to_string(), count),
            Err(e) => {
                eprintln!("rows of {keyspace}.{table} could not be counted: {e:#}");
                return None;
            }
        };
    }
    Some(stored)
}

/// Prints what the projector wrote per event applied, by table and in total, beside the rows
/// each table holds per event (`stored`: what the plain insert writes).
fn report_written(written: &Written, stored: Option<&BTreeMap<String, u64>>) {
    let per_event = |v: f64| v / written.applied.max(1.0);
    let mut rows: Vec<(&(String, String), &[f64; 3])> = written.tables.iter().collect();
    // The biggest first.
    rows.sort_by(|a, b| b.1[2].total_cmp(&a.1[2]));
    let stored_of = |table: &str, op: &str| match (stored, op) {
        (Some(stored), "insert") => stored
            .get(table)
            .map_or("-".into(), |n| format!("{:.3}", per_event(*n as f64))),
        (Some(_), _) => String::new(),
        (None, _) => "?".into(),
    };
    let mut table: Vec<Vec<String>> = rows
        .iter()
        .map(|((name, op), [r, c, b])| {
            vec![
                name.clone(),
                op.clone(),
                format!("{:.3}", per_event(*r)),
                format!("{:.2}", per_event(*c)),
                format!("{:.1}", per_event(*b)),
                format!("{:.1}", c / r.max(1.0)),
                format!("{:.0}", b / r.max(1.0)),
                stored_of(name, op),
            ]
        })
        .collect();
    // Tables that hold rows the projector did not write in this run (`projection_settings`,
    // written by the migration), so the stored rows add up to the total.
    let unwritten = stored.into_iter().flatten().filter(|(name, n)| {
        **n > 0
            && !written
                .tables
                .contains_key(&((*name).clone(), "insert".into()))
    });
    for (name, n) in unwritten {
        let none = || "-".to_string();
        table.push(vec![
            name.clone(),
            "insert".into(),
            none(),
            none(),
            none(),
            none(),
            none(),
            format!("{:.3}", per_event(*n as f64)),
        ]);
    }
    let sum = |i: usize| written.tables.values().map(|v| v[i]).sum::<f64>();
    let (r, c, b) = (sum(0), sum(1), sum(2));
    let stored_total = stored.map_or("?".into(), |stored| {
        format!("{:.3}", per_event(stored.values().sum::<u64>() as f64))
    });
    table.push(vec![
        "total".into(),
        String::new(),
        format!("{:.3}", per_event(r)),
        format!("{:.2}", per_event(c)),
        format!("{:.1}", per_event(b)),
        format!("{:.1}", c / r.max(1.0)),
        format!("{:.0}", b / r.max(1.0)),
        stored_total,
    ]);
    println!();
    println!(
        "what the projector wrote per event applied ({:.0} events over the run, warm-up included), by table; stored rows/ev: what each table holds at the end per event, which the plain insert writes",
        written.applied
    );
    print_table(
        &[
            "table",
            "op",
            "rows/ev",
            "cells/ev",
            "bytes/ev",
            "cells/row",
            "bytes/row",
            "stored rows/ev",
        ],
        &table,
    );
}

/// The lag run (1.) on a topic and keyspace of its own, dropped afterwards.
async fn lag_run(args: &Args, base: &Settings, bin: &Path) -> Result<LagRun> {
    let mut settings = base.clone();
    stack::isolate(&mut settings, "bench", "projector", args.partitions);
    stack::create_topics(&settings).await?;
    let store = ProjectionStore::migrate(&settings.cql).await?;
    let (projector, log) = start_projector(bin, &settings, &store).await?;
    let (appended, Lag { mut all, .. }) =
        load(args, 1, &log, &store, &settings.kafka.topic).await?;
    drop(projector);
    drop_run(&store, &settings, &[settings.cql.keyspace.clone()]).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(LagRun {
        appended,
        p50_ms: ms(all.percentile(50.0)),
        p99_ms: ms(all.percentile(99.0)),
    })
}

/// Rounds of the lag run on two sides (`names`, `sides`: plain and sealed, or sealed per
/// session and per record), alternating which runs first; the ratios are the second side's
/// over the first's.
async fn compare_sides(
    args: &Args,
    names: [&str; 2],
    sides: [&Settings; 2],
    rounds: usize,
    bin: &Path,
) -> Result<()> {
    let (mut rows, mut p50s, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        let mut runs = [None, None];
        for i in order {
            eprintln!("round {round}: {}", names[i]);
            runs[i] = Some(lag_run(args, sides[i], bin).await?);
        }
        let [Some(a), Some(b)] = runs else {
            bail!("round {round} did not run both");
        };
        let (p50, p99) = (b.p50_ms / a.p50_ms, b.p99_ms / a.p99_ms);
        p50s.push(p50);
        p99s.push(p99);
        rows.push(vec![
            round.to_string(),
            format!("{}, {}", names[order[0]], names[order[1]]),
            format!("{} / {}", a.appended, b.appended),
            format!("{:.1} / {:.1}", a.p50_ms, b.p50_ms),
            format!("{p50:.3}"),
            format!("{:.1} / {:.1}", a.p99_ms, b.p99_ms),
            format!("{p99:.3}"),
        ]);
    }
    let [a, b] = names;
    println!(
        "
{} events/s over {} sessions for {}+{} s per run: lag (append → visible), {a} / {b}",
        args.rate, args.sessions, args.warmup, args.duration
    );
    print_table(
        &[
            "round", "order", "appended", "p50 ms", "ratio", "p99 ms", "ratio",
        ],
        &rows,
    );
    println!("lag p50 {b}/{a}: median {}", crate::Spread::of(&p50s));
    println!("lag p99 {b}/{a}: median {}", crate::Spread::of(&p99s));
    Ok(())
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    let mut settings = Settings::load(None)?;
    if args.encryption_rounds > 0 || args.key_rounds > 0 {
        let bin = sessionlog_testkit::sessionlog_bin()?;
        let (names, (a, b), rounds) = if args.encryption_rounds > 0 {
            let pair = crate::plain_and_sealed(&settings).await?;
            (["plain", "sealed"], pair, args.encryption_rounds)
        } else {
            let pair = crate::per_session_and_per_record(&settings).await?;
            (["per-session", "per-record"], pair, args.key_rounds)
        };
        return compare_sides(&args, names, [&a, &b], rounds, &bin).await;
    }
    stack::isolate(&mut settings, "bench", "projector", args.partitions);
    stack::create_topics(&settings).await?;
    let store = ProjectionStore::migrate(&settings.cql).await?;
    let bin = sessionlog_testkit::sessionlog_bin()?;
    crate::prepare_privacy(&mut settings).await?;

    // Run 1: live projection under load.
    let (projector, log) = start_projector(&bin, &settings, &store).await?;
    let (appended, mut lag) = load(&args, args.rounds, &log, &store, &settings.kafka.topic).await?;
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    let ends = partition_ends(&reader, args.partitions).await?;
    wait_applied_through(
        &store,
        &settings.kafka.topic,
        &ends,
        Duration::from_secs(600),
        crate::POLL,
    )
    .await?;
    let live_rss = projector.process.peak_mib();
    let batches = projector.batches().await;
    let written = projector.written().await;
    drop(projector);
    let total: i64 = ends.values().sum();
    println!(
        "appended {appended} events over {}+{}×{} s (warm-up + measured rounds) across {} sessions; {} lag samples; projector peak RSS {live_rss:.0} MiB",
        args.warmup,
        args.rounds,
        args.duration,
        args.sessions,
        lag.all.len()
    );
    report_lag(&mut lag);
    match batches {
        Ok(batches) => println!("\n{batches}"),
        Err(e) => eprintln!("the projector's metrics could not be read: {e:#}"),
    }
    match written {
        Ok(written) => {
            let stored = stored_rows(&store, &settings.cql.keyspace).await;
            report_written(&written, stored.as_ref());
        }
        Err(e) => eprintln!("the projector's write counters could not be read: {e:#}"),
    }

    // Run 2: rounds of a replay into a fresh keyspace against the same rows inserted plainly.
    let keyspace = settings.cql.keyspace.clone();
    // The plain insert's rows come from the latest replayed keyspace (round 1 replays first).
    let mut source: Option<String> = None;
    let (mut rows, mut ratios) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let replay_first = round % 2 == 1;
        let replay_ks = format!("{keyspace}_replay{round}");
        let plain_ks = format!("{keyspace}_plain{round}");
        let mut replayed = None;
        let mut plain = None;
        for replay_now in [replay_first, !replay_first] {
            if replay_now {
                eprintln!("round {round}: replay into {replay_ks}");
                replayed = Some(replay(&bin, &settings, &replay_ks)?);
            } else {
                let from = source.as_deref().unwrap_or(&replay_ks);
                eprintln!("round {round}: plain insert of the rows of {from}");
                plain = Some(plain_insert(&settings, from, &plain_ks).await?);
            }
        }
        let (Some((replay_secs, replay_rss)), Some((inserted, plain_secs))) = (replayed, plain)
        else {
            bail!("round {round} did not run both");
        };
        // Each round's keyspaces go once the next round has its source: runs must not pile up.
        let done = std::iter::once(plain_ks).chain(source.replace(replay_ks));
        if !args.keep {
            for keyspace in done {
                store.drop_keyspace(&keyspace).await?;
            }
        }
        let (replay_eps, plain_eps) = (total as f64 / replay_secs, total as f64 / plain_secs);
        ratios.push(replay_eps / plain_eps);
        rows.push(vec![
            round.to_string(),
            if replay_first {
                "replay, plain"
            } else {
                "plain, replay"
            }
            .into(),
            format!("{total} in {replay_secs:.1} s = {replay_eps:.0}"),
            format!("{inserted} rows in {plain_secs:.1} s = {plain_eps:.0}"),
            format!("{:.3}", replay_eps / plain_eps),
            format!("{replay_rss:.0}"),
        ]);
    }
    println!();
    println!("replay of the topic against a plain insert of the rows it wrote (events/s)");
    print_table(
        &[
            "round",
            "order",
            "replay events",
            "plain insert",
            "ratio",
            "replay peak RSS MiB",
        ],
        &rows,
    );
    println!("replay/plain: median {}", crate::Spread::of(&ratios));
    if !args.keep {
        let keyspaces: Vec<String> = std::iter::once(keyspace).chain(source).collect();
        drop_run(&store, &settings, &keyspaces).await?;
    }
    Ok(())
}

/// Replays the run's topic into `keyspace` with `sessionlog replay`; its seconds and the
/// process's peak RSS in MiB.
fn replay(bin: &Path, settings: &Settings, keyspace: &str) -> Result<(f64, f64)> {
    let mut replay = sessionlog_testkit::served::command_with(bin, settings)?;
    replay
        .args(["replay", "--keyspace", keyspace])
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut replayer = Watched::spawn(replay)?;
    let status = tokio::task::block_in_place(|| replayer.child.wait())?;
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("sessionlog replay failed: {status}");
    }
    Ok((seconds, replayer.peak_mib()))
}

/// Prints the lag per round (the median p99 with its spread) and per 10-second window.
fn report_lag(lag: &mut Lag) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let mut p99s = Vec::new();
    let rows: Vec<Vec<String>> = lag
        .rounds
        .iter_mut()
        .enumerate()
        .map(|(i, (round, append))| {
            p99s.push(round.percentile(99.0).as_secs_f64() * 1e3);
            vec![
                (i + 1).to_string(),
                round.len().to_string(),
                ms(round.percentile(50.0)),
                ms(round.percentile(99.0)),
                ms(round.max()),
                format!(
                    "{} / {}",
                    ms(append.percentile(50.0)),
                    ms(append.percentile(99.0))
                ),
            ]
        })
        .collect();
    println!();
    println!("lag, append → visible, per round (ms)");
    print_table(
        &[
            "round",
            "samples",
            "p50",
            "p99",
            "max",
            "of which appending p50 / p99",
        ],
        &rows,
    );
    println!(
        "lag p99 over rounds: median {} ms; all samples: p50 {} ms, p99 {} ms",
        crate::Spread::of(&p99s),
        ms(lag.all.percentile(50.0)),
        ms(lag.all.percentile(99.0))
    );
    println!();
    println!("lag over time (by when the event was appended)");
    let rows: Vec<Vec<String>> = lag
        .windows
        .iter_mut()
        .enumerate()
        .map(|(i, window)| {
            let from = i as u64 * WINDOW.as_secs();
            vec![
                format!("{from}-{} s", from + WINDOW.as_secs()),
                window.len().to_string(),
                ms(window.percentile(50.0)),
                ms(window.percentile(99.0)),
                ms(window.max()),
            ]
        })
        .collect();
    print_table(&["window", "samples", "p50 ms", "p99 ms", "max ms"], &rows);
}

/// Appends at the target rate; returns how many events were appended and the lag samples.
///
/// A sample is an appended event's position and the instant its append started. One watcher
/// polls the projector's stored partition progress every 5 ms and takes the samples it has
/// passed: progress is written after the rows it covers, so it is a slightly late (honest)
/// visibility time, and polling one small partition keeps the measurement's own load on the
/// store constant however many samples are outstanding.
async fn load(
    args: &Args,
    rounds: u32,
    log: &Arc<EventLog>,
    store: &ProjectionStore,
    topic: &str,
) -> Result<(u64, Lag)> {
    let per_session = args.rate as f64 / args.sessions as f64;
    let interval = Duration::from_secs_f64(1.0 / per_session);
    let measure_from = Instant::now() + Duration::from_secs(args.warmup);
    let round = Duration::from_secs(args.duration);
    let deadline = measure_from + round * rounds;
    let appended = Arc::new(AtomicU64::new(0));
    let pending: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sample_every = (args.rate / args.samples.max(1)).max(1);
    let watcher = tokio::spawn(watch(
        store.clone(),
        topic.to_string(),
        Arc::clone(&pending),
        Lag::new(measure_from, round),
        deadline,
    ));
    let mut tasks = Vec::new();
    for i in 0..args.sessions {
        let (log, appended, pending) =
            (Arc::clone(log), Arc::clone(&appended), Arc::clone(&pending));
        tasks.push(tokio::spawn(async move {
            let (mut writer, _) = SessionWriter::create(log, "bench", None).await?;
            let mut tick = tokio::time::interval(interval);
            // Spread the sessions' ticks over one interval rather than all at once.
            tokio::time::sleep(interval.mul_f64(i as f64 / 500.0 % 1.0)).await;
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < deadline {
                tick.tick().await;
                let n = appended.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                let a = writer
                    .append(SessionEvent::UserRequest {
                        content: Content::plain(format!("turn {n}")),
                    })
                    .await?;
                // An append whose tick came before the deadline may start after it.
                if n % sample_every == 0 && (measure_from..deadline).contains(&started) {
                    let p = a.position;
                    let sample = Sample {
                        partition: p.partition,
                        offset: p.offset,
                        started,
                        acked: Instant::now(),
                    };
                    pending.lock().await.push(sample);
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let appended = appended.load(Ordering::Relaxed);
    let lag = watcher.await??;
    Ok((appended, lag))
}

/// Lag samples: all of them, by round of `--duration`, and by window of [`WINDOW`] from the
/// start of the measurement (by when the event was appended), to show whether the tail comes in
/// bursts.
struct Lag {
    measure_from: Instant,
    round: Duration,
    all: Latencies,
    /// Per round: the lag, and the part of it spent appending (until the log acknowledged).
    rounds: Vec<(Latencies, Latencies)>,
    windows: Vec<Latencies>,
}

/// An appended event whose lag is still to be measured.
struct Sample {
    partition: i32,
    offset: i64,
    /// When its append started.
    started: Instant,
    /// When the log acknowledged it.
    acked: Instant,
}

/// The length of one window of the lag-over-time table.
const WINDOW: Duration = Duration::from_secs(10);

impl Lag {
    fn new(measure_from: Instant, round: Duration) -> Self {
        Self {
            measure_from,
            round,
            all: Latencies::default(),
            rounds: Vec::new(),
            windows: Vec::new(),
        }
    }

    fn record(&mut self, sample: &Sample, visible: Instant) {
        let lag = visible - sample.started;
        let since = sample.started - self.measure_from;
        self.all.record(lag);
        let round = (since.as_secs() / self.round.as_secs().max(1)) as usize;
        let (round, append) = grown(&mut self.rounds, round);
        round.record(lag);
        append.record(sample.acked - sample.started);
        grown(
            &mut self.windows,
            (since.as_secs() / WINDOW.as_secs()) as usize,
        )
        .record(lag);
    }
}

/// The `index`th element of `items`, grown with defaults to reach it.
fn grown<T: Default>(items: &mut Vec<T>, index: usize) -> &mut T {
    if items.len() <= index {
        items.resize_with(index + 1, T::default);
    }
    &mut items[index]
}

/// Takes each pending sample once the stored progress of its partition has passed it;
/// returns when the load is over and every sample is taken.
async fn watch(
    store: ProjectionStore,
    topic: String,
    pending: Arc<Mutex<Vec<Sample>>>,
    mut lag: Lag,
    load_ends: Instant,
) -> Result<Lag> {
    loop {
        let progress = store.load_progress(&topic).await?;
        let now = Instant::now();
        let mut pending = pending.lock().await;
        pending.retain(|sample| {
            let next = progress.get(&sample.partition);
            let seen = next.is_some_and(|next| *next > sample.offset);
            if seen {
                lag.record(sample, now);
            }
            !seen
        });
        if now > load_ends && pending.is_empty() {
            return Ok(lag);
        }
        if now > load_ends + Duration::from_secs(600) {
            bail!("{} samples never became visible", pending.len());
        }
        drop(pending);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads every row the replay wrote and inserts it, as it is, into a third keyspace (`target`) with
/// plain prepared `INSERT ... JSON` statements, 64 in flight: the store's own cost of the rows.
async fn plain_insert(settings: &Settings, source: &str, target: &str) -> Result<(u64, f64)> {
    let mut cql = settings.cql.clone();
    cql.keyspace = target.to_string();
    let target = ProjectionStore::migrate(&cql).await?;
    let session = target.cql();
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut inserts = Vec::new();
    for (i, table) in TABLES.iter().enumerate() {
        let mut stream = session
            .query_iter(format!("SELECT JSON * FROM {source}.{table}"), ())
            .await?
            .rows_stream::<(String,)>()?;
        while let Some((json,)) = stream.try_next().await? {
            rows.push((i, json));
        }
        inserts.push(
            session
                .prepare(format!("INSERT INTO {}.{table} JSON ?", cql.keyspace))
                .await?,
        );
    }
    let started = Instant::now();
    let inserts = &inserts;
    futures::stream::iter(rows.iter())
        .map(|(i, json)| async move {
            session
                .execute_unpaged(&inserts[*i], (json.as_str(),))
                .await
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok((rows.len() as u64, started.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_counters_are_read_by_table_and_op() {
        let text = "\
# TYPE sessionlog_projector_applied_total counter
sessionlog_projector_applied_total 200
sessionlog_projector_applied_totals_other 7
sessionlog_projector_cql_rows_total{table=\"event_index\",op=\"insert\"} 200
sessionlog_projector_cql_rows_total{table=\"context_turns\",op=\"delete\"} 3
sessionlog_projector_cql_cells_total{table=\"event_index\",op=\"insert\"} 1600
sessionlog_projector_cql_bytes_total{table=\"event_index\",op=\"insert\"} 20000
";
        let written = Written::parse(text).expect("parsed");
        assert_eq!(written.applied, 200.0);
        let key = |t: &str, op: &str| (t.to_string(), op.to_string());
        assert_eq!(
            written.tables[&key("event_index", "insert")],
            [200.0, 1600.0, 20000.0]
        );
        assert_eq!(
            written.tables[&key("context_turns", "delete")],
            [3.0, 0.0, 0.0]
        );
        assert_eq!(written.tables.len(), 2);
        assert!(Written::parse("sessionlog_projector_applied_total 1\n").is_err());
    }
}
