//! `/metrics` (Prometheus) and the health routes (JSON) for the processes that serve no API of
//! their own (a projector, an OTLP export): `/health/live` while the process serves,
//! `/health/ready` (and `/health`) while the servers it needs answer and its loop is not stuck.

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

/// What `/health/ready` adds beside its checks: a name and a JSON value (the projector's
/// progress), read at each request.
pub type Detail = (
    &'static str,
    Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
);

/// Serves a projector's metrics and health on `listen`: ready while Kafka and the store
/// answer and its loop is not stuck behind its lag, with its progress in the answer.
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
    let detail: Detail = (
        "projector",
        Arc::new(move || serde_json::to_value(health.report()).unwrap_or_default()),
    );
    serve(
        listen,
        &[sessionlog_projector::describe_metrics],
        readiness,
        Some(detail),
    )
    .await
}

/// Installs the process's metrics recorder (with `describe`'s help texts) and serves, on
/// `listen`, `/metrics`, `/health/live`, and `/health/ready` (and `/health`) answering
/// `readiness`'s checks and `detail`. The server runs on a background task for the life of the
/// process.
pub async fn serve(
    listen: &str,
    describe: &[fn()],
    readiness: Readiness,
    detail: Option<Detail>,
) -> Result<()> {
    let ready = move || {
        let (readiness, detail) = (readiness.clone(), detail.clone());
        async move {
            let (status, checks) = readiness.answer().await;
            let mut body = serde_json::json!({
                "status": checks.status,
                "checks": checks.checks,
            });
            if let Some((name, value)) = detail {
                body[name] = value();
            }
            (status, axum::Json(body)).into_response()
        }
    };
    let handle = sessionlog_http::metrics::install(describe);
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
