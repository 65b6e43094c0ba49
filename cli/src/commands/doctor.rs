//! `sessionlog doctor`: the settings as this process resolves them (each value with where it
//! came from, secrets redacted), every server they name asked directly (each Kafka bootstrap
//! address and broker, the registry, each CQL contact point and node, the OTLP receiver when
//! one is named) with what it runs, the topics against `[retention]` and `[kafka]`, the
//! keyspaces, and this host's clock against each broker's.
//!
//! The facts come from the libraries (`log::cluster` and `log::topic` for Kafka,
//! `SchemaRegistry::about`, `store::nodes`, `export::probe`); this module judges them and
//! prints them. It changes nothing, except that the clock probe appends a few records to a
//! topic of its own (created once, an hour's retention; `--no-clock` skips it).

use crate::args::Globals;
use crate::exit;
use crate::output::Output;
use anyhow::{Result, anyhow};
use serde::Serialize;
use sessionlog_log::cluster::{self, ApiVersionRange, BrokerClock};
use sessionlog_log::topic::{self, TopicCheck};
use sessionlog_log::{Resolution, ResolvedSetting, SettingSource, Settings};
use sessionlog_store::nodes::{self, KeyspaceReplication};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `doctor` command's arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long each server may take to answer before it counts as unreachable: `10s`,
    /// `500ms` (a bare number is seconds).
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
    /// The largest difference between this host's clock and a broker's that passes.
    #[arg(long, default_value = "1s", value_parser = crate::duration::parse)]
    pub max_clock_skew: Duration,
    /// The topic the clock probe appends to (created with LogAppendTime if missing; default:
    /// `<kafka.topic>-doctor`, under the events topic's name so its ACLs can cover it).
    #[arg(long)]
    pub clock_topic: Option<String>,
    /// Do not measure the brokers' clocks (the probe appends a few records).
    #[arg(long)]
    pub no_clock: bool,
    /// An OTLP/HTTP traces endpoint to check, `/v1/traces` included (what `export-otlp
    /// --endpoint` sends to).
    #[arg(long, env = "SESSIONLOG_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// A header for the OTLP endpoint, `name=value`; repeatable; from the environment
    /// comma-separated. Never printed.
    #[arg(
        long = "otlp-header",
        env = "SESSIONLOG_OTLP_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub otlp_headers: Vec<String>,
}

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
    fn as_str(self) -> &'static str {
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

/// Runs `sessionlog doctor`: prints the report; exits 3 when a server did not answer, 1 when
/// anything else is wrong, 0 when nothing is.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let resolution = Settings::resolve(globals.config.as_deref())?;
    let report = gather(&resolution, &args).await;
    let output = Output::new(&report, human(&report))?;
    let unreachable = report.problems.iter().filter(|p| p.unreachable).count();
    if unreachable > 0 {
        return Ok(output.fail(anyhow::Error::new(exit::Unreachable(format!(
            "{unreachable} server(s) did not answer; each is listed with its fix above"
        )))));
    }
    if !report.healthy {
        return Ok(output.fail(anyhow!(
            "{} problem(s); each is listed with its fix above",
            report.problems.len()
        )));
    }
    Ok(output)
}

/// What one group of checks found.
#[derive(Default)]
struct Found {
    servers: Vec<ServerCheck>,
    topics: Vec<TopicCheck>,
    keyspaces: Vec<KeyspaceCheck>,
    clock: Option<ClockReport>,
    notes: Vec<String>,
    problems: Vec<Problem>,
}

impl Found {
    fn server(
        &mut self,
        server: &'static str,
        role: impl Into<String>,
        address: &str,
    ) -> &mut ServerCheck {
        self.servers.push(ServerCheck {
            server,
            role: role.into(),
            address: address.to_string(),
            status: Status::Ok,
            version: None,
            api_versions: Vec::new(),
        });
        let last = self.servers.len() - 1;
        &mut self.servers[last]
    }

    fn problem(&mut self, check: &'static str, problem: String, fix: String, status: Status) {
        self.problems.push(Problem {
            check,
            problem,
            fix,
            unreachable: status == Status::Unreachable,
        });
    }

