//! Rebuilds against the real stack: random sessions rebuild to exactly the projected state
//! (and to the writer's own fold, projector running or not), and on a partition shared by
//! 1,000 sessions a rebuild reads about as many records as the session has since its
//! checkpoint.

use anyhow::{Result, ensure};
use futures::future::try_join_all;
use futures::{StreamExt, TryStreamExt, stream};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Recovery, StartPoint};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_session::SessionState;
use sessionlog_testkit::projector::{event_log, store, wait_caught_up};
use sessionlog_testkit::recovery::random_session;
use sessionlog_testkit::{TestStack, wait_for};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Appends `count` random sessions, `concurrency` at a time, seeded from `seed`.
async fn append_random(
    stack: &TestStack,
    seed: u64,
    count: u64,
    concurrency: usize,
) -> Result<BTreeMap<SessionId, SessionState>> {
    let log = event_log(stack).await?;
    stream::iter((0..count).map(|i| random_session(log.clone(), seed.wrapping_add(i))))
        .buffer_unordered(concurrency)
        .map_ok(|state| (state.session_id, state))
        .try_collect()
        .await
}

/// Fails unless every session rebuilds to the writer's fold.
async fn assert_rebuilt(
    recovery: &Recovery,
    sessions: &BTreeMap<SessionId, SessionState>,
) -> Result<()> {
    for (session, expected) in sessions {
        let rebuilt = recovery.rebuild(*session).await?;
        ensure!(
            rebuilt.state.canonical_json() == expected.canonical_json(),
            "session {session}: rebuilt state differs from the writer's fold"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn rebuilt_state_equals_projected_state_for_random_sessions() -> Result<()> {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64;
    println!("seed {seed}");
    let stack = TestStack::new("rec_random", 3).await?;

    // Half the sessions are appended while a projector runs, half while it is stopped.
    let projector = stack.spawn_projector()?;
    let mut sessions = append_random(&stack, seed, 50, 10).await?;
    drop(projector);
    let unprojected = append_random(&stack, seed.wrapping_add(1_000), 50, 10).await?;

    // The tables lag the log now; a rebuild of what the projector never saw must be exact.
    let recovery = Recovery::connect(&stack.settings).await?;
    assert_rebuilt(&recovery, &unprojected).await?;
    sessions.extend(unprojected);
    assert_eq!(sessions.len(), 100);

    let _projector = stack.spawn_projector()?;
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(180)).await?;
    let mut from_checkpoint = 0;
    for (session, expected) in &sessions {
        let projected = store.load_session(*session).await?;
        let rebuilt = recovery.rebuild(*session).await?;
        ensure!(
            rebuilt.state.canonical_json() == expected.canonical_json(),
            "session {session}: rebuilt state differs from the writer's fold"
        );
        ensure!(
            projected.map(|p| p.state.canonical_json()) == Some(rebuilt.state.canonical_json()),
            "session {session}: rebuilt state differs from the projected state"
        );
        from_checkpoint += usize::from(matches!(rebuilt.start, StartPoint::Checkpoint { .. }));
    }
    // Random sessions include checkpoints: most rebuilds must have started from one.
    assert!(from_checkpoint > 0, "no rebuild started from a checkpoint");
    Ok(())
}

/// Appends one event to every writer at once (a checkpoint, or a user request), so that the
/// sessions interleave on the partition.
async fn round(writers: &mut [SessionWriter], checkpoint: bool) -> Result<()> {
    try_join_all(writers.iter_mut().map(|w| {
        // A checkpoint declares the writer's digest, as `SessionWriter::checkpoint` does,
        // without its per-writer read-back (1,000 read-backs of a shared partition).
        let event = if checkpoint {
            SessionEvent::Checkpoint {
                state_digest: w.state().digest(),
                workspace_revision: None,
            }
        } else {
            SessionEvent::UserRequest {
                content: Content::plain("more"),
            }
        };
        w.append(event)
    }))
    .await?;
    Ok(())
}

/// `count` sessions created concurrently, then given one event each per entry of `rounds` (a
/// checkpoint where it is true), round by round so that they interleave on the partition;
/// returns once the stack's running projector has applied them all.
async fn interleaved_and_projected(
    stack: &TestStack,
    count: usize,
    rounds: &[bool],
) -> Result<Vec<SessionWriter>> {
    let log = event_log(stack).await?;
    let mut writers: Vec<SessionWriter> =
        stream::iter((0..count).map(|_| SessionWriter::create(log.clone(), "interleaved", None)))
            .buffer_unordered(200)
            .map_ok(|(writer, _)| writer)
            .try_collect()
            .await?;
    for checkpoint in rounds {
        round(&mut writers, *checkpoint).await?;
    }
    let store = store(stack).await?;
    wait_caught_up(stack, &store, Duration::from_secs(180)).await?;
    Ok(writers)
}

/// Waits until `recovery`'s tail has positioned itself on every partition.
async fn tail_positioned(recovery: &Recovery) -> Result<()> {
    let log = recovery.log();
    wait_for(
        "the tail to position itself",
        Duration::from_secs(30),
        || async {
            Ok((0..log.partitions())
                .all(|p| log.tail_start(p).is_some())
                .then_some(()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn read_amplification_stays_low_on_a_shared_partition() -> Result<()> {
    const SESSIONS: usize = 1_000;
    let stack = TestStack::new("rec_amp", 1).await?;
    let projector = stack.spawn_projector()?;
    let mut writers =
        interleaved_and_projected(&stack, SESSIONS, &[false, true, false, false]).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let sample: Vec<&SessionWriter> = writers.iter().step_by(50).collect();
    for writer in &sample {
        let rebuilt = recovery.rebuild(writer.session_id()).await?;
        assert!(
            matches!(rebuilt.start, StartPoint::Checkpoint { .. }),
            "{:?}",
            rebuilt.start
        );
        assert_eq!(
            rebuilt.state.canonical_json(),
            writer.state().canonical_json()
        );
        assert_eq!(rebuilt.events_folded, 2, "two events follow the checkpoint");
        assert!(
            rebuilt.read_amplification() <= 2.0,
            "read amplification {} ({} records read for {} events)",
            rebuilt.read_amplification(),
            rebuilt.records_read,
            rebuilt.events_folded
        );
    }

    // With the projector stopped, the newest events are only in the log: the rebuild reads
    // the tail beyond what the tables cover and is still exact.
    drop(projector);
    round(&mut writers, false).await?;
    for writer in writers.iter().step_by(50) {
        let rebuilt = recovery.rebuild(writer.session_id()).await?;
        assert_eq!(
            rebuilt.state.canonical_json(),
            writer.state().canonical_json()
        );
        assert_eq!(rebuilt.events_folded, 3);
        assert!(
            rebuilt.records_read >= SESSIONS as u64,
            "the uncovered tail holds {SESSIONS} records, read {}",
            rebuilt.records_read
        );
    }
    Ok(())
}

/// A fleet restart's rebuilds: each session's checkpoint is older than the process's tail, but
/// what the projector has not applied yet (the fleet's own claims, mostly) was written since the
/// tail started. That part is read from memory, the session's records only, instead of every
/// record of the partition past the projection.
#[tokio::test(flavor = "multi_thread")]
async fn the_unprojected_rest_of_a_session_is_read_from_the_tail_when_it_holds_it() -> Result<()> {
    const SESSIONS: usize = 200;
    let stack = TestStack::new("rec_tail_rest", 1).await?;
    let projector = stack.spawn_projector()?;
    let mut writers = interleaved_and_projected(&stack, SESSIONS, &[false, true, false]).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    recovery.log().start_tail().await;
    tail_positioned(&recovery).await?;
    // Written after the tail started and never projected: 2 × SESSIONS records past the index.
    drop(projector);
    round(&mut writers, false).await?;
    round(&mut writers, false).await?;
    // A rebuild takes from the tail only what it has already read (no wait), the rest from the
    // log: wait until it has read everything written, or a slow tail would fail the count below.
    let (_, end) = recovery.log().watermarks(0).await?;
    wait_for(
        "the tail to read everything written",
        Duration::from_secs(30),
        || async {
            Ok(recovery
                .log()
                .tail_end(0)
                .is_some_and(|read| read >= end)
                .then_some(()))
        },
    )
    .await?;

    for writer in writers.iter().step_by(20) {
        let rebuilt = recovery.rebuild(writer.session_id()).await?;
        ensure!(
            matches!(rebuilt.start, StartPoint::Checkpoint { .. }) && !rebuilt.from_tail,
            "the checkpoint predates the tail: {:?}, from_tail {}",
            rebuilt.start,
            rebuilt.from_tail
        );
        ensure!(
            rebuilt.state.canonical_json() == writer.state().canonical_json(),
            "session {}: the rebuild differs from the writer's fold",
            writer.session_id()
        );
        ensure!(
            rebuilt.events_folded == 3,
            "one event after the checkpoint and two unprojected: folded {}",
            rebuilt.events_folded
        );
        ensure!(
            rebuilt.read_amplification() <= 2.0,
            "read amplification {} ({} records read for {} events): the unprojected rest was \
             read from the log",
            rebuilt.read_amplification(),
            rebuilt.records_read,
            rebuilt.events_folded
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_the_tail_holds_rebuilds_from_memory_to_the_same_state() -> Result<()> {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64;
    println!("seed {seed}");
    let stack = TestStack::new("rec_tail", 3).await?;
    let _projector = stack.spawn_projector()?;
    // Written before the tail started: its start is not in memory.
    let before = append_random(&stack, seed, 5, 5).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    recovery.log().start_tail().await;
    tail_positioned(&recovery).await?;
    let after = append_random(&stack, seed.wrapping_add(100), 30, 10).await?;
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(180)).await?;

    // The same sessions rebuilt by a process without a tail read the partition.
    let mut untailed = stack.settings.clone();
    untailed.producer.tail_bytes = 0;
    let reader = Recovery::connect(&untailed).await?;
    let mut from_checkpoint = 0;
    for (session, expected) in before.iter().chain(&after) {
        let held = recovery.rebuild(*session).await?;
        let read = reader.rebuild(*session).await?;
        // The tail answers when it holds everything from the start point on. That is every
        // session written after it started, and also one written before whose last record is
        // a checkpoint that ended its partition then: its read starts where the tail began.
        let tail_began = recovery.log().tail_start(held.partition);
        let held_from_start = tail_began.is_some_and(|began| held.start.first_offset() >= began);
        ensure!(
            held.from_tail == held_from_start && (held.from_tail || !after.contains_key(session)),
            "session {session}: from_tail {} (the tail began at {tail_began:?}, the read at {}; \
             written after the tail started: {})",
            held.from_tail,
            held.start.first_offset(),
            after.contains_key(session)
        );
        ensure!(!read.from_tail, "a process without a tail read memory");
        ensure!(
            held.state.canonical_json() == expected.canonical_json()
                && read.state.canonical_json() == expected.canonical_json(),
            "session {session}: a rebuild differs from the writer's fold"
        );
        // (The last record read may differ: the log's read takes only the offsets the index
        // says were accepted, the tail's every record of the session.)
        ensure!(
            (&held.start, held.end_offset) == (&read.start, read.end_offset),
            "session {session}: the two rebuilds disagree on where they read"
        );
        from_checkpoint += usize::from(matches!(held.start, StartPoint::Checkpoint { .. }));
    }
    ensure!(from_checkpoint > 0, "no rebuild started from a checkpoint");
    Ok(())
}
