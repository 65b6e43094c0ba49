//! `sessionlog replay`: the projections rebuilt into a keyspace from the log.

use crate::args::{Globals, start_at};
use crate::output::Output;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sessionlog_projector::replay::{Replay, ReplayOptions, StartAt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The `replay` command's arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target keyspace (default: `[cql] keyspace`). Use a fresh one to rebuild from scratch.
    #[arg(long)]
    keyspace: Option<String>,
    /// Start offsets, `partition:offset` comma-separated (others start at the beginning).
    #[arg(long, conflicts_with = "from_time")]
    from_offsets: Option<String>,
    /// Start at the first record at or after this time: milliseconds since the epoch, RFC 3339
    /// in UTC (`2025-01-31T12:00:00Z`), or how long ago (`2h`, `30m`).
    #[arg(long)]
    from_time: Option<String>,
    /// Only these partitions, comma-separated.
    #[arg(long)]
    partitions: Option<String>,
    /// Fold and count without writing anything.
    #[arg(long)]
    dry_run: bool,
    /// Records per batch.
    #[arg(long, default_value_t = 2000)]
    batch: usize,
}

/// Plans and runs a replay with a progress bar (events/s, time remaining) on stderr.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let mut settings = globals.settings.clone();
    if let Some(keyspace) = args.keyspace {
        settings.cql.keyspace = keyspace;
    }
    let start = start_at(args.from_offsets.as_deref(), args.from_time.as_deref())?
        .unwrap_or(StartAt::Beginning);
    let partitions = args
        .partitions
        .as_deref()
        .map(|list| {
            list.split(',')
                .map(|p| p.trim().parse::<i32>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("--partitions {list:?}: expected e.g. 0,2,5"))
        })
        .transpose()?;
    let options = ReplayOptions {
        start,
        partitions,
        dry_run: args.dry_run,
        batch: args.batch,
        ..ReplayOptions::default()
    };
    let plan = Replay::plan(&settings, options)
        .await
        .with_context(|| format!("planning a replay into keyspace {}", settings.cql.keyspace))?;
    let done = Arc::new(AtomicU64::new(0));
    let bar = ProgressBar::new(plan.total());
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} records  {per_sec}  eta {eta}",
        )
        .context("progress bar template")?
        .progress_chars("=> "),
    );
    let ticker = {
        let (bar, done) = (bar.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            loop {
                bar.set_position(done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let summary = plan.run(Arc::clone(&done)).await;
    ticker.abort();
    bar.set_position(done.load(Ordering::Relaxed));
    bar.finish();
    let summary = summary?;
    let text = format!(
        "{} {} records into {} in {:.1}s: {} accepted, {} rejected, {} undecodable, {} already there",
        if args.dry_run {
            "folded (dry run)"
        } else {
            "replayed"
        },
        summary.consumed,
        settings.cql.keyspace,
        summary.seconds,
        summary.accepted,
        summary.rejected,
        summary.dead_lettered,
        summary.skipped,
    );
    Output::new(&summary, text)
}
