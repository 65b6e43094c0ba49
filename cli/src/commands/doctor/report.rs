//! What `doctor` reports: the servers, topics, keyspaces and clocks it found, and each problem
//! with its fix.

use serde::Serialize;
use sessionlog_log::ResolvedSetting;
use sessionlog_log::cluster::{ApiVersionRange, BrokerClock};
use sessionlog_log::topic::TopicCheck;
use std::collections::BTreeMap;

/// What `doctor` found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The settings file read, if any.
    pub settings_file: Option<String>,
    /// Every setting, its value (secrets redacted) and where it came from.
    pub settings: Vec<ResolvedSetting>,
    /// Every server asked, with its answer.
    pub servers: Vec<ServerCheck>,
    /// The events and dead-letter topics.
    pub topics: Vec<TopicCheck>,
    /// The projection and key keyspaces.
    pub keyspaces: Vec<KeyspaceCheck>,
    /// This host's clock against each broker's, unless skipped or not measured.
    pub clock: Option<ClockReport>,
    /// What could not be checked, and why (not a failure).
    pub notes: Vec<String>,
    /// Whether nothing is wrong.
    pub healthy: bool,
    /// What is wrong, each with its fix.
    pub problems: Vec<Problem>,
}

/// One server asked directly.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCheck {
    /// `kafka`, `registry`, `cql` or `otlp`.
    pub server: &'static str,
    /// What it is to us: `bootstrap`, `broker 1`, `registry`, `contact point`, `node`, `receiver`.
    pub role: String,
    /// The address asked.
    pub address: String,
    /// `ok`, `failed` (it answered, wrongly) or `unreachable`.
    pub status: Status,
    /// What it runs, when it says.
    pub version: Option<String>,
    /// For a Kafka broker: the requests it serves and their versions (its ApiVersions answer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_versions: Vec<ApiVersionRange>,
}

/// How a server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// As it should.
    Ok,
    /// It answered, but refused us or answered wrongly.
    Failed,
    /// It did not answer.
    Unreachable,
}

impl Status {
    /// How the report's text says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Unreachable => "unreachable",
        }
    }
}

/// A keyspace and its state.
#[derive(Debug, Clone, Serialize)]
pub struct KeyspaceCheck {
    /// The keyspace.
    pub keyspace: String,
    /// What it holds: `projections` or `keys`.
    pub holds: &'static str,
    /// `migrated`, `outdated` or `missing` (projections); `present` or `missing` (keys).
    pub state: &'static str,
    /// Its replication options, as `system_schema` has them.
    pub replication: Option<BTreeMap<String, String>>,
}

/// This host's clock against each broker's.
#[derive(Debug, Clone, Serialize)]
pub struct ClockReport {
    /// The topic the probe records went to.
    pub topic: String,
    /// The largest offset that passes, in milliseconds.
    pub max_skew_ms: u64,
    /// Each broker measured: its clock minus this host's, and the bound on that.
    pub clocks: Vec<BrokerClock>,
}

/// Something wrong and what fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Which check found it (`kafka`, `registry`, `cql`, `otlp`, `topic`, `keyspace`, `clock`).
    pub check: &'static str,
    /// What is wrong.
    pub problem: String,
    /// The command or setting that fixes it.
    pub fix: String,
    /// Whether it is a server that did not answer (exit status 3).
    pub unreachable: bool,
}
