//! `/metrics` (Prometheus) and the health routes (JSON) for a running projector:
//! `/health/live` while the process serves, `/health/ready` (and `/health`) while Kafka and
//! the store answer and the projector's loop is not stuck behind its lag.

use anyhow::{Context, Result};
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use sessionlog_http::{Liveness, Readiness};
use sessionlog_log::Settings;
use sessionlog_projector::observe::Health;
use sessionlog_store::ProjectionStore;
use std::sync::Arc;
use std::time::Duration;

/// Installs the process's metrics recorder and serves it, with the projector's health, on
/// `listen`. The server runs on a background task for the life of the process.
pub async fn serve_metrics(
    listen: &str,
    settings: &Settings,
    store: ProjectionStore,
    health: Arc<Health>,
) -> Result<()> {
    let stall = Duration::from_secs(settings.projector.stall_secs);
    let readiness = {
        let health = Arc::clone(&health);
        Readiness::new()
            .kafka(&settings.kafka)
            .store(store)
            .with("projector", move || {
                let verdict = health.ready(stall);
                async move { verdict }
            })
    };
    let ready = move || {
        let (readiness, health) = (readiness.clone(), Arc::clone(&health));
        async move {
            let (status, checks) = readiness.answer().await;
            let body = serde_json::json!({
                "status": checks.status,
                "checks": checks.checks,
                "projector": health.report(),
            });
            (status, axum::Json(body)).into_response()
        }
    };
    let handle = sessionlog_http::metrics::install(&[sessionlog_projector::describe_metrics]);
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        handle.render(),
                    )
                }
            }),
        )
        .route("/health", get(ready.clone()))
        .route("/health/ready", get(ready))
        .route("/health/live", get(|| async { axum::Json(Liveness::LIVE) }));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    tracing::info!(%listen, "serving /metrics, /health/live and /health/ready");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}
