//! Shared set-up for the integration tests: each test gets its own topic, keyspace and
//! consumer group on the real stack, so tests run in parallel without seeing each other.
//!
//! The stack's addresses come from the environment `scripts/stack up` writes to
//! `.stack/stack.env` (the test script exports it); defaults point at the local stack.

pub mod auth;

pub mod ingest;

pub mod producer;

pub mod projector;

pub mod recovery;
pub mod traces;
pub mod wake;

use anyhow::{Context, Result, bail, ensure};
use sessionlog_log::{Settings, topic};
use sessionlog_schemas::value_subject;
use std::path::PathBuf;
use std::process::Child;

/// The texts of `window`'s turns as a reader with the session's data key sees them (the
/// projection keeps sealed texts sealed); a turn whose text does not open is left out.
pub async fn opened_texts(
    log: &sessionlog_producer::EventLog,
    session: sessionlog_schemas::SessionId,
    window: &sessionlog_session::context::ContextWindow,
) -> Result<Vec<String>> {
    let opener = match log.keyring() {
        Some(keyring) => keyring.opener(session).await?,
        None => sessionlog_keys::Opener::without_keys(session),
    };
    Ok(window
        .recent
        .iter()
        .filter_map(|turn| {
            let opened = turn.sealed_text.as_ref().map(|t| opener.text(t));
            let readable = opened.as_ref().and_then(|t| t.readable());
            turn.clone()
                .with_opened(readable, window.policy.turn_text_chars)
                .text
        })
        .collect())
}
use std::time::{Duration, Instant};

/// One test's private corner of the stack.
#[derive(Clone)]
pub struct TestStack {
    /// Settings naming the test's own topic, dead-letter topic and keyspace.
    pub settings: Settings,
    /// A consumer group unique to the test.
    pub group: String,
}

impl TestStack {
    /// Creates a topic of `partitions` partitions, registers the schemas and creates a fresh
    /// keyspace, all unique to this test run: what `sessionlog init` does. (Readers such as
    /// recovery only open an existing keyspace; they never create one.)
    pub async fn new(name: &str, partitions: i32) -> Result<Self> {
        let mut settings = Settings::load(None).context("loading settings from the environment")?;
        let run = uuid::Uuid::now_v7().simple().to_string();
        let tag = format!("{name}_{}", &run[run.len() - 8..]);
        // Names under the prefixes the secure stack's ACLs grant the services (topics
        // `session-events*`, groups `sessionlog-*`), so the same tests run on both tiers.
        settings.kafka.topic = format!("session-events-t-{tag}");
        settings.kafka.dead_letter_topic = format!("session-events-t-{tag}-dlq");
        settings.kafka.partitions = partitions;
        settings.cql.keyspace = format!("t_{tag}");
        settings.auth = auth::settings()?;
        settings.recovery.signing_key_file = Some(auth::signing_key_file()?);
        settings.privacy.kek_file = Some(auth::kek_file()?);
        topic::ensure_topics(&settings.kafka)
            .await
            .with_context(|| {
                format!(
                    "creating test topics on {} (is the stack up? `scripts/stack up`)",
                    settings.kafka.bootstrap
                )
            })?;
        settings
            .registry
            .client()?
            .register_all_versions(&value_subject(&settings.kafka.topic))
            .await
            .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
        sessionlog_store::ProjectionStore::migrate(&settings.cql)
            .await
            .with_context(|| format!("creating keyspace {}", settings.cql.keyspace))?;
        sessionlog_store::KeyTable::create(&settings)
            .await
            .with_context(|| format!("creating keyspace {}", settings.privacy.keyspace))?;
        Ok(Self {
            settings,
            group: format!("sessionlog-t-{tag}"),
        })
    }

