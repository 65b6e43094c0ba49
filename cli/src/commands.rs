//! The subcommands. Each is a few calls into the libraries; output is human by default,
//! JSON with `--json`.

use crate::args::parse_session;
use crate::example;
use crate::signal::shutdown_signal;
use crate::when::{Precision, timestamp};
use anyhow::{Context, Result, bail};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use sessionlog_log::{Settings, topic};
use sessionlog_producer::EventLog;
use sessionlog_projector::Projector;
use sessionlog_projector::worker::ProjectorOptions;
use sessionlog_recovery::{Recovery, StartPoint};
use sessionlog_schemas::{SessionId, value_subject};
use sessionlog_session::SessionState;
use sessionlog_store::ProjectionStore;
use std::io::IsTerminal;
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
    /// How log lines (on stderr) are written: `text` for people, `json` (one object per line)
    /// for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SESSIONLOG_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Whether `--json` was given: errors are then printed as a JSON object too.
    pub fn json(&self) -> bool {
        self.json
    }
}

/// The format of the log lines on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the span fields (session, partition, offset) as members.
    Json,
}

/// Sets up logging once for the process: `SESSIONLOG_LOG` filters (default
/// `warn,sessionlog=info`), `format` shapes the lines. Payloads and secrets are never fields.
/// Text lines are coloured only on a terminal ([`log_colours`]): in a file, a pipe or a
/// collector they are plain.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SESSIONLOG_LOG")
        .unwrap_or_else(|_| "warn,sessionlog=info".into());
    let colours = log_colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(format == LogFormat::Text && colours)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
}

