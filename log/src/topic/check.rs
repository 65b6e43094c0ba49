//! A topic as the cluster has it, against what sessionlog and the settings want: the
//! partition count sessions are pinned to (checked at start), and the findings of
//! `sessionlog doctor`, each with its fix.

use super::admin::{admin_client, describe_topic};
use super::{
    WantedConfig, add_config_command, cleanup_policy, differences, join_error, metadata_client,
    wanted_configs,
};
use crate::settings::RetentionSettings;
use crate::{Error, KafkaSettings, Result};
use rdkafka::consumer::Consumer;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Number of partitions of `topic`, from the cluster's metadata.
pub async fn partition_count(settings: &KafkaSettings, topic: &str) -> Result<i32> {
    match topic_layout(settings, topic).await? {
        (0, _) => Err(Error::TopicMismatch {
            topic: topic.to_string(),
            problem: "does not exist (run `sessionlog init`)".into(),
        }),
        (partitions, _) => Ok(partitions),
    }
}

/// The partition count sessions are placed by: `[kafka] partitions`, which must be the count
/// the topic has (the one `sessionlog init` created it with).
///
/// A session's partition is `murmur2(id) % count` and producers name it explicitly, so a
/// session never moves while a process runs, whatever happens to the topic. A topic whose
/// live count differs from the setting is refused at start: either the setting is wrong (and
/// every session would be looked for on the wrong partition), or partitions were added to the
/// topic (and sessions placed by the old count would move). Partitions cannot be added to a
/// topic in use.
pub async fn pinned_partitions(settings: &KafkaSettings) -> Result<i32> {
    let live = partition_count(settings, &settings.topic).await?;
    match unpinned(live, settings.partitions) {
        None => Ok(live),
        Some(problem) => Err(Error::TopicMismatch {
            topic: settings.topic.clone(),
            problem,
        }),
    }
}

/// What is wrong when the events topic has `live` partitions and `[kafka] partitions` pins
/// `pinned` (see [`pinned_partitions`]); `None` when they agree.
pub fn unpinned(live: i32, pinned: i32) -> Option<String> {
    if live == pinned {
        return None;
    }
    let why = if live > pinned {
        "if partitions were added to the topic, sessions written before were placed by the \
         old count and would move: partitions cannot be added to a topic in use (create a new \
         topic and move sessions to it by replay)"
    } else {
        "sessions would be looked for on partitions the topic does not have"
    };
    Some(format!(
        "has {live} partitions but [kafka] partitions (SESSIONLOG_KAFKA__PARTITIONS) pins \
         {pinned}: every component places sessions by the pinned count, which must be the \
         count the topic was created with; if the topic was created with {live}, set it to \
         {live}; {why}"
    ))
}

/// A topic as the cluster has it, and what about it differs from what sessionlog and the
/// settings want (`sessionlog doctor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicCheck {
    /// The topic.
    pub topic: String,
    /// Whether the cluster has it.
    pub exists: bool,
    /// Its partitions.
    pub partitions: i32,
    /// The fewest replicas any of its partitions has.
    pub replication_factor: i32,
    /// The configuration values checked, as the brokers report them.
    pub configs: BTreeMap<String, Option<String>>,
    /// What differs, each with its fix.
    pub findings: Vec<TopicFinding>,
}

/// Something about a topic that differs from what is wanted, and what fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicFinding {
    /// The topic.
    pub topic: String,
    /// What differs.
    pub problem: String,
    /// The command or setting that fixes it.
    pub fix: String,
    /// The setting involved (`retention.retention_ms`, `kafka.partitions`, ...), if one is.
    pub setting: Option<&'static str>,
}

/// The configuration keys [`check_topics`] reports.
const CHECKED_CONFIGS: [&str; 5] = [
    "retention.ms",
    "retention.bytes",
    "cleanup.policy",
    "min.insync.replicas",
    "message.timestamp.type",
];

