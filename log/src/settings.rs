//! Deployment settings: defaults that work against the local stack (`scripts/stack up`),
//! overridden by a TOML file, overridden by `SESSIONLOG_*` environment variables
//! (`__` separates sections: `SESSIONLOG_KAFKA__BOOTSTRAP=broker:9092`).
//!
//! An unknown key is an error that names the key and where it came from: a typo must not
//! silently keep the default. librdkafka properties, whose names contain dots, are set from
//! the environment as `SESSIONLOG_KAFKA__LIBRDKAFKA__<NAME>` with each `_` of `<NAME>` standing
//! for a `.` (`SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_MECHANISMS=SCRAM-SHA-512` sets
//! `sasl.mechanisms`); no settable librdkafka property has an underscore in its name.

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Everything a sessionlog process needs to find its servers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The Kafka cluster and the session-events topic.
    pub kafka: KafkaSettings,
    /// The schema registry.
    pub registry: RegistrySettings,
    /// The CQL store (ScyllaDB, or Cassandra).
    pub cql: CqlSettings,
    /// The projector's consumer group, batching and metrics endpoint.
    pub projector: ProjectorSettings,
    /// How harness processes produce to the session-events topic.
    pub producer: ProducerSettings,
    /// The HTTP ingest service for harnesses not written in Rust.
    pub ingest: IngestSettings,
    /// The recovery service: its HTTP address and the resolvers it may ask.
    pub recovery: RecoverySettings,
    /// Who may call the HTTP services: bearer tokens and API keys, on by default.
    pub auth: AuthSettings,
    /// Encryption of sensitive fields under per-session data keys, on by default.
    pub privacy: PrivacySettings,
    /// How long the log keeps events and the projections keep ended sessions; by default,
    /// forever.
    pub retention: RetentionSettings,
    /// How sessions' context views are built (`[context.default]`, `[context.agents.NAME]`):
    /// turns kept, characters per turn, token budget, what counts as a turn. The projector and
    /// recovery must be given the same policies.
    pub context: sessionlog_session::context::ContextPolicies,
    /// Writer leases (`[lease]`): how long a writer's heartbeat on its session lasts.
    pub lease: LeaseSettings,
    /// The wake component (`[wake]`, `sessionlog wake`).
    pub wake: WakeSettings,
}

/// The wake component (`[wake]`): it writes a wake record when a session needs a harness
/// (see [`crate::wake`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WakeSettings {
    /// A wake no harness answered (no new lease on the session) is written again after this
    /// many milliseconds: a worker that died holding it, or a wake written while no worker of
    /// the agent ran. At least 1,000.
    pub rewake_after_ms: u64,
    /// Where `sessionlog wake` serves `/metrics` and `/health` (`host:port`); empty means not
    /// served.
    pub listen: String,
}

impl Default for WakeSettings {
    fn default() -> Self {
        Self {
            rewake_after_ms: 60_000,
            listen: String::new(),
        }
    }
}

impl WakeSettings {
    /// Checks the re-wake interval is at least a second (a smaller one writes a wake per tick).
    pub fn validate(&self) -> crate::Result<()> {
        if self.rewake_after_ms < 1_000 {
            return Err(crate::Error::BadSetting {
                key: "wake.rewake_after_ms".into(),
                problem: format!("{} is less than 1000 (a second)", self.rewake_after_ms),
            });
        }
        Ok(())
    }
}

/// Writer leases (`[lease]`, docs/design.md "Writer leases"): a writer holding a lease renews
/// it every third of `ttl_ms` in the lease topic (`<kafka.topic>-leases`); one not renewed for
/// `ttl_ms` is no longer live. Liveness only: a lease never lets anyone write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseSettings {
    /// How long a lease lasts after each renewal, in milliseconds; `0` disables leases (no
    /// writer holds one, and no record is written). At most a day.
    pub ttl_ms: u64,
}

/// The longest `[lease] ttl_ms`: a lease is a heartbeat, and a day without one is not liveness.
pub const MAX_LEASE_TTL_MS: u64 = 86_400_000;

impl Default for LeaseSettings {
    fn default() -> Self {
        Self { ttl_ms: 15_000 }
    }
}

impl LeaseSettings {
    /// The TTL, or `None` when leases are off.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        (self.ttl_ms > 0).then(|| std::time::Duration::from_millis(self.ttl_ms))
    }

    /// Checks the TTL is at most [`MAX_LEASE_TTL_MS`].
    pub fn validate(&self) -> crate::Result<()> {
        if self.ttl_ms > MAX_LEASE_TTL_MS {
            return Err(crate::Error::BadSetting {
                key: "lease.ttl_ms".into(),
                problem: format!(
                    "{} is more than {MAX_LEASE_TTL_MS} (a day); 0 turns leases off",
                    self.ttl_ms
                ),
            });
        }
        Ok(())
    }
}

/// Envelope encryption (`[privacy]`). On unless `encrypt = false`: every sensitive field (texts,
/// tool arguments and outputs, titles, reasons, notes) is sealed under its session's data key
/// before it reaches Kafka, and the data keys are kept wrapped by a key-encryption key (KEK) in
/// their own keyspace. A process that writes or reads session content needs the KEK
/// (`sessionlog keys init` makes one); the projector does not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrivacySettings {
    /// Seal sensitive fields. `false` writes them in plain text (and erasure then cannot reach
    /// the topic's copy).
    pub encrypt: bool,
    /// The current key-encryption key: a file holding 32 random bytes, base64 (what
    /// `sessionlog keys init` writes). New data keys are wrapped with it.
    pub kek_file: Option<String>,
    /// The same key inline, base64 (e.g. `SESSIONLOG_PRIVACY__KEK` from a secret store);
    /// wins over `kek_file`.
    pub kek: Secret,
    /// Retired KEKs that may still wrap some data keys, until `sessionlog keys rotate` has
    /// rewrapped them under the current one.
    pub previous_kek_files: Vec<String>,
    /// The keyspace of the data keys and erasure receipts: not a projection, so replays and
    /// `verify` never touch it.
    pub keyspace: String,
    /// How long a process uses the key store's answer about a session's data key, in seconds:
    /// every holder of a key asks the store again before using it once the answer is older,
    /// and drops a destroyed one. After an erasure, another process may open the session's
    /// text or seal with its key for at most this long, also when it cannot reach the store
    /// (its uses of the key then fail with the store's error).
    pub key_cache_secs: u64,
    /// What sealing does with a text field that holds what looks like a secret (a cloud key,
    /// a private key, a token, a password in a connection string): `redact` (the default)
    /// writes it without its text and redacts it at once, `warn` writes it sealed as usual and
    /// says so, `off` does not look.
    pub secret_scan: SecretScanMode,
    /// A deployment's own secret rules, looked for besides the built-in ones
    /// (`[[privacy.secret_rules]]`).
    pub secret_rules: Vec<SecretRuleSettings>,
    /// Ids of built-in secret rules not to look for (a shape this deployment's texts hold by
    /// design).
    pub secret_rules_disabled: Vec<String>,
    /// Seal each field under its own key (the default), so that a redaction destroys exactly
    /// that field's key. `false` seals every field of a session under its one AES key, as
    /// releases before schema v8 did: a redaction then withdraws a field from every reader but
    /// cannot destroy its key, and a secret-scan finding of a writer fenced without knowing it
    /// hides the new writer's field at that seq. It is the reference the throughput benches
    /// compare per-record keys with (`sessionlog-bench producer --key-rounds`), not a setting
    /// to deploy.
    pub per_record_keys: bool,
}