/// Whether log lines get ANSI colours: only when stderr is a terminal, and not when `NO_COLOR`
/// is set to anything but the empty string (<https://no-color.org>).
fn log_colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the topics, register the schemas (BACKWARD_TRANSITIVE) and migrate the CQL keyspace.
    /// On topics that exist, report each retention value that differs from `[retention]`.
    Init {
        /// Change the retention of existing topics to what `[retention]` says (without it,
        /// `init` only reports the differences and the commands that fix them).
        #[arg(long)]
        apply: bool,
    },
    /// Run a projector instance until interrupted.
    Project {
        /// Consumer group; instances in one group share the partitions (default: `[projector] group_id`).
        #[arg(long)]
        group: Option<String>,
        /// Serve `/metrics` (Prometheus) and `/health` on this address, e.g. 127.0.0.1:9100
        /// (default: `[projector] listen`; empty serves nothing).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Run a wake component instance until interrupted: it writes a wake record to the wake
    /// topic when a session needs a harness (its writer's lease lapsed, an approval was
    /// decided, an operator recorded a result, a pause ran out, steering reached it with no
    /// live writer), for the workers of its agent.
    Wake {
        /// Serve `/metrics` (Prometheus) and `/health` on this address (default: `[wake]
        /// listen`; empty serves nothing).
        #[arg(long)]
        listen: Option<String>,
    },
    /// List sessions: with --orphaned, each session whose writer's lease lapsed and that has
    /// not ended, oldest first, with what it waits for (a harness, an approval, an operator,
    /// its pause to end).
    Sessions {
        /// Sessions whose writer's lease lapsed (the only listing so far, so required).
        #[arg(long, required = true)]
        orphaned: bool,
    },
    /// Rebuild the projections into a keyspace from the log: from the beginning, given offsets
    /// or a time; resumes where an earlier replay into the same keyspace stopped.
    Replay(crate::replay::ReplayRequest),
    /// Compare two projection keyspaces table by table; exits non-zero on any difference.
    Verify {
        /// One keyspace.
        #[arg(long)]
        left: String,
        /// The other.
        #[arg(long)]
        right: String,
    },
    /// Serve the HTTP ingest API (create, claim, append, checkpoint, close under /v1;
    /// /v1/openapi.json, /metrics, /health) until interrupted.
    Ingest {
        /// Address to listen on (default: `[ingest] listen`).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Append the example harness session and print its id and the writer's own fold.
    Example,
    /// Print a session as the projector last wrote it.
    Inspect {
        /// The session id.
        session: String,
        /// Wait (up to --timeout) until the projection reaches this seq.
        #[arg(long)]
        wait_for_seq: Option<u64>,
        /// How long --wait-for-seq waits: `30s`, `2m`, `500ms` (a bare number is seconds).
        #[arg(long, default_value = "60s", value_parser = crate::duration::parse)]
        timeout: Duration,
    },
    /// Rebuild a session from the log (from its latest verified checkpoint) and print it.
    Recover {
        /// The session id.
        session: String,
    },
    /// Take over a session as a new writer: claim the next epoch, settle in-doubt tool calls,
    /// and print the resume bundle. Refused while an approval or an operator is awaited.
    Resume {
        /// The session id.
        session: String,
        /// Who takes over.
        #[arg(long, default_value = "sessionlog-cli")]
        writer: String,
        /// Token budget of the context view in the bundle (default: the session's context
        /// policy's, `[context]`).
        #[arg(long)]
        context_tokens: Option<usize>,
    },
    /// Fork a session at a seq or a checkpoint into a new session that names its parent.
    Fork(crate::recovery::ForkArgs),
    /// Print a session's ancestors and the sessions forked from it.
    Lineage {
        /// The session id.
        session: String,
    },
    /// Draw a session's trace as the projector wrote it: its span tree as a waterfall
    /// (names, start, duration, tokens, cost, outcome), or the tree as JSON with --json.
    Trace {
        /// The session id.
        session: String,
    },
    /// Print usage over whole UTC days from the rollups the projector keeps: calls, failed
    /// tool calls, tokens, cost and latency quantiles by model, agent, tool or day.
    Usage {
        /// The first day, YYYY-MM-DD (UTC).
        #[arg(long)]
        from: String,
        /// The last day, included (default: --from).
        #[arg(long)]
        to: Option<String>,
        /// What the lines are by.
        #[arg(long, value_parser = ["model", "agent", "tool", "day"], default_value = "model")]
        by: String,
    },
    /// Export the log as OpenTelemetry GenAI spans over OTLP/HTTP to a trace server, as its
    /// own consumer group, until interrupted (or caught up with --until-caught-up).
    ExportOtlp(crate::export::ExportArgs),
    /// Print the events after the fork point on each side of a fork and its parent.
    Diff {
        /// The forked (child) session id.
        session: String,
    },
    /// Print a range of a session's history (located by the event index, read from the log,
    /// texts opened): a table, or one JSON object per event with --json. Follows the pages
    /// until the range is done.
    Events(crate::recovery::EventsArgs),
    /// Record an operator's outcome for an in-doubt tool call.
    Resolve(crate::recovery::ResolveArgs),
    /// Record a decision on a pending approval.
    Approve(crate::recovery::ApproveArgs),
    /// Pause a session: record why (and, as the writer, who); resume refuses it until
    /// `unpause`. Takes the session over, fencing the harness that was writing.
    Pause(crate::operate::PauseArgs),
    /// Lift a pause: the session can be resumed again.
    Unpause(crate::operate::UnpauseArgs),
    /// Append a steering message for the agent (author and text). Takes the session over,
    /// fencing the harness that was writing; it sees the message when it resumes.
    Steer(crate::operate::SteerArgs),
    /// Serve a session's history to a model over MCP (Streamable HTTP at /mcp, or --stdio):
    /// tools to read, search and expand what its context view left out.
    Mcp(crate::mcp::McpArgs),
    /// Run the recovery HTTP service until interrupted.
    ServeRecovery {
        /// Address to listen on (default from settings: 127.0.0.1:8095).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Development keys and tokens for the services' authentication, and API keys.
    Token {
        /// Where the development key lives (default: $SESSIONLOG_AUTH_DIR, else .sessionlog/auth).
        #[arg(long, global = true)]
        dir: Option<std::path::PathBuf>,
        /// What to make.
        #[command(subcommand)]
        command: crate::token::TokenCommand,
    },
    /// The key-encryption key: make one, or rotate to a new one.
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: crate::keys::KeysCommand,
    },
    /// Erase a session: append SessionErased, destroy its data key (every sealed copy of its
    /// texts becomes unreadable), keep a receipt; or print where an erasure stands (--status).
    Erase(crate::keys::EraseArgs),
    /// The session-event schema versions registered for the events topic against the ones this
    /// build keeps: `list` them, or `check` (exit 1 on drift, naming the fix).
    Schemas {
        /// What to do.
        #[command(subcommand)]
        command: crate::schemas::SchemasCommand,
    },
    /// The events topic and its partitions, each projector group's lag per partition and live
    /// instances, dead letters, the registered schemas and the store; exits 1 naming each
    /// problem and its fix when something is unhealthy, 3 when a server cannot be reached.
    ///
    /// With a SESSION: that session's status and epoch, rebuilt from the log, and its writer
    /// lease (who holds it, at which epoch, until when, and whether it is live).
    Status {
        /// A session to report on instead of the deployment.
        session: Option<String>,
        /// A projector consumer group to report on; repeat for several (default:
        /// `[projector] group_id`, the group `sessionlog project` joins).
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// Dead letters, the records the projector could not project: `list` them, `show` one,
    /// `replay` chosen ones into the events topic once their cause is fixed.
    Dlq {
        /// What to do.
        #[command(subcommand)]
        command: crate::dlq::DlqCommand,
    },
    /// Check the deployment: the settings and where each came from, every server they name
    /// (with what it runs), the topics against `[retention]` and `[kafka]`, the keyspaces, and
    /// the brokers' clocks; exits 1 naming each problem's fix, 3 when a server does not answer.
    Doctor(crate::doctor::DoctorArgs),
    /// Print a shell completion script: `source <(sessionlog completions bash)`, or save it
    /// where the shell loads completions from. Needs no servers.
    Completions {
        /// Which shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a service's OpenAPI 3.1 document (what it serves at /v1/openapi.json) as JSON.
    /// Needs no servers.
    Openapi {
        /// Which service.
        #[arg(long, value_enum)]
        service: HttpService,
    },
}

/// The HTTP services the binary runs.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum HttpService {
    /// `sessionlog ingest`.
    Ingest,
    /// `sessionlog serve-recovery`.
    Recovery,
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    // Before the settings: printing a document or a script needs none.
    match cli.command {
        Command::Openapi { service } => return print_openapi(service),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "sessionlog",
                &mut std::io::stdout(),
            );
            return Ok(());
        }
        _ => {}
    }
    let settings = Settings::load(cli.config.as_deref()).context("loading settings")?;
    match cli.command {
        Command::Init { apply } => init(&settings, apply, cli.json).await,
        Command::Project { group, listen } => project(&settings, group, listen).await,
        Command::Wake { listen } => crate::wake::run(&settings, listen).await,
        Command::Sessions { orphaned: _ } => {
            emit(cli.json, crate::wake::orphaned(&settings).await?)
        }
        Command::Replay(request) => crate::replay::replay(&settings, request, cli.json).await,
        Command::Verify { left, right } => {
            crate::replay::verify(&settings, &left, &right, cli.json).await
        }
        Command::Example => run_example(&settings, cli.json).await,
        Command::Ingest { listen } => {
            crate::ingest::run(&settings, listen, shutdown_signal()).await
        }
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
        Command::Resume {
            session,
            writer,
            context_tokens,
        } => emit(
            cli.json,
            crate::recovery::resume(&settings, &session, &writer, context_tokens).await?,
        ),
        Command::Fork(args) => emit(cli.json, crate::recovery::fork(&settings, &args).await?),
        Command::Lineage { session } => emit(
            cli.json,
            crate::recovery::lineage(&settings, &session).await?,
        ),
        Command::Trace { session } => {
            emit(cli.json, crate::trace::trace(&settings, &session).await?)
        }
        Command::Usage { from, to, by } => emit(
            cli.json,
            crate::trace::usage(&settings, &from, to.as_deref(), &by).await?,
        ),
        Command::ExportOtlp(args) => crate::export::run(&settings, args, cli.json).await,
        Command::Diff { session } => {
            emit(cli.json, crate::recovery::diff(&settings, &session).await?)
        }
        Command::Events(args) => crate::recovery::events(&settings, &args, cli.json).await,
        Command::Resolve(args) => emit(cli.json, crate::recovery::resolve(&settings, &args).await?),
        Command::Approve(args) => emit(cli.json, crate::recovery::approve(&settings, &args).await?),
        Command::Pause(args) => emit(cli.json, crate::operate::pause(&settings, &args).await?),
        Command::Unpause(args) => emit(cli.json, crate::operate::unpause(&settings, &args).await?),
        Command::Steer(args) => emit(cli.json, crate::operate::steer(&settings, &args).await?),
        Command::Mcp(args) => crate::mcp::run(&settings, args).await,
        Command::ServeRecovery { listen } => crate::recovery::serve(&settings, listen).await,
        Command::Token { dir, command } => crate::token::run(&settings, dir, command),
        Command::Keys { command } => emit(cli.json, crate::keys::run(&settings, command).await?),
        Command::Erase(args) => emit(cli.json, crate::keys::erase(&settings, &args).await?),
        Command::Schemas { command } => crate::schemas::run(&settings, command, cli.json).await,
        Command::Status {
            session: Some(session),
            ..
        } => crate::status::run_session(&settings, parse_session(&session)?, cli.json).await,
        Command::Status {
            session: None,
            groups,
        } => crate::status::run(&settings, groups, cli.json).await,
        Command::Dlq { command } => crate::dlq::run(&settings, command, cli.json).await,
        Command::Doctor(args) => crate::doctor::run(cli.config.as_deref(), args, cli.json).await,
        Command::Openapi { service } => print_openapi(service),
        Command::Completions { .. } => Ok(()),
    }
}

