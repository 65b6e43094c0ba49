//! Crashes and rebalances during a load leave the same tables as a clean replay.

use anyhow::{Context, Result};
use sessionlog_producer::SessionWriter;
use sessionlog_testkit::projector::{
    assert_projected, assert_same_tables, event_log, replay_into, run_load, store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, wait_for};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

/// A random delay in `[min, max)` milliseconds (std's randomly keyed hasher, no extra crate).
fn random_ms(min: u64, max: u64) -> Duration {
    let r = RandomState::new().hash_one(std::time::Instant::now());
    Duration::from_millis(min + r % (max - min))
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_leaves_the_tables_of_a_clean_replay() -> Result<()> {
    let stack = TestStack::new("pkill", 3).await?;
    let log = event_log(&stack).await?;
    let load = tokio::spawn(run_load(log, 16, 24, Duration::from_millis(1_000)));
    let mut kills = 0;
    while kills < 22 {
        let mut projector = stack.spawn_projector()?;
        // The point of the test: an arbitrary instant, during start-up, a batch or a commit.
        tokio::time::sleep(random_ms(200, 2_500)).await;
        projector.0.kill().context("kill -9")?;
        projector.0.wait()?;
        kills += 1;
    }
    let load = load.await??;
    let _last = stack.spawn_projector()?;
    let live = store(&stack).await?;
    wait_caught_up(&stack, &live, Duration::from_secs(180)).await?;
    assert_projected(&live, &load).await?;
    let clean = format!("{}_clean", live.keyspace());
    replay_into(&stack, &clean).await?;
    assert_same_tables(&live, live.keyspace(), &clean).await
}

/// Sum of stored progress over all partitions.
async fn progress(stack: &TestStack, store: &sessionlog_store::ProjectionStore) -> Result<i64> {
    Ok(store
        .load_progress(&stack.settings.kafka.topic)
        .await?
        .values()
        .sum())
}

/// Waits until the projection advanced past `from` (the load keeps appending).
async fn advanced(
    stack: &TestStack,
    store: &sessionlog_store::ProjectionStore,
    from: i64,
) -> Result<i64> {
    wait_for(
        "the projection to advance",
        Duration::from_secs(60),
        || async move {
            let now = progress(stack, store).await?;
            Ok((now > from + 20).then_some(now))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_joining_and_leaving_give_the_same_final_tables() -> Result<()> {
    let stack = TestStack::new("pjoin", 4).await?;
    let live = store(&stack).await?;
    let log = event_log(&stack).await?;
    // About a minute of load, so that every join and leave below happens while it runs: each
    // may pause the group for up to a session timeout (10 s).
    let load = tokio::spawn(run_load(log, 16, 80, Duration::from_millis(700)));
    let first = stack.spawn_projector()?;
    let mut at = advanced(&stack, &live, 0).await?;
    let mut second = stack.spawn_projector()?;
    at = advanced(&stack, &live, at).await?;
    // The first leaves cleanly (SIGTERM: commit, leave the group) ...
    let status = std::process::Command::new("kill")
        .args(["-TERM", &first.0.id().to_string()])
        .status()?;
    assert!(status.success());
    drop(first);
    at = advanced(&stack, &live, at).await?;
    let third = stack.spawn_projector()?;
    at = advanced(&stack, &live, at).await?;
    // ... the second dies without a word, the third takes over its partitions.
    second.0.kill()?;
    second.0.wait()?;
    advanced(&stack, &live, at).await?;
    let load = load.await??;
    wait_caught_up(&stack, &live, Duration::from_secs(180)).await?;
    drop(third);
    assert_projected(&live, &load).await?;
    let clean = format!("{}_clean", live.keyspace());
    replay_into(&stack, &clean).await?;
    assert_same_tables(&live, live.keyspace(), &clean).await
}

/// A writer's retry that lands after the projector restarted is still a harmless duplicate:
/// the restarted projector rebuilds the duplicate window (which stored rows leave out) from
/// the event index and the writer claims, so it neither rejects the retry as a conflict nor
/// projects it twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_a_projector_restart_is_still_a_duplicate() -> Result<()> {
    let stack = TestStack::new("pretry", 2).await?;
    let log = event_log(&stack).await?;
    let store = store(&stack).await?;
    let (mut first, _) = SessionWriter::create(Arc::clone(&log), "agent", Some("retry")).await?;
    let session = first.session_id();
    let early = first.user_request("before the takeover").await?;
    let (mut second, claim) = SessionWriter::claim(Arc::clone(&log), session, "successor").await?;
    let late = second.user_request("after the takeover").await?;

    let mut projector = stack.spawn_projector()?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;
    projector.0.kill().context("kill -9")?;
    projector.0.wait()?;

    // What a writer retrying its last batches would send again: a sequenced event before the
    // claim, the claim itself and the latest event.
    for retried in [&early, &claim, &late] {
        log.append(&retried.envelope).await?;
    }
    let _projector = stack.spawn_projector()?;
    wait_caught_up(&stack, &store, Duration::from_secs(60)).await?;

    let ks = store.keyspace().to_string();
    let rejected: Vec<(String, String)> = store
        .rejected_events(session)
        .await?
        .into_iter()
        .map(|r| (r.label, r.reason))
        .collect();
    assert!(rejected.is_empty(), "retries were rejected: {rejected:?}");
    let projected = store
        .load_session(session)
        .await?
        .context("session projected")?;
    assert_eq!(projected.state.digest(), second.state().digest());
    let clean = format!("{ks}_clean");
    replay_into(&stack, &clean).await?;
    assert_same_tables(&store, &ks, &clean).await
}