/// What sealing does with a text that holds a secret (`[privacy] secret_scan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretScanMode {
    /// Written without its text, the redaction's reason recorded with the session's key at once;
    /// refused when encryption is off (it could not be sealed).
    #[default]
    Redact,
    /// Written sealed as usual; logged (never the text) and said in the append's answer.
    Warn,
    /// Not looked for.
    Off,
}

/// One secret rule of a deployment's own (`[[privacy.secret_rules]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRuleSettings {
    /// The rule's id, named in answers and in the redaction's reason.
    pub id: String,
    /// A regular expression (the `regex` crate's syntax: matched in linear time); its first
    /// capture group, if it has one, is the secret.
    pub regex: String,
    /// Words one of which must be in the text (case-insensitive) before the expression is
    /// tried; none: always tried.
    #[serde(default)]
    pub keywords: Vec<String>,
}

impl Default for PrivacySettings {
    fn default() -> Self {
        Self {
            encrypt: true,
            kek_file: None,
            kek: Secret::default(),
            previous_kek_files: Vec::new(),
            keyspace: "sessionlog_keys".into(),
            key_cache_secs: 60,
            secret_scan: SecretScanMode::Redact,
            secret_rules: Vec::new(),
            secret_rules_disabled: Vec::new(),
            per_record_keys: true,
        }
    }
}

/// Kafka's value for "no limit" in `retention.ms` and `retention.bytes`.
pub const UNLIMITED: i64 = -1;

/// The longest TTL CQL accepts: 20 years, in seconds (Cassandra and ScyllaDB alike).
pub const MAX_CQL_TTL_SECS: u32 = 630_720_000;

/// Retention (`[retention]`): how long the brokers keep the session-events topic's records
/// and the dead-letter topic's, and whether the projections of ended sessions expire.
///
/// The defaults keep everything forever, as sessionlog always did. `sessionlog init` creates
/// the topics with these values and, on topics that already exist, reports every value that
/// differs (`sessionlog init --apply` changes them). Recovery of a session whose early events
/// retention deleted starts from its last verified checkpoint, so keep checkpointing sessions
/// that live longer than `retention_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// `retention.ms` of the session-events topic: the brokers delete a segment once its
    /// newest record is older than this. `-1` (the default) keeps records forever.
    pub retention_ms: i64,
    /// `retention.bytes` of the session-events topic, per partition: the brokers delete the
    /// oldest segments beyond this size. `-1` (the default) sets no limit.
    pub retention_bytes: i64,
    /// `retention.ms` of the dead-letter topic, which has its own because its records are only
    /// kept for someone to look at why they failed. It holds copies of session events, so it
    /// should not be longer than `retention_ms`. `-1` (the default) keeps them forever.
    pub dead_letter_retention_ms: i64,
    /// `retention.ms` of the wake topic (`<topic>-wake`): a wake is a hint for the workers
    /// running now, so a day (the default) is plenty; a session still without a harness is
    /// listed by `sessionlog sessions --orphaned` and woken again when the wake component
    /// restarts.
    pub wake_retention_ms: i64,
    /// When set, the projector writes every row of a session that has ended (completed,
    /// failed, cancelled or erased) `USING TTL` this many seconds, so its projection expires;
    /// unset (the default), projections stay until a keyspace is dropped. At most
    /// 630,720,000 (20 years), CQL's limit.
    pub ended_session_ttl_secs: Option<u32>,
}

/// A day in milliseconds: the wake topic's default retention.
const DAY_MS: i64 = 86_400_000;

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            retention_ms: UNLIMITED,
            retention_bytes: UNLIMITED,
            dead_letter_retention_ms: UNLIMITED,
            wake_retention_ms: DAY_MS,
            ended_session_ttl_secs: None,
        }
    }
}

impl RetentionSettings {
    /// Checks the values are ones Kafka and CQL accept: each limit `-1` or positive, the TTL
    /// positive and at most CQL's 20 years.
    pub fn validate(&self) -> crate::Result<()> {
        let limits = [
            ("retention_ms", self.retention_ms),
            ("retention_bytes", self.retention_bytes),
            ("dead_letter_retention_ms", self.dead_letter_retention_ms),
            ("wake_retention_ms", self.wake_retention_ms),
        ];
        for (key, value) in limits {
            if value != UNLIMITED && value <= 0 {
                return Err(crate::Error::BadSetting {
                    key: format!("retention.{key}"),
                    problem: format!("{value} is neither -1 (no limit) nor a positive number"),
                });
            }
        }
        if let Some(ttl) = self.ended_session_ttl_secs
            && (ttl == 0 || ttl > MAX_CQL_TTL_SECS)
        {
            return Err(crate::Error::BadSetting {
                key: "retention.ended_session_ttl_secs".into(),
                problem: format!(
                    "{ttl} is not between 1 and {MAX_CQL_TTL_SECS} seconds (leave it unset for no TTL)"
                ),
            });
        }
        Ok(())
    }
}

/// Authentication of the HTTP services (`[auth]`). On unless `mode = "disabled"`: with nothing
/// else set, every API request is refused with 401 until a JWKS or an API key is configured
/// (`sessionlog token init` makes a development key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// `required` (the default), or `disabled`: every caller may do everything, and each
    /// service start logs a warning saying so.
    pub mode: AuthMode,
    /// The `iss` every bearer token must carry.
    pub issuer: String,
    /// The `aud` every bearer token must carry.
    pub audience: String,
    /// A JWKS document (RS256 or ES256 public keys) on disk, read at start.
    pub jwks_file: Option<String>,
    /// A JWKS document served over HTTPS, read at start and again (at most once a minute)
    /// when a token names a key id it does not hold.
    pub jwks_url: Option<String>,
    /// Tolerated clock difference when checking `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// API keys for machines, stored hashed (`sessionlog token api-key` makes one).
    pub api_keys: Vec<ApiKey>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            mode: AuthMode::Required,
            issuer: "sessionlog".into(),
            audience: "sessionlog".into(),
            jwks_file: None,
            jwks_url: None,
            leeway_secs: 30,
            api_keys: Vec::new(),
        }
    }
}

