//! `sessionlog ingest`: the HTTP ingest service, until interrupted.

use crate::args::Globals;
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_http::Access;
use sessionlog_ingest::Ingest;
use std::sync::Arc;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::ingest";

/// The arguments of `sessionlog ingest`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (default: `[ingest] listen`).
    #[arg(long)]
    listen: Option<String>,
}

/// Connects to the log and serves until Ctrl-C or SIGTERM, then flushes what is in flight.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let listen = args
        .listen
        .unwrap_or_else(|| settings.ingest.listen.clone());
    // Bound first: the port is held while connecting takes seconds, and a taken port is said
    // at once.
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| {
            format!("listening on {listen} (is another service on it? use --listen)")
        })?;
    let access = Arc::new(Access::from_settings(&settings.auth).await?);
    let ingest = Ingest::connect(settings, access)
        .await
        .context("connecting to the log and the projection (did you run `sessionlog init`?)")?;
    tracing::info!(target: LOG_TARGET, %listen, topic = %settings.kafka.topic, "ingest serving; Ctrl-C or SIGTERM stops it");
    ingest.serve(listener, shutdown_signal()).await?;
    Ok(Output::none())
}
