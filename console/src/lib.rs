//! The console (`sessionlog console`): web pages where operators and approvers see sessions and
//! decide what waits for them. One more door onto the recovery library: every action calls the
//! function the recovery service's HTTP handler calls (`decide_approval`, `record_resolution`,
//! `operate`), checked by the same authenticator, roles and tenants, so the fold, the
//! signatures and the audit lines are the same whichever door a person uses.
//!
//! Security: a person logs in once with a bearer token or an API key; the console keeps it on
//! the server and gives the browser an opaque login id in an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` behind TLS). Every form carries the login's CSRF token; every page is sent
//! with a Content-Security-Policy that allows scripts from the console alone (one: the live
//! timeline's, a few lines of our own pinned by its integrity hash; no inline script), and
//! every value is escaped by the templates ([`maud`]).
//!
//! `login` keeps logins and checks callers, `pages` renders, `inbox`, `sessions`, `session`
//! and `fleet` read what the pages show, `actions` handles the forms.

mod actions;
mod error;
mod fleet;
mod inbox;
mod login;
mod pages;
mod session;
mod sessions;

pub use error::Error;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sessionlog_http::Authenticator;
use sessionlog_recovery::Recovery;
use std::sync::Arc;

/// How the console serves.
#[derive(Clone, Debug)]
pub struct Options {
    /// Ask for a login (a bearer token or an API key). Off only with `--no-auth`, for a
    /// deployment whose services run with `[auth] mode = "disabled"`.
    pub authenticate: bool,
    /// Browsers reach the console over HTTPS (a TLS-terminating proxy in front): cookies are
    /// `Secure` and `__Host-` prefixed.
    pub behind_tls: bool,
}

/// What every page handler shares.
pub(crate) struct Console {
    pub(crate) recovery: Arc<Recovery>,
    pub(crate) access: Arc<dyn Authenticator>,
    pub(crate) logins: login::Logins,
    pub(crate) options: Options,
}

/// The policy every answer carries: scripts and styles only from the console (no inline
/// script or style), connections (the live timeline's events) only to it, forms only to it,
/// never framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

/// The stylesheet, served from `/static/console.css` (the policy forbids inline styles).
const STYLESHEET: &str = include_str!("../static/console.css");

/// The console's routes over `recovery`, letting in whom `access` lets in.
pub fn router(recovery: Arc<Recovery>, access: Arc<dyn Authenticator>, options: Options) -> Router {
    let console = Arc::new(Console {
        recovery,
        access,
        logins: login::Logins::default(),
        options,
    });
    Router::new()
        .route("/", get(inbox::page))
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/sessions", get(sessions::list))
        .route("/sessions/{session_id}", get(session::page))
        .route("/sessions/{session_id}/live", get(session::live))
        .route("/sessions/{session_id}/context", get(session::context))
        .route("/sessions/{session_id}/lineage", get(session::lineage))
        .route(
            "/sessions/{session_id}/checkpoints",
            get(session::checkpoints),
        )
        .route("/sessions/{session_id}/trace", get(session::trace))
        .route(
            "/sessions/{session_id}/erase",
            get(session::erase_form).post(actions::erase),
        )
        .route("/sessions/{session_id}/fork", post(actions::fork))
        .route("/fleet", get(fleet::page))
        .route(
            "/sessions/{session_id}/approvals/{approval_id}",
            post(actions::decide),
        )
        .route("/sessions/{session_id}/resolutions", post(actions::resolve))
        .route("/sessions/{session_id}/pause", post(actions::pause))
        .route("/sessions/{session_id}/unpause", post(actions::unpause))
        .route("/sessions/{session_id}/steering", post(actions::steer))
        .route("/static/console.css", get(stylesheet))
        .route(session::LIVE_SCRIPT_PATH, get(live_script))
        .route("/health/live", get(|| async { "live" }))
        .route("/health/ready", get(ready))
        .fallback(not_found)
        .layer(middleware::from_fn(secure_headers))
        .with_state(console)
}

async fn stylesheet() -> Response {
    static_asset("text/css; charset=utf-8", STYLESHEET)
}

async fn live_script() -> Response {
    static_asset("text/javascript; charset=utf-8", session::LIVE_SCRIPT)
}

/// One of the console's own files, cached by browsers for an hour.
fn static_asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// Ready while the servers recovery needs answer (its own readiness checks).
async fn ready(State(console): State<Arc<Console>>) -> Response {
    console
        .recovery
        .readiness()
        .clone()
        .answer()
        .await
        .into_response()
}

async fn not_found() -> Response {
    error::Refused::new(
        axum::http::StatusCode::NOT_FOUND,
        "no such page",
        "there is no page at this address",
    )
    .into_response()
}

/// Puts the policy and the other protective headers on every answer; pages are not cached.
async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |name, value: &'static str| (name, HeaderValue::from_static(value));
    for (name, value) in [
        set(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        set(header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        set(header::X_FRAME_OPTIONS, "DENY"),
        set(header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, value);
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