fn default_tenant() -> String {
    "default".into()
}

/// Whether the HTTP services check their callers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Every API request needs a valid bearer token or API key.
    #[default]
    Required,
    /// No checks: only for a trusted network, and logged as a warning at every start.
    Disabled,
}

/// What a caller may do. A token or key carries one or more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs sessions: creates, claims, appends, checkpoints, closes and resumes them.
    Harness,
    /// Decides approvals.
    Approver,
    /// Resolves in-doubt calls, forks, lists stuck sessions.
    Operator,
    /// Reads state, lineage, diffs and ranges of history.
    Reader,
}

impl Role {
    /// Every role, for a caller that may do everything (authentication disabled).
    pub const ALL: [Role; 4] = [Role::Harness, Role::Approver, Role::Operator, Role::Reader];

    /// The role's name as settings and tokens spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Harness => "harness",
            Role::Approver => "approver",
            Role::Operator => "operator",
            Role::Reader => "reader",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == text)
            .ok_or_else(|| format!("{text:?} is not a role: harness, approver, operator or reader"))
    }
}

/// One machine's API key (`[[auth.api_keys]]`), as `sessionlog token api-key` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The key's id: the part of the key after `slk_` and before the next `_`.
    pub id: String,
    /// Hex SHA-256 of the whole key; the key itself is never stored.
    pub sha256: String,
    /// Who the key speaks for, as audit records name it.
    pub subject: String,
    /// The tenant whose sessions it may see and create.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// What it may do.
    pub roles: Vec<Role>,
    /// If set, the key may act on this session only (a UUID).
    #[serde(default)]
    pub session: Option<String>,
}

/// The recovery service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoverySettings {
    /// Where `sessionlog serve-recovery` listens.
    pub listen: String,
    /// Resolvers by tool name: the base URL a tool's service answers
    /// `GET {url}/{idempotency_key}` on (see `recovery::HttpResolver`).
    pub resolvers: BTreeMap<String, String>,
    /// The P-256 private key (PKCS#8 PEM) recovery signs approval decisions and operator
    /// results with; without it those cannot be recorded and no decision verifies, so a
    /// session that waited for one cannot resume (`sessionlog token init` writes one).
    pub signing_key_file: Option<String>,
    /// A JWKS of retired signing keys whose signatures still count (after a rotation).
    pub previous_keys_file: Option<String>,
    /// Resumes a process runs at once, from the rebuild to the claim's answer; more wait their
    /// turn (they do not fail). Each holds its session's state and context window, so this,
    /// not the number of harnesses restarting at once, bounds the memory resumes take.
    pub max_concurrent_resumes: usize,
    /// Agents of one tenant (or of the credentials of every tenant, together) that
    /// `GET /v1/work` waits for wakes for at once on an instance (default 100, at most
    /// [`Self::MAX_WORK_AGENTS`]): one tenant's workers cannot take every agent's place.
    pub work_agents_per_tenant: usize,
    /// The MCP endpoint a resume bundle names, with a reader token for the session
    /// (`[recovery.mcp]`): off unless `url` is set.
    pub mcp: McpAccessSettings,
}

/// What a resume bundle tells the harness about the MCP server over the session's history
/// (`sessionlog mcp`), so it can hand its model the endpoint and a credential for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpAccessSettings {
    /// The endpoint as harnesses reach it (`http://127.0.0.1:8097/mcp`); without it bundles
    /// name no MCP server.
    pub url: Option<String>,
    /// A P-256 private key (PKCS#8 PEM) whose public half is in the JWKS file the MCP server
    /// trusts (its `auth.jwks_file`): recovery signs with it, for each resume, a `reader` token
    /// narrowed to the resumed session. Without it a bundle names the endpoint
    /// only and the harness brings a credential of its own.
    pub token_key_file: Option<String>,
    /// How long such a token is valid, in seconds (default 3,600; 60 to 86,400).
    pub token_ttl_secs: Option<u64>,
}

impl RecoverySettings {
    /// Agents of all tenants together that `GET /v1/work` waits for wakes for at once on an
    /// instance: the bound of `work_agents_per_tenant`.
    pub const MAX_WORK_AGENTS: usize = 10_000;

    /// Checks `work_agents_per_tenant` (1 to [`Self::MAX_WORK_AGENTS`]) and `[recovery.mcp]`.
    pub fn validate(&self) -> crate::Result<()> {
        if !(1..=Self::MAX_WORK_AGENTS).contains(&self.work_agents_per_tenant) {
            return Err(crate::Error::BadSetting {
                key: "recovery.work_agents_per_tenant".into(),
                problem: format!(
                    "{} is not between 1 and {} (the agents of every tenant together)",
                    self.work_agents_per_tenant,
                    Self::MAX_WORK_AGENTS
                ),
            });
        }
        self.mcp.validate()
    }
}

impl McpAccessSettings {
    /// A token lasts 3,600 s unless `token_ttl_secs` says otherwise.
    pub const DEFAULT_TOKEN_TTL_SECS: u64 = 3_600;

    /// How long a minted token lasts.
    pub fn token_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.token_ttl_secs.unwrap_or(Self::DEFAULT_TOKEN_TTL_SECS))
    }

    /// Checks that a token key comes with the endpoint it is for, and the token's lifetime is
    /// between a minute and a day.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |key: &str, problem: String| {
            Err(crate::Error::BadSetting {
                key: key.into(),
                problem,
            })
        };
        if self.url.is_none() && (self.token_key_file.is_some() || self.token_ttl_secs.is_some()) {
            return bad(
                "recovery.mcp.url",
                "is not set, but recovery.mcp names a token key or lifetime: set it to the MCP endpoint harnesses reach (`http://127.0.0.1:8097/mcp`)".into(),
            );
        }
        if let Some(ttl) = self.token_ttl_secs
            && !(60..=86_400).contains(&ttl)
        {
            return bad(
                "recovery.mcp.token_ttl_secs",
                format!("{ttl} is not between 60 (a minute) and 86400 (a day)"),
            );
        }
        Ok(())
    }
}

