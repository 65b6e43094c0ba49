//! `sessionlog wake`: a wake component instance, until interrupted.

use crate::args::Globals;
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_http::Readiness;
use sessionlog_store::ProjectionStore;
use sessionlog_wake::WakeService;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::wake";

/// The arguments of `sessionlog wake`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Serve `/metrics` (Prometheus) and `/health` on this address (default: `[wake]
    /// listen`; empty serves nothing).
    #[arg(long)]
    listen: Option<String>,
}

/// Runs a wake component instance until Ctrl-C or SIGTERM, serving `/metrics` and `/health`
/// on `listen` (default `[wake] listen`; empty serves nothing).
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let listen = args.listen.unwrap_or_else(|| settings.wake.listen.clone());
    if !listen.is_empty() {
        let store = ProjectionStore::open(&settings.cql)
            .await
            .context("opening the store for /health")?;
        let readiness = Readiness::new().kafka(&settings.kafka).store(store);
        crate::serve::serve(
            &listen,
            &[sessionlog_wake::observe::describe_metrics],
            readiness,
            None,
        )
        .await?;
    }
    let service = WakeService::new(settings)
        .await
        .context("starting the wake component (did you run `sessionlog init`?)")?;
    tracing::info!(target: LOG_TARGET, topic = %settings.kafka.topic, "wake component running; Ctrl-C or SIGTERM stops it");
    service.run(shutdown_signal()).await?;
    Ok(Output::none())
}
