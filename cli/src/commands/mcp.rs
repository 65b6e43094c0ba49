//! `sessionlog mcp`: an MCP server over a session's history, for the model to fetch what its
//! context view left out (see docs/harnesses.md).

use crate::args::{Globals, parse_session};
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_http::Access;
use sessionlog_log::Settings;
use sessionlog_mcp::http::HttpOptions;
use sessionlog_mcp::{Reader, Target};
use sessionlog_recovery::{Recovery, Scope};
use std::sync::Arc;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::mcp";

/// Where the MCP endpoint listens when `--listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8097";

/// The arguments of `sessionlog mcp`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The session served. Required with --stdio; over HTTP, without it each credential reads
    /// the session it is narrowed to (`sessionlog token mint --role reader --session ID`).
    #[arg(long, required_if_eq("stdio", "true"))]
    session: Option<String>,
    /// Address of the Streamable HTTP endpoint (`/mcp`), default 127.0.0.1:8097.
    #[arg(long, conflicts_with = "stdio")]
    listen: Option<String>,
    /// Serve over stdin and stdout instead, for a harness that runs this command itself (no
    /// credential is asked: the process already holds the deployment's settings).
    #[arg(long)]
    stdio: bool,
    /// The URL clients reach the endpoint at, for the protected-resource metadata (default
    /// http://<listen>).
    #[arg(long, conflicts_with = "stdio")]
    public_url: Option<String>,
    /// An authorization server that issues tokens for this endpoint, listed in the metadata
    /// (repeatable).
    #[arg(long = "authorization-server", conflicts_with = "stdio")]
    authorization_servers: Vec<String>,
}

/// Runs the server until interrupted (HTTP) or until the client closes stdio.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let session = args.session.as_deref().map(parse_session).transpose()?;
    if args.stdio {
        let session = session.context("--stdio needs --session ID")?;
        let reader = Reader::new(Arc::new(connect(settings).await?));
        let target = Target {
            session,
            scope: Scope::Family,
        };
        sessionlog_mcp::serve_stdio(reader, target).await?;
        return Ok(Output::none());
    }
    let address = args.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    // Bound first: a taken port is said at once, before connecting takes seconds.
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding {address} (is another service on it? use --listen)"))?;
    let bound = listener.local_addr()?;
    let access = Access::from_settings(&settings.auth).await?;
    let reader = Reader::new(Arc::new(connect(settings).await?));
    let options = HttpOptions {
        session,
        public_url: args.public_url.unwrap_or_else(|| format!("http://{bound}")),
        authorization_servers: args.authorization_servers,
    };
    let router = sessionlog_mcp::http::router(reader, access, options);
    tracing::info!(target: LOG_TARGET, address = %bound, "MCP server listening at /mcp");
    sessionlog_mcp::http::serve(listener, router, shutdown_signal()).await?;
    Ok(Output::none())
}

/// A reader's recovery: it signs nothing, so it needs no signing key.
async fn connect(settings: &Settings) -> Result<Recovery> {
    Recovery::connect_reader(settings)
        .await
        .context("connecting to the log, the registry and the store")
}