impl Default for RecoverySettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8095".into(),
            resolvers: BTreeMap::new(),
            signing_key_file: None,
            previous_keys_file: None,
            max_concurrent_resumes: 256,
            work_agents_per_tenant: 100,
            mcp: McpAccessSettings::default(),
        }
    }
}

/// Producer tuning (`[producer]`), with defaults for durability first. `acks=all`, idempotence
/// and the murmur2 partitioner are not settings: they are what keeps a session's order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProducerSettings {
    /// How long librdkafka waits to fill a batch (`linger.ms`).
    pub linger_ms: u32,
    /// Largest batch to one partition, in bytes (`batch.size`).
    pub batch_size: u32,
    /// Largest batch to one partition, in records (`batch.num.messages`).
    pub batch_num_messages: u32,
    /// `lz4` by default; `zstd`, `snappy`, `gzip` or `none`.
    pub compression: String,
    /// Events whose encoded size exceeds this are refused before sending.
    pub max_event_bytes: usize,
    /// Events sent but not yet acknowledged, over every session of the process. Appends beyond
    /// it wait (or fail with a typed error in the non-waiting variant): this bounds memory.
    pub max_in_flight: usize,
    /// How long an event may wait for its ack before it counts as not acknowledged
    /// (`message.timeout.ms`).
    pub delivery_timeout_ms: u64,
    /// Topic readers a process keeps for short reads (a confirmed append's read-back, a
    /// writer's catch-up, a recovery's rebuild). Reads beyond it wait for a reader: each is a
    /// Kafka consumer with its threads and a connection per broker, and up to about 2 MiB of
    /// prefetched records.
    pub readers: usize,
    /// Bytes of recent records the process's tail of the topic keeps, over all partitions
    /// (`0`: no tail). A confirmed append waits for the tail to read its own records and
    /// takes the session's from it instead of reading the partition back; one whose last
    /// confirmed offset the tail no longer holds reads the partition as before.
    pub tail_bytes: usize,
    /// How long a confirmed append waits for the tail to read its records before it answers
    /// that the tail is behind (HTTP 503 with `Retry-After`; the retry is answered as a
    /// duplicate once the tail catches up).
    pub tail_wait_ms: u64,
    /// Bytes a broker gathers for the tail's fetch before answering it (`fetch.min.bytes`),
    /// unless [`Self::tail_fetch_wait_ms`] passes first. Answering every fetch at its first
    /// record made a fetch, on the broker and in the process, per produced batch: under a
    /// fleet's load most of what the brokers spent per confirmed append (docs/performance.md).
    pub tail_fetch_min_bytes: u32,
    /// Longest a broker holds the tail's fetch to gather [`Self::tail_fetch_min_bytes`]
    /// (`fetch.wait.max.ms`): what a confirmation may wait beyond its ack when the topic is
    /// quiet, and how often an idle tail asks each broker.
    pub tail_fetch_wait_ms: u32,
    /// Most records after the projection's position that catching a session up (a claim, a
    /// cold append, a resume) reads from the partition before it answers that the projection
    /// is behind (HTTP 503 `projection_behind`, with the lag). Records the tail holds cost no
    /// read and do not count.
    pub max_unprojected_records: i64,
}

impl ProducerSettings {
    /// [`Self::tail_wait_ms`] as a duration.
    pub fn tail_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.tail_wait_ms)
    }
}

impl Default for ProducerSettings {
    fn default() -> Self {
        Self {
            linger_ms: 5,
            batch_size: 1_000_000,
            batch_num_messages: 10_000,
            compression: "lz4".into(),
            // Kafka's default max.message.bytes is 1 MiB; stay under it with room for headers.
            max_event_bytes: 1_000_000,
            max_in_flight: 10_000,
            delivery_timeout_ms: 120_000,
            // A thousand sessions resuming at once queued behind 16; 64 keep the rebuilds'
            // reads busy without a consumer per session (docs/performance.md).
            readers: 64,
            // About ten seconds of a 6 MB/s fleet: an append confirmed within that finds its
            // session's records in memory.
            tail_bytes: 64 * 1024 * 1024,
            tail_wait_ms: 5_000,
            // Measured with 1,000 sessions over HTTP (docs/performance.md, "Where a confirmed
            // append's CPU goes"): the brokers' CPU per confirmed append fell by about a quarter.
            tail_fetch_min_bytes: 64 * 1024,
            tail_fetch_wait_ms: 10,
            // About half a second of reading on a small machine (38,000 records a second).
            max_unprojected_records: 20_000,
        }
    }
}

/// The HTTP ingest service (`[ingest]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestSettings {
    /// Address to listen on.
    pub listen: String,
    /// Largest request body accepted, in bytes; larger requests get 413.
    pub max_body_bytes: usize,
    /// Most events accepted in one append request (at most the fold's duplicate window, 128,
    /// so that a retried request is recognised as a retry).
    pub max_batch_events: usize,
    /// Sessions whose writer an instance keeps between requests. A session not among them is
    /// caught up from the projection and the log on its next request: a cache, so any number
    /// of sessions can be served, by any instance.
    pub cached_sessions: usize,
}

impl Default for IngestSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8090".into(),
            max_body_bytes: 16 * 1024 * 1024,
            max_batch_events: 128,
            cached_sessions: 10_000,
        }
    }
}

/// How a projector instance consumes and writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectorSettings {
    /// The consumer group; instances in one group share the partitions.
    pub group_id: String,
    /// At most this many records are folded before their writes are flushed and committed.
    pub batch_max: usize,
    /// How long a batch waits for more records once it has one, in milliseconds, when the
    /// previous batch is already written (while it is not, the batch keeps growing).
    pub batch_wait_ms: u64,
    /// Concurrent CQL writes per batch.
    pub write_concurrency: usize,
    /// Sessions kept in memory between batches; beyond it the cache starts over from CQL.
    pub cache_sessions: usize,
    /// Where `/metrics` and `/health` are served (`host:port`); empty means not served.
    pub listen: String,
    /// `/health/ready` answers 503 when the projector has lag and made no batch durable for
    /// this many seconds: a loop that is stuck, not one that is idle.
    pub stall_secs: u64,
    /// This instance's stable name in the group (Kafka static membership, `group.instance.id`),
    /// unique per instance and kept across restarts (a pod or host name). A restarted instance
    /// then takes its partitions back at once, instead of waiting for the group to drop the
    /// member it was before (`session.timeout.ms`, 10 s). Empty: dynamic membership.
    pub instance_id: String,
    /// How many CQL partitions one tenant's day of `trace_spans_by_tenant_day` is spread
    /// over, by session id (1 to 1024). Fixed for a keyspace by its first projector: another value is
    /// refused at start (a span's opening and closing writes must pick the same bucket); a
    /// replay into a fresh keyspace takes a new one.
    pub trace_day_buckets: u16,
}

