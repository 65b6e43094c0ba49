//! Recovery benchmark: the time and peak memory of `Recovery::rebuild` against session length.
//!
//! For each length (1,000 / 10,000 / 100,000 events, and 1,000,000 if `--max-events` allows)
//! one session of small `UserRequest` events with a checkpoint every 1,000 events (the last
//! one 500 events before the end, so every rebuild folds the same tail) is written to a fresh
//! topic of one partition; a projector runs in-process until the session's row has caught up
//! (so its checkpoints are verified), then is stopped, and `rebuild` is timed (median of
//! `--reps`). The reference, measured in the same run on the same session, is a full replay
//! from the session's first event (`rebuild_with(session, Some(0), ..)`, which ignores
//! checkpoints); the ratio rebuild ÷ full replay should fall as the session grows while the
//! rebuild time stays flat.
//!
//! It also builds the session's context view as a resume does (`prepare_resume`: the view the
//! projector stored, plus the log after it) and as a resume does when that view is behind the
//! last checkpoint (`window_at`: the view stored with the checkpoint, plus the events after
//! it), and prints the log records each read: bounded by the events since the last verified
//! checkpoint plus what the projector has not applied, whatever the session's length.
//!
//! And it times redacting one field of the session (`Recovery::redact`, `--redactions` rounds,
//! each a request's content near the session's start, printed as it runs, then the median and
//! the spread): a rebuild from the last checkpoint, the event read by seq, one key-store write,
//! a claim and one event, whatever the session's length.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo run --release -p sessionlog-benches --bin sessionlog-bench -- recovery --max-events 100000
//! ```

use crate::{Latencies, drop_run, peak_rss_bytes, print_table};
use anyhow::{Context, Result, bail};
use sessionlog_log::Settings;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_projector::Projector;
use sessionlog_projector::worker::ProjectorOptions;
use sessionlog_recovery::{RebuiltSession, Recovery, StartPoint};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_session::DUPLICATE_WINDOW;
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::stack;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog recovery: checkpoint rebuild vs full replay against session length")]
pub struct Args {
    /// Longest session measured (lengths 1,000 / 10,000 / 100,000 / 1,000,000 up to it, and
    /// this value itself if it is not one of them).
    #[arg(long, default_value_t = 100_000)]
    max_events: u64,
    /// Events between checkpoints.
    #[arg(long, default_value_t = 1_000)]
    checkpoint_every: u64,
    /// Timed repetitions of each rebuild; the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Timed redactions of one field each (a field is redacted once: each round another event).
    #[arg(long, default_value_t = 5)]
    redactions: usize,
    /// Seconds to wait for the projector to catch up with one session.
    #[arg(long, default_value_t = 900)]
    catch_up_secs: u64,
}

/// One length's figures.
struct Row {
    length: u64,
    /// The first rebuild of the session by a fresh `Recovery` (connections, the reader pool
    /// and registry lookups not yet warm).
    rebuild_cold: Duration,
    /// Warm rebuilds: median and p99 (nearest rank) of `--reps`.
    rebuild: Duration,
    rebuild_p99: Duration,
    replay: Duration,
    checkpoint_rebuild: RebuiltSession,
    full_replay: RebuiltSession,
    /// Peak RSS while rebuilding from the checkpoint (reset just before).
    rebuild_rss: Option<u64>,
    /// Peak RSS while replaying from the first event (reset just before).
    replay_rss: Option<u64>,
    /// How long erasing the session took (once: a session is erased once).
    erase: Duration,
    /// Redacting one field: median, fastest and slowest of `--redactions` rounds.
    redact: Duration,
    redact_min: Duration,
    redact_max: Duration,
    /// Building the context view as a resume does: median time, log records read, turns.
    view: Duration,
    view_records: u64,
    view_turns: usize,
    /// Building it from the last checkpoint's stored view: median time, log records read.
    view_from_checkpoint: Duration,
    view_from_checkpoint_records: u64,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.checkpoint_every < 2 {
        bail!("--checkpoint-every must be at least 2");
    }
    let mut lengths: Vec<u64> = [1_000, 10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|&n| n <= args.max_events)
        .collect();
    if !lengths.contains(&args.max_events) {
        lengths.push(args.max_events);
    }
    let mut base = Settings::load(None).context("loading settings")?;
    crate::prepare_privacy(&mut base).await?;
    // A redaction is signed: with the development key the tests use, unless one is set.
    if base.recovery.signing_key_file.is_none() {
        base.recovery.signing_key_file = Some(sessionlog_testkit::auth::signing_key_file()?);
    }

