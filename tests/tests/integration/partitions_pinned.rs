//! The partition of a session never moves: producers name it, computed from the count pinned
//! in `[kafka] partitions`, so partitions added to the topic while processes run change
//! nothing, and a process started against the changed topic refuses to run.
//!
//! Before: sends let librdkafka pick the partition from the live count, while writers,
//! recovery and the projector fixed it at start; after `CreatePartitions` a session's new
//! events landed on another partition, claims failed and recovery called it unknown.

use anyhow::{Context, Result, ensure};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use sessionlog_log::{partitioner, topic};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::Recovery;
use sessionlog_testkit::{TestStack, wait_for};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn partitions_added_to_the_topic_move_no_session() -> Result<()> {
    let mut stack = TestStack::new("pinned", 2).await?;
    // The producer learns the topic's new shape within a fraction of a second, as the old
    // partitioner would have.
    stack
        .settings
        .kafka
        .librdkafka
        .insert("topic.metadata.refresh.interval.ms".into(), "100".into());
    let log = Arc::new(EventLog::from_settings(&stack.settings).await?);
    let mut writers = Vec::new();
    for _ in 0..24 {
        let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "h", None).await?;
        writer.user_request("before").await?;
        writers.push(writer);
    }

    let admin: AdminClient<DefaultClientContext> = stack.settings.kafka.client_config().create()?;
    let added = admin
        .create_partitions(
            &[NewPartitions::new(&stack.settings.kafka.topic, 5)],
            &AdminOptions::new(),
        )
        .await?;
    ensure!(
        added.iter().all(Result::is_ok),
        "create partitions: {added:?}"
    );
    wait_for("the topic to have 5 partitions", Duration::from_secs(30), || {
        let kafka = stack.settings.kafka.clone();
        async move { Ok((topic::partition_count(&kafka, &kafka.topic).await? == 5).then_some(())) }
    })
    .await?;

    for writer in &mut writers {
        let pinned = partitioner::partition_for(writer.session_id(), 2);
        for _ in 0..3 {
            let appended = writer.user_request("after").await?;
            ensure!(
                appended.position.partition == pinned,
                "session {} moved from partition {pinned} to {}",
                writer.session_id(),
                appended.position.partition
            );
        }
        let checkpoint = writer.checkpoint(None).await?;
        ensure!(checkpoint.position.partition == pinned);
    }
    // A takeover through the running process finds every session where it always was.
    let (claimed, _) = SessionWriter::claim(Arc::clone(&log), writers[0].session_id(), "w2")
        .await
        .context("claiming after the partitions were added")?;
    ensure!(claimed.state().last_seq == writers[0].state().last_seq);

    // A process started now refuses the changed topic, naming the setting.
    for refused in [
        EventLog::from_settings(&stack.settings)
            .await
            .err()
            .map(|e| e.to_string()),
        Recovery::connect(&stack.settings)
            .await
            .err()
            .map(|e| e.to_string()),
    ] {
        let message = refused.context("a process started against 5 partitions pinned at 2")?;
        ensure!(
            message.contains("[kafka] partitions") && message.contains("has 5 partitions"),
            "{message}"
        );
    }
    Ok(())
}
