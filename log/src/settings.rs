//! Deployment settings: defaults that work against the local stack (`scripts/stack up`),
//! overridden by a TOML file, overridden by `SESSIONLOG_*` environment variables
//! (`__` separates sections: `SESSIONLOG_KAFKA__BOOTSTRAP=broker:9092`).

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Everything a sessionlog process needs to find its servers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// The Kafka cluster and the session-events topic.
    pub kafka: KafkaSettings,
    /// The schema registry.
    pub registry: RegistrySettings,
    /// The CQL store (ScyllaDB, or Cassandra).
    pub cql: CqlSettings,
}

/// The Kafka cluster and topics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KafkaSettings {
    /// Bootstrap servers, comma-separated.
    pub bootstrap: String,
    /// The session-events topic.
    pub topic: String,
    /// Where undecodable or unfoldable records go, with their reason.
    pub dead_letter_topic: String,
    /// Partitions of the topic when our tooling creates it.
    pub partitions: i32,
    /// Replication factor of the topic when our tooling creates it (3 in production).
    pub replication_factor: i32,
    /// `min.insync.replicas` of the topic (2 in production, with `acks=all`).
    pub min_insync_replicas: i32,
    /// Extra librdkafka properties for every client, applied last.
    pub librdkafka: BTreeMap<String, String>,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        Self {
            bootstrap: "127.0.0.1:9092".into(),
            topic: "session-events".into(),
            dead_letter_topic: "session-events-dlq".into(),
            partitions: 6,
            replication_factor: 1,
            min_insync_replicas: 1,
            librdkafka: BTreeMap::new(),
        }
    }
}

impl KafkaSettings {
    /// A client configuration with the bootstrap servers and the pass-through properties.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (key, value) in &self.librdkafka {
            config.set(key, value);
        }
        config
    }

    /// A producer configuration: durable (`acks=all`, idempotent) and partitioning like Kafka's
    /// own clients. Pass-through properties still win.
    pub fn producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            // Java, Python and Go clients hash keys with murmur2; librdkafka's default differs.
            // murmur2 keeps a session on the partition every client (and recovery) expects.
            .set("partitioner", "murmur2_random");
        for (key, value) in &self.librdkafka {
            config.set(key, value);
        }
        config
    }
}

/// The schema registry (Confluent-compatible API).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RegistrySettings {
    /// Base URL of the Confluent-compatible API.
    pub url: String,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8081/apis/ccompat/v7".into(),
        }
    }
}

/// The CQL store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CqlSettings {
    /// Contact points, comma-separated `host:port`.
    pub nodes: String,
    /// The keyspace holding the projections.
    pub keyspace: String,
    /// Replication factor of the keyspace when our tooling creates it.
    pub replication_factor: u32,
}

impl Default for CqlSettings {
    fn default() -> Self {
        Self {
            nodes: "127.0.0.1:9042".into(),
            keyspace: "sessionlog".into(),
            replication_factor: 1,
        }
    }
}

impl CqlSettings {
    /// The contact points as a list.
    pub fn node_list(&self) -> Vec<String> {
        split_list(&self.nodes)
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// The file read when no other is named: `sessionlog.toml` in the working directory, if present.
pub const DEFAULT_FILE: &str = "sessionlog.toml";

impl Settings {
    /// Defaults, then `file` (or `sessionlog.toml` if it exists, or `$SESSIONLOG_CONFIG`), then the environment.
    pub fn load(file: Option<&Path>) -> crate::Result<Self> {
        let env_file = std::env::var_os("SESSIONLOG_CONFIG").map(std::path::PathBuf::from);
        let file = file.map(Path::to_path_buf).or(env_file);
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        match &file {
            // A file the user named must exist: a typo should not silently mean "defaults".
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None => figment = figment.merge(Toml::file(DEFAULT_FILE)),
        }
        figment
            .merge(Env::prefixed("SESSIONLOG_").split("__"))
            .extract()
            .map_err(|e| crate::Error::Config(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_point_at_the_local_stack() {
        let s = Settings::default();
        assert_eq!(s.kafka.bootstrap, "127.0.0.1:9092");
        assert_eq!(s.kafka.topic, "session-events");
        assert_eq!(s.cql.node_list(), vec!["127.0.0.1:9042".to_string()]);
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn environment_overrides_file_overrides_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("s.toml", "[kafka]\ntopic = \"from-file\"\npartitions = 3\n")?;
            jail.set_env("SESSIONLOG_KAFKA__PARTITIONS", "12");
            jail.set_env("SESSIONLOG_CQL__NODES", "a:9042, b:9042");
            let s = Settings::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(s.kafka.topic, "from-file");
            assert_eq!(s.kafka.partitions, 12);
            assert_eq!(s.cql.node_list(), vec!["a:9042", "b:9042"]);
            Ok(())
        });
    }

    #[test]
    fn a_named_file_that_is_missing_is_an_error() {
        assert!(Settings::load(Some(Path::new("/nonexistent/sessionlog.toml"))).is_err());
    }
}
