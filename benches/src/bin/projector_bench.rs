//! Projector benchmark, against the running stack (`scripts/stack up`):
//!
//! 1. End-to-end lag: appends at `--rate` events/s for `--duration` seconds across `--sessions`
//!    sessions (after `--warmup` seconds of the same load, not measured) while a
//!    `sessionlog project` process projects them; for a sample of events, the
//!    time from the start of the append until the projector's stored progress passes it
//!    (written after the rows it covers).
//! 2. Replay throughput: `sessionlog replay` of the same topic into a fresh keyspace, against
//!    a plain `scylla`-driver insert of the same rows (read back from the replayed keyspace)
//!    into a third keyspace, in the same run; prints both and the ratio.
//!
//! The projector's peak resident memory (VmHWM of the child process) is printed for both runs.
//!
//! With `--encryption-rounds N` it measures what sealing costs instead: N rounds of the lag run
//! (1.) with `[privacy] encrypt` off and on, each on its own topic and keyspace, alternating
//! which goes first; every round, the median ratios (sealed / plain) and their spread.
//!
//! `cargo run --release -p sessionlog-benches --bin projector_bench -- --duration 120`

use anyhow::{Result, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use sessionlog_benches::{Latencies, Watched, drop_run, print_table};
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_producer::{EventLog, ProducerOptions, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent};
use sessionlog_store::ProjectionStore;
use sessionlog_store::verify::TABLES;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

#[derive(Debug, Parser)]
struct Args {
    /// Seconds of load measured.
    #[arg(long, default_value_t = 120)]
    duration: u64,
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
}

/// One lag run's figures, for the encryption comparison.
struct LagRun {
    appended: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// The lag run (1.) on a topic and keyspace of its own, dropped afterwards.
async fn lag_run(args: &Args, base: &Settings, bin: &PathBuf) -> Result<LagRun> {
    let mut settings = base.clone();
    sessionlog_benches::isolate_run(&mut settings, "projector", args.partitions);
    sessionlog_benches::prepare_topics(&settings).await?;
    let store = ProjectionStore::migrate(&settings.cql).await?;
    let mut project = Command::new(bin);
    project
        .arg("project")
        .envs(sessionlog_benches::sessionlog_env(&settings));
    let projector = Watched::spawn(project)?;
    let log = Arc::new(EventLog::connect(&settings, ProducerOptions::default()).await?);
    let (appended, Lag { mut all, .. }) = load(args, &log, &store, &settings.kafka.topic).await?;
    drop(projector);
    drop_run(&store, &settings, &[settings.cql.keyspace.clone()]).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(LagRun {
        appended,
        p50_ms: ms(all.percentile(50.0)),
        p99_ms: ms(all.percentile(99.0)),
    })
}

/// Rounds of the lag run with encryption off and on, alternating which runs first.
async fn compare_encryption(args: &Args, settings: &Settings, bin: &PathBuf) -> Result<()> {
    let (plain, sealed, _kek) = sessionlog_benches::plain_and_sealed(settings).await?;
    let (mut rows, mut p50s, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.encryption_rounds {
        let plain_first = round % 2 == 1;
        let mut runs = [None, None];
        for sealing in if plain_first {
            [false, true]
        } else {
            [true, false]
        } {
            eprintln!(
                "round {round}: {}",
                if sealing { "sealed" } else { "plain" }
            );
            runs[usize::from(sealing)] =
                Some(lag_run(args, if sealing { &sealed } else { &plain }, bin).await?);
        }
        let [Some(off), Some(on)] = runs else {
            bail!("round {round} did not run both");
        };
        let (p50, p99) = (on.p50_ms / off.p50_ms, on.p99_ms / off.p99_ms);
        p50s.push(p50);
        p99s.push(p99);
        rows.push(vec![
            round.to_string(),
            if plain_first {
                "plain, sealed"
            } else {
                "sealed, plain"
            }
            .into(),
            format!("{} / {}", off.appended, on.appended),
            format!("{:.1} / {:.1}", off.p50_ms, on.p50_ms),
            format!("{p50:.3}"),
            format!("{:.1} / {:.1}", off.p99_ms, on.p99_ms),
            format!("{p99:.3}"),
        ]);
    }
    println!(
        "
{} events/s over {} sessions for {}+{} s per run: lag (append → visible), plain / sealed",
        args.rate, args.sessions, args.warmup, args.duration
    );
    print_table(
        &[
            "round", "order", "appended", "p50 ms", "ratio", "p99 ms", "ratio",
        ],
        &rows,
    );
    println!(
        "lag p50 sealed/plain: median {}",
        sessionlog_benches::Spread::of(&p50s)
    );
    println!(
        "lag p99 sealed/plain: median {}",
        sessionlog_benches::Spread::of(&p99s)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut settings = Settings::load(None)?;
    if args.encryption_rounds > 0 {
        let bin = sessionlog_benches::sessionlog_bin()?;
        return compare_encryption(&args, &settings, &bin).await;
    }
    sessionlog_benches::isolate_run(&mut settings, "projector", args.partitions);
    sessionlog_benches::prepare_topics(&settings).await?;
    let store = ProjectionStore::migrate(&settings.cql).await?;
    let bin = sessionlog_benches::sessionlog_bin()?;
    let _kek = sessionlog_benches::prepare_privacy(&mut settings).await?;

    // Run 1: live projection under load.
    let mut project = Command::new(&bin);
    project
        .arg("project")
        .envs(sessionlog_benches::sessionlog_env(&settings));
    let projector = Watched::spawn(project)?;
    let log = Arc::new(EventLog::connect(&settings, ProducerOptions::default()).await?);
    let (
        appended,
        Lag {
            mut all,
            mut append,
            windows,
        },
    ) = load(&args, &log, &store, &settings.kafka.topic).await?;
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    let ends = sessionlog_benches::partition_ends(&reader, args.partitions).await?;
    sessionlog_benches::wait_applied_through(
        &store,
        &settings.kafka.topic,
        &ends,
        Duration::from_secs(600),
    )
    .await?;
    let live_rss = projector.peak_mib();
    drop(projector);
    let total: i64 = ends.values().sum();

    // Run 2: replay into a fresh keyspace, then the same rows inserted plainly.
    let replay_ks = format!("{}_replay", settings.cql.keyspace);
    let mut replay = Command::new(&bin);
    replay
        .args(["replay", "--keyspace", &replay_ks])
        .envs(sessionlog_benches::sessionlog_env(&settings))
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut replayer = Watched::spawn(replay)?;
    let status = tokio::task::block_in_place(|| replayer.child.wait())?;
    let replay_secs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("sessionlog replay failed: {status}");
    }
    let replay_rss = replayer.peak_mib();
    let plain_ks = format!("{}_plain", settings.cql.keyspace);
    let (rows, plain_secs) = plain_insert(&settings, &replay_ks, &plain_ks).await?;

    let replay_eps = total as f64 / replay_secs;
    let plain_eps = total as f64 / plain_secs;
    println!(
        "appended {appended} events over {}+{}s (warm-up + measured) across {} sessions; {} lag samples",
        args.warmup,
        args.duration,
        args.sessions,
        all.len()
    );
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    print_table(
        &["measure", "value"],
        &[
            vec![
                "lag p50 (append → visible)".into(),
                ms(all.percentile(50.0)),
            ],
            vec!["lag p99".into(), ms(all.percentile(99.0))],
            vec!["lag max".into(), ms(all.max())],
            vec![
                "  of which appending, p50 / p99".into(),
                format!(
                    "{} / {}",
                    ms(append.percentile(50.0)),
                    ms(append.percentile(99.0))
                ),
            ],
            vec![
                "projector peak RSS (live)".into(),
                format!("{live_rss:.0} MiB"),
            ],
            vec![
                "replay".into(),
                format!("{total} events in {replay_secs:.1} s = {replay_eps:.0} events/s"),
            ],
            vec![
                "plain scylla insert of the same rows".into(),
                format!("{rows} rows in {plain_secs:.1} s = {plain_eps:.0} events/s"),
            ],
            vec![
                "ratio replay / plain".into(),
                format!("{:.2}x", replay_eps / plain_eps),
            ],
            vec![
                "projector peak RSS (replay)".into(),
                format!("{replay_rss:.0} MiB"),
            ],
        ],
    );
    println!();
    println!("lag over time (by when the event was appended)");
    let rows: Vec<Vec<String>> = windows
        .into_iter()
        .enumerate()
        .map(|(i, mut window)| {
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
    print_table(&["window", "samples", "p50", "p99", "max"], &rows);
    if !args.keep {
        let keyspaces = [settings.cql.keyspace.clone(), replay_ks, plain_ks];
        drop_run(&store, &settings, &keyspaces).await?;
    }
    Ok(())
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
    log: &Arc<EventLog>,
    store: &ProjectionStore,
    topic: &str,
) -> Result<(u64, Lag)> {
    let per_session = args.rate as f64 / args.sessions as f64;
    let interval = Duration::from_secs_f64(1.0 / per_session);
    let measure_from = Instant::now() + Duration::from_secs(args.warmup);
    let deadline = measure_from + Duration::from_secs(args.duration);
    let appended = Arc::new(AtomicU64::new(0));
    let pending: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sample_every = (args.rate / args.samples.max(1)).max(1);
    let watcher = tokio::spawn(watch(
        store.clone(),
        topic.to_string(),
        Arc::clone(&pending),
        measure_from,
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
                if n % sample_every == 0 && started >= measure_from {
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

/// Lag samples: all of them, and by window of [`WINDOW`] from the start of the measurement
/// (by when the event was appended), to show whether the tail comes in bursts.
#[derive(Default)]
struct Lag {
    all: Latencies,
    /// The part of each sample spent appending (until the log acknowledged the event).
    append: Latencies,
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
    fn record(&mut self, sample: &Sample, measure_from: Instant, visible: Instant) {
        let lag = visible - sample.started;
        self.all.record(lag);
        self.append.record(sample.acked - sample.started);
        let window = ((sample.started - measure_from).as_secs() / WINDOW.as_secs()) as usize;
        if self.windows.len() <= window {
            self.windows.resize_with(window + 1, Latencies::default);
        }
        self.windows[window].record(lag);
    }
}

/// Takes each pending sample once the stored progress of its partition has passed it;
/// returns when the load is over and every sample is taken.
async fn watch(
    store: ProjectionStore,
    topic: String,
    pending: Arc<Mutex<Vec<Sample>>>,
    measure_from: Instant,
    load_ends: Instant,
) -> Result<Lag> {
    let mut lag = Lag::default();
    loop {
        let progress = store.load_progress(&topic).await?;
        let now = Instant::now();
        let mut pending = pending.lock().await;
        pending.retain(|sample| {
            let next = progress.get(&sample.partition);
            let seen = next.is_some_and(|next| *next > sample.offset);
            if seen {
                lag.record(sample, measure_from, now);
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