    let mut rows = Vec::new();
    for length in lengths {
        rows.push(measure(&base, length, &args).await?);
    }

    println!(
        "\none session per length in its own 1-partition topic; small UserRequest events, a \
         checkpoint every {} events (the last one {} before the end); median of {} rebuilds",
        args.checkpoint_every,
        args.checkpoint_every / 2,
        args.reps
    );
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let rebuilt = &r.checkpoint_rebuild;
            vec![
                r.length.to_string(),
                ms(r.rebuild_cold),
                ms(r.rebuild),
                ms(r.rebuild_p99),
                ms(r.replay),
                format!(
                    "{:.4}",
                    r.rebuild.as_secs_f64() / r.replay.as_secs_f64().max(f64::EPSILON)
                ),
                rebuilt.events_folded.to_string(),
                rebuilt.records_read.to_string(),
                format!("{:.2}", rebuilt.read_amplification()),
                start_point(&rebuilt.start),
                format!(
                    "{}/{}",
                    r.full_replay.events_folded, r.full_replay.records_read
                ),
                mib(r.rebuild_rss),
                mib(r.replay_rss),
                ms(r.erase),
                format!(
                    "{} ({}–{})",
                    ms(r.redact),
                    ms(r.redact_min),
                    ms(r.redact_max)
                ),
                format!("{} / {} / {}", ms(r.view), r.view_records, r.view_turns),
                format!(
                    "{} / {}",
                    ms(r.view_from_checkpoint),
                    r.view_from_checkpoint_records
                ),
            ]
        })
        .collect();
    print_table(
        &[
            "length",
            "cold rebuild ms",
            "warm p50 ms",
            "warm p99 ms",
            "full replay ms",
            "ratio",
            "events folded",
            "records read",
            "amplification",
            "start",
            "replay folded/read",
            "rebuild peak RSS MiB",
            "replay peak RSS MiB",
            "erase ms",
            "redact ms p50 (min–max)",
            "view ms / records / turns",
            "view from checkpoint ms / records",
        ],
        &table,
    );
    println!(
        "peak RSS: the process's high-water mark (VmHWM), reset before the rebuilds and again \
         before the replays of each length, so each column covers that phase alone"
    );
    Ok(())
}

fn start_point(start: &StartPoint) -> String {
    match start {
        StartPoint::Checkpoint { seq, .. } => format!("checkpoint seq {seq}"),
        StartPoint::FirstEvent { offset } => format!("first event @{offset}"),
        StartPoint::PartitionStart { offset } => format!("partition start @{offset}"),
    }
}