    /// Environment variables that point a `sessionlog` process at this test's corner.
    pub fn env(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let mut env = context_env(&s.context);
        env.extend([
            (
                "SESSIONLOG_KAFKA__BOOTSTRAP".into(),
                s.kafka.bootstrap.clone(),
            ),
            ("SESSIONLOG_KAFKA__TOPIC".into(), s.kafka.topic.clone()),
            (
                "SESSIONLOG_KAFKA__PARTITIONS".into(),
                s.kafka.partitions.to_string(),
            ),
            (
                "SESSIONLOG_KAFKA__DEAD_LETTER_TOPIC".into(),
                s.kafka.dead_letter_topic.clone(),
            ),
            ("SESSIONLOG_REGISTRY__URL".into(), s.registry.url.clone()),
            ("SESSIONLOG_CQL__NODES".into(), s.cql.nodes.clone()),
            ("SESSIONLOG_CQL__KEYSPACE".into(), s.cql.keyspace.clone()),
            (
                "SESSIONLOG_AUTH__JWKS_FILE".into(),
                s.auth.jwks_file.clone().unwrap_or_default(),
            ),
            (
                "SESSIONLOG_RECOVERY__SIGNING_KEY_FILE".into(),
                s.recovery.signing_key_file.clone().unwrap_or_default(),
            ),
            (
                "SESSIONLOG_PRIVACY__KEK_FILE".into(),
                s.privacy.kek_file.clone().unwrap_or_default(),
            ),
            (
                "SESSIONLOG_LEASE__TTL_MS".into(),
                s.lease.ttl_ms.to_string(),
            ),
            (
                "SESSIONLOG_RECOVERY__WORK_AGENTS_PER_TENANT".into(),
                s.recovery.work_agents_per_tenant.to_string(),
            ),
        ]);
        let mcp = &s.recovery.mcp;
        let set = |name: &str, value: Option<String>| value.map(|v| (name.to_string(), v));
        env.extend(
            [
                set("SESSIONLOG_RECOVERY__MCP__URL", mcp.url.clone()),
                set(
                    "SESSIONLOG_RECOVERY__MCP__TOKEN_KEY_FILE",
                    mcp.token_key_file.clone(),
                ),
                set(
                    "SESSIONLOG_RECOVERY__MCP__TOKEN_TTL_SECS",
                    mcp.token_ttl_secs.map(|t| t.to_string()),
                ),
            ]
            .into_iter()
            .flatten(),
        );
        env
    }

    /// Runs the `sessionlog` binary with `args` in this test's corner (no settings file) and
    /// waits for it to exit.
    pub fn sessionlog(&self, args: &[&str]) -> Result<std::process::Output> {
        std::process::Command::new(sessionlog_bin()?)
            .args(args)
            .envs(self.env())
            .env("SESSIONLOG_CONFIG", "/dev/null")
            .output()
            .with_context(|| format!("running sessionlog {args:?}"))
    }

    /// Starts `sessionlog project` as a separate process in this test's consumer group.
    pub fn spawn_projector(&self) -> Result<ChildGuard> {
        projector::spawn_projector_with(self, &[])
    }
}

