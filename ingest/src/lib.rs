//! HTTP ingest: the producer library over HTTP, for harnesses not written in Rust.
//!
//! The service is stateless: any instance serves any session. An append names the session,
//! the writer epoch create or claim answered, and each event's seq; the instance finds where
//! the session stands in a bounded cache of writers, else from the projection's row plus the
//! log after it ([`SessionWriter::current`]), never by folding the partition from its start.
//! Fencing stays the log's and the fold's: every append is confirmed by reading the session's
//! partition back to its events, so a 2xx means the fold accepted them, and a writer fenced by
//! a claim anywhere gets 409 `fenced`. A retried request (same seqs and event ids) is answered
//! with each event's first position, `duplicate: true`, whichever instance wrote it, and a
//! batch part of which reached the log before a failure is completed by its retry.
//!
//! Every answer for an event carries its durable position (partition, offset). Bad input gets
//! a 4xx problem (`application/problem+json`); only the servers behind the service cause a
//! 503, and a bug a 500. Routes and the OpenAPI document come from [`service`]: the handlers live in `routes`, a
//! module per route (or pair of routes on one path), on the route kit of `sessionlog-http`
//! (the session a path names, the writer token, roles, groups of problem answers).

mod error;
mod instance;
mod routes;

pub use error::{Error, Result};
pub use instance::Ingest;
pub use sessionlog_http::WRITER_TOKEN_HEADER;

use sessionlog_http::{Service, ServiceInfo};
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Requests answered, by `method`, `route` and `status`.
pub const REQUESTS_TOTAL: &str = "sessionlog_ingest_requests_total";
/// Events appended through the append route.
pub const EVENTS_TOTAL: &str = "sessionlog_ingest_events_total";
/// Texts the secret scan found a secret in, by `action` (`redacted`, `warned`) and `rule`.
pub const SECRETS_DETECTED_TOTAL: &str = "sessionlog_ingest_secrets_detected_total";
/// Sessions whose writer this instance holds in its cache.
pub const CACHED_SESSIONS: &str = "sessionlog_ingest_cached_sessions";
/// Events sent to Kafka and not yet acknowledged, in this process.
pub const IN_FLIGHT: &str = "sessionlog_producer_in_flight";
/// Times this instance read the log to bring a session's writer up to date: a writer not in
/// its cache, an append or epoch it did not expect, a checkpoint, a close, a lease release.
/// Each costs a round trip to the partition's leader and a read; what sessions cost per
/// request beyond their own appends.
pub const CATCH_UPS_TOTAL: &str = "sessionlog_ingest_catch_ups_total";

/// Gives the ingest metrics their `# HELP` lines; [`sessionlog_http::metrics::install`] calls it.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "HTTP requests the ingest service answered, by method, route and status."
    );
    metrics::describe_counter!(
        EVENTS_TOTAL,
        "Events appended to the log through POST /v1/sessions/{session_id}/events."
    );
    metrics::describe_counter!(
        SECRETS_DETECTED_TOTAL,
        "Texts appended through ingest in which the secret scan found a secret ([privacy] \
         secret_scan), by action and rule."
    );
    metrics::describe_gauge!(
        CACHED_SESSIONS,
        "Sessions whose writer this ingest instance holds in its cache (bounded by [ingest] cached_sessions)."
    );
    metrics::describe_gauge!(
        IN_FLIGHT,
        "Events sent to Kafka and not yet acknowledged by this process."
    );
    metrics::describe_counter!(
        CATCH_UPS_TOTAL,
        "Times this instance read the log to bring a session's writer up to date (a cache miss, an unexpected append or epoch, a checkpoint, a close, a lease release)."
    );
}

/// Counts a read of the log that brings a session's writer up to date ([`CATCH_UPS_TOTAL`]).
pub(crate) fn caught_up() {
    metrics::counter!(CATCH_UPS_TOTAL).increment(1);
}

/// What the ingest service is, for its document and its metrics.
const INFO: ServiceInfo = ServiceInfo {
    title: "sessionlog ingest",
    description: "Append durable agent-session events to the session log over HTTP. Create or \
        claim a session to get a writer epoch; append events with the seq you expect (gap-free \
        from 1) and an event_id, so that a retry is idempotent; every answer carries the durable \
        Kafka position (partition, offset). Errors are RFC 9457 problems whose `code` member is \
        stable.",
    requests_metric: REQUESTS_TOTAL,
    problems_metric: None,
};

/// The routes and their OpenAPI paths; needs no running service.
pub fn service() -> Service<Arc<Ingest>> {
    Service::new(
        INFO,
        OpenApiRouter::new()
            .routes(routes!(
                routes::create::create,
                routes::create::find_by_name
            ))
            .routes(routes!(routes::claim::claim))
            .routes(routes!(routes::append::append))
            .routes(routes!(routes::checkpoint::checkpoint))
            .routes(routes!(routes::checkpoint::close))
            .routes(routes!(
                routes::lease::renew_lease,
                routes::lease::release_lease
            )),
        OpenApiRouter::new(),
    )
}
