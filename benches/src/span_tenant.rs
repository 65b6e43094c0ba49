//! Spans-by-tenant benchmark: what a small tenant's `GET /v1/spans` costs as the rest of the
//! fleet grows.
//!
//! It fills a keyspace of its own with two UTC days of spans, written as the projector writes
//! them (`CqlRow::span` rows in `trace_spans_by_tenant_day` and their
//! `trace_tenant_day_buckets` notes, straight through the store, with no log in between): on
//! each day a small tenant has the same `--small-spans` spans, and one large tenant has
//! `--fleet-spans` spans on the first day and `--factor` times as many on the second. Each
//! round then lists every span of the small tenant's day, `--limit` a page through the cursor,
//! as the route does for a tenant's credential (`SpanQuery::page` runs the same store read,
//! `ProjectionStore::spans_between`), `--requests` times on each day, alternating which day
//! goes first; the ratio of the medians, large fleet ÷ small fleet, should stay near 1.
//!
//! The reference, measured the same way in the same rounds: the operator's listing of each
//! day (every tenant's partitions) filtered to the small tenant, which is what a tenant's
//! listing read before migration 14 put the tenant in the partition key (every tenant's spans
//! of a day in the same partitions, filtered after the read). Its ratio grows with the fleet.
//! Each listing's rows read, from the store's own report, are printed beside its time.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo run --release -p sessionlog-benches --bin sessionlog-bench -- span-tenant --rounds 6
//! ```

use crate::{Latencies, Spread, print_table};
use anyhow::{Context, Result, bail, ensure};
use futures::TryStreamExt;
use sessionlog_log::Settings;
use sessionlog_schemas::SessionId;
use sessionlog_session::trace::{MODEL_CALL, SpanWrite, day_bucket, day_of};
use sessionlog_store::{CqlRow, DaySpanRow, ProjectionStore, ROWS_PER_BATCH, SpanSearch};
use sessionlog_testkit::stack;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(about = "sessionlog spans: a small tenant's listing against the fleet's size")]
pub struct Args {
    /// Rounds.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// The small tenant's spans of each day.
    #[arg(long, default_value_t = 200)]
    small_spans: usize,
    /// The large tenant's spans of the first day.
    #[arg(long, default_value_t = 10_000)]
    fleet_spans: usize,
    /// How many times as many the large tenant has on the second day.
    #[arg(long, default_value_t = 10)]
    factor: usize,
    /// Spans per session (sessions spread over the day's buckets by id).
    #[arg(long, default_value_t = 50)]
    spans_per_session: usize,
    /// Spans per page, as `limit` of `GET /v1/spans`.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Small-tenant listings per day per round.
    #[arg(long, default_value_t = 20)]
    requests: usize,
    /// Operator listings filtered to the small tenant (the reference) per day per round.
    #[arg(long, default_value_t = 2)]
    scans: usize,
    /// `[projector] trace_day_buckets` of the keyspace.
    #[arg(long, default_value_t = 16)]
    buckets: u16,
    /// Keep the run's keyspace.
    #[arg(long)]
    keep: bool,
}

const DAY_US: i64 = 86_400_000_000;
const SMALL: &str = "small-tenant";
const LARGE: &str = "large-tenant";

/// One listing of a day's spans: how long it took, what it found and the rows it read.
struct Listed {
    took: Duration,
    spans: usize,
    rows_read: u64,
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    if args.rounds == 0 || args.small_spans == 0 || args.factor == 0 || args.limit == 0 {
        bail!("--rounds, --small-spans, --factor and --limit must be at least 1");
    }
    let mut settings = Settings::load(None).context("loading settings")?;
    // A keyspace of the run's own (it writes no topic).
    stack::isolate(&mut settings, "bench", "spantenant", 1);
    let store = ProjectionStore::migrate(&settings.cql).await?;
    store.fix_trace_day_buckets(args.buckets).await?;

    // Two whole days in the past, so no projector of anyone's writes into them.
    let today = sessionlog_schemas::now_micros().div_euclid(DAY_US);
    let small_fleet = (today - 3) * DAY_US;
    let large_fleet = (today - 2) * DAY_US;
    let started = Instant::now();
    let mut written = 0;
    for (day, fleet) in [
        (small_fleet, args.fleet_spans),
        (large_fleet, args.fleet_spans * args.factor),
    ] {
        written += fill(&store, &args, day, SMALL, args.small_spans).await?;
        written += fill(&store, &args, day, LARGE, fleet).await?;
    }
    eprintln!(
        "wrote {written} spans in {:.1} s to {}",
        started.elapsed().as_secs_f64(),
        settings.cql.keyspace
    );