/// Kills its process when dropped, so a failing test leaves nothing running.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Fails if the process already exited (it should still be serving).
    pub fn assert_running(&mut self) -> Result<()> {
        if let Some(status) = self.0.try_wait()? {
            bail!("process exited early with {status}");
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The built `sessionlog` binary: `$SESSIONLOG_BIN`, else next to the test executable's
/// target directory (`scripts/test` builds it before running the tests).
pub fn sessionlog_bin() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("SESSIONLOG_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> -> target/<profile>/sessionlog
    let candidate = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("sessionlog"))
        .context("locating the target directory")?;
    if !candidate.exists() {
        bail!(
            "{} not found: build it first with `cargo build -p sessionlog-cli` (scripts/test does)",
            candidate.display()
        );
    }
    Ok(candidate)
}

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Polls `probe` until it yields a value or `limit` passes; the error names `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + limit;
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() > deadline {
            bail!(
                "timed out after {}s waiting for {what}{}",
                limit.as_secs(),
                last_error
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The python of the venv `scripts/python-env` manages (confluent-kafka, openapi-spec-validator).
pub fn python_env() -> Result<String> {
    let out = std::process::Command::new(repo_root().join("scripts/python-env"))
        .output()
        .context("running scripts/python-env")?;
    if !out.status.success() {
        bail!(
            "scripts/python-env failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// A service's `/metrics` page (Prometheus text).
pub async fn metrics_page(http: &reqwest::Client, base: &str) -> Result<String> {
    Ok(http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// The value of the series `series` (a name, with its labels if it has any:
/// `name{label="v"}`) on a Prometheus text page; `None` when the page has no such line.
pub fn metric_value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// `127.0.0.1:<port>` with a port free now: bind :0, read it, release it for a service.
pub fn free_address() -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// A `sessionlog` HTTP service running as its own process on a free port of this test.
pub struct ServedProcess {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The process, killed when this is dropped.
    pub process: ChildGuard,
}

impl ServedProcess {
    /// Runs `sessionlog <command> --listen 127.0.0.1:<free port>` in `stack`'s corner and waits
    /// (up to 60 s) until its `/health` answers 200.
    pub async fn start(stack: &TestStack, command: &str) -> Result<Self> {
        Self::start_without(stack, command, &[]).await
    }

    /// [`Self::start`] with the variables `unset` removed from the service's environment
    /// (e.g. `SESSIONLOG_AUTH__JWKS_FILE`, to run it with default access settings).
    ///
    /// The port is free when chosen but released before the service binds it, so another
    /// process (an outgoing connection's ephemeral port, say) can take it in between; a service
    /// that exits before answering is tried again on a fresh port, twice at most.
    pub async fn start_without(stack: &TestStack, command: &str, unset: &[&str]) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_at(stack, command, &free_address()?, unset).await {
                Err(e) if attempt < 3 && e.downcast_ref::<ExitedEarly>().is_some() => {
                    eprintln!("retrying `sessionlog {command}` on another port: {e:#}");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// [`Self::start_without`] listening on `listen` (`host:port`): to restart a service where
    /// its clients expect it. Fails at once, with [`ExitedEarly`], if the process exits before
    /// its `/health` answers.
    pub async fn start_at(
        stack: &TestStack,
        command: &str,
        listen: &str,
        unset: &[&str],
    ) -> Result<Self> {
        let mut spawn = std::process::Command::new(sessionlog_bin()?);
        spawn
            .args([command, "--listen", listen])
            .envs(stack.env())
            .env("SESSIONLOG_CONFIG", "/dev/null")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        for name in unset {
            spawn.env_remove(name);
        }
        let mut process = ChildGuard(
            spawn
                .spawn()
                .with_context(|| format!("spawning `sessionlog {command}`"))?,
        );
        let base = format!("http://{listen}");
        let health = format!("{base}/health");
        // A service that accepted but never answers must not hold a probe past the deadline.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let exited = wait_for(
            &format!("`sessionlog {command}` to answer /health"),
            Duration::from_secs(60),
            || {
                let exited = process.0.try_wait();
                let request = http.get(&health).send();
                async move {
                    if let Some(status) = exited? {
                        return Ok(Some(Some(status)));
                    }
                    Ok((request.await?.status() == 200).then_some(None))
                }
            },
        )
        .await?;
        if let Some(status) = exited {
            return Err(anyhow::Error::new(ExitedEarly(status)).context(format!(
                "`sessionlog {command} --listen {listen}` stopped before answering /health \
                 (its log is above)"
            )));
        }
        Ok(Self { base, process })
    }
}

/// A served process exited before it answered `/health`.
#[derive(Debug, thiserror::Error)]
#[error("the process exited with {0}")]
pub struct ExitedEarly(pub std::process::ExitStatus);

/// `[context]` as settings variables (`SESSIONLOG_CONTEXT__AGENTS__NAME__RECENT_TURNS=4`),
/// every policy field spelled out; agent names are lowercase (figment lowercases keys).
fn context_env(policies: &sessionlog_session::context::ContextPolicies) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if *policies == Default::default() {
        return env;
    }
    let named = std::iter::once(("DEFAULT".to_string(), &policies.default)).chain(
        policies
            .agents
            .iter()
            .map(|(agent, p)| (format!("AGENTS__{}", agent.to_uppercase()), p)),
    );
    for (prefix, policy) in named {
        let fields = serde_json::to_value(policy).unwrap_or_default();
        for (field, value) in fields.as_object().into_iter().flatten() {
            env.push((
                format!("SESSIONLOG_CONTEXT__{prefix}__{}", field.to_uppercase()),
                value.to_string(),
            ));
        }
    }
    env
}

/// Every page of a range read, following the cursor; fails if a page holds more than its limit.
pub async fn all_pages(
    recovery: &sessionlog_recovery::Recovery,
    session: sessionlog_schemas::SessionId,
    range: sessionlog_recovery::EventRange,
) -> Result<Vec<sessionlog_recovery::EventPage>> {
    let limit = usize::try_from(range.limit.unwrap_or(100))?;
    let mut pages: Vec<sessionlog_recovery::EventPage> = Vec::new();
    let mut cursor = None;
    loop {
        let page = recovery
            .events(
                session,
                sessionlog_recovery::EventRange {
                    cursor: cursor.take(),
                    ..range.clone()
                },
            )
            .await?;
        ensure!(page.events.len() <= limit, "a page over its limit");
        cursor = page.next_cursor.clone();
        pages.push(page);
        if cursor.is_none() {
            return Ok(pages);
        }
        ensure!(pages.len() < 10_000, "the cursor never ends");
    }
}