fn print_openapi(service: HttpService) -> Result<()> {
    let document = match service {
        HttpService::Ingest => sessionlog_ingest::service().openapi(),
        HttpService::Recovery => sessionlog_recovery::http::openapi(),
    };
    println!("{}", serde_json::to_string_pretty(&document)?);
    Ok(())
}

/// Prints a command's output: JSON with `--json`, its human lines otherwise.
fn emit(json: bool, output: crate::recovery::Output) -> Result<()> {
    print(json, &output.json, || output.human)
}

async fn init(settings: &Settings, apply: bool, json: bool) -> Result<()> {
    let topics = topic::init_topics(&settings.kafka, &settings.retention, apply)
        .await
        .with_context(|| format!("creating topics on {}", settings.kafka.bootstrap))?;
    let registry = settings.registry.client()?;
    let schema_id = registry
        .register_all_versions(&value_subject(&settings.kafka.topic))
        .await
        .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
    ProjectionStore::migrate(&settings.cql)
        .await
        .with_context(|| format!("migrating CQL keyspace at {}", settings.cql.nodes))?;
    // The key store: data keys and erasure receipts (created with encryption on or off).
    sessionlog_store::KeyTable::create(settings)
        .await
        .with_context(|| format!("creating the key keyspace {}", settings.privacy.keyspace))?;
    print(
        json,
        &serde_json::json!({
            "topic": settings.kafka.topic,
            "dead_letter_topic": settings.kafka.dead_letter_topic,
            "partitions": settings.kafka.partitions,
            "schema_id": schema_id,
            "keyspace": settings.cql.keyspace,
            "topics_created": topics.created,
            "config_differences": topics.differences,
            "config_changed": topics.changed,
        }),
        || {
            let mut text = format!(
                "topics {} and {} ready; schema id {schema_id}; keyspace {} migrated",
                settings.kafka.topic, settings.kafka.dead_letter_topic, settings.cql.keyspace
            );
            text.push_str(&topic_report_text(&topics, &settings.kafka.bootstrap));
            text
        },
    )
}

