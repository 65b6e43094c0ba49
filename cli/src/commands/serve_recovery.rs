//! `sessionlog serve-recovery`: the recovery HTTP service, until interrupted.

use crate::args::Globals;
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_http::Access;
use std::sync::Arc;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::recovery";

/// The arguments of `sessionlog serve-recovery`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (default from settings: 127.0.0.1:8095).
    #[arg(long)]
    listen: Option<String>,
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let address = args
        .listen
        .unwrap_or_else(|| settings.recovery.listen.clone());
    let metrics = sessionlog_http::metrics::install(&[
        sessionlog_recovery::http::describe_metrics,
        sessionlog_recovery::describe_metrics,
        sessionlog_http::auth::describe_metrics,
    ]);
    // Bound first: the port is held while connecting takes seconds, and a taken port is said
    // at once.
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding {address} (is another service on it? use --listen)"))?;
    let access = Arc::new(Access::from_settings(&settings.auth).await?);
    let recovery = crate::recovery::connect(settings).await?;
    // Started now, as ingest starts its own: every claim confirms through it, and a rebuild of
    // a session written since reads it from memory instead of a pooled reader.
    recovery.log().start_tail().await;
    // Said once, by the service that would sign: the one-shot commands that sign fail naming
    // the setting instead, and the others never need the key.
    if !recovery.notary().can_sign() {
        tracing::warn!(target: LOG_TARGET, "{}", sessionlog_recovery::notary::Notary::UNSIGNED_WARNING);
    }
    let app = sessionlog_recovery::http::router(recovery, metrics, access);
    tracing::info!(target: LOG_TARGET, %address, "recovery service listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(Output::none())
}
