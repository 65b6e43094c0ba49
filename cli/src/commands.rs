//! The command tree and its dispatch: the global flags ([`Cli`]), one variant per subcommand
//! (its doc comment is the command's help), and [`run`], which hands each its arguments and
//! prints the `Output` it returns.
//!
//! Each subcommand is a module of `commands/`: its arguments (`Args`) and
//! `run(args, &Globals) -> Result<Output>`. Adding one is that module, its `mod` line, a
//! variant and its line in [`run`].
//!
//! A command that logs names its log lines' target (`LOG_TARGET`), the name log filters
//! (`SESSIONLOG_LOG`) and collectors know it by, so that moving its code does not rename it.

use crate::args::Globals;
use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;

mod approve;
mod completions;
mod console;
mod diff;
mod dlq;
mod doctor;
mod erase;
mod events;
mod example;
mod export_otlp;
mod fork;
mod ingest;
mod init;
mod inspect;
mod keys;
mod lineage;
mod mcp;
mod openapi;
mod pause;
mod project;
mod recover;
mod redact;
mod replay;
mod resolve;
mod resume;
mod schemas;
mod serve_recovery;
mod sessions;
mod status;
mod steer;
mod token;
mod trace;
mod unpause;
mod usage;
mod verify;
mod wake;

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
    Init(init::Args),
    /// Run a projector instance until interrupted.
    Project(project::Args),
    /// Run a wake component instance until interrupted: it writes a wake record to the wake
    /// topic when a session needs a harness (its writer's lease lapsed, an approval was
    /// decided, an operator recorded a result, a pause ran out, steering reached it with no
    /// live writer), for the workers of its agent.
    Wake(wake::Args),
    /// List sessions: with --orphaned, each session whose writer's lease lapsed and that has
    /// not ended, oldest first, with what it waits for (a harness, an approval, an operator,
    /// its pause to end).
    Sessions(sessions::Args),
    /// Rebuild the projections into a keyspace from the log: from the beginning, given offsets
    /// or a time; resumes where an earlier replay into the same keyspace stopped.
    Replay(replay::Args),
    /// Compare two projection keyspaces table by table; exits non-zero on any difference.
    Verify(verify::Args),
    /// Serve the HTTP ingest API (create, claim, append, checkpoint, close under /v1;
    /// /v1/openapi.json, /metrics, /health) until interrupted.
    Ingest(ingest::Args),
    /// Append the example harness session and print its id and the writer's own fold.
    Example(example::Args),
    /// Print a session as the projector last wrote it.
    Inspect(inspect::Args),
    /// Rebuild a session from the log (from its latest verified checkpoint) and print it.
    Recover(recover::Args),
    /// Take over a session as a new writer: claim the next epoch, settle in-doubt tool calls,
    /// and print the resume bundle. Refused while an approval or an operator is awaited.
    Resume(resume::Args),
    /// Fork a session at a seq or a checkpoint into a new session that names its parent.
    Fork(fork::Args),
    /// Print a session's ancestors and the sessions forked from it.
    Lineage(lineage::Args),
    /// Draw a session's trace as the projector wrote it: its span tree as a waterfall
    /// (names, start, duration, tokens, cost, outcome), or the tree as JSON with --json.
    Trace(trace::Args),
    /// Print usage over whole UTC days from the rollups the projector keeps: calls, failed
    /// tool calls, tokens, cost and latency quantiles by model, agent, tool or day.
    Usage(usage::Args),
    /// Export the log as OpenTelemetry GenAI spans over OTLP/HTTP to a trace server, as its
    /// own consumer group, until interrupted (or caught up with --until-caught-up).
    ExportOtlp(export_otlp::Args),
    /// Print the events after the fork point on each side of a fork and its parent.
    Diff(diff::Args),
    /// Print a range of a session's history (located by the event index, read from the log,
    /// texts opened): a table, or one JSON object per event with --json. Follows the pages
    /// until the range is done.
    Events(events::Args),
    /// Record an operator's outcome for an in-doubt tool call.
    Resolve(resolve::Args),
    /// Record a decision on a pending approval.
    Approve(approve::Args),
    /// Pause a session: record why (and, as the writer, who); resume refuses it until
    /// `unpause`. Takes the session over, fencing the harness that was writing.
    Pause(pause::Args),
    /// Lift a pause: the session can be resumed again.
    Unpause(unpause::Args),
    /// Append a steering message for the agent (author and text). Takes the session over,
    /// fencing the harness that was writing; it sees the message when it resumes.
    Steer(steer::Args),
    /// Serve a session's history to a model over MCP (Streamable HTTP at /mcp, or --stdio):
    /// tools to read, search and expand what its context view left out.
    Mcp(mcp::Args),
    /// Run the recovery HTTP service until interrupted.
    ServeRecovery(serve_recovery::Args),
    /// Serve the console until interrupted: web pages where operators and approvers see
    /// sessions and decide what waits for them (log in with a token or an API key).
    Console(console::Args),
    /// Development keys and tokens for the services' authentication, and API keys.
    Token(token::Args),
    /// The key-encryption key: make one, or rotate to a new one.
    Keys(keys::Args),
    /// Erase a session: append SessionErased, destroy its data key (every sealed copy of its
    /// texts becomes unreadable), keep a receipt; or print where an erasure stands (--status).
    Erase(erase::Args),
    /// Redact one field of one event: destroy its own key (every sealed copy of that text
    /// becomes unreadable) and append PayloadRedacted; the rest of the session still reads.
    Redact(redact::Args),
    /// The session-event schema versions registered for the events topic against the ones this
    /// build keeps: `list` them, or `check` (exit 1 on drift, naming the fix).
    Schemas(schemas::Args),
    /// The events topic and its partitions, each projector group's lag per partition and live
    /// instances, dead letters, the registered schemas and the store; exits 1 naming each
    /// problem and its fix when something is unhealthy, 3 when a server cannot be reached.
    ///
    /// With a SESSION: that session's status and epoch, rebuilt from the log, and its writer
    /// lease (who holds it, at which epoch, until when, and whether it is live).
    Status(status::Args),
    /// Dead letters, the records the projector could not project: `list` them, `show` one,
    /// `replay` chosen ones into the events topic once their cause is fixed.
    Dlq(dlq::Args),
    /// Check the deployment: the settings and where each came from, every server they name
    /// (with what it runs), the topics against `[retention]` and `[kafka]`, the keyspaces, and
    /// the brokers' clocks; exits 1 naming each problem's fix, 3 when a server does not answer.
    Doctor(doctor::Args),
    /// Print a shell completion script: `source <(sessionlog completions bash)`, or save it
    /// where the shell loads completions from. Needs no servers.
    Completions(completions::Args),
    /// Print a service's OpenAPI 3.1 document (what it serves at /v1/openapi.json) as JSON.
    /// Needs no servers.
    Openapi(openapi::Args),
}

