//! Creating the session-events topic, its dead-letter topic and its lease topic, and keeping
//! their retention as the settings say.
//!
//! Here: creating the topics and comparing their retention with the settings (`init`). The
//! admin client's describing, altering and deleting of topics is in `admin`; checking a
//! topic as the cluster has it against what is wanted (the pinned partition count,
//! `sessionlog doctor`) in `check`.

mod admin;
mod check;

pub use admin::delete_topics;
use admin::{admin_client, admin_options, alter_topic, check_each, describe_topic};
pub use check::{
    TopicCheck, TopicFinding, TopicLayout, check_topics, partition_count, pinned_partitions,
    topic_findings, unpinned,
};

use crate::settings::{RetentionSettings, UNLIMITED};
use crate::{Error, KafkaSettings, Result};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Creates the session-events and dead-letter topics if they do not exist, with unlimited
/// retention, and waits until every partition has a leader: for tests and benchmarks, which
/// own their topics. `sessionlog init` uses [`init_topics`], which also applies `[retention]`.
pub async fn ensure_topics(settings: &KafkaSettings) -> Result<()> {
    init_topics(settings, &RetentionSettings::default(), false)
        .await
        .map(drop)
}

/// What [`init_topics`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TopicReport {
    /// Topics it created, with the wanted configuration.
    pub created: Vec<String>,
    /// Configuration of existing topics that differs from the settings and was left as it is
    /// (without `apply`).
    pub differences: Vec<ConfigDifference>,
    /// Configuration it changed to what the settings want (with `apply`).
    pub changed: Vec<ConfigDifference>,
}

/// One topic configuration value that differs from what the settings want.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigDifference {
    /// The topic.
    pub topic: String,
    /// The configuration key, e.g. `retention.ms`.
    pub key: String,
    /// Its value on the cluster (`None`: the broker did not report it).
    pub actual: Option<String>,
    /// The value the settings want.
    pub wanted: String,
    /// The setting that wants it, e.g. `retention.retention_ms`.
    pub setting: &'static str,
}

impl ConfigDifference {
    /// The Kafka command that changes this value and nothing else (an incremental change);
    /// `sessionlog init --apply` does the same.
    pub fn fix_command(&self, bootstrap: &str) -> String {
        add_config_command(bootstrap, &self.topic, &self.key, &self.wanted)
    }
}

impl std::fmt::Display for ConfigDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "topic {}: {} is {}, the settings want {} ({})",
            self.topic,
            self.key,
            self.actual.as_deref().unwrap_or("not reported"),
            self.wanted,
            self.setting
        )
    }
}

/// One configuration value `init` wants on a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedConfig {
    /// The configuration key, e.g. `retention.ms`.
    pub key: &'static str,
    /// The value the settings want.
    pub value: String,
    /// The setting it comes from, e.g. `retention.retention_ms`.
    pub setting: &'static str,
}

impl WantedConfig {
    fn new(key: &'static str, value: i64, setting: &'static str) -> Self {
        Self {
            key,
            value: value.to_string(),
            setting,
        }
    }
}

/// The configuration `init` wants on each topic, from the settings: the retention keys the
/// existing topics are compared on, by topic, with the setting each comes from.
pub fn wanted_configs(
    kafka: &KafkaSettings,
    retention: &RetentionSettings,
) -> Vec<(String, Vec<WantedConfig>)> {
    vec![
        (
            kafka.topic.clone(),
            vec![
                WantedConfig::new(
                    "retention.ms",
                    retention.retention_ms,
                    "retention.retention_ms",
                ),
                WantedConfig::new(
                    "retention.bytes",
                    retention.retention_bytes,
                    "retention.retention_bytes",
                ),
            ],
        ),
        (
            kafka.dead_letter_topic.clone(),
            vec![
                WantedConfig::new(
                    "retention.ms",
                    retention.dead_letter_retention_ms,
                    "retention.dead_letter_retention_ms",
                ),
                WantedConfig::new(
                    "retention.bytes",
                    UNLIMITED,
                    "(not a setting: dead letters are bounded by time only)",
                ),
            ],
        ),
        // Compacted, not retained by time or size: compaction keeps each session's latest.
        (kafka.lease_topic(), Vec::new()),
        (
            kafka.wake_topic(),
            vec![WantedConfig::new(
                "retention.ms",
                retention.wake_retention_ms,
                "retention.wake_retention_ms",
            )],
        ),
    ]
}

/// The `cleanup.policy` a topic of `kafka` must have: `delete` for history (compaction would
/// delete events), `compact` for the lease topic (a session's latest lease is all it needs).
pub fn cleanup_policy(kafka: &KafkaSettings, topic: &str) -> &'static str {
    if topic == kafka.lease_topic() {
        "compact"
    } else {
        "delete"
    }
}

/// Configuration the lease topic is created with besides its policy: a segment rolled every
/// minute, so the cleaner can compact all but the last minute's renewals and a reader of one
/// session's lease reads about one record per session of its partition
/// ([`crate::lease::read_lease`]).
const LEASE_TOPIC_CONFIGS: [(&str, &str); 1] = [("segment.ms", "60000")];

/// Whether a reported value equals the wanted one: numbers are compared as numbers.
fn same_value(actual: Option<&str>, wanted: &str) -> bool {
    match (actual.map(str::trim), wanted) {
        (Some(a), w) if a == w => true,
        (Some(a), w) => matches!((a.parse::<i64>(), w.parse::<i64>()), (Ok(a), Ok(w)) if a == w),
        (None, _) => false,
    }
}

