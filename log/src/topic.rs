//! Creating the session-events topic and its dead-letter topic.

use crate::{Error, KafkaSettings, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};

/// Creates the session-events and dead-letter topics if they do not exist, and waits until every
/// partition has a leader. History is append-only: `cleanup.policy=delete` with infinite
/// retention, never compaction.
pub async fn ensure_topics(settings: &KafkaSettings) -> Result<()> {
    let admin = admin_client(settings)?;
    let min_isr = settings.min_insync_replicas.to_string();
    let topics: Vec<NewTopic<'_>> = [&settings.topic, &settings.dead_letter_topic]
        .into_iter()
        .map(|name| {
            NewTopic::new(
                name,
                settings.partitions,
                TopicReplication::Fixed(settings.replication_factor),
            )
            .set("cleanup.policy", "delete")
            .set("retention.ms", "-1")
            .set("retention.bytes", "-1")
            .set("min.insync.replicas", &min_isr)
        })
        .collect();
    let results = admin
        .create_topics(&topics, &admin_options())
        .await
        .map_err(Error::kafka("create topics"))?;
    check_each(results, RDKafkaErrorCode::TopicAlreadyExists, "created")?;
    for name in [&settings.topic, &settings.dead_letter_topic] {
        wait_for_leaders(settings, name, Duration::from_secs(60)).await?;
    }
    Ok(())
}

/// Deletes the session and dead-letter topics of `settings` (a benchmark's or a test's own
/// topics, when it is done with them). A topic that is already gone is not an error.
pub async fn delete_topics(settings: &KafkaSettings) -> Result<()> {
    let names = [settings.topic.as_str(), settings.dead_letter_topic.as_str()];
    let results = admin_client(settings)?
        .delete_topics(&names, &admin_options())
        .await
        .map_err(Error::kafka("delete topics"))?;
    check_each(
        results,
        RDKafkaErrorCode::UnknownTopicOrPartition,
        "deleted",
    )
}

fn admin_client(settings: &KafkaSettings) -> Result<AdminClient<DefaultClientContext>> {
    settings
        .client_config()
        .create()
        .map_err(Error::kafka("create admin client"))
}

fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

/// The first topic the admin call failed for, unless its failure was `already_done` (the topic
/// is already as asked).
fn check_each(
    results: Vec<rdkafka::admin::TopicResult>,
    already_done: RDKafkaErrorCode,
    verb: &str,
) -> Result<()> {
    for result in results {
        match result {
            Ok(_) => {}
            Err((_, code)) if code == already_done => {}
            Err((topic, code)) => {
                return Err(Error::TopicMismatch {
                    topic,
                    problem: format!("could not be {verb}: {code}"),
                });
            }
        }
    }
    Ok(())
}

/// Number of partitions of `topic`, from the cluster's metadata.
pub async fn partition_count(settings: &KafkaSettings, topic: &str) -> Result<i32> {
    let settings = settings.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = metadata_client(&settings)?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(Error::kafka("fetch metadata"))?;
        let t = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .ok_or_else(|| Error::TopicMismatch {
                topic: topic.clone(),
                problem: "does not exist (run `sessionlog init`)".into(),
            })?;
        Ok(t.partitions().len() as i32)
    })
    .await
    .unwrap_or_else(|e| Err(join_error(e)))
}

/// The ids of the brokers the cluster reports as live.
pub async fn live_brokers(settings: &KafkaSettings) -> Result<Vec<i32>> {
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || {
        let consumer = metadata_client(&settings)?;
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(Error::kafka("fetch metadata"))?;
        let mut ids: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
        ids.sort_unstable();
        Ok(ids)
    })
    .await
    .unwrap_or_else(|e| Err(join_error(e)))
}

async fn wait_for_leaders(settings: &KafkaSettings, topic: &str, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let settings = settings.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = metadata_client(&settings)?;
        loop {
            let ready = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    m.topics().iter().find(|t| t.name() == topic).map(|t| {
                        t.error().is_none()
                            && t.partitions().len() as i32 >= settings.partitions.min(1)
                            && t.partitions().iter().all(|p| p.leader() >= 0)
                    })
                })
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("leaders of every partition of {topic}"),
                    seconds: limit.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
    .await
    .unwrap_or_else(|e| Err(join_error(e)))
}

fn metadata_client(settings: &KafkaSettings) -> Result<BaseConsumer> {
    settings
        .client_config()
        .create()
        .map_err(Error::kafka("create metadata client"))
}

fn join_error(e: tokio::task::JoinError) -> Error {
    Error::Task(e.to_string())
}