/// Writes one session of `length` events to a fresh topic and keyspace, projects it, then times
/// the checkpoint rebuild and the full replay.
async fn measure(base: &Settings, length: u64, args: &Args) -> Result<Row> {
    let mut settings = base.clone();
    let tag = stack::isolate(&mut settings, "bench", &format!("recovery_{length}"), 1);
    stack::create_topics(&settings).await?;

    // The projector runs alongside the appends, as it would in production.
    let options = ProjectorOptions {
        group_id: stack::group("bench", &tag),
        ..ProjectorOptions::from(&settings.projector)
    };
    let projector = Projector::new(&settings, options).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let projecting = tokio::spawn(projector.run(async {
        let _ = stopped.await;
    }));

    let log = Arc::new(EventLog::from_settings(&settings).await?);
    let session = append_session(&log, length, args.checkpoint_every).await?;

    let store = ProjectionStore::open(&settings.cql).await?;
    let waited = Instant::now();
    let deadline = waited + Duration::from_secs(args.catch_up_secs);
    loop {
        let projected = store
            .load_session(session)
            .await?
            .map_or(0, |p| p.state.last_seq);
        if projected >= length {
            break;
        }
        if projecting.is_finished() {
            projecting.await??;
            bail!("the projector stopped before catching up");
        }
        if Instant::now() > deadline {
            bail!("the projection reached seq {projected} of {length} within the deadline");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "{length}: projection caught up {:.1} s after the last append",
        waited.elapsed().as_secs_f64()
    );
    // Stop the projector so the timings do not share the two cores with it.
    let _ = stop.send(());
    projecting.await??;
    drop(log);

    let recovery = Recovery::connect(&settings).await?;
    // The first call pays for what a warm service has made already: timed apart.
    let started = Instant::now();
    recovery.rebuild(session).await?;
    let rebuild_cold = started.elapsed();
    reset_peak_rss();

    let mut rebuilds = Vec::with_capacity(args.reps);
    let mut checkpoint_rebuild = None;
    for _ in 0..args.reps.max(1) {
        let started = Instant::now();
        let rebuilt = recovery.rebuild(session).await?;
        rebuilds.push(started.elapsed());
        checkpoint_rebuild = Some(rebuilt);
    }
    let rebuild_rss = peak_rss_bytes();
    reset_peak_rss();
    let mut replays = Vec::with_capacity(args.reps);
    let mut full_replay = None;
    for _ in 0..args.reps.max(1) {
        let started = Instant::now();
        let rebuilt = recovery.rebuild_with(session, Some(0), |_, _| {}).await?;
        replays.push(started.elapsed());
        full_replay = Some(rebuilt);
    }
    let replay_rss = peak_rss_bytes();
    let checkpoint_rebuild = checkpoint_rebuild.context("no rebuild ran")?;
    let full_replay = full_replay.context("no replay ran")?;
    for rebuilt in [&checkpoint_rebuild, &full_replay] {
        if rebuilt.state.last_seq != length {
            bail!(
                "a rebuild reached seq {} of {length}",
                rebuilt.state.last_seq
            );
        }
    }
    if checkpoint_rebuild.state.digest() != full_replay.state.digest() {
        bail!("the checkpoint rebuild and the full replay disagree on the state");
    }
    // The context view, as a resume builds it (nothing is appended).
    let mut views = Vec::with_capacity(args.reps);
    let mut view_point = None;
    for _ in 0..args.reps.max(1) {
        let started = Instant::now();
        let point = recovery.prepare_resume(session).await?;
        views.push(started.elapsed());
        view_point = Some(point);
    }
    let view_point = view_point.context("no view was built")?;
    let last_offset = view_point
        .rebuilt
        .last_offset
        .or(checkpoint_rebuild.last_offset)
        .context("no offset for the session's last event")?;
    let mut from_checkpoint = Vec::with_capacity(args.reps);
    let mut at = None;
    for _ in 0..args.reps.max(1) {
        let started = Instant::now();
        let window = recovery.window_at(session, length, last_offset).await?;
        from_checkpoint.push(started.elapsed());
        at = Some(window);
    }
    let at = at.context("no view was built")?;
    if at.window.recent != view_point.window.recent {
        bail!("the view from the checkpoint differs from the projector's");
    }
    // Redacting one field of a request near the start (a checkpoint is no request).
    let mut redactions = Vec::with_capacity(args.redactions);
    let requests =
        (2..length).filter(|seq| seq % args.checkpoint_every != args.checkpoint_every / 2);
    for (round, seq) in requests.take(args.redactions.max(1)).enumerate() {
        let started = Instant::now();
        let receipt = recovery
            .redact(session, seq, "content", "bench", "benchmark")
            .await?;
        let took = started.elapsed();
        if receipt.seq != seq {
            bail!("the redaction of seq {seq} answered seq {}", receipt.seq);
        }
        eprintln!(
            "{length}: redaction {} (seq {seq}): {:.1} ms",
            round + 1,
            took.as_secs_f64() * 1e3
        );
        redactions.push(took);
    }
    let (redact_min, redact_max) = (
        redactions.iter().min().copied().unwrap_or_default(),
        redactions.iter().max().copied().unwrap_or_default(),
    );
    eprintln!(
        "{length}: redaction median {:.1} ms, spread {:.1}–{:.1} ms over {} rounds",
        median(redactions.clone()).as_secs_f64() * 1e3,
        redact_min.as_secs_f64() * 1e3,
        redact_max.as_secs_f64() * 1e3,
        redactions.len()
    );
    // Erasure rewrites nothing: a rebuild from the checkpoint, a claim, one event, the key.
    let started = Instant::now();
    recovery.erase(session, "bench", "benchmark").await?;
    let erase = started.elapsed();
    drop_run(
        &store,
        &settings,
        std::slice::from_ref(&settings.cql.keyspace),
    )
    .await?;
    let row = Row {
        length,
        rebuild_cold,
        rebuild_p99: {
            let mut latencies = Latencies::default();
            rebuilds.iter().for_each(|d| latencies.record(*d));
            latencies.percentile(99.0)
        },
        rebuild: median(rebuilds),
        replay: median(replays),
        checkpoint_rebuild,
        full_replay,
        rebuild_rss,
        replay_rss,
        erase,
        redact: median(redactions),
        redact_min,
        redact_max,
        view: median(views),
        view_records: view_point.rebuilt.records_read,
        view_turns: view_point.window.recent.len(),
        view_from_checkpoint: median(from_checkpoint),
        view_from_checkpoint_records: at.records_read,
    };
    eprintln!(
        "{length}: rebuild {:.1} ms, full replay {:.1} ms",
        row.rebuild.as_secs_f64() * 1e3,
        row.replay.as_secs_f64() * 1e3
    );
    Ok(row)
}

/// Appends a session of `length` events (its start event included): short user requests, with
/// a checkpoint at every seq `k·every + every/2`, so the last one is `every/2` before the end.
async fn append_session(log: &Arc<EventLog>, length: u64, every: u64) -> Result<SessionId> {
    let (mut writer, _) = SessionWriter::create(Arc::clone(log), "bench", Some("recovery")).await?;
    let is_checkpoint = |seq: u64| seq % every == every / 2;
    let started = Instant::now();
    let mut last_report = started;
    let mut written = 1u64;
    while writer.state().last_seq < length {
        let next = writer.next_seq();
        if is_checkpoint(next) {
            writer.checkpoint(None).await?;
            written += 1;
        } else {
            // Up to the next checkpoint (or the end), in batches the producer accepts.
            let mut until = next;
            while until < length
                && !is_checkpoint(until + 1)
                && until + 1 - next < DUPLICATE_WINDOW as u64
            {
                until += 1;
            }
            let events = (next..=until)
                .map(|seq| SessionEvent::UserRequest {
                    content: Content::plain(format!("request {seq}")),
                })
                .collect();
            writer.append_batch(events).await?;
            written += until - next + 1;
        }
        if last_report.elapsed() >= Duration::from_secs(2) || writer.state().last_seq >= length {
            last_report = Instant::now();
            eprintln!(
                "{length}: appended {written} / {length} ({:.0} events/s)",
                written as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    log.flush(Duration::from_secs(30)).await?;
    Ok(writer.session_id())
}

/// Resets the kernel's peak-RSS mark to the current RSS (Linux ≥ 4.0); ignored elsewhere.
fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("?".into(), |b| {
        format!("{:.1}", b as f64 / (1024.0 * 1024.0))
    })
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}