/// The differences between `configs` (key to value, as a topic's description reports them)
/// and what `wanted` asks of `topic`.
pub fn differences(
    topic: &str,
    configs: &BTreeMap<String, Option<String>>,
    wanted: &[WantedConfig],
) -> Vec<ConfigDifference> {
    wanted
        .iter()
        .filter_map(|want| {
            let actual = configs.get(want.key).cloned().flatten();
            (!same_value(actual.as_deref(), &want.value)).then(|| ConfigDifference {
                topic: topic.to_string(),
                key: want.key.to_string(),
                actual,
                wanted: want.value.clone(),
                setting: want.setting,
            })
        })
        .collect()
}

/// Creates the session-events and dead-letter topics if they do not exist, with
/// `cleanup.policy=delete` (never compaction: history is append-only) and the retention of
/// `retention`, and the lease topic, compacted, with as many partitions as the events topic, and waits until every partition has a leader. For a topic that already
/// exists, it reads the topic's configuration and reports each retention value that differs
/// from the settings; with `apply`, it changes those values (and only those) and reports them
/// as changed.
pub async fn init_topics(
    settings: &KafkaSettings,
    retention: &RetentionSettings,
    apply: bool,
) -> Result<TopicReport> {
    let admin = admin_client(settings)?;
    let min_isr = settings.min_insync_replicas.to_string();
    let wanted = wanted_configs(settings, retention);
    let topics: Vec<NewTopic<'_>> = wanted
        .iter()
        .map(|(name, configs)| {
            let topic = NewTopic::new(
                name,
                settings.partitions,
                TopicReplication::Fixed(settings.replication_factor),
            )
            .set("cleanup.policy", cleanup_policy(settings, name))
            .set("min.insync.replicas", &min_isr);
            let topic = if *name == settings.lease_topic() {
                LEASE_TOPIC_CONFIGS
                    .iter()
                    .fold(topic, |topic, (key, value)| topic.set(key, value))
            } else {
                topic
            };
            configs
                .iter()
                .fold(topic, |topic, want| topic.set(want.key, &want.value))
        })
        .collect();
    let results = admin
        .create_topics(&topics, &admin_options())
        .await
        .map_err(Error::kafka("create topics"))?;
    let mut report = TopicReport {
        created: results.iter().flatten().cloned().collect(),
        ..TopicReport::default()
    };
    check_each(results, RDKafkaErrorCode::TopicAlreadyExists, "created")?;
    for (name, _) in &wanted {
        wait_for_leaders(settings, name, Duration::from_secs(60)).await?;
    }
    for (name, configs) in &wanted {
        if report.created.contains(name) {
            continue;
        }
        let current = describe_topic(&admin, name).await?;
        let values = current
            .iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        let found = differences(name, &values, configs);
        if found.is_empty() {
            continue;
        }
        if apply {
            alter_topic(&admin, name, &current, &found).await?;
            report.changed.extend(found);
        } else {
            report.differences.extend(found);
        }
    }
    Ok(report)
}

/// The Kafka command that sets one configuration value of a topic, leaving the others.
pub fn add_config_command(bootstrap: &str, topic: &str, key: &str, value: &str) -> String {
    format!(
        "kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics \
         --entity-name {topic} --add-config {key}={value}"
    )
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

/// Waits until every partition of `topic` has a leader, for at most `limit`.
pub(crate) async fn wait_for_leaders(
    settings: &KafkaSettings,
    topic: &str,
    limit: Duration,
) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn described(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_string())))
            .collect()
    }

    #[test]
    fn every_retention_value_that_differs_is_reported_with_its_fix() {
        let kafka = KafkaSettings::default();
        let retention = RetentionSettings {
            retention_ms: 86_400_000,
            dead_letter_retention_ms: 604_800_000,
            ..RetentionSettings::default()
        };
        let wanted = wanted_configs(&kafka, &retention);
        let (topic, configs) = &wanted[0];
        assert_eq!(topic, "session-events");
        let found = differences(
            topic,
            &described(&[("retention.ms", "-1"), ("retention.bytes", "-1")]),
            configs,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        let diff = &found[0];
        assert_eq!(
            (
                diff.key.as_str(),
                diff.actual.as_deref(),
                diff.wanted.as_str()
            ),
            ("retention.ms", Some("-1"), "86400000")
        );
        assert_eq!(
            diff.to_string(),
            "topic session-events: retention.ms is -1, the settings want 86400000 \
             (retention.retention_ms)"
        );
        assert_eq!(
            diff.fix_command("broker:9092"),
            "kafka-configs.sh --bootstrap-server broker:9092 --alter --entity-type topics \
             --entity-name session-events --add-config retention.ms=86400000"
        );

        let (dlq, configs) = &wanted[1];
        let found = differences(
            dlq,
            &described(&[("retention.ms", "-1"), ("retention.bytes", "1000")]),
            configs,
        );
        let keys: Vec<&str> = found.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["retention.ms", "retention.bytes"]);
        assert!(found.iter().all(|d| &d.topic == dlq));
    }

    #[test]
    fn equal_numbers_are_not_differences_and_a_missing_key_is() {
        let wanted = [WantedConfig::new(
            "retention.ms",
            -1,
            "retention.retention_ms",
        )];
        assert!(differences("t", &described(&[("retention.ms", " -1")]), &wanted).is_empty());
        let missing = differences("t", &BTreeMap::new(), &wanted);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].to_string().contains("not reported"));
    }
}
