//! Takeover benchmark: what a claim costs when the session's partition holds a great deal of
//! other sessions' history.
//!
//! Two 1-partition topics, each with its own keyspace and an in-process projector: one holds
//! nothing but the measured session, the other `--others` records of other sessions written
//! before it. Each round claims the measured session once on each topic, alternating which
//! goes first, through a log with the projection attached (`EventLog::with_projection`, as the
//! ingest and recovery services run): the claim starts from the session's projected row and
//! reads only the log after it. The ratio full ÷ empty should stay near 1 (goal: at most 2).
//! With `--unprojected-rounds N`, N claims on the full topic through a log without the
//! projection show the cost before (a fold of the partition from its first offset).
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo run --release -p sessionlog-benches --bin sessionlog-bench -- claim --others 1000000 --rounds 10
//! ```

use crate::{Spread, drop_run, print_table};
use anyhow::{Context, Result, bail};
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_projector::Projector;
use sessionlog_projector::worker::ProjectorOptions;
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_session::DUPLICATE_WINDOW;
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::stack;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog claim: takeover cost on a full partition vs an empty one")]
pub struct Args {
    /// Records of other sessions written to the full topic before the measured session.
    #[arg(long, default_value_t = 1_000_000)]
    others: u64,
    /// Events per other session.
    #[arg(long, default_value_t = 1_000)]
    events_per_session: u64,
    /// Concurrent writers filling the full topic.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Rounds; each claims once on each topic.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Claims on the full topic without the projection (the cost before), after the rounds.
    #[arg(long, default_value_t = 0)]
    unprojected_rounds: usize,
    /// Seconds to wait for a projector to catch up.
    #[arg(long, default_value_t = 1_800)]
    catch_up_secs: u64,
}

/// One topic of the comparison, with its projector running.
struct Side {
    name: &'static str,
    settings: Settings,
    log: Arc<EventLog>,
    store: ProjectionStore,
    session: SessionId,
    stop: tokio::sync::oneshot::Sender<()>,
    projecting: JoinHandle<sessionlog_projector::Result<()>>,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    let mut base = Settings::load(None).context("loading settings")?;
    crate::prepare_privacy(&mut base).await?;

    let empty = Side::start("empty", &base, 0, &args).await?;
    let full = Side::start("full", &base, args.others, &args).await?;
    for side in [&empty, &full] {
        side.wait_for_projector(&args).await?;
        // Warm the connections and prepared statements outside the timings.
        side.claim().await?;
        side.wait_for_projector(&args).await?;
    }

    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        // Alternate which side goes first, so neither always runs on a cache the other warmed.
        let (first, second) = if round % 2 == 0 {
            (&empty, &full)
        } else {
            (&full, &empty)
        };
        let a = first.claim().await?;
        let b = second.claim().await?;
        let (empty_ms, full_ms) = if round % 2 == 0 { (a, b) } else { (b, a) };
        let ratio = full_ms / empty_ms.max(f64::EPSILON);
        println!("round {round}: empty {empty_ms:.1} ms, full {full_ms:.1} ms, ratio {ratio:.2}");
        rows.push(vec![
            round.to_string(),
            format!("{empty_ms:.1}"),
            format!("{full_ms:.1}"),
            format!("{ratio:.2}"),
        ]);
        ratios.push(ratio);
        // The projector applies each claim before the next round, as it would between
        // takeovers in production.
        for side in [&empty, &full] {
            side.wait_for_projector(&args).await?;
        }
    }
    let mut unprojected = Vec::new();
    if args.unprojected_rounds > 0 {
        let log = Arc::new(EventLog::from_settings(&full.settings).await?);
        for round in 0..args.unprojected_rounds {
            let started = Instant::now();
            SessionWriter::claim(Arc::clone(&log), full.session, "bench").await?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            println!("unprojected round {round}: full {ms:.1} ms");
            unprojected.push(ms);
        }
    }

    println!(
        "\nclaims of one session on a 1-partition topic: alone (empty) and after {} records of \
         other sessions (full), through a log with the projection attached",
        args.others
    );
    print_table(&["round", "empty ms", "full ms", "full ÷ empty"], &rows);
    let spread = Spread::of(&ratios);
    println!(
        "median ratio full ÷ empty: {spread} over {} rounds (goal: at most 2)",
        ratios.len()
    );
    if !unprojected.is_empty() {
        let empty_median = Spread::of(
            &rows
                .iter()
                .filter_map(|r| r[1].parse::<f64>().ok())
                .collect::<Vec<_>>(),
        )
        .median;
        let before = Spread::of(&unprojected);
        println!(
            "without the projection (before): full {} ms, {:.1}× the projected empty claim",
            before,
            before.median / empty_median.max(f64::EPSILON)
        );
    }
    for side in [empty, full] {
        side.stop().await?;
    }
    Ok(())
}