/// The most buckets a day of spans may be spread over (`[projector] trace_day_buckets`): a
/// read of a day's spans queries each of them.
pub const MAX_TRACE_DAY_BUCKETS: u16 = 1024;

impl ProjectorSettings {
    /// Checks the values a settings file or the environment can get wrong.
    pub fn validate(&self) -> crate::Result<()> {
        if !(1..=MAX_TRACE_DAY_BUCKETS).contains(&self.trace_day_buckets) {
            return Err(crate::Error::BadSetting {
                key: "projector.trace_day_buckets".into(),
                problem: format!(
                    "{} is not between 1 and {MAX_TRACE_DAY_BUCKETS}",
                    self.trace_day_buckets
                ),
            });
        }
        Ok(())
    }
}

impl Default for ProjectorSettings {
    fn default() -> Self {
        Self {
            group_id: "sessionlog-projector".into(),
            batch_max: 5_000,
            batch_wait_ms: 20,
            write_concurrency: 64,
            cache_sessions: 10_000,
            listen: String::new(),
            stall_secs: 60,
            instance_id: String::new(),
            trace_day_buckets: 16,
        }
    }
}

/// The Kafka cluster and topics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// The compacted topic of writer leases: `<topic>-leases`, named after the events topic so
    /// that each events topic (a test's, a benchmark's) has its own, created with it, with the
    /// same partition count (see [`crate::lease`]).
    pub fn lease_topic(&self) -> String {
        format!("{}-leases", self.topic)
    }

    /// The topic of wake records: `<topic>-wake`, named after the events topic and
    /// partitioned as it is (see [`crate::wake`]).
    pub fn wake_topic(&self) -> String {
        format!("{}-wake", self.topic)
    }

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

/// A password or token: read from settings like any string, never shown by `Debug` (settings
/// may be logged), and empty when unset.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the client that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no secret is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

/// The schema registry (Confluent-compatible API).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistrySettings {
    /// Base URL of the Confluent-compatible API.
    pub url: String,
    /// HTTP basic authentication user; empty sends none.
    pub username: String,
    /// HTTP basic authentication password.
    pub password: Secret,
    /// A bearer token, sent instead of basic authentication when set.
    pub bearer_token: Secret,
    /// A PEM file with the CA that signed the registry's certificate (for an `https` URL whose
    /// CA is not in the system's trust store).
    pub ca_file: String,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8081/apis/ccompat/v7".into(),
            username: String::new(),
            password: Secret::default(),
            bearer_token: Secret::default(),
            ca_file: String::new(),
        }
    }
}

impl RegistrySettings {
    /// A registry client with these credentials; no request is made yet.
    pub fn client(&self) -> sessionlog_schemas::Result<sessionlog_schemas::SchemaRegistry> {
        let mut access = sessionlog_schemas::RegistryAccess::default();
        if !self.bearer_token.is_empty() {
            access.credentials = sessionlog_schemas::RegistryCredentials::Bearer(
                self.bearer_token.expose().to_string(),
            );
        } else if !self.username.is_empty() {
            access.credentials = sessionlog_schemas::RegistryCredentials::Basic {
                username: self.username.clone(),
                password: self.password.expose().to_string(),
            };
        }
        if !self.ca_file.is_empty() {
            access.ca_file = Some(self.ca_file.clone().into());
        }
        sessionlog_schemas::SchemaRegistry::with_access(self.url.clone(), access)
    }
}

/// The CQL store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CqlSettings {
    /// Contact points, comma-separated `host:port`.
    pub nodes: String,
    /// The keyspace holding the projections.
    pub keyspace: String,
    /// Replicas per data center of the keyspaces our tooling creates (the projections and the
    /// keys); unset, as many as the smallest data center has nodes, at most 3: 1 on a single
    /// node, 3 on a cluster of three or more. A keyspace that exists keeps its replication.
    pub replication_factor: Option<u32>,
    /// The consistency level of each family of statements (`[cql.consistency]`).
    pub consistency: CqlConsistency,
    /// The CQL role to log in as (`PasswordAuthenticator`); empty logs in as no one.
    pub username: String,
    /// The role's password.
    pub password: Secret,
    /// A PEM file with the CA that signed the nodes' certificates; set, the connection uses TLS
    /// and verifies each node against it.
    pub tls_ca_file: String,
}

impl Default for CqlSettings {
    fn default() -> Self {
        Self {
            nodes: "127.0.0.1:9042".into(),
            keyspace: "sessionlog".into(),
            replication_factor: None,
            consistency: CqlConsistency::default(),
            username: String::new(),
            password: Secret::default(),
            tls_ca_file: String::new(),
        }
    }
}

/// The consistency level of each family of CQL statements. The defaults keep every promise
/// with one node of three down (replication factor 3): a quorum of the local data center is
/// two of three replicas, so what a write acknowledged is on a replica every quorum read asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CqlConsistency {
    /// The projector's writes: the projection rows and, in the same batches, the progress marks
    /// it resumes from.
    pub writes: ConsistencyLevel,
    /// Every read of the projection: recovery's rebuilds, ingest's claims, the commands.
    pub reads: ConsistencyLevel,
    /// The key store's and the session names' plain reads and writes.
    pub keys: ConsistencyLevel,
    /// The conditional writes (lightweight transactions) of the key store and the names, and
    /// the reads that must see them: Paxos among the replicas of the local data center
    /// (`local_serial`) or of every data center (`serial`).
    pub serial: SerialConsistencyLevel,
}

impl Default for CqlConsistency {
    fn default() -> Self {
        Self {
            writes: ConsistencyLevel::LocalQuorum,
            reads: ConsistencyLevel::LocalQuorum,
            keys: ConsistencyLevel::LocalQuorum,
            serial: SerialConsistencyLevel::LocalSerial,
        }
    }
}

/// A CQL consistency level, as the settings spell it (`local_quorum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsistencyLevel {
    /// One replica, any data center.
    One,
    /// One replica of the local data center.
    LocalOne,
    /// A majority of all replicas.
    Quorum,
    /// A majority of the local data center's replicas.
    LocalQuorum,
    /// A majority in every data center.
    EachQuorum,
    /// Every replica: a single node down fails the statement.
    All,
}

/// The consistency of a lightweight transaction's Paxos round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SerialConsistencyLevel {
    /// A majority of all replicas.
    Serial,
    /// A majority of the local data center's replicas.
    LocalSerial,
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

