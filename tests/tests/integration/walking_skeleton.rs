//! The walking skeleton, end to end on the real stack: a harness appends a session, a
//! projector process writes its state row to CQL, recovery rebuilds it from topic offsets,
//! and all three agree with the fold of what was appended.

use anyhow::{Context, Result};
use sessionlog_cli::example;
use sessionlog_log::partitioner;
use sessionlog_producer::{EventLog, ProducerOptions};
use sessionlog_recovery::{Recovery, StartPoint};
use sessionlog_session::{SessionStatus, fold};
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::{TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn rebuilt_equals_projected_equals_fold_of_appended() -> Result<()> {
    let stack = TestStack::new("skeleton", 3).await?;
    let mut projector = stack.spawn_projector()?;

    let log = Arc::new(EventLog::connect(&stack.settings, ProducerOptions::default()).await?);
    let (writer, appended) = example::run_example_session(log).await?;
    let session = writer.session_id();

    // Every event of the session sits on the partition Kafka's murmur2 assigns its key.
    let expected_partition = partitioner::partition_for(session, 3);
    for a in &appended {
        assert_eq!(
            a.position.partition, expected_partition,
            "seq {}",
            a.envelope.seq
        );
    }
    let offsets: Vec<i64> = appended.iter().map(|a| a.position.offset).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "offsets in append order: {offsets:?}"
    );

    let envelopes: Vec<_> = appended.iter().map(|a| a.envelope.clone()).collect();
    let folded = fold(&envelopes).context("the appended events start a session")?;
    assert_eq!(folded.status(), SessionStatus::Completed);
    assert_eq!(folded.last_seq, appended.len() as u64);
    assert!(
        folded
            .last_checkpoint
            .as_ref()
            .is_some_and(|c| c.verified())
    );
    assert_eq!(writer.state().canonical_json(), folded.canonical_json());

    let store = ProjectionStore::open(&stack.settings.cql).await?;
    let projected = wait_for(
        "the projector to write the session row",
        Duration::from_secs(60),
        || {
            let store = store.clone();
            let last_seq = folded.last_seq;
            async move {
                Ok(store
                    .load_session(session)
                    .await?
                    .filter(|p| p.state.last_seq >= last_seq))
            }
        },
    )
    .await?;
    projector.assert_running()?;
    assert_eq!(projected.state.canonical_json(), folded.canonical_json());
    assert_eq!(projected.partition, expected_partition);
    assert_eq!(projected.applied_offset, *offsets.last().unwrap_or(&-1));

    let recovery = Recovery::connect(&stack.settings).await?;
    let rebuilt = recovery.rebuild(session).await?;
    assert_eq!(rebuilt.state.canonical_json(), folded.canonical_json());
    assert_eq!(rebuilt.partition, expected_partition);
    // The checkpoint is the second-to-last event: recovery starts from it, not from the start.
    let checkpoint = &appended[appended.len() - 2];
    assert_eq!(
        rebuilt.start,
        StartPoint::Checkpoint {
            seq: checkpoint.envelope.seq,
            offset: checkpoint.position.offset
        }
    );
    assert_eq!(
        rebuilt.events_folded, 1,
        "only the terminal event follows the checkpoint"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn recovery_without_a_projection_reads_the_log_from_the_partition_start() -> Result<()> {
    // No projector runs: the tables know nothing, and recovery must still be right.
    let stack = TestStack::new("noproj", 2).await?;
    let log = Arc::new(EventLog::connect(&stack.settings, ProducerOptions::default()).await?);
    let (first, _) = example::run_example_session(Arc::clone(&log)).await?;
    let (second, appended) = example::run_example_session(log).await?;

    let recovery = Recovery::connect(&stack.settings).await?;
    for writer in [&first, &second] {
        let rebuilt = recovery.rebuild(writer.session_id()).await?;
        assert_eq!(
            rebuilt.state.canonical_json(),
            writer.state().canonical_json()
        );
        assert!(matches!(rebuilt.start, StartPoint::PartitionStart { .. }));
        assert_eq!(rebuilt.events_folded, appended.len() as u64);
    }
    Ok(())
}
