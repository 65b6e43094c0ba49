//! `sessionlog replay` and `sessionlog verify`.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use sessionlog_log::Settings;
use sessionlog_projector::replay::{Replay, ReplayOptions, StartAt};
use sessionlog_store::{ProjectionStore, verify};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The `replay` command's arguments.
#[derive(Debug, clap::Args)]
pub struct ReplayRequest {
    /// Target keyspace (default: `[cql] keyspace`). Use a fresh one to rebuild from scratch.
    #[arg(long)]
    pub keyspace: Option<String>,
    /// Start offsets, `partition:offset` comma-separated (others start at the beginning).
    #[arg(long, conflicts_with = "from_time")]
    pub from_offsets: Option<String>,
    /// Start at the first record at or after this time: milliseconds since the epoch, RFC 3339
    /// in UTC (`2025-01-31T12:00:00Z`), or how long ago (`2h`, `30m`).
    #[arg(long)]
    pub from_time: Option<String>,
    /// Only these partitions, comma-separated.
    #[arg(long)]
    pub partitions: Option<String>,
    /// Fold and count without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Records per batch.
    #[arg(long, default_value_t = 2000)]
    pub batch: usize,
}

/// Plans and runs a replay with a progress bar (events/s, time remaining) on stderr.
pub async fn replay(settings: &Settings, request: ReplayRequest, json: bool) -> Result<()> {
    let mut settings = settings.clone();
    if let Some(keyspace) = request.keyspace {
        settings.cql.keyspace = keyspace;
    }
    let start = start_at(
        request.from_offsets.as_deref(),
        request.from_time.as_deref(),
    )?
    .unwrap_or(StartAt::Beginning);
    let partitions = request
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
        dry_run: request.dry_run,
        batch: request.batch,
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
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{} {} records into {} in {:.1}s: {} accepted, {} rejected, {} undecodable, {} already there",
            if request.dry_run {
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
    }
    Ok(())
}

/// Compares two keyspaces; an error (non-zero exit) when any table differs. Read-only: both
/// keyspaces must exist and be migrated; neither is ever created.
pub async fn verify(settings: &Settings, left: &str, right: &str, json: bool) -> Result<()> {
    let mut cql = settings.cql.clone();
    cql.keyspace = left.to_string();
    let store = ProjectionStore::open(&cql).await?;
    let comparison = verify::compare(&store, left, right).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        for t in &comparison.tables {
            println!(
                "{:<24} {:>9} rows {}  {:>9} rows {}  {}",
                t.left.table,
                t.left.rows,
                &t.left.digest[..12],
                t.right.rows,
                &t.right.digest[..12],
                if t.equal() { "same" } else { "DIFFERENT" }
            );
            for row in &t.only_left {
                println!("  only in {left}: {row}");
            }
            for row in &t.only_right {
                println!("  only in {right}: {row}");
            }
        }
    }
    if !comparison.equal() {
        bail!("keyspaces {left} and {right} differ");
    }
    Ok(())
}

/// Where `--from-offsets` or `--from-time` says to start; `None` when neither is given.
pub(crate) fn start_at(offsets: Option<&str>, time: Option<&str>) -> Result<Option<StartAt>> {
    Ok(match (offsets, time) {
        (Some(offsets), _) => Some(StartAt::Offsets(parse_offsets(offsets)?)),
        (None, Some(time)) => Some(StartAt::Timestamp(parse_time(time)?)),
        (None, None) => None,
    })
}

fn parse_offsets(text: &str) -> Result<BTreeMap<i32, i64>> {
    text.split(',')
        .map(|pair| {
            let (p, o) = pair
                .split_once(':')
                .with_context(|| format!("{pair:?}: expected partition:offset"))?;
            Ok((p.trim().parse()?, o.trim().parse()?))
        })
        .collect()
}

/// Milliseconds since the epoch, an RFC 3339 time like `2025-01-31T12:00:00Z`, or a duration
/// with units meaning that long ago (`2h`, `30m`, `1d`).
fn parse_time(text: &str) -> Result<i64> {
    parse_time_at(text, time::OffsetDateTime::now_utc())
}

/// [`parse_time`] with "now" given, so that a relative time can be tested.
fn parse_time_at(text: &str, now: time::OffsetDateTime) -> Result<i64> {
    let time = if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    } else if let Ok(ago) = humantime::parse_duration(text.trim()) {
        now.checked_sub(time::Duration::try_from(ago).context("a duration out of range")?)
            .with_context(|| format!("{text:?} ago is out of range"))?
    } else {
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .with_context(|| {
                format!(
                    "{text:?}: expected milliseconds since the epoch, RFC 3339 like \
                     2025-01-31T12:00:00Z, or how long ago like 2h"
                )
            })?
    };
    i64::try_from(time.unix_timestamp_nanos() / 1_000_000)
        .with_context(|| format!("{text:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_utc_milliseconds() {
        assert_eq!(parse_time("0").ok(), Some(0));
        assert_eq!(parse_time("1970-01-01T00:00:00Z").ok(), Some(0));
        assert_eq!(
            parse_time("2024-03-01T00:00:01.5Z").ok(),
            Some(1_709_251_201_500)
        );
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn a_duration_is_that_long_ago() {
        let now = time::macros::datetime!(2026-12-02 12:00 UTC);
        let at = |text: &str| parse_time_at(text, now).ok();
        assert_eq!(at("2h"), Some(1_796_205_600_000));
        assert_eq!(at("90m"), at("1h 30m"));
        assert_eq!(at("500ms"), Some(1_796_212_800_000 - 500));
        // A bare number stays milliseconds since the epoch, as before.
        assert_eq!(at("1000"), Some(1000));
    }

    #[test]
    fn offsets_parse_by_partition() {
        let parsed = parse_offsets("0:10, 3:7").ok();
        assert_eq!(parsed, Some(BTreeMap::from([(0, 10), (3, 7)])));
        assert!(parse_offsets("0=10").is_err());
    }
}