/// Environment variables with this prefix carry librdkafka properties (see the module docs).
pub const LIBRDKAFKA_ENV_PREFIX: &str = "SESSIONLOG_KAFKA__LIBRDKAFKA__";

impl Settings {
    /// Defaults, then `file` (or `sessionlog.toml` if it exists, or `$SESSIONLOG_CONFIG`), then the environment.
    pub fn load(file: Option<&Path>) -> crate::Result<Self> {
        extract(&layers(file))
    }

    /// Like [`Settings::load`], and says where each value came from (`sessionlog doctor`):
    /// the default, the settings file, or the environment variable that set it. Secrets are
    /// redacted in what it returns (see [`is_secret`]).
    pub fn resolve(file: Option<&Path>) -> crate::Result<Resolution> {
        let figment = layers(file);
        let settings = extract(&figment)?;
        let tree = serde_json::to_value(&settings).map_err(|e| crate::Error::BadSetting {
            key: "(all)".into(),
            problem: format!("the settings do not serialise: {e}"),
        })?;
        let env: Vec<(String, String)> = std::env::vars().collect();
        let mut values = Vec::new();
        let mut path = Vec::new();
        walk(&tree, &mut path, &mut |path, value| {
            let secret = is_secret(path);
            let shown = match value {
                serde_json::Value::String(text) if secret && !text.is_empty() => {
                    serde_json::Value::String(REDACTED.into())
                }
                other => other.clone(),
            };
            values.push(ResolvedSetting {
                key: path.join("."),
                value: shown,
                secret,
                source: source_of(&figment, &env, path),
            });
        });
        let file = figment.metadata().find_map(|m| match &m.source {
            Some(figment::Source::File(path)) => Some(path.display().to_string()),
            _ => None,
        });
        Ok(Resolution {
            settings,
            file,
            values,
        })
    }
}

/// The layers settings are read from, later ones winning: defaults, the file, the environment.
fn layers(file: Option<&Path>) -> Figment {
    let env_file = std::env::var_os("SESSIONLOG_CONFIG").map(std::path::PathBuf::from);
    let file = file.map(Path::to_path_buf).or(env_file);
    let figment = Figment::from(Serialized::defaults(Settings::default()));
    let figment = match &file {
        // A file the user named must exist: a typo should not silently mean "defaults".
        Some(path) => figment.merge(Toml::file_exact(path)),
        None => figment.merge(Toml::file(DEFAULT_FILE)),
    };
    // Every setting lives in a section, so a settings variable has a `__`; the other
    // `SESSIONLOG_*` variables (`SESSIONLOG_LOG`, `SESSIONLOG_CONFIG`, the scripts' own) are
    // not settings. librdkafka's are read in `extract`: figment would nest their dots.
    figment.merge(
        Env::prefixed("SESSIONLOG_")
            .filter(|key| {
                key.as_str().contains("__")
                    && !key
                        .as_str()
                        .to_ascii_uppercase()
                        .starts_with("KAFKA__LIBRDKAFKA__")
            })
            .split("__"),
    )
}

/// The settings the layers make, checked.
fn extract(figment: &Figment) -> crate::Result<Settings> {
    let mut settings: Settings = figment
        .extract()
        .map_err(|e| crate::Error::Config(Box::new(e)))?;
    settings.retention.validate()?;
    settings.projector.validate()?;
    settings.lease.validate()?;
    settings.wake.validate()?;
    settings.recovery.validate()?;
    settings
        .context
        .validate()
        .map_err(|problem| crate::Error::BadSetting {
            key: "context".into(),
            problem,
        })?;
    settings
        .kafka
        .librdkafka
        .extend(librdkafka_from_env(std::env::vars()));
    Ok(settings)
}

/// What a secret's value is shown as once it is set.
pub const REDACTED: &str = "<redacted>";

/// Settings the way a process resolved them, and where each value came from.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// The settings themselves (secrets included: for the clients, never for printing).
    pub settings: Settings,
    /// The settings file read, if one was.
    pub file: Option<String>,
    /// Every value, by key in document order, secrets redacted.
    pub values: Vec<ResolvedSetting>,
}

/// One setting's value and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResolvedSetting {
    /// The key, `section.key` (`kafka.librdkafka.security.protocol` for a librdkafka
    /// property, `context.agents.NAME.turns` for a nested one).
    pub key: String,
    /// The value; [`REDACTED`] for a secret that is set.
    pub value: serde_json::Value,
    /// Whether it is a password, token or key, shown redacted.
    pub secret: bool,
    /// Where it came from.
    pub source: SettingSource,
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SettingSource {
    /// The built-in default: nothing set it.
    Default,
    /// A settings file.
    File {
        /// The file's path.
        path: String,
    },
    /// An environment variable.
    Env {
        /// The variable's name.
        variable: String,
    },
}

impl std::fmt::Display for SettingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettingSource::Default => f.write_str("default"),
            SettingSource::File { path } => write!(f, "file {path}"),
            SettingSource::Env { variable } => write!(f, "env {variable}"),
        }
    }
}

/// Whether the setting at `path` holds a secret: a password, a token, a key-encryption key, a
/// private key inline, or a librdkafka property that carries credentials. Judged by name, so
/// a new secret setting must have one of these words in its key (every [`Secret`] does).
pub fn is_secret(path: &[String]) -> bool {
    let Some(key) = path.last().map(|k| k.to_ascii_lowercase()) else {
        return false;
    };
    [
        "password",
        "secret",
        "token",
        "key.pem",
        "jaas.config",
        "oauthbearer.config",
    ]
    .iter()
    .any(|word| key.contains(word))
        || key == "kek"
}

/// Calls `leaf` with the path of every value in `tree` that is not an object with members
/// (arrays and empty maps are values too).
fn walk(
    tree: &serde_json::Value,
    path: &mut Vec<String>,
    leaf: &mut impl FnMut(&[String], &serde_json::Value),
) {
    match tree {
        serde_json::Value::Object(members) if !members.is_empty() => {
            for (key, value) in members {
                path.push(key.clone());
                walk(value, path, leaf);
                path.pop();
            }
        }
        other => leaf(path, other),
    }
}

