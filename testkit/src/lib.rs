//! The harness the integration tests (`sessionlog-tests`) and the benchmarks
//! (`sessionlog-benches`) share: each test or run gets its own topic, keyspace and consumer
//! group on the real stack ([`TestStack`], [`stack::isolate`]), so they run side by side without
//! seeing each other; each process they serve reads its settings from one file written from
//! the run's settings ([`served`]); tokens come from one key per process ([`auth`]).
//!
//! The stack's addresses come from the environment `scripts/stack up` writes to
//! `.stack/stack.env` (the test script exports it); defaults point at the local stack.

pub mod auth;
pub mod ingest;
pub mod producer;
pub mod projector;
pub mod recovery;
pub mod served;
pub mod stack;
pub mod traces;
pub mod wake;

pub use served::{ChildGuard, free_address, sessionlog_bin};
pub use stack::TestStack;

use anyhow::{Context, Result, bail, ensure};
use std::path::PathBuf;

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

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Polls `probe` (every 100 ms) until it yields a value or `limit` passes; the error names
/// `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    wait_for_every(what, limit, Duration::from_millis(100), probe).await
}

/// [`wait_for`] polling every `every`: finer for a benchmark that times what it waits for.
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut probe: F,
) -> Result<T>
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
        tokio::time::sleep(every).await;
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

/// Waits (up to a minute) until the service at `base` answers `/health/ready` with 200.
pub async fn wait_ready(http: &reqwest::Client, base: &str) -> Result<()> {
    let ready = format!("{base}/health/ready");
    wait_for(
        &format!("{base} to be ready"),
        Duration::from_secs(60),
        || async {
            Ok(http
                .get(&ready)
                .send()
                .await?
                .status()
                .is_success()
                .then_some(()))
        },
    )
    .await
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
    ///
    /// The port is free when chosen but released before the service binds it, so another
    /// process (an outgoing connection's ephemeral port, say) can take it in between; a service
    /// that exits before answering is tried again on a fresh port, twice at most.
    pub async fn start(stack: &TestStack, command: &str) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_at(stack, command, &free_address()?).await {
                Err(e) if attempt < 3 && e.downcast_ref::<ExitedEarly>().is_some() => {
                    eprintln!("retrying `sessionlog {command}` on another port: {e:#}");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// `sessionlog <command>` listening on `listen` (`host:port`): to restart a service where
    /// its clients expect it. Fails at once, with [`ExitedEarly`], if the process exits before
    /// its `/health` answers. Run it with other settings by changing a clone's
    /// [`TestStack::settings`] (default access: `settings.auth = AuthSettings::default()`).
    pub async fn start_at(stack: &TestStack, command: &str, listen: &str) -> Result<Self> {
        let mut spawn = stack.command(&[command, "--listen", listen])?;
        spawn.stdout(std::process::Stdio::null());
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
