//! Ops replay: dropping everything and replaying gives the same tables, byte for byte;
//! replays resume; a dry run writes nothing; `sessionlog verify` reports differences.

use anyhow::{Context, Result};
use sessionlog_projector::replay::{Replay, ReplayOptions, StartAt};
use sessionlog_store::{ProjectionStore, verify};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::{
    assert_projected, assert_same_tables, event_log, replay_into, run_load, send_raw, store,
    wait_caught_up,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn dropping_everything_and_replaying_gives_the_same_tables() -> Result<()> {
    let stack = TestStack::new("prepl", 3).await?;
    let projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let load = run_load(log, 12, 6, Duration::ZERO).await?;
    send_raw(&stack, "not-a-session", b"junk").await?;
    let live = store(&stack).await?;
    wait_caught_up(&stack, &live, Duration::from_secs(120)).await?;
    drop(projector);
    assert_projected(&live, &load).await?;
    let live_ks = live.keyspace().to_string();
    let before = verify::digest_keyspace(&live, &live_ks).await?;

    // A fresh keyspace, replayed from the beginning: the same tables as the live projector's.
    let fresh = format!("{live_ks}_r");
    let summary = replay_into(&stack, &fresh).await?;
    assert_eq!(summary.dead_lettered, 1);
    assert_same_tables(&live, &live_ks, &fresh).await?;

    // A replay whose session cache holds one session per partition, in small batches: every
    // session is dropped and reloaded from its stored row again and again, with the same end.
    let mut settings = stack.settings.clone();
    settings.cql.keyspace = format!("{live_ks}_c");
    settings.projector.cache_sessions = 1;
    let options = ReplayOptions {
        batch: 7,
        ..ReplayOptions::default()
    };
    Replay::plan(&settings, options)
        .await?
        .run(Arc::new(AtomicU64::new(0)))
        .await?;
    assert_same_tables(&live, &live_ks, &settings.cql.keyspace).await?;

    // Drop everything, replay into the same name: byte for byte what was there.
    live.drop_keyspace(&live_ks).await?;
    replay_into(&stack, &live_ks).await?;
    let after = verify::digest_keyspace(&live, &live_ks).await?;
    assert_eq!(before, after);
    assert!(
        before
            .iter()
            .any(|t| t.table == "trace_spans_by_tenant_day" && t.rows > 0)
    );

    // The CLI's verify agrees, then notices a single changed cell.
    let verify_cli = |left: &str, right: &str| {
        stack
            .command(&[])?
            .args(["verify", "--left", left, "--right", right])
            .output()
            .context("running sessionlog verify")
    };
    let same = verify_cli(&live_ks, &fresh)?;
    assert!(
        same.status.success(),
        "{}",
        String::from_utf8_lossy(&same.stderr)
    );
    let (session, _) = load.iter().next().context("a session")?;
    live.cql()
        .query_unpaged(
            format!("UPDATE {fresh}.context_view SET plan = 'tampered' WHERE session_id = ?"),
            (session.0,),
        )
        .await?;
    let differs = verify_cli(&live_ks, &fresh)?;
    assert!(!differs.status.success());
    let out = String::from_utf8_lossy(&differs.stdout);
    assert!(
        out.contains("context_view") && out.contains("DIFFERENT") && out.contains("tampered"),
        "{out}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_resumes_selects_partitions_and_dry_runs() -> Result<()> {
    let stack = TestStack::new("presume", 3).await?;
    let log = event_log(&stack).await?;
    let load = run_load(log, 9, 4, Duration::ZERO).await?;
    let reference_ks = format!("{}_ref", stack.settings.cql.keyspace);
    replay_into(&stack, &reference_ks).await?;

    let mut settings = stack.settings.clone();
    settings.cql.keyspace = format!("{}_part", stack.settings.cql.keyspace);
    // A dry run folds everything and writes nothing.
    let dry = Replay::plan(
        &settings,
        ReplayOptions {
            dry_run: true,
            ..ReplayOptions::default()
        },
    )
    .await?;
    let total = dry.total();
    let summary = dry.run(Arc::new(AtomicU64::new(0))).await?;
    assert_eq!(summary.consumed, total);
    assert_eq!(summary.accepted, total);
    let probe = store(&stack).await?;
    let exists = probe.keyspace_exists(&settings.cql.keyspace).await?;
    assert!(!exists, "a dry run creates no keyspace");

    // Partition 0 only, then everything: the second run resumes and skips partition 0.
    let first = Replay::plan(
        &settings,
        ReplayOptions {
            partitions: Some(vec![0]),
            ..ReplayOptions::default()
        },
    )
    .await?;
    assert_eq!(first.ranges().len(), 1);
    let done = Arc::new(AtomicU64::new(0));
    let part0 = first.run(Arc::clone(&done)).await?;
    assert_eq!(done.load(Ordering::Relaxed), part0.consumed);
    let rest = Replay::plan(&settings, ReplayOptions::default()).await?;
    let p0 = rest
        .ranges()
        .iter()
        .find(|r| r.partition == 0)
        .context("partition 0")?;
    assert!(p0.is_empty(), "partition 0 resumes at its end: {p0:?}");
    assert_eq!(rest.total() + part0.consumed, total);
    let ends: BTreeMap<i32, i64> = rest
        .ranges()
        .iter()
        .map(|r| (r.partition, r.until))
        .collect();
    rest.run(Arc::new(AtomicU64::new(0))).await?;
    assert_same_tables(&probe, &reference_ks, &settings.cql.keyspace).await?;
    let target = ProjectionStore::open(&settings.cql).await?;
    assert_projected(&target, &load).await?;

    // From given offsets: partition 1 from its end reads nothing there.
    let mut other = settings.clone();
    other.cql.keyspace = format!("{}_off", stack.settings.cql.keyspace);
    let from_offsets = Replay::plan(
        &other,
        ReplayOptions {
            start: StartAt::Offsets(BTreeMap::from([(1, ends[&1])])),
            dry_run: true,
            ..ReplayOptions::default()
        },
    )
    .await?;
    let p1 = from_offsets
        .ranges()
        .iter()
        .find(|r| r.partition == 1)
        .context("partition 1")?;
    assert!(p1.is_empty());
    // From a time after everything: nothing to read anywhere.
    let later = Replay::plan(
        &other,
        ReplayOptions {
            start: StartAt::Timestamp(i64::MAX / 2),
            dry_run: true,
            ..ReplayOptions::default()
        },
    )
    .await?;
    assert_eq!(later.total(), 0);
    Ok(())
}

/// Processes that start together (projectors, a replay, a test) migrate the same fresh
/// keyspace at once: every one of them succeeds, added columns included.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_migrations_of_one_keyspace_all_succeed() -> Result<()> {
    let stack = TestStack::new("pmigr", 1).await?;
    for round in 0..4 {
        let mut cql = stack.settings.cql.clone();
        cql.keyspace = format!("{}_m{round}", cql.keyspace);
        let connects = (0..8).map(|_| ProjectionStore::migrate(&cql));
        futures::future::try_join_all(connects).await?;
    }
    Ok(())
}
