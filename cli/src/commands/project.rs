//! `sessionlog project`: a projector instance, until interrupted.

use crate::args::Globals;
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_projector::Projector;
use sessionlog_projector::worker::ProjectorOptions;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::commands";

/// The arguments of `sessionlog project`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Consumer group; instances in one group share the partitions (default: `[projector] group_id`).
    #[arg(long)]
    group: Option<String>,
    /// Serve `/metrics` (Prometheus) and `/health` on this address, e.g. 127.0.0.1:9100
    /// (default: `[projector] listen`; empty serves nothing).
    #[arg(long)]
    listen: Option<String>,
}

/// Projects the log into the store until Ctrl-C or SIGTERM.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let mut options = ProjectorOptions::from(&settings.projector);
    if let Some(group) = args.group {
        options.group_id = group;
    }
    let projector = Projector::new(settings, options)
        .await
        .context("starting the projector")?;
    let listen = args
        .listen
        .unwrap_or_else(|| settings.projector.listen.clone());
    if !listen.is_empty() {
        let store = projector.store().context("the projector's store")?.clone();
        crate::serve::serve_metrics(&listen, settings, store, projector.health()).await?;
    }
    tracing::info!(target: LOG_TARGET, topic = %settings.kafka.topic, "projector running; Ctrl-C or SIGTERM stops it");
    projector.run(shutdown_signal()).await?;
    Ok(Output::none())
}