    /// Records the problem `error` is (the server did not answer, or answered wrongly, as the
    /// exit status reads errors) and marks the server added last with it.
    fn server_failed(
        &mut self,
        check: &'static str,
        error: &anyhow::Error,
        problem: String,
        fix: String,
    ) {
        let status = status_of(error);
        if let Some(last) = self.servers.last_mut() {
            last.status = status;
        }
        self.problem(check, problem, fix, status);
    }

    fn merge(&mut self, other: Found) {
        self.servers.extend(other.servers);
        self.topics.extend(other.topics);
        self.keyspaces.extend(other.keyspaces);
        self.clock = self.clock.take().or(other.clock);
        self.notes.extend(other.notes);
        self.problems.extend(other.problems);
    }
}

async fn gather(resolution: &Resolution, args: &Args) -> Report {
    let (kafka, registry, cql, otlp) = tokio::join!(
        kafka_checks(resolution, args),
        registry_checks(resolution, args),
        cql_checks(resolution, args),
        otlp_checks(args),
    );
    let mut found = Found::default();
    for part in [kafka, registry, cql, otlp] {
        found.merge(part);
    }
    Report {
        settings_file: resolution.file.clone(),
        settings: resolution.values.clone(),
        servers: found.servers,
        topics: found.topics,
        keyspaces: found.keyspaces,
        clock: found.clock,
        notes: found.notes,
        healthy: found.problems.is_empty(),
        problems: found.problems,
    }
}

/// `ok` unless the error says a server did not answer (as the exit status reads errors).
fn status_of(error: &anyhow::Error) -> Status {
    if exit::code(error) == exit::UNAVAILABLE {
        Status::Unreachable
    } else {
        Status::Failed
    }
}

/// Where to change `key`: the variable or the file that set it, or where it can be set.
fn change(resolution: &Resolution, key: &str) -> String {
    let variable = format!("SESSIONLOG_{}", key.replace('.', "__").to_ascii_uppercase());
    match resolution
        .values
        .iter()
        .find(|v| v.key == key)
        .map(|v| &v.source)
    {
        Some(SettingSource::Env { variable }) => {
            format!("correct {key}, set by the environment variable {variable}")
        }
        Some(SettingSource::File { path }) => {
            format!("correct {key} in {path} (or override it with {variable})")
        }
        _ => format!("set {key} in the settings file or with {variable} (it has its default)"),
    }
}