/// Where the value at `path` came from: a librdkafka variable, else the layer figment took it
/// from.
fn source_of(figment: &Figment, env: &[(String, String)], path: &[String]) -> SettingSource {
    if let [section, map, name] = path
        && section == "kafka"
        && map == "librdkafka"
        && let Some((variable, _)) = env
            .iter()
            .find(|(key, _)| librdkafka_property(key).as_ref() == Some(name))
    {
        return SettingSource::Env {
            variable: variable.clone(),
        };
    }
    let mut value = figment.find_value("").ok();
    for key in path {
        value = value
            .and_then(|v| v.into_dict())
            .and_then(|mut d| d.remove(key));
    }
    let Some(metadata) = value.and_then(|v| figment.get_metadata(v.tag()).cloned()) else {
        return SettingSource::Default;
    };
    match metadata.source {
        Some(figment::Source::File(file)) => SettingSource::File {
            path: file.display().to_string(),
        },
        _ if metadata.name.contains("environment") => {
            // The variable as it was written (figment matches names case-insensitively).
            let canonical = format!("SESSIONLOG_{}", path.join("__")).to_ascii_uppercase();
            let variable = env
                .iter()
                .map(|(key, _)| key)
                .find(|key| key.to_ascii_uppercase() == canonical)
                .cloned()
                .unwrap_or(canonical);
            SettingSource::Env { variable }
        }
        _ => SettingSource::Default,
    }
}

/// The librdkafka properties named by `SESSIONLOG_KAFKA__LIBRDKAFKA__*` variables.
fn librdkafka_from_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.filter_map(|(key, value)| Some((librdkafka_property(&key)?, value)))
        .collect()
}

