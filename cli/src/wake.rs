//! `sessionlog wake` (the wake component, until interrupted) and `sessionlog sessions
//! --orphaned` (sessions whose writer's lease lapsed).

use crate::recovery::Output;
use anyhow::{Context, Result};
use sessionlog_http::Readiness;
use sessionlog_log::Settings;
use sessionlog_store::ProjectionStore;
use sessionlog_wake::WakeService;

/// Runs a wake component instance until Ctrl-C or SIGTERM, serving `/metrics` and `/health`
/// on `listen` (default `[wake] listen`; empty serves nothing).
pub async fn run(settings: &Settings, listen: Option<String>) -> Result<()> {
    let listen = listen.unwrap_or_else(|| settings.wake.listen.clone());
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
    tracing::info!(topic = %settings.kafka.topic, "wake component running; Ctrl-C or SIGTERM stops it");
    service.run(crate::signal::shutdown_signal()).await?;
    Ok(())
}

/// `sessionlog sessions --orphaned`: every session whose writer's lease lapsed and that has
/// not ended, oldest first, with what it waits for.
pub async fn orphaned(settings: &Settings) -> Result<Output> {
    let store = ProjectionStore::open(&settings.cql)
        .await
        .context("opening the store")?;
    let orphans = sessionlog_wake::orphaned(settings, &store)
        .await
        .context("reading the lease topic (did you run `sessionlog init`?)")?;
    let mut human = format!(
        "{} session(s) without a live writer\n{:<36}  {:<16}  {:<20}  {:>5}  {:>8}  waits for",
        orphans.len(),
        "SESSION",
        "AGENT",
        "LAST HOLDER",
        "EPOCH",
        "AGE"
    );
    for o in &orphans {
        human.push_str(&format!(
            "\n{:<36}  {:<16}  {:<20}  {:>5}  {:>7}s  {}",
            o.session_id,
            o.agent.as_deref().unwrap_or("-"),
            o.holder,
            o.epoch,
            o.age_secs,
            o.waits_for
        ));
    }
    Ok(Output {
        json: serde_json::json!({ "orphaned": orphans }),
        human,
    })
}