    let mut rows = Vec::new();
    let (mut ratios, mut scan_ratios) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        // Alternate which day goes first, so neither always meets the warmer caches.
        let order = if round % 2 == 1 {
            [small_fleet, large_fleet]
        } else {
            [large_fleet, small_fleet]
        };
        let mut ours: BTreeMap<i64, (Latencies, u64)> = BTreeMap::new();
        let mut scans: BTreeMap<i64, (Latencies, u64)> = BTreeMap::new();
        for day in order {
            for _ in 0..args.requests {
                let listed = list_day(&store, day, Some(SMALL), args.limit).await?;
                ensure!(
                    listed.spans == args.small_spans,
                    "the small tenant's listing found {} spans, not {}",
                    listed.spans,
                    args.small_spans
                );
                let entry = ours.entry(day).or_default();
                entry.0.record(listed.took);
                entry.1 = listed.rows_read;
            }
        }
        for day in order {
            for _ in 0..args.scans {
                let listed = list_day(&store, day, None, args.limit).await?;
                ensure!(
                    listed.spans == args.small_spans,
                    "the filtered operator listing found {} spans, not {}",
                    listed.spans,
                    args.small_spans
                );
                let entry = scans.entry(day).or_default();
                entry.0.record(listed.took);
                entry.1 = listed.rows_read;
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let median = |side: &mut BTreeMap<i64, (Latencies, u64)>, day: i64| {
            let (latencies, rows_read) = side.get_mut(&day).expect("measured");
            (ms(latencies.percentile(50.0)), *rows_read)
        };
        let (small_ms, small_rows) = median(&mut ours, small_fleet);
        let (large_ms, large_rows) = median(&mut ours, large_fleet);
        let (scan_small_ms, scan_small_rows) = median(&mut scans, small_fleet);
        let (scan_large_ms, scan_large_rows) = median(&mut scans, large_fleet);
        let ratio = large_ms / small_ms.max(0.001);
        let scan_ratio = scan_large_ms / scan_small_ms.max(0.001);
        ratios.push(ratio);
        scan_ratios.push(scan_ratio);
        let row = vec![
            round.to_string(),
            format!("{small_ms:.2}"),
            format!("{large_ms:.2}"),
            format!("{ratio:.3}"),
            format!("{small_rows}/{large_rows}"),
            format!("{scan_small_ms:.1}"),
            format!("{scan_large_ms:.1}"),
            format!("{scan_ratio:.2}"),
            format!("{scan_small_rows}/{scan_large_rows}"),
        ];
        println!("round {}", row.join("  "));
        rows.push(row);
    }
    print_table(
        &[
            "round",
            "tenant p50 ms 1x",
            &format!("tenant p50 ms {}x", args.factor),
            "ratio",
            "rows read",
            "fleet scan p50 ms 1x",
            &format!("fleet scan p50 ms {}x", args.factor),
            "scan ratio",
            "scan rows read",
        ],
        &rows,
    );
    println!(
        "small tenant ({} spans) listing, fleet of {} vs {} other spans, p50 {}x ÷ 1x: median {}",
        args.small_spans,
        args.fleet_spans,
        args.fleet_spans * args.factor,
        args.factor,
        Spread::of(&ratios)
    );
    println!(
        "reference, every tenant's partitions filtered to the small tenant, {}x ÷ 1x: median {}",
        args.factor,
        Spread::of(&scan_ratios)
    );
    if !args.keep {
        store.drop_keyspace(&settings.cql.keyspace).await?;
    }
    Ok(())
}

/// Writes `count` spans of `tenant` spread over the UTC day starting at `day_start`, in
/// sessions of `--spans-per-session`, as the projector writes them: each partition's rows in
/// single-partition batches, then the day's notes of the partitions. Returns `count`.
async fn fill(
    store: &ProjectionStore,
    args: &Args,
    day_start: i64,
    tenant: &str,
    count: usize,
) -> Result<usize> {
    let per_session = args.spans_per_session.max(1);
    let step = DAY_US / i64::try_from(count.max(1))?;
    let mut partitions: BTreeMap<i32, Vec<CqlRow>> = BTreeMap::new();
    let mut session = SessionId::new();
    for i in 0..count {
        if i % per_session == 0 {
            session = SessionId::new();
        }
        let seq = u64::try_from(i % per_session)? + 2;
        let start_us = day_start + i64::try_from(i)? * step;
        let span = SpanWrite {
            session_id: session,
            span_seq: seq,
            span_kind: MODEL_CALL,
            name: "bench-model".into(),
            parent_seq: Some(1),
            start_us,
            opens: true,
            end_seq: Some(seq),
            end_us: Some(start_us + 1_000),
            tokens_in: Some(500),
            tokens_out: Some(80),
            cost_micros: Some(600),
            outcome: "ok",
        };
        let bucket = day_bucket(session, args.buckets);
        let offset = i64::try_from(i)?;
        let [_, by_day] = CqlRow::span(&span, 0, offset, (tenant, Some("bench-agent")), bucket);
        partitions.entry(bucket).or_default().push(by_day);
    }
    let batches = partitions
        .values()
        .flat_map(|rows| rows.chunks(ROWS_PER_BATCH))
        .map(Ok::<_, anyhow::Error>);
    futures::stream::iter(batches)
        .try_for_each_concurrent(8, |rows| async move {
            store.write_rows(rows).await?;
            Ok(())
        })
        .await?;
    let day = day_of(day_start);
    let notes: Vec<CqlRow> = partitions
        .keys()
        .map(|bucket| CqlRow::tenant_day_bucket(tenant.to_string(), day.clone(), *bucket))
        .collect();
    store.write_rows(&notes).await?;
    Ok(count)
}

/// Lists every span of the small tenant on the UTC day starting at `day_start`, `limit` a page
/// through the cursor: as `tenant` (its own partitions) or, for `None`, as the operator
/// (every tenant's partitions) keeping the small tenant's spans alone.
async fn list_day(
    store: &ProjectionStore,
    day_start: i64,
    tenant: Option<&str>,
    limit: usize,
) -> Result<Listed> {
    let started = Instant::now();
    let (mut spans, mut rows_read) = (0, 0);
    let mut after = None;
    loop {
        let search = SpanSearch {
            from_us: day_start,
            to_us: day_start + DAY_US,
            after,
            limit,
            tenant: tenant.map(String::from),
        };
        let page = store
            .spans_between(&search, |row| row.tenant.as_deref() == Some(SMALL))
            .await?;
        spans += page.spans.len();
        rows_read += page.rows_read;
        if page.spans.len() < limit {
            break;
        }
        after = page.spans.last().map(DaySpanRow::order_key);
    }
    Ok(Listed {
        took: started.elapsed(),
        spans,
        rows_read,
    })
}
