//! Creating the session-events topic, its dead-letter topic and its lease topic, and keeping
//! their retention as the settings say.

use crate::settings::{RetentionSettings, UNLIMITED};
use crate::{Error, KafkaSettings, Result};
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewTopic, OwnedResourceSpecifier,
    ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
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

/// A topic's configuration: every key with its value and whether it is set on the topic
/// itself (not inherited from the broker or the defaults).
async fn describe_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<BTreeMap<String, (Option<String>, bool)>> {
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &admin_options())
        .await
        .map_err(Error::kafka("describe topic configs"))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| Error::TopicMismatch {
            topic: topic.to_string(),
            problem: "the brokers returned no configuration for it".into(),
        })?
        .map_err(|code| Error::TopicMismatch {
            topic: topic.to_string(),
            problem: format!(
                "its configuration could not be read: {code} (the principal needs \
                 DescribeConfigs on the topic)"
            ),
        })?;
    Ok(resource
        .entries
        .into_iter()
        .map(|e| {
            let own = e.source == ConfigSource::DynamicTopic;
            (e.name, (e.value, own))
        })
        .collect())
}

/// Sets the values of `changes` on `topic`, keeping every other value set on the topic.
///
/// rdkafka 0.39 wraps only Kafka's non-incremental AlterConfigs, which resets each key it is
/// not given to its default; so the request carries every key set on the topic itself, as just
/// described, with the changed ones replaced. A topic value that changes between the describe
/// and this call is lost; `init` is an operator's command, not something run concurrently with
/// other configuration changes. A sensitive key's value is never described, so it could not be
/// kept: then this changes nothing and says which command does it incrementally.
async fn alter_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    current: &BTreeMap<String, (Option<String>, bool)>,
    changes: &[ConfigDifference],
) -> Result<()> {
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, (value, own)) in current {
        if !own {
            continue;
        }
        match value {
            Some(value) => {
                values.insert(key, value);
            }
            None if changes.iter().any(|c| &c.key == key) => {}
            None => {
                return Err(Error::TopicMismatch {
                    topic: topic.to_string(),
                    problem: format!(
                        "its key {key} is set but not readable, so `init --apply` cannot keep it \
                         while changing retention; run the kafka-configs.sh commands `init` \
                         prints instead"
                    ),
                });
            }
        }
    }
    for change in changes {
        values.insert(&change.key, &change.wanted);
    }
    let alter = values.into_iter().fold(
        AlterConfig::new(ResourceSpecifier::Topic(topic)),
        |a, (k, v)| a.set(k, v),
    );
    let results = admin
        .alter_configs(&[alter], &admin_options())
        .await
        .map_err(Error::kafka("alter topic configs"))?;
    for result in results {
        if let Err((resource, code)) = result {
            let topic = match resource {
                OwnedResourceSpecifier::Topic(name) => name,
                other => format!("{other:?}"),
            };
            return Err(Error::TopicMismatch {
                topic,
                problem: format!(
                    "its configuration could not be changed: {code} (the principal needs \
                     AlterConfigs on the topic)"
                ),
            });
        }
    }
    Ok(())
}

/// Deletes the session, dead-letter, lease and wake topics of `settings` (a benchmark's or a test's own
/// topics, when it is done with them). A topic that is already gone is not an error.
pub async fn delete_topics(settings: &KafkaSettings) -> Result<()> {
    let (leases, wakes) = (settings.lease_topic(), settings.wake_topic());
    let names = [
        settings.topic.as_str(),
        settings.dead_letter_topic.as_str(),
        leases.as_str(),
        wakes.as_str(),
    ];
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

    fn described(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
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
