//! The admin client's calls on topics: describing a topic's configuration, changing it
//! (keeping what is set), and deleting topics.

use super::ConfigDifference;
use crate::{Error, KafkaSettings, Result};
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, OwnedResourceSpecifier, ResourceSpecifier,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// A topic's configuration: every key with its value and whether it is set on the topic
/// itself (not inherited from the broker or the defaults).
pub(super) async fn describe_topic(
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
pub(super) async fn alter_topic(
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

pub(super) fn admin_client(settings: &KafkaSettings) -> Result<AdminClient<DefaultClientContext>> {
    settings
        .client_config()
        .create()
        .map_err(Error::kafka("create admin client"))
}

pub(super) fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

/// The first topic the admin call failed for, unless its failure was `already_done` (the topic
/// is already as asked).
pub(super) fn check_each(
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