/// Runs one command and prints what it returns.
pub async fn run(cli: Cli) -> Result<()> {
    let Cli {
        config,
        json,
        command,
        ..
    } = cli;
    // Each command that needs the deployment loads the settings before anything else it does;
    // printing a script or a document needs none.
    let globals = || Globals::load(config.clone(), json);
    let output = match command {
        Command::Init(args) => init::run(args, &globals()?).await,
        Command::Project(args) => project::run(args, &globals()?).await,
        Command::Wake(args) => wake::run(args, &globals()?).await,
        Command::Sessions(args) => sessions::run(args, &globals()?).await,
        Command::Replay(args) => replay::run(args, &globals()?).await,
        Command::Verify(args) => verify::run(args, &globals()?).await,
        Command::Ingest(args) => ingest::run(args, &globals()?).await,
        Command::Example(args) => example::run(args, &globals()?).await,
        Command::Inspect(args) => inspect::run(args, &globals()?).await,
        Command::Recover(args) => recover::run(args, &globals()?).await,
        Command::Resume(args) => resume::run(args, &globals()?).await,
        Command::Fork(args) => fork::run(args, &globals()?).await,
        Command::Lineage(args) => lineage::run(args, &globals()?).await,
        Command::Trace(args) => trace::run(args, &globals()?).await,
        Command::Usage(args) => usage::run(args, &globals()?).await,
        Command::ExportOtlp(args) => export_otlp::run(args, &globals()?).await,
        Command::Diff(args) => diff::run(args, &globals()?).await,
        Command::Events(args) => events::run(args, &globals()?).await,
        Command::Resolve(args) => resolve::run(args, &globals()?).await,
        Command::Approve(args) => approve::run(args, &globals()?).await,
        Command::Pause(args) => pause::run(args, &globals()?).await,
        Command::Unpause(args) => unpause::run(args, &globals()?).await,
        Command::Steer(args) => steer::run(args, &globals()?).await,
        Command::Mcp(args) => mcp::run(args, &globals()?).await,
        Command::ServeRecovery(args) => serve_recovery::run(args, &globals()?).await,
        Command::Console(args) => console::run(args, &globals()?).await,
        Command::Token(args) => token::run(args, &globals()?).await,
        Command::Keys(args) => keys::run(args, &globals()?).await,
        Command::Erase(args) => erase::run(args, &globals()?).await,
        Command::Redact(args) => redact::run(args, &globals()?).await,
        Command::Schemas(args) => schemas::run(args, &globals()?).await,
        Command::Status(args) => status::run(args, &globals()?).await,
        Command::Dlq(args) => dlq::run(args, &globals()?).await,
        Command::Doctor(args) => doctor::run(args, &globals()?).await,
        Command::Completions(args) => completions::run(args, Cli::command()),
        Command::Openapi(args) => openapi::run(args),
    }?;
    output.print(json)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
