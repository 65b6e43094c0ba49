//! The subcommands. Each is a few calls into the libraries; output is human by default,
//! JSON with `--json`.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde::Serialize;
use sessionlog_log::{Settings, topic};
use sessionlog_producer::{EventLog, ProducerOptions, example};
use sessionlog_projector::worker::ProjectorOptions;
use sessionlog_projector::{ProjectionStore, Projector};
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{SchemaRegistry, SessionId, value_subject};
use sessionlog_session::SessionState;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Durable agent sessions: an append-only Kafka log, projections in CQL, recovery and forks.
#[derive(Debug, Parser)]
#[command(name = "sessionlog", version)]
pub struct Cli {
    /// Settings file (TOML); defaults to ./sessionlog.toml if present. `SESSIONLOG_*`
    /// environment variables override it (`SESSIONLOG_KAFKA__BOOTSTRAP=host:9092`).
    #[arg(long, global = true, env = "SESSIONLOG_CONFIG")]
    config: Option<PathBuf>,
    /// Print JSON instead of human-readable text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the topics, register the schemas (BACKWARD_TRANSITIVE) and migrate the CQL keyspace.
    Init,
    /// Run a projector instance until interrupted.
    Project {
        /// Consumer group; instances in one group share the partitions.
        #[arg(long, default_value = "sessionlog-projector")]
        group: String,
    },
    /// Append the example harness session and print its id and the writer's own fold.
    Example,
    /// Print a session as the projector last wrote it.
    Inspect {
        /// The session id.
        session: String,
        /// Wait (up to --timeout seconds) until the projection reaches this seq.
        #[arg(long)]
        wait_for_seq: Option<u64>,
        /// How long --wait-for-seq waits.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Rebuild a session from the log (from its latest verified checkpoint) and print it.
    Recover {
        /// The session id.
        session: String,
    },
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    let settings = Settings::load(cli.config.as_deref()).context("loading settings")?;
    match cli.command {
        Command::Init => init(&settings, cli.json).await,
        Command::Project { group } => project(&settings, group).await,
        Command::Example => run_example(&settings, cli.json).await,
        Command::Inspect {
            session,
            wait_for_seq,
            timeout,
        } => {
            inspect(
                &settings,
                &parse_session(&session)?,
                wait_for_seq,
                timeout,
                cli.json,
            )
            .await
        }
        Command::Recover { session } => {
            recover(&settings, &parse_session(&session)?, cli.json).await
        }
    }
}

fn parse_session(text: &str) -> Result<SessionId> {
    text.parse().map_err(|_| {
        anyhow::anyhow!(
            "{text:?} is not a session id: expected a UUID such as 0190c6e2-5b7a-7c3e-9f00-1a2b3c4d5e6f \
             (`sessionlog example` prints one)"
        )
    })
}

async fn init(settings: &Settings, json: bool) -> Result<()> {
    topic::ensure_topics(&settings.kafka)
        .await
        .with_context(|| format!("creating topics on {}", settings.kafka.bootstrap))?;
    let registry = SchemaRegistry::new(settings.registry.url.clone())?;
    let schema_id = registry
        .register_all_versions(&value_subject(&settings.kafka.topic))
        .await
        .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
    ProjectionStore::connect(&settings.cql)
        .await
        .with_context(|| format!("migrating CQL keyspace at {}", settings.cql.nodes))?;
    print(
        json,
        &serde_json::json!({
            "topic": settings.kafka.topic,
            "dead_letter_topic": settings.kafka.dead_letter_topic,
            "partitions": settings.kafka.partitions,
            "schema_id": schema_id,
            "keyspace": settings.cql.keyspace,
        }),
        || {
            format!(
                "topics {} and {} ready; schema id {schema_id}; keyspace {} migrated",
                settings.kafka.topic, settings.kafka.dead_letter_topic, settings.cql.keyspace
            )
        },
    )
}

async fn project(settings: &Settings, group: String) -> Result<()> {
    let options = ProjectorOptions {
        group_id: group,
        ..ProjectorOptions::default()
    };
    let projector = Projector::new(settings, options)
        .await
        .context("starting the projector")?;
    tracing::info!(topic = %settings.kafka.topic, "projector running; Ctrl-C or SIGTERM stops it");
    projector.run(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn run_example(settings: &Settings, json: bool) -> Result<()> {
    let log = Arc::new(
        EventLog::connect(settings, ProducerOptions::default())
            .await
            .context("connecting to the log (did you run `sessionlog init`?)")?,
    );
    let (writer, _) = example::run_example_session(log).await?;
    let state = writer.state().clone();
    let position = writer.last_position();
    print(
        json,
        &serde_json::json!({
            "session_id": state.session_id,
            "last_seq": state.last_seq,
            "partition": position.map(|p| p.partition),
            "last_offset": position.map(|p| p.offset),
            "state": state,
        }),
        || {
            format!(
                "appended session {} ({} events) to partition {:?}\n{}",
                state.session_id,
                state.last_seq,
                position.map(|p| p.partition),
                describe(&state)
            )
        },
    )
}

async fn inspect(
    settings: &Settings,
    session: &SessionId,
    wait_for_seq: Option<u64>,
    timeout: u64,
    json: bool,
) -> Result<()> {
    let store = ProjectionStore::connect(&settings.cql).await?;
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let projected = loop {
        let row = store.load_session(*session).await?;
        let reached = match (&row, wait_for_seq) {
            (Some(p), Some(seq)) => p.state.last_seq >= seq,
            (Some(_), None) => true,
            (None, None) => bail!("session {session} is not in the projection (yet?)"),
            (None, Some(_)) => false,
        };
        if reached {
            break row.context("checked above")?;
        }
        if Instant::now() > deadline {
            bail!(
                "session {session} did not reach seq {} in the projection within {timeout}s \
                 (is `sessionlog project` running?)",
                wait_for_seq.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    print(
        json,
        &serde_json::json!({
            "state": projected.state,
            "partition": projected.partition,
            "applied_offset": projected.applied_offset,
            "digest": projected.state.digest(),
        }),
        || {
            format!(
                "projected session (partition {}, applied offset {})\n{}",
                projected.partition,
                projected.applied_offset,
                describe(&projected.state)
            )
        },
    )
}

async fn recover(settings: &Settings, session: &SessionId, json: bool) -> Result<()> {
    let recovery = Recovery::connect(settings).await?;
    let rebuilt = recovery.rebuild(*session).await?;
    print(
        json,
        &serde_json::json!({
            "rebuilt": rebuilt,
            "digest": rebuilt.state.digest(),
        }),
        || {
            format!(
                "recovered session from the log: partition {}, start {:?}, read {} records, \
                 folded {} events\n{}",
                rebuilt.partition,
                rebuilt.start,
                rebuilt.records_read,
                rebuilt.events_folded,
                describe(&rebuilt.state)
            )
        },
    )
}

/// A short human description of a session's state.
fn describe(state: &SessionState) -> String {
    let checkpoint = state
        .last_checkpoint
        .as_ref()
        .map(|c| {
            format!(
                "seq {} ({})",
                c.seq,
                if c.verified() {
                    "verified"
                } else {
                    "digest mismatch"
                }
            )
        })
        .unwrap_or_else(|| "none".into());
    format!(
        "  session     {}\n  status      {}\n  agent       {}\n  epoch       {}\n  last seq    {}\n  \
         tokens      {} in / {} out\n  cost        ${:.6}\n  tool calls  {} ({} pending)\n  \
         checkpoint  {}\n  digest      {}",
        state.session_id,
        state.status().as_str(),
        state.agent.as_deref().unwrap_or("-"),
        state.epoch,
        state.last_seq,
        state.tokens_in,
        state.tokens_out,
        state.cost_micros as f64 / 1e6,
        state.tool_calls,
        state.pending_calls.len(),
        checkpoint,
        state.digest(),
    )
}

fn print(json: bool, value: &impl Serialize, human: impl FnOnce() -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        println!("{}", human());
    }
    Ok(())
}