impl Side {
    /// Creates the side's topic and keyspace, starts its projector, writes `others` records of
    /// other sessions, then the measured session.
    async fn start(name: &'static str, base: &Settings, others: u64, args: &Args) -> Result<Self> {
        let mut settings = base.clone();
        let tag = stack::isolate(&mut settings, "bench", &format!("claim_{name}"), 1);
        stack::create_topics(&settings).await?;
        let options = ProjectorOptions {
            group_id: stack::group("bench", &tag),
            ..ProjectorOptions::from(&settings.projector)
        };
        let projector = Projector::new(&settings, options).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let projecting = tokio::spawn(projector.run(async {
            let _ = stopped.await;
        }));
        let store = ProjectionStore::open(&settings.cql).await?;
        let log = Arc::new(
            EventLog::from_settings(&settings)
                .await?
                .with_projection(store.clone()),
        );
        fill(&log, name, others, args).await?;
        let (mut writer, _) =
            SessionWriter::create(Arc::clone(&log), "bench", Some("claimed")).await?;
        writer
            .append_batch(
                (0..10)
                    .map(|i| SessionEvent::UserRequest {
                        content: Content::plain(format!("request {i}")),
                    })
                    .collect(),
            )
            .await?;
        Ok(Self {
            name,
            session: writer.session_id(),
            settings,
            log,
            store,
            stop,
            projecting,
        })
    }

    /// Claims the measured session; the time it took, in milliseconds.
    async fn claim(&self) -> Result<f64> {
        let started = Instant::now();
        SessionWriter::claim(Arc::clone(&self.log), self.session, "bench").await?;
        Ok(started.elapsed().as_secs_f64() * 1e3)
    }

    /// Waits until the projector's progress reaches the partition's end.
    async fn wait_for_projector(&self, args: &Args) -> Result<()> {
        let reader = PartitionReader::new(&self.settings.kafka, &self.settings.kafka.topic)?;
        let (_, end) = reader.watermarks(0).await?;
        let started = Instant::now();
        let mut reported = started;
        loop {
            let progress = self
                .store
                .load_progress(&self.settings.kafka.topic)
                .await?
                .get(&0)
                .copied()
                .unwrap_or(0);
            if progress >= end {
                return Ok(());
            }
            if self.projecting.is_finished() {
                bail!("the {} side's projector stopped", self.name);
            }
            if started.elapsed() > Duration::from_secs(args.catch_up_secs) {
                bail!(
                    "the {} side's projector reached {progress} of {end} within {} s",
                    self.name,
                    args.catch_up_secs
                );
            }
            if reported.elapsed() > Duration::from_secs(5) {
                reported = Instant::now();
                eprintln!("{}: projected {progress} / {end}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.projecting.await??;
        drop_run(
            &self.store,
            &self.settings,
            std::slice::from_ref(&self.settings.cql.keyspace),
        )
        .await
    }
}

/// Writes `records` events of other sessions (`--events-per-session` each) from
/// `--writers` concurrent writers, reporting progress.
async fn fill(log: &Arc<EventLog>, name: &str, records: u64, args: &Args) -> Result<()> {
    if records == 0 {
        return Ok(());
    }
    let per_session = args.events_per_session.max(2);
    let sessions = records.div_ceil(per_session);
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.writers.max(1) {
        let (log, written, next) = (Arc::clone(log), Arc::clone(&written), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            while next.fetch_add(1, Relaxed) < sessions {
                let (mut writer, _) =
                    SessionWriter::create(Arc::clone(&log), "other", None).await?;
                let mut left = per_session - 1;
                written.fetch_add(1, Relaxed);
                while left > 0 {
                    let n = left.min(DUPLICATE_WINDOW as u64);
                    let events = (0..n)
                        .map(|i| SessionEvent::UserRequest {
                            content: Content::plain(format!("other request {i}")),
                        })
                        .collect();
                    writer.append_batch(events).await?;
                    left -= n;
                    written.fetch_add(n, Relaxed);
                }
            }
            anyhow::Ok(())
        }));
    }
    let reporter = {
        let written = Arc::clone(&written);
        let name = name.to_string();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let n = written.load(std::sync::atomic::Ordering::Relaxed);
                eprintln!(
                    "{name}: wrote {n} / {records} records of other sessions ({:.0}/s)",
                    n as f64 / started.elapsed().as_secs_f64()
                );
            }
        })
    };
    for task in tasks {
        task.await??;
    }
    reporter.abort();
    log.flush(Duration::from_secs(30)).await?;
    Ok(())
}