/// The lines `init` adds about the topics' configuration: what it changed, or what differs
/// and the command that fixes each difference.
fn topic_report_text(report: &topic::TopicReport, bootstrap: &str) -> String {
    let mut text = String::new();
    for changed in &report.changed {
        text.push_str(&format!(
            "\nchanged topic {}: {} from {} to {} ({})",
            changed.topic,
            changed.key,
            changed.actual.as_deref().unwrap_or("unset"),
            changed.wanted,
            changed.setting
        ));
    }
    if !report.differences.is_empty() {
        text.push_str(&format!(
            "\n{} topic setting(s) differ from [retention] and were left as they are; \
             `sessionlog init --apply` changes them, or run the command after each:",
            report.differences.len()
        ));
        for difference in &report.differences {
            text.push_str(&format!(
                "\n  {difference}\n    fix: {}",
                difference.fix_command(bootstrap)
            ));
        }
    }
    text
}

async fn project(settings: &Settings, group: Option<String>, listen: Option<String>) -> Result<()> {
    let mut options = ProjectorOptions::from(&settings.projector);
    if let Some(group) = group {
        options.group_id = group;
    }
    let projector = Projector::new(settings, options)
        .await
        .context("starting the projector")?;
    let listen = listen.unwrap_or_else(|| settings.projector.listen.clone());
    if !listen.is_empty() {
        let store = projector.store().context("the projector's store")?.clone();
        crate::serve::serve_metrics(&listen, settings, store, projector.health()).await?;
    }
    tracing::info!(topic = %settings.kafka.topic, "projector running; Ctrl-C or SIGTERM stops it");
    projector.run(shutdown_signal()).await?;
    Ok(())
}