/// Describes the events and dead-letter topics (partitions, replicas, configuration) and
/// judges them with [`topic_findings`]. Changes nothing.
pub async fn check_topics(
    settings: &KafkaSettings,
    retention: &RetentionSettings,
) -> Result<Vec<TopicCheck>> {
    let admin = admin_client(settings)?;
    let mut checks = Vec::new();
    for (name, wanted) in wanted_configs(settings, retention) {
        let (partitions, replication_factor) = topic_layout(settings, &name).await?;
        let exists = partitions > 0;
        let configs = if exists {
            let described = describe_topic(&admin, &name).await?;
            CHECKED_CONFIGS
                .iter()
                .map(|key| {
                    let value = described.get(*key).and_then(|(v, _)| v.clone());
                    (key.to_string(), value)
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let layout = TopicLayout {
            exists,
            partitions,
            replication_factor,
            // The lease and wake topics are partitioned as the events topic is (see `lease`).
            events: name == settings.topic
                || name == settings.lease_topic()
                || name == settings.wake_topic(),
        };
        checks.push(TopicCheck {
            findings: topic_findings(settings, &name, &layout, &configs, &wanted),
            topic: name,
            exists,
            partitions,
            replication_factor,
            configs,
        });
    }
    Ok(checks)
}

/// A topic's partitions and the fewest replicas any has (0, 0: the topic does not exist).
async fn topic_layout(settings: &KafkaSettings, topic: &str) -> Result<(i32, i32)> {
    let settings = settings.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = metadata_client(&settings)?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(Error::kafka("fetch metadata"))?;
        let Some(t) = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
        else {
            return Ok((0, 0));
        };
        let partitions = i32::try_from(t.partitions().len()).unwrap_or(i32::MAX);
        let replicas = t
            .partitions()
            .iter()
            .map(|p| i32::try_from(p.replicas().len()).unwrap_or(i32::MAX))
            .min()
            .unwrap_or(0);
        Ok((partitions, replicas))
    })
    .await
    .unwrap_or_else(|e| Err(join_error(e)))
}

/// What [`topic_findings`] needs to know of a topic besides its configuration.
#[derive(Clone, Copy, Debug)]
pub struct TopicLayout {
    /// Whether the cluster has it.
    pub exists: bool,
    /// Its partitions.
    pub partitions: i32,
    /// The fewest replicas any partition has.
    pub replication_factor: i32,
    /// Whether it is the events topic or its lease topic (whose partition count is pinned).
    pub events: bool,
}

/// What differs between a topic and what sessionlog and the settings want: it exists; its
/// retention is `[retention]`'s (as `init` compares it); `cleanup.policy=delete` (compaction
/// would delete history); `min.insync.replicas` as set, and at most its replicas (or no
/// `acks=all` write succeeds); at least `kafka.replication_factor` replicas; and, for the
/// events topic, the pinned partition count.
pub fn topic_findings(
    settings: &KafkaSettings,
    topic: &str,
    layout: &TopicLayout,
    configs: &BTreeMap<String, Option<String>>,
    wanted: &[WantedConfig],
) -> Vec<TopicFinding> {
    let finding = |problem: String, fix: String, setting: Option<&'static str>| TopicFinding {
        topic: topic.to_string(),
        problem,
        fix,
        setting,
    };
    let bootstrap = settings.bootstrap.as_str();
    if !layout.exists {
        return vec![finding(
            format!("topic {topic} does not exist"),
            "sessionlog init (or name the existing topics in kafka.topic and \
             kafka.dead_letter_topic)"
                .into(),
            Some(if topic == settings.dead_letter_topic {
                "kafka.dead_letter_topic"
            } else {
                "kafka.topic"
            }),
        )];
    }
    let mut found: Vec<TopicFinding> = differences(topic, configs, wanted)
        .into_iter()
        .map(|d| {
            finding(
                d.to_string(),
                format!("sessionlog init --apply, or {}", d.fix_command(bootstrap)),
                Some(d.setting),
            )
        })
        .collect();
    let value = |key: &str| configs.get(key).cloned().flatten();
    let policy_wanted = cleanup_policy(settings, topic);
    if let Some(policy) = value("cleanup.policy")
        && policy.trim() != policy_wanted
    {
        let why = if policy_wanted == "delete" {
            "history is append-only and compaction would delete events, so it must be delete"
        } else {
            "it holds each session's latest lease and must be compacted to stay small"
        };
        found.push(finding(
            format!("topic {topic}: cleanup.policy is {policy}; {why}"),
            add_config_command(bootstrap, topic, "cleanup.policy", policy_wanted),
            None,
        ));
    }
    let min_isr = value("min.insync.replicas").and_then(|v| v.trim().parse::<i32>().ok());
    if let Some(min_isr) = min_isr {
        if min_isr != settings.min_insync_replicas {
            found.push(finding(
                format!(
                    "topic {topic}: min.insync.replicas is {min_isr}, the settings want {} \
                     (kafka.min_insync_replicas)",
                    settings.min_insync_replicas
                ),
                format!(
                    "{}, or set kafka.min_insync_replicas to {min_isr}",
                    add_config_command(
                        bootstrap,
                        topic,
                        "min.insync.replicas",
                        &settings.min_insync_replicas.to_string()
                    )
                ),
                Some("kafka.min_insync_replicas"),
            ));
        }
        if min_isr > layout.replication_factor {
            found.push(finding(
                format!(
                    "topic {topic}: min.insync.replicas {min_isr} exceeds its {} replica(s), so \
                     no write with acks=all can succeed",
                    layout.replication_factor
                ),
                add_config_command(
                    bootstrap,
                    topic,
                    "min.insync.replicas",
                    &layout.replication_factor.to_string(),
                ),
                None,
            ));
        }
    }
    if layout.replication_factor < settings.replication_factor {
        found.push(finding(
            format!(
                "topic {topic}: a partition has {} replica(s), fewer than \
                 kafka.replication_factor {}",
                layout.replication_factor, settings.replication_factor
            ),
            format!(
                "add replicas with kafka-reassign-partitions.sh --bootstrap-server {bootstrap} \
                 (a plan with {} replicas per partition of {topic}), or lower \
                 kafka.replication_factor",
                settings.replication_factor
            ),
            Some("kafka.replication_factor"),
        ));
    }
    if layout.events
        && let Some(problem) = unpinned(layout.partitions, settings.partitions)
    {
        found.push(finding(
            format!("topic {topic} {problem}"),
            format!("set kafka.partitions to {}", layout.partitions),
            Some("kafka.partitions"),
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic::tests::described;

    fn layout(partitions: i32, replication_factor: i32) -> TopicLayout {
        TopicLayout {
            exists: true,
            partitions,
            replication_factor,
            events: true,
        }
    }

    /// The findings on the events topic described as `pairs` with `layout`.
    fn events_findings(
        kafka: &KafkaSettings,
        retention: &RetentionSettings,
        pairs: &[(&str, &str)],
        layout: TopicLayout,
    ) -> Vec<TopicFinding> {
        let wanted = wanted_configs(kafka, retention);
        topic_findings(
            kafka,
            &wanted[0].0,
            &layout,
            &described(pairs),
            &wanted[0].1,
        )
    }

    #[test]
    fn a_topic_as_init_creates_it_has_no_findings() {
        let found = events_findings(
            &KafkaSettings::default(),
            &RetentionSettings::default(),
            &[
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
                ("cleanup.policy", "delete"),
                ("min.insync.replicas", "1"),
            ],
            layout(6, 1),
        );
        assert_eq!(found, Vec::new());
    }

    #[test]
    fn each_way_a_topic_differs_is_a_finding_naming_its_fix() {
        let kafka = KafkaSettings {
            replication_factor: 3,
            min_insync_replicas: 2,
            ..KafkaSettings::default()
        };
        let retention = RetentionSettings {
            retention_ms: 86_400_000,
            ..RetentionSettings::default()
        };
        let found = events_findings(
            &kafka,
            &retention,
            &[
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
                ("cleanup.policy", "compact"),
                ("min.insync.replicas", "2"),
            ],
            layout(4, 1),
        );
        let problems: Vec<&str> = found.iter().map(|f| f.problem.as_str()).collect();
        assert_eq!(found.len(), 5, "{problems:#?}");
        assert!(problems[0].contains("retention.ms is -1, the settings want 86400000"));
        assert!(
            found[0]
                .fix
                .starts_with("sessionlog init --apply, or kafka-configs.sh")
        );
        assert!(found[0].fix.ends_with("--add-config retention.ms=86400000"));
        assert_eq!(found[0].setting, Some("retention.retention_ms"));
        assert!(problems[1].contains("cleanup.policy is compact"));
        assert!(found[1].fix.ends_with("--add-config cleanup.policy=delete"));
        assert!(problems[2].contains("min.insync.replicas 2 exceeds its 1 replica(s)"));
        assert!(problems[3].contains("fewer than kafka.replication_factor 3"));
        assert!(problems[4].contains("has 4 partitions but [kafka] partitions"));
        assert_eq!(found[4].fix, "set kafka.partitions to 4");

        // The dead-letter topic's partitions are not pinned; a missing topic is one finding.
        let dlq = TopicLayout {
            events: false,
            ..layout(4, 3)
        };
        assert!(
            topic_findings(
                &kafka,
                "dlq",
                &dlq,
                &described(&[("retention.ms", "-1")]),
                &[]
            )
            .is_empty()
        );
        let missing = TopicLayout {
            exists: false,
            ..layout(0, 0)
        };
        let found = topic_findings(&kafka, "gone", &missing, &BTreeMap::new(), &[]);
        assert_eq!(found.len(), 1);
        assert!(found[0].fix.starts_with("sessionlog init"));
    }
}
