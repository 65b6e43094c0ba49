//! The recovery service over HTTP: rebuild, resume, fork, lineage, diff, ranges of a session's
//! history, resolutions and approvals, on the shared layer of `sessionlog-http`. Bad input gets
//! a 4xx problem (`application/problem+json`); a server recovery depends on (Kafka, the
//! registry, CQL) being unavailable gets a 503; anything else is a bug and gets a 500. The
//! handlers live in `routes`, a module per route or family of routes, on the route kit of
//! `sessionlog-http` (the session a path names, roles, groups of problem answers).

use crate::Recovery;
use crate::routes::{events, fork, operators, privacy, resume, session, traces, work};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use sessionlog_http::{Authenticator, Service, ServiceInfo};
use std::sync::Arc;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use crate::routes::visible;

/// Requests answered, by `method`, `route` and `status`.
pub const REQUESTS_TOTAL: &str = "sessionlog_recovery_requests_total";

/// Gives the recovery service's own metric its `# HELP` line; the library's are described by
/// [`crate::describe_metrics`]. The metrics installer calls both.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "HTTP requests the recovery service answered, by method, route and status."
    );
}

const INFO: ServiceInfo = ServiceInfo {
    title: "sessionlog recovery",
    description: "Rebuild a session from the log, resume it without repeating a side effect, \
        settle in-doubt tool calls, decide approvals, and fork with lineage. Errors are RFC 9457 \
        problems whose `code` member is stable.",
    requests_metric: REQUESTS_TOTAL,
    problems_metric: Some(crate::observe::ERRORS),
};

/// The routes and their OpenAPI paths; needs no connection.
pub fn service() -> Service<Arc<Recovery>> {
    Service::new(
        INFO,
        OpenApiRouter::new()
            .routes(routes!(session::get_session))
            .routes(routes!(resume::resume))
            .routes(routes!(fork::fork))
            .routes(routes!(fork::lineage))
            .routes(routes!(traces::trace))
            .routes(routes!(traces::usage))
            .routes(routes!(traces::spans))
            .routes(routes!(fork::diff))
            .routes(routes!(events::events))
            .routes(routes!(operators::resolve))
            .routes(routes!(operators::pause))
            .routes(routes!(operators::unpause))
            .routes(routes!(operators::steer))
            .routes(routes!(operators::approve))
            .routes(routes!(privacy::erase))
            .routes(routes!(privacy::erasure))
            .routes(routes!(privacy::redact, privacy::redactions))
            .routes(routes!(operators::needing_resolution))
            .routes(routes!(work::work)),
        OpenApiRouter::new(),
    )
}

/// The service's router over `recovery`, rendering `metrics` at `/metrics`, letting through
/// whom `access` lets through.
pub fn router(
    recovery: Recovery,
    metrics: PrometheusHandle,
    access: Arc<dyn Authenticator>,
) -> Router {
    let readiness = recovery.readiness().clone();
    let desk = Arc::new(crate::work::WorkDesk::new(recovery.settings()));
    service()
        .readiness(readiness)
        .router(Arc::new(recovery), metrics, access)
        .layer(axum::Extension(desk))
}

/// The service's OpenAPI 3.1 document, as `/v1/openapi.json` serves it.
pub fn openapi() -> OpenApi {
    service().openapi()
}