/// The librdkafka property a `SESSIONLOG_KAFKA__LIBRDKAFKA__*` variable sets, if it is one.
fn librdkafka_property(variable: &str) -> Option<String> {
    let name = variable.strip_prefix(LIBRDKAFKA_ENV_PREFIX)?;
    (!name.is_empty()).then(|| name.to_ascii_lowercase().replace('_', "."))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error and its sources, as an operator sees them printed.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(e) = source {
            text = format!("{text}: {e}");
            source = e.source();
        }
        text
    }

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
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn a_tenants_share_of_work_agents_is_at_least_one_and_at_most_all() {
        figment::Jail::expect_with(|jail| {
            assert_eq!(Settings::default().recovery.work_agents_per_tenant, 100);
            for bad in ["0", "10001"] {
                jail.set_env("SESSIONLOG_RECOVERY__WORK_AGENTS_PER_TENANT", bad);
                let error = chain(&Settings::load(None).expect_err(bad));
                assert!(error.contains("recovery.work_agents_per_tenant"), "{error}");
            }
            jail.set_env("SESSIONLOG_RECOVERY__WORK_AGENTS_PER_TENANT", "10000");
            let s = Settings::load(None).map_err(|e| e.to_string())?;
            assert_eq!(s.recovery.work_agents_per_tenant, 10_000);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn an_mcp_token_key_needs_the_endpoint_and_a_lifetime_within_a_day() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("SESSIONLOG_RECOVERY__MCP__TOKEN_KEY_FILE", "k.pem");
            let error = chain(&Settings::load(None).expect_err("a key without its endpoint"));
            assert!(error.contains("recovery.mcp.url"), "{error}");
            jail.set_env("SESSIONLOG_RECOVERY__MCP__URL", "http://127.0.0.1:8097/mcp");
            let s = Settings::load(None).map_err(|e| e.to_string())?;
            assert_eq!(s.recovery.mcp.token_ttl().as_secs(), 3_600);
            jail.set_env("SESSIONLOG_RECOVERY__MCP__TOKEN_TTL_SECS", "86401");
            let error = chain(&Settings::load(None).expect_err("a token for over a day"));
            assert!(error.contains("token_ttl_secs"), "{error}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn an_unknown_key_in_the_file_is_an_error_naming_the_key_and_the_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("typo.toml", "[kafka]\ntopik = \"t\"\n")?;
            let error = chain(
                &Settings::load(Some(Path::new("typo.toml")))
                    .expect_err("a misspelt key must not keep the default"),
            );
            assert!(error.contains("topik"), "{error}");
            assert!(error.contains("typo.toml"), "{error}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn an_unknown_section_key_in_the_environment_is_an_error_other_variables_are_not() {
        figment::Jail::expect_with(|jail| {
            // Not settings: no section separator.
            jail.set_env("SESSIONLOG_LOG", "debug");
            jail.set_env("SESSIONLOG_KAFKA_BROKERS", "3");
            assert!(Settings::load(None).is_ok());
            jail.set_env("SESSIONLOG_CQL__NODEZ", "a:9042");
            let error = chain(&Settings::load(None).expect_err("typo"));
            assert!(error.contains("nodez"), "{error}");
            assert!(error.contains("SESSIONLOG_"), "{error}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn librdkafka_properties_come_from_the_file_and_the_environment() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "s.toml",
                "[kafka.librdkafka]\n\"security.protocol\" = \"SSL\"\n\"sasl.mechanisms\" = \"PLAIN\"\n",
            )?;
            jail.set_env(
                "SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_MECHANISMS",
                "SCRAM-SHA-512",
            );
            jail.set_env(
                "SESSIONLOG_KAFKA__LIBRDKAFKA__SSL_CA_LOCATION",
                "/etc/ca.pem",
            );
            let s = Settings::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
            let props = &s.kafka.librdkafka;
            assert_eq!(
                props.get("security.protocol").map(String::as_str),
                Some("SSL")
            );
            // The environment wins over the file, as for every other setting.
            assert_eq!(
                props.get("sasl.mechanisms").map(String::as_str),
                Some("SCRAM-SHA-512")
            );
            assert_eq!(
                props.get("ssl.ca.location").map(String::as_str),
                Some("/etc/ca.pem")
            );
            assert_eq!(
                s.kafka.client_config().get("ssl.ca.location"),
                Some("/etc/ca.pem")
            );
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn credentials_come_from_the_environment_and_never_show_in_debug_output() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("SESSIONLOG_REGISTRY__USERNAME", "sessionlog");
            jail.set_env("SESSIONLOG_REGISTRY__PASSWORD", "hunter2-registry");
            jail.set_env("SESSIONLOG_CQL__USERNAME", "sessionlog");
            jail.set_env("SESSIONLOG_CQL__PASSWORD", "hunter2-cql");
            jail.set_env("SESSIONLOG_CQL__TLS_CA_FILE", "/etc/ca.pem");
            let s = Settings::load(None).map_err(|e| e.to_string())?;
            assert_eq!(s.registry.password.expose(), "hunter2-registry");
            assert_eq!(s.cql.password.expose(), "hunter2-cql");
            assert_eq!(s.cql.tls_ca_file, "/etc/ca.pem");
            let shown = format!("{s:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("sessionlog"), "{shown}");
            Ok(())
        });
    }

    #[test]
    fn kafka_clients_are_built_with_tls_and_scram() {
        // librdkafka refuses to create a client whose `builtin.features` names a feature the
        // build lacks: production clusters need both.
        let mut kafka = KafkaSettings {
            bootstrap: "127.0.0.1:1".into(),
            ..KafkaSettings::default()
        };
        for (key, value) in [
            ("builtin.features", "ssl,sasl_scram"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ] {
            kafka.librdkafka.insert(key.into(), value.into());
        }
        let created: Result<rdkafka::producer::BaseProducer, _> = kafka.producer_config().create();
        assert!(created.is_ok(), "{:?}", created.err());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn retention_defaults_to_forever_and_comes_from_the_file_and_the_environment() {
        let defaults = RetentionSettings::default();
        assert_eq!(defaults.retention_ms, UNLIMITED);
        assert_eq!(defaults.retention_bytes, UNLIMITED);
        assert_eq!(defaults.dead_letter_retention_ms, UNLIMITED);
        assert_eq!(defaults.ended_session_ttl_secs, None);
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "s.toml",
                "[retention]\nretention_ms = 86400000\nended_session_ttl_secs = 3600\n",
            )?;
            jail.set_env(
                "SESSIONLOG_RETENTION__DEAD_LETTER_RETENTION_MS",
                "604800000",
            );
            jail.set_env("SESSIONLOG_RETENTION__RETENTION_MS", "172800000");
            let s = Settings::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(s.retention.retention_ms, 172_800_000);
            assert_eq!(s.retention.retention_bytes, UNLIMITED);
            assert_eq!(s.retention.dead_letter_retention_ms, 604_800_000);
            assert_eq!(s.retention.ended_session_ttl_secs, Some(3600));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn a_retention_kafka_or_cql_would_refuse_is_an_error_naming_the_key() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("SESSIONLOG_RETENTION__RETENTION_BYTES", "0");
            let error = chain(&Settings::load(None).expect_err("0 bytes keeps nothing"));
            assert!(error.contains("retention.retention_bytes"), "{error}");
            jail.set_env("SESSIONLOG_RETENTION__RETENTION_BYTES", "-1");
            jail.set_env("SESSIONLOG_RETENTION__ENDED_SESSION_TTL_SECS", "630720001");
            let error = chain(&Settings::load(None).expect_err("beyond CQL's TTL limit"));
            assert!(error.contains("ended_session_ttl_secs"), "{error}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn trace_day_buckets_outside_their_range_are_an_error_naming_the_key() {
        figment::Jail::expect_with(|jail| {
            assert_eq!(
                Settings::load(None)
                    .map_err(|e| e.to_string())?
                    .projector
                    .trace_day_buckets,
                16
            );
            for bad in ["0", "1025"] {
                jail.set_env("SESSIONLOG_PROJECTOR__TRACE_DAY_BUCKETS", bad);
                let error = chain(&Settings::load(None).expect_err("out of range"));
                assert!(error.contains("projector.trace_day_buckets"), "{error}");
            }
            jail.set_env("SESSIONLOG_PROJECTOR__TRACE_DAY_BUCKETS", "64");
            let s = Settings::load(None).map_err(|e| e.to_string())?;
            assert_eq!(s.projector.trace_day_buckets, 64);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn resolve_says_where_each_value_came_from_and_never_shows_a_secret() {
        figment::Jail::expect_with(|jail| {
            // The stack's variables (tests run with them exported) would be sources too.
            jail.clear_env();
            jail.create_file(
                "s.toml",
                "[kafka]\ntopic = \"from-file\"\n[cql]\npassword = \"hunter2-file\"\n\
                 [kafka.librdkafka]\n\"security.protocol\" = \"SSL\"\n",
            )?;
            jail.set_env("SESSIONLOG_REGISTRY__URL", "http://registry:8081");
            jail.set_env("SESSIONLOG_REGISTRY__BEARER_TOKEN", "hunter2-token");
            jail.set_env(
                "SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_PASSWORD",
                "hunter2-sasl",
            );
            let resolved =
                Settings::resolve(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
            let find = |key: &str| {
                resolved
                    .values
                    .iter()
                    .find(|v| v.key == key)
                    .cloned()
                    .ok_or_else(|| format!("{key} not resolved"))
            };
            let file = SettingSource::File {
                path: resolved.file.clone().ok_or("no file")?,
            };
            assert!(
                resolved
                    .file
                    .as_deref()
                    .is_some_and(|f| f.ends_with("s.toml"))
            );
            assert_eq!(find("kafka.topic")?.source, file);
            assert_eq!(find("kafka.topic")?.value, "from-file");
            let url = find("registry.url")?;
            assert_eq!(
                (url.value.as_str(), &url.source),
                (
                    Some("http://registry:8081"),
                    &SettingSource::Env {
                        variable: "SESSIONLOG_REGISTRY__URL".into()
                    }
                )
            );
            assert_eq!(find("kafka.bootstrap")?.source, SettingSource::Default);
            assert_eq!(find("kafka.librdkafka.security.protocol")?.source, file);
            let sasl = find("kafka.librdkafka.sasl.password")?;
            assert!(sasl.secret && sasl.value == REDACTED, "{sasl:?}");
            assert_eq!(
                sasl.source,
                SettingSource::Env {
                    variable: "SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_PASSWORD".into()
                }
            );
            assert_eq!(find("cql.password")?.source, file);
            assert!(find("registry.bearer_token")?.secret);
            // An unset secret shows as empty, not as redacted.
            assert_eq!(find("registry.password")?.value, "");
            let shown = serde_json::to_string(&resolved.values).map_err(|e| e.to_string())?;
            assert!(!shown.contains("hunter2"), "{shown}");
            // The settings themselves keep the secrets for the clients.
            assert_eq!(resolved.settings.cql.password.expose(), "hunter2-file");
            Ok(())
        });
    }

    #[test]
    fn secrets_are_known_by_their_names() {
        let secret = |key: &str| is_secret(&key.split('.').map(String::from).collect::<Vec<_>>());
        for key in [
            "registry.password",
            "registry.bearer_token",
            "cql.password",
            "privacy.kek",
            "kafka.librdkafka.sasl.password",
            "kafka.librdkafka.ssl.key.password",
            "kafka.librdkafka.sasl.oauthbearer.client.secret",
        ] {
            assert!(secret(key), "{key}");
        }
        for key in [
            "registry.url",
            "privacy.kek_file",
            "cql.username",
            "kafka.librdkafka.sasl.username",
        ] {
            assert!(!secret(key), "{key}");
        }
    }

    #[test]
    fn a_named_file_that_is_missing_is_an_error() {
        assert!(Settings::load(Some(Path::new("/nonexistent/sessionlog.toml"))).is_err());
    }
}
