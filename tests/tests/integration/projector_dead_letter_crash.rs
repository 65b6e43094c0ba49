//! Dead letters are sent once across crashes: a projector killed with SIGKILL while it sends a
//! batch's dead letters (after some reached the dead-letter topic, before the batch's progress
//! was stored) is restarted, reads the batch again, and does not send those dead letters again.
//!
//! Before: every restart re-sent the dead letters of the records after the stored progress, so
//! the dead-letter topic held duplicates after a crash.

use anyhow::{Result, ensure};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use sessionlog_schemas::SessionId;
use sessionlog_testkit::projector::{dead_letters, spawn_projector_with};
use sessionlog_testkit::{ChildGuard, TestStack, free_address, wait_for};
use std::collections::BTreeMap;
use std::time::Duration;

/// Records that are not Avro at all, `count` of them, sent at once; their offsets.
async fn send_garbage(stack: &TestStack, count: usize) -> Result<Vec<i64>> {
    let producer: FutureProducer = stack.settings.kafka.producer_config().create()?;
    let key = SessionId::new().to_string();
    let sends = (0..count).map(|i| {
        let payload = format!("\u{7} not avro {i}");
        let producer = producer.clone();
        let (topic, key) = (stack.settings.kafka.topic.clone(), key.clone());
        async move {
            let record = FutureRecord::to(&topic).key(&key).payload(&payload);
            producer
                .send(record, Timeout::After(Duration::from_secs(30)))
                .await
                .map(|d| d.offset)
                .map_err(|(e, _)| anyhow::Error::from(e))
        }
    });
    futures::future::try_join_all(sends).await
}

/// A projector serving its metrics, and where.
fn projector(stack: &TestStack) -> Result<(ChildGuard, String)> {
    let listen = free_address()?;
    Ok((
        spawn_projector_with(stack, &["--listen", &listen])?,
        format!("http://{listen}/metrics"),
    ))
}

/// How many dead letters the projector at `metrics` found already sent (0 before the first).
async fn already_sent(metrics: &str) -> Result<f64> {
    let text = reqwest::get(metrics).await?.text().await?;
    Ok(text
        .lines()
        .find(|l| l.starts_with("sessionlog_projector_dead_letters_already_sent_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0))
}

/// The dead letters' origin offsets, with how often each was sent.
async fn origins(stack: &TestStack) -> Result<BTreeMap<i64, usize>> {
    let mut counts = BTreeMap::new();
    for headers in dead_letters(stack).await? {
        if let Some(offset) = headers
            .get("sessionlog.origin.offset")
            .and_then(|o| o.parse::<i64>().ok())
        {
            *counts.entry(offset).or_default() += 1;
        }
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_projector_killed_while_dead_lettering_sends_none_twice() -> Result<()> {
    let stack = TestStack::new("dlqcrash", 1).await?;
    let mut sent = Vec::new();
    let mut found_again = 0.0;
    for round in 0..3 {
        sent.extend(send_garbage(&stack, 300).await?);
        let before = origins(&stack).await?.len();
        let (killed, metrics) = projector(&stack)?;
        // Killed as soon as this round's dead letters start arriving: mid-batch.
        wait_for(
            &format!("round {round}'s first dead letters"),
            Duration::from_secs(60),
            || {
                let stack = stack.clone();
                async move { Ok((origins(&stack).await?.len() > before).then_some(())) }
            },
        )
        .await?;
        found_again += already_sent(&metrics).await.unwrap_or(0.0);
        drop(killed); // SIGKILL
    }
    let (mut last, metrics) = projector(&stack)?;
    let counts = wait_for(
        "every record to be dead-lettered",
        Duration::from_secs(120),
        || {
            let stack = stack.clone();
            let wanted = sent.len();
            async move {
                let counts = origins(&stack).await?;
                Ok((counts.len() >= wanted).then_some(counts))
            }
        },
    )
    .await?;
    found_again += already_sent(&metrics).await?;
    last.assert_running()?;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(twice.is_empty(), "dead-lettered more than once: {twice:?}");
    for offset in &sent {
        ensure!(
            counts.contains_key(offset),
            "offset {offset} was never dead-lettered"
        );
    }
    // The kills did land between a dead letter and its batch's progress: the restarted
    // projectors found dead letters already there and left them.
    ensure!(
        found_again > 0.0,
        "no restart found a dead letter already sent: the kills missed the window"
    );
    Ok(())
}
