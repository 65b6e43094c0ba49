//! `sessionlog ingest`: the HTTP ingest service, as a command.

use anyhow::{Context, Result};
use sessionlog_http::Access;
use sessionlog_ingest::Ingest;
use sessionlog_log::Settings;
use std::sync::Arc;

/// Connects to the log and serves until `shutdown` completes, then flushes what is in flight.
pub async fn run(
    settings: &Settings,
    listen: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listen = listen.unwrap_or_else(|| settings.ingest.listen.clone());
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
    tracing::info!(%listen, topic = %settings.kafka.topic, "ingest serving; Ctrl-C or SIGTERM stops it");
    ingest.serve(listener, shutdown).await?;
    Ok(())
}