async fn run_example(settings: &Settings, json: bool) -> Result<()> {
    let log = Arc::new(
        EventLog::from_settings(settings)
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
                describe(&state, &state.digest())
            )
        },
    )
}

async fn inspect(
    settings: &Settings,
    session: &SessionId,
    wait_for_seq: Option<u64>,
    timeout: Duration,
    json: bool,
) -> Result<()> {
    // Read-only: a missing or outdated keyspace is an error naming the command to run.
    let store = ProjectionStore::open(&settings.cql).await?;
    let deadline = Instant::now() + timeout;
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
                "session {session} did not reach seq {} in the projection within {} \
                 (is `sessionlog project` running? a longer --timeout waits more)",
                wait_for_seq.unwrap_or_default(),
                crate::duration::show(timeout)
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
                describe(&projected.state, &projected.state.digest())
            )
        },
    )
}

async fn recover(settings: &Settings, session: &SessionId, json: bool) -> Result<()> {
    let recovery = Recovery::connect(settings).await?;
    let mut rebuilt = recovery.rebuild(*session).await?;
    // The digest covers the sealed form; what is printed has the texts opened.
    let digest = rebuilt.state.digest();
    let opener = recovery.opener(*session, rebuilt.state.erased).await?;
    rebuilt.state = sessionlog_recovery::reveal::opened_state(&opener, &rebuilt.state);
    print(
        json,
        &serde_json::json!({
            "rebuilt": rebuilt,
            "digest": digest,
        }),
        || {
            format!(
                "recovered session from the log: partition {}, {}; read {} records, \
                 folded {} events\n{}",
                rebuilt.partition,
                start_text(&rebuilt.start),
                rebuilt.records_read,
                rebuilt.events_folded,
                describe(&rebuilt.state, &digest)
            )
        },
    )
}

/// Where a rebuild started reading, in words.
fn start_text(start: &StartPoint) -> String {
    match start {
        StartPoint::Checkpoint { seq, offset } => {
            format!("from the verified checkpoint at seq {seq} (offset {offset})")
        }
        StartPoint::FirstEvent { offset } => format!("from its first event (offset {offset})"),
        StartPoint::PartitionStart { offset } => {
            format!("from the partition's start (offset {offset})")
        }
    }
}

/// A short human description of a session's state.
fn describe(state: &SessionState, digest: &str) -> String {
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
    let now = crate::when::now();
    let when = |micros| timestamp(micros, Precision::Seconds, Some(now));
    format!(
        "  session     {}\n  status      {}\n  agent       {}\n  started     {}\n  \
         last event  {}\n  epoch       {}\n  last seq    {}\n  \
         tokens      {} in / {} out\n  cost        ${:.6}\n  tool calls  {} ({} pending)\n  \
         checkpoint  {}\n  digest      {}",
        state.session_id,
        state.status().as_str(),
        state.agent.as_deref().unwrap_or("-"),
        when(state.started_at),
        when(state.updated_at),
        state.epoch,
        state.last_seq,
        state.tokens_in,
        state.tokens_out,
        state.cost_micros as f64 / 1e6,
        state.tool_calls,
        state.pending_calls.len(),
        checkpoint,
        digest,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sessionlog").chain(args.iter().copied()))
    }

    #[test]
    fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(log_colours(true, None));
        assert!(
            log_colours(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!log_colours(true, Some(OsStr::new("1"))));
        assert!(
            !log_colours(false, None),
            "a file or a pipe gets no escapes"
        );
        assert!(!log_colours(false, Some(OsStr::new("1"))));
    }

    #[test]
    fn inspect_takes_a_timeout_with_units() {
        let id = "0190e5b8-0000-7000-8000-000000000001";
        let timeout = |args: &[&str]| match parse(args).map(|cli| cli.command) {
            Ok(Command::Inspect { timeout, .. }) => Some(timeout),
            _ => None,
        };
        assert_eq!(
            timeout(&["inspect", id, "--wait-for-seq", "2", "--timeout", "30s"]),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            timeout(&["inspect", id, "--timeout", "60"]),
            Some(Duration::from_secs(60))
        );
        assert_eq!(timeout(&["inspect", id]), Some(Duration::from_secs(60)));
        assert!(parse(&["inspect", id, "--timeout", "soon"]).is_err());
    }
}
