//! `/metrics` (Prometheus) and `/health` (JSON) for a running projector.

use anyhow::{Context, Result};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use sessionlog_projector::observe::Health;
use std::sync::Arc;

/// Installs the process's metrics recorder and serves it, with the projector's health, on
/// `listen`. The server runs on a background task for the life of the process.
pub async fn serve_metrics(listen: &str, health: Arc<Health>) -> Result<()> {
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
        .route(
            "/health",
            get(move || {
                let report = health.report();
                async move {
                    let status = if report.store_failing {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::OK
                    };
                    let body = serde_json::to_string(&report).unwrap_or_default();
                    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    tracing::info!(%listen, "serving /metrics and /health");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}