async fn kafka_checks(resolution: &Resolution, args: &Args) -> Found {
    let settings = &resolution.settings;
    let kafka = &settings.kafka;
    let mut found = Found::default();
    let probe = cluster::probe_cluster(kafka, args.timeout).await;
    let versions: BTreeMap<String, String> = match &probe.brokers {
        Ok(brokers) => brokers
            .iter()
            .map(|b| (b.broker.to_string(), api_summary(&b.api_versions)))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let mut reached = false;
    for answer in probe.bootstrap {
        let line = found.server("kafka", "bootstrap", &answer.address);
        line.version = versions.get(&answer.address).cloned();
        match answer.answer {
            Ok(_) => reached = true,
            Err(e) => {
                let e = anyhow::Error::new(e);
                found.server_failed(
                    "kafka",
                    &e,
                    format!(
                        "Kafka bootstrap address {} did not answer: {e}",
                        answer.address
                    ),
                    format!(
                        "start the broker there, or {}",
                        change(resolution, "kafka.bootstrap")
                    ),
                );
            }
        }
    }
    let brokers = match probe.brokers {
        Ok(brokers) => brokers,
        Err(e) => {
            if reached {
                let e = anyhow::Error::new(e);
                found.problem(
                    "kafka",
                    format!("the cluster's metadata could not be read: {e}"),
                    change(resolution, "kafka.bootstrap"),
                    status_of(&e),
                );
            }
            return found;
        }
    };
    let broker_ids: Vec<i32> = brokers.iter().map(|b| b.broker.id).collect();
    for answer in brokers {
        let id = answer.broker.id;
        let address = answer.broker.to_string();
        let line = found.server("kafka", format!("broker {id}"), &address);
        line.version = Some(api_summary(&answer.api_versions));
        line.api_versions = answer.api_versions;
        let Err(e) = answer.answer else { continue };
        let e = anyhow::Error::new(e);
        if status_of(&e) == Status::Unreachable {
            line.status = Status::Unreachable;
            found.problem(
                "kafka",
                format!("broker {id} advertises {address}, which did not answer from here: {e}"),
                format!(
                    "start broker {id}, or make its advertised.listeners name an address this \
                     host reaches (check DNS and the network to {address})"
                ),
                Status::Unreachable,
            );
        } else {
            // It answered, with a refusal: reachable, which is what is checked here.
            found.notes.push(format!(
                "kafka: broker {id} answered but refused to describe itself: {e} (reading a \
                 broker's configuration needs DescribeConfigs on the cluster)"
            ));
        }
    }
    match topic::check_topics(kafka, &settings.retention).await {
        Ok(checks) => {
            for check in &checks {
                for finding in &check.findings {
                    let mut fix = finding.fix.clone();
                    if let Some(key) = finding.setting
                        && let Some(value) = resolution.values.iter().find(|v| v.key == key)
                    {
                        fix.push_str(&match &value.source {
                            SettingSource::Default => format!(" ({key} has its default)"),
                            source => format!(" ({key} comes from {source})"),
                        });
                    }
                    found.problem("topic", finding.problem.clone(), fix, Status::Failed);
                }
            }
            found.topics = checks;
        }
        Err(e) => {
            let e = anyhow::Error::new(e);
            let status = status_of(&e);
            found.problem(
                "topic",
                format!("the topics could not be described: {e}"),
                "the principal needs Describe and DescribeConfigs on the topics".into(),
                status,
            );
        }
    }
    if args.no_clock {
        found.notes.push("clock: not measured (--no-clock)".into());
        return found;
    }
    let clock_topic = args
        .clock_topic
        .clone()
        .unwrap_or_else(|| format!("{}-doctor", kafka.topic));
    match cluster::broker_clocks(kafka, &clock_topic, args.timeout).await {
        Ok(probe) => {
            let max = i64::try_from(args.max_clock_skew.as_millis()).unwrap_or(i64::MAX);
            for clock in &probe.clocks {
                if let Some(problem) = skew_problem(clock, max) {
                    found.problem(
                        "clock",
                        problem,
                        "synchronise the clocks of this host and the brokers with NTP \
                         (`chronyc tracking` or `timedatectl timesync-status` shows where each \
                         stands); record timestamps, retention and --from-time follow them"
                            .into(),
                        Status::Failed,
                    );
                }
            }
            let measured: Vec<i32> = probe.clocks.iter().map(|c| c.broker).collect();
            let unmeasured: Vec<String> = broker_ids
                .iter()
                .copied()
                .filter(|id| !measured.contains(id))
                .map(|id| id.to_string())
                .collect();
            if !unmeasured.is_empty() {
                found.notes.push(format!(
                    "clock: broker(s) {} lead no partition of {}, so their clocks were not \
                     measured (add partitions to it: kafka-topics.sh --alter --partitions {})",
                    unmeasured.join(", "),
                    probe.topic,
                    broker_ids.len()
                ));
            }
            found.clock = Some(ClockReport {
                topic: probe.topic,
                max_skew_ms: u64::try_from(args.max_clock_skew.as_millis()).unwrap_or(u64::MAX),
                clocks: probe.clocks,
            });
        }
        Err(e) => found.notes.push(format!(
            "clock: not measured: {e} (--clock-topic names a topic with \
             message.timestamp.type=LogAppendTime this principal may write to; --no-clock skips it)"
        )),
    }
    found
}

/// A clock that is off by more than `max_ms` for certain: beyond it even at the near end of
/// the measurement's bound.
fn skew_problem(clock: &BrokerClock, max_ms: i64) -> Option<String> {
    let certain = clock.offset_ms.abs() - clock.uncertainty_ms;
    (certain > max_ms).then(|| {
        let side = if clock.offset_ms > 0 {
            "behind"
        } else {
            "ahead of"
        };
        format!(
            "this host's clock is {} ms (± {} ms) {side} broker {}'s, more than the {max_ms} ms \
             allowed (--max-clock-skew)",
            clock.offset_ms.abs(),
            clock.uncertainty_ms,
            clock.broker
        )
    })
}

/// A broker's ApiVersions answer in a line: how many requests, and the newest versions of the
/// ones every client uses.
fn api_summary(apis: &[ApiVersionRange]) -> String {
    if apis.is_empty() {
        return "unknown (no ApiVersions answer was seen)".into();
    }
    let newest = |name: &str| {
        apis.iter()
            .find(|a| a.api == name)
            .map(|a| format!(" {name} v{}", a.max))
            .unwrap_or_default()
    };
    format!(
        "Kafka protocol: {} APIs;{}{}{}",
        apis.len(),
        newest("Produce"),
        newest("Fetch"),
        newest("Metadata")
    )
}

async fn registry_checks(resolution: &Resolution, args: &Args) -> Found {
    let settings = &resolution.settings.registry;
    let mut found = Found::default();
    let line = found.server("registry", "registry", &settings.url);
    let client = match settings.client() {
        Ok(client) => client,
        Err(e) => {
            line.status = Status::Failed;
            found.problem(
                "registry",
                format!("the registry client cannot be made: {e}"),
                change(resolution, "registry.ca_file"),
                Status::Failed,
            );
            return found;
        }
    };
    let about = tokio::time::timeout(args.timeout, client.about())
        .await
        .map_err(|_| {
            anyhow::Error::new(exit::Unreachable(format!(
                "no answer within {}",
                crate::duration::show(args.timeout)
            )))
        })
        .and_then(|answer| answer.map_err(anyhow::Error::new));
    match about {
        Ok(about) => {
            line.version = Some(about.version.clone().unwrap_or_else(|| {
                "unknown (it answers neither /v1/metadata/version nor Apicurio's system info)"
                    .into()
            }));
            if about.compatibility.is_none() {
                line.status = Status::Failed;
                found.problem(
                    "registry",
                    format!(
                        "{} answers, but not with a Confluent-compatible API (GET /config found \
                         nothing)",
                        settings.url
                    ),
                    format!(
                        "point registry.url at the API's root (Apicurio: \
                         http://HOST:8080/apis/ccompat/v7; Confluent: http://HOST:8081): {}",
                        change(resolution, "registry.url")
                    ),
                    Status::Failed,
                );
            }
        }
        Err(e) => {
            let status = status_of(&e);
            line.status = status;
            let fix = if status == Status::Unreachable {
                format!(
                    "start the registry, or {}",
                    change(resolution, "registry.url")
                )
            } else {
                format!(
                    "{}; or check registry.username, registry.password and \
                     registry.bearer_token",
                    change(resolution, "registry.url")
                )
            };
            found.problem(
                "registry",
                format!("the registry at {}: {e}", settings.url),
                fix,
                status,
            );
        }
    }
    found
}

async fn cql_checks(resolution: &Resolution, args: &Args) -> Found {
    let settings = &resolution.settings;
    let mut found = Found::default();
    let keyspaces = [
        settings.cql.keyspace.as_str(),
        settings.privacy.keyspace.as_str(),
    ];
    let probe = nodes::probe_nodes(&settings.cql, &keyspaces, args.timeout).await;
    let releases: BTreeMap<String, String> = match &probe.nodes {
        Ok(nodes) => nodes
            .iter()
            .filter_map(|n| Some((n.address.clone(), n.release.as_ref().ok()?.clone())))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    for contact in probe.contact_points {
        let line = found.server("cql", "contact point", &contact.address);
        line.version = releases.get(&contact.address).cloned();
        if let Err(e) = contact.answer {
            let e = anyhow::Error::new(e);
            found.server_failed(
                "cql",
                &e,
                format!("CQL contact point {}: {e}", contact.address),
                format!(
                    "start the node there, or {}",
                    change(resolution, "cql.nodes")
                ),
            );
        }
    }
    let Ok(nodes) = probe.nodes else {
        return found;
    };
    let mut per_datacenter = BTreeMap::<String, usize>::new();
    for node in &nodes {
        let dc = node.datacenter.clone().unwrap_or_default();
        *per_datacenter.entry(dc).or_default() += 1;
    }
    for keyspace in &probe.keyspaces {
        let Some(replication) = &keyspace.replication else {
            continue;
        };
        for problem in nodes::replication_problems(&keyspace.keyspace, replication, &per_datacenter)
        {
            found.problem(
                "keyspace",
                problem,
                format!(
                    "ALTER KEYSPACE {} WITH replication = {{'class': 'NetworkTopologyStrategy', \
                     'replication_factor': 3}} (or the node count, if fewer), then `nodetool repair \
                     --full {}` on every node (docs/operations.md, \"Running a cluster\")",
                    keyspace.keyspace, keyspace.keyspace
                ),
                Status::Failed,
            );
        }
    }
    for node in nodes {
        let role = match &node.datacenter {
            Some(dc) => format!("node ({dc})"),
            None => "node".into(),
        };
        let line = found.server("cql", role, &node.address);
        match node.release {
            Ok(release) => line.version = Some(release),
            Err(e) => {
                line.status = Status::Unreachable;
                found.problem(
                    "cql",
                    format!("CQL node {} did not answer: {e}", node.address),
                    format!(
                        "start node {} or check the network to it (the cluster lists it, so \
                         its replicas are not being written)",
                        node.address
                    ),
                    Status::Unreachable,
                );
            }
        }
    }
    let replication = |name: &str| {
        probe
            .keyspaces
            .iter()
            .find(|k| k.keyspace == name)
            .and_then(|k: &KeyspaceReplication| k.replication.clone())
    };
    match super::status::store_health(settings).await {
        Ok(health) => {
            if health.state != "migrated" {
                found.problem(
                    "keyspace",
                    format!(
                        "keyspace {} is {}{}",
                        health.keyspace,
                        health.state,
                        health.detail.map(|d| format!(": {d}")).unwrap_or_default()
                    ),
                    format!(
                        "sessionlog init (or {})",
                        change(resolution, "cql.keyspace")
                    ),
                    Status::Failed,
                );
            }
            found.keyspaces.push(KeyspaceCheck {
                replication: replication(&health.keyspace),
                keyspace: health.keyspace,
                holds: "projections",
                state: health.state,
            });
        }
        Err(e) => {
            let status = status_of(&e);
            found.problem(
                "keyspace",
                format!("keyspace {} could not be read: {e}", settings.cql.keyspace),
                "check the CQL role's permissions on it (cql.username)".into(),
                status,
            );
        }
    }
    let keys = replication(&settings.privacy.keyspace);
    if keys.is_none() {
        found.problem(
            "keyspace",
            format!(
                "the key store keyspace {} does not exist",
                settings.privacy.keyspace
            ),
            format!(
                "sessionlog init (or {})",
                change(resolution, "privacy.keyspace")
            ),
            Status::Failed,
        );
    }
    found.keyspaces.push(KeyspaceCheck {
        keyspace: settings.privacy.keyspace.clone(),
        holds: "keys",
        state: if keys.is_some() { "present" } else { "missing" },
        replication: keys,
    });
    found
}

async fn otlp_checks(args: &Args) -> Found {
    let mut found = Found::default();
    let Some(endpoint) = &args.otlp_endpoint else {
        found
            .notes
            .push("otlp: no receiver named (--otlp-endpoint, SESSIONLOG_OTLP_ENDPOINT)".into());
        return found;
    };
    let line = found.server("otlp", "receiver", endpoint);
    let headers = match crate::args::parse_headers(&args.otlp_headers) {
        Ok(headers) => headers,
        Err(e) => {
            line.status = Status::Failed;
            found.problem(
                "otlp",
                format!("{e}"),
                "correct --otlp-header (or SESSIONLOG_OTLP_HEADERS): name=value".into(),
                Status::Failed,
            );
            return found;
        }
    };
    match sessionlog_export::probe_receiver(endpoint, &headers, args.timeout).await {
        Ok(probe) => {
            line.version =
                Some(probe.version.clone().unwrap_or_else(|| {
                    "unknown (an OTLP receiver need not say what it runs)".into()
                }));
            let (status, fix) = match probe.status {
                200..=299 => (Status::Ok, String::new()),
                401 | 403 => (
                    Status::Failed,
                    "the receiver refused the credentials: correct --otlp-header \
                     (SESSIONLOG_OTLP_HEADERS)"
                        .to_string(),
                ),
                500..=599 => (
                    Status::Unreachable,
                    "the receiver is failing: look at its logs".to_string(),
                ),
                _ => (
                    Status::Failed,
                    "--otlp-endpoint (SESSIONLOG_OTLP_ENDPOINT) must be the receiver's OTLP/HTTP \
                     traces URL, /v1/traces included"
                        .to_string(),
                ),
            };
            line.status = status;
            if status != Status::Ok {
                found.problem(
                    "otlp",
                    format!(
                        "the OTLP receiver at {endpoint} answered an empty export with HTTP {}",
                        probe.status
                    ),
                    fix,
                    status,
                );
            }
        }
        Err(e) => {
            let e = anyhow::Error::new(e);
            found.server_failed(
                "otlp",
                &e,
                format!("{e}"),
                "start the receiver, or correct --otlp-endpoint (SESSIONLOG_OTLP_ENDPOINT)".into(),
            );
        }
    }
    found
}

/// Lines of `rows` under `headers`, each column as wide as its widest cell.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(" ");
        for (cell, width) in cells.iter().zip(&widths) {
            text.push_str(&format!(" {cell:<width$}"));
        }
        text.trim_end().to_string()
    };
    let mut text = line(headers.to_vec());
    for row in rows {
        text.push('\n');
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

fn human(report: &Report) -> String {
    let mut text = format!(
        "settings (file: {})\n",
        report.settings_file.as_deref().unwrap_or("none")
    );
    let settings: Vec<Vec<String>> = report
        .settings
        .iter()
        .map(|s| {
            let value = match &s.value {
                serde_json::Value::String(v) => v.clone(),
                other => other.to_string(),
            };
            vec![s.key.clone(), value, s.source.to_string()]
        })
        .collect();
    text.push_str(&table(&["key", "value", "source"], &settings));
    text.push_str("\n\nservers\n");
    let servers: Vec<Vec<String>> = report
        .servers
        .iter()
        .map(|s| {
            vec![
                s.server.to_string(),
                s.role.clone(),
                s.address.clone(),
                s.status.as_str().to_string(),
                s.version.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    text.push_str(&table(
        &["server", "role", "address", "status", "version"],
        &servers,
    ));
    if !report.topics.is_empty() {
        text.push_str("\n\ntopics\n");
        let config = |t: &TopicCheck, key: &str| {
            t.configs
                .get(key)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "-".into())
        };
        let topics: Vec<Vec<String>> = report
            .topics
            .iter()
            .map(|t| {
                vec![
                    t.topic.clone(),
                    if t.exists {
                        t.partitions.to_string()
                    } else {
                        "missing".into()
                    },
                    t.replication_factor.to_string(),
                    config(t, "retention.ms"),
                    config(t, "retention.bytes"),
                    config(t, "cleanup.policy"),
                    config(t, "min.insync.replicas"),
                ]
            })
            .collect();
        text.push_str(&table(
            &[
                "topic",
                "partitions",
                "replicas",
                "retention.ms",
                "retention.bytes",
                "cleanup.policy",
                "min.insync.replicas",
            ],
            &topics,
        ));
    }
    if !report.keyspaces.is_empty() {
        text.push_str("\n\nkeyspaces\n");
        let keyspaces: Vec<Vec<String>> = report
            .keyspaces
            .iter()
            .map(|k| {
                let replication = k
                    .replication
                    .as_ref()
                    .map(|r| {
                        r.iter()
                            .map(|(key, value)| {
                                let value = value.rsplit('.').next().unwrap_or(value);
                                format!("{key}={value}")
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|| "-".into());
                vec![
                    k.keyspace.clone(),
                    k.holds.to_string(),
                    k.state.to_string(),
                    replication,
                ]
            })
            .collect();
        text.push_str(&table(
            &["keyspace", "holds", "state", "replication"],
            &keyspaces,
        ));
    }
    if let Some(clock) = &report.clock {
        text.push_str(&format!(
            "\n\nclock (broker minus this host, via {}; at most {} ms passes)\n",
            clock.topic, clock.max_skew_ms
        ));
        let clocks: Vec<Vec<String>> = clock
            .clocks
            .iter()
            .map(|c| {
                vec![
                    format!("broker {}", c.broker),
                    format!("{:+} ms", c.offset_ms),
                    format!("± {} ms", c.uncertainty_ms),
                ]
            })
            .collect();
        text.push_str(&table(&["broker", "offset", "bound"], &clocks));
    }
    for note in &report.notes {
        text.push_str(&format!("\n\nnote: {note}"));
    }
    if report.healthy {
        text.push_str("\n\nhealthy");
    } else {
        text.push_str(&format!(
            "\n\nunhealthy: {} problem(s)",
            report.problems.len()
        ));
        for p in &report.problems {
            text.push_str(&format!(
                "\n  [{}] {}\n    fix: {}",
                p.check, p.problem, p.fix
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(offset_ms: i64, uncertainty_ms: i64) -> BrokerClock {
        BrokerClock {
            broker: 1,
            partition: 0,
            offset_ms,
            uncertainty_ms,
        }
    }

    #[test]
    fn only_a_skew_beyond_the_limit_for_certain_is_a_problem() {
        assert_eq!(skew_problem(&clock(900, 5), 1000), None);
        // 1,004 ms ± 5: it may be 999 ms.
        assert_eq!(skew_problem(&clock(1004, 5), 1000), None);
        let ahead = skew_problem(&clock(-1500, 3), 1000).unwrap_or_default();
        assert!(
            ahead.contains("1500 ms (± 3 ms) ahead of broker 1's"),
            "{ahead}"
        );
        let behind = skew_problem(&clock(2500, 3), 1000).unwrap_or_default();
        assert!(behind.contains("behind broker 1's"), "{behind}");
    }

    fn resolution(source: SettingSource) -> Resolution {
        Resolution {
            settings: Settings::default(),
            file: None,
            values: vec![ResolvedSetting {
                key: "registry.url".into(),
                value: serde_json::json!("http://r"),
                secret: false,
                source,
            }],
        }
    }

    #[test]
    fn a_fix_names_where_the_setting_came_from() {
        let env = resolution(SettingSource::Env {
            variable: "SESSIONLOG_REGISTRY__URL".into(),
        });
        assert_eq!(
            change(&env, "registry.url"),
            "correct registry.url, set by the environment variable SESSIONLOG_REGISTRY__URL"
        );
        let file = resolution(SettingSource::File {
            path: "/etc/sessionlog.toml".into(),
        });
        assert!(
            change(&file, "registry.url")
                .starts_with("correct registry.url in /etc/sessionlog.toml")
        );
        let default = resolution(SettingSource::Default);
        assert!(change(&default, "registry.url").contains("SESSIONLOG_REGISTRY__URL"));
    }

    #[test]
    fn the_table_aligns_columns_to_the_widest_cell() {
        let text = table(
            &["key", "value"],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "2".into()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["  key    value", "  a      1", "  longer 2"]);
    }

    #[test]
    fn the_api_summary_names_the_requests_every_client_uses() {
        let api = |name: &str, key: i16, max: i16| ApiVersionRange {
            api: name.into(),
            key,
            min: 0,
            max,
        };
        assert_eq!(
            api_summary(&[
                api("Produce", 0, 12),
                api("Fetch", 1, 17),
                api("Metadata", 3, 13)
            ]),
            "Kafka protocol: 3 APIs; Produce v12 Fetch v17 Metadata v13"
        );
        assert!(api_summary(&[]).starts_with("unknown"));
    }
}
