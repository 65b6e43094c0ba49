//! `/metrics` (Prometheus text) and `/health` (JSON) for a running projector.

use anyhow::{Context, Result};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use sessionlog_projector::observe::{self, Health};
use std::sync::Arc;
use std::time::Duration;

/// Installs the Prometheus recorder and serves it, with the projector's health, on `listen`.
/// The server runs on a background task for the life of the process.
pub async fn serve_metrics(listen: &str, health: Arc<Health>) -> Result<()> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), observe::LATENCY_BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        // Histograms are drained into their buckets by upkeep; without it they only grow.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
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
