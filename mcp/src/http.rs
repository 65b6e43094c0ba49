//! The Streamable HTTP endpoint (`/mcp`) behind the services' bearer credentials, and the
//! protected-resource metadata (RFC 9728) the MCP authorization spec points clients at.
//!
//! Every request to `/mcp` is checked before the MCP layer sees it: a credential the HTTP
//! services accept ([`sessionlog_http::Access`]), the `reader` role, and a session it may read:
//! the one the server was started for, or else the one the credential is narrowed to. A
//! credential narrowed to another session, or of another tenant, gets 404 as if the session did
//! not exist; none (or a bad one) gets 401 with `WWW-Authenticate` naming the metadata.

use crate::reader::{Reader, Target};
use crate::server::HistoryServer;
use crate::{Error, Result};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use sessionlog_http::{Access, Authenticator, Caller, Problem};
use sessionlog_log::Role;
use sessionlog_recovery::Scope;
use sessionlog_schemas::SessionId;
use std::sync::Arc;

/// Where the MCP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";
/// The protected-resource metadata (RFC 9728), at the root and for the `/mcp` resource.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// How the HTTP endpoint is set up.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The session served; `None`: the one each credential is narrowed to.
    pub session: Option<SessionId>,
    /// The URL clients reach this server at (`http://127.0.0.1:8097`), for the metadata.
    pub public_url: String,
    /// Authorization servers that issue tokens for this resource (the metadata lists them).
    pub authorization_servers: Vec<String>,
}

struct Gate {
    access: Access,
    options: HttpOptions,
    reader: Reader,
    /// Started sessions' tenants as their projected rows had them: a session's tenant is fixed
    /// by its start, so a request need not ask the store again (a CQL read per tool call).
    tenants: std::sync::Mutex<lru::LruCache<SessionId, String>>,
}

/// Sessions whose tenant a server remembers.
const TENANTS_KEPT: usize = 10_000;

/// The router: `/mcp` behind the access check, the metadata and `/health` open.
pub fn router(reader: Reader, access: Access, options: HttpOptions) -> Router {
    let host = options
        .public_url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_string();
    let hostname = host
        .rsplit_once(':')
        .map_or(host.as_str(), |(name, _)| name)
        .to_string();
    // rmcp refuses other Host headers (DNS rebinding); the public URL's host is this server's.
    let config = StreamableHttpServerConfig::default().with_allowed_hosts([
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
        host,
        hostname,
    ]);
    let server = HistoryServer::new(reader.clone(), None);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let gate = Arc::new(Gate {
        access,
        options,
        reader,
        tenants: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(TENANTS_KEPT).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
    });
    let mcp = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(Arc::clone(&gate), check));
    Router::new()
        .route(METADATA_PATH, get(metadata))
        .route(&format!("{METADATA_PATH}{MCP_PATH}"), get(metadata))
        .route("/health", get(ready))
        .route("/health/ready", get(ready))
        .route("/health/live", get(|| async { "live" }))
        .with_state(gate)
        .merge(mcp)
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    use axum::serve::ListenerExt;
    // An answer streamed as server-sent events goes out in several small writes; with Nagle's
    // algorithm on, the last waits for the client's delayed ACK (about 40 ms a request).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Io {
            what: "serving MCP over HTTP".into(),
            source,
        })
}

/// The protected-resource metadata: what this resource is and where its tokens come from.
async fn metadata(State(gate): State<Arc<Gate>>) -> Response {
    let base = gate.options.public_url.trim_end_matches('/');
    let mut document = serde_json::json!({
        "resource": format!("{base}{MCP_PATH}"),
        "bearer_methods_supported": ["header"],
        "resource_name": "sessionlog session history (MCP)",
    });
    if !gate.options.authorization_servers.is_empty() {
        document["authorization_servers"] = gate.options.authorization_servers.clone().into();
    }
    axum::Json(document).into_response()
}

/// Ready while the servers every read needs answer (Kafka, the registry, the store): the
/// recovery library's checks.
async fn ready(State(gate): State<Arc<Gate>>) -> Response {
    gate.reader
        .recovery()
        .readiness()
        .answer()
        .await
        .into_response()
}

/// The access check in front of `/mcp`.
async fn check(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Err(problem) = gate.access.authenticate(&mut parts).await {
        return refused(&gate, problem);
    }
    let Some(caller) = parts.extensions.get::<Caller>().cloned() else {
        return refused(&gate, Problem::internal("no caller after authentication"));
    };
    match target(&gate, &caller).await {
        Ok(target) => {
            parts.extensions.insert(target);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(problem) => refused(&gate, problem),
    }
}

impl Gate {
    /// `session`'s tenant, from memory or its projected row (`None`: not projected).
    async fn tenant_of(&self, session: SessionId) -> std::result::Result<Option<String>, Problem> {
        let remembered = |tenants: &std::sync::Mutex<lru::LruCache<SessionId, String>>| {
            tenants
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&session)
                .cloned()
        };
        if let Some(tenant) = remembered(&self.tenants) {
            return Ok(Some(tenant));
        }
        let state = self
            .reader
            .recovery()
            .store()
            .session_state(session)
            .await
            .map_err(|e| Problem::from(sessionlog_recovery::Error::from(e)))?;
        let Some(state) = state else {
            return Ok(None);
        };
        // Only a started session's tenant is fixed: a row the projector wrote for an event it
        // refused before any start holds the default, which the start may still change.
        if state.started {
            self.tenants
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .put(session, state.tenant.clone());
        }
        Ok(Some(state.tenant))
    }
}

/// The session `caller` reads here, or the refusal.
async fn target(gate: &Gate, caller: &Caller) -> std::result::Result<Target, Problem> {
    caller.require(Role::Reader)?;
    let session = match (gate.options.session, caller.session) {
        (Some(served), _) => served,
        (None, Some(narrowed)) => narrowed,
        (None, None) => {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "session_required",
                "this MCP server serves the session a credential is narrowed to: mint one with \
                 `sessionlog token mint --role reader --session ID` (or start the server with \
                 --session ID)",
            ));
        }
    };
    caller.require_for(Role::Reader, session)?;
    if caller.tenant.is_some() {
        // The reads go by the projection, so the tenant does too: a session it does not have
        // is unknown here whoever asks.
        let tenant = match gate.tenant_of(session).await? {
            Some(tenant) => tenant,
            None => return Err(caller.unknown_session(session, "unknown_session")),
        };
        caller.require_tenant(session, &tenant)?;
    }
    let scope = match caller.session {
        Some(_) => Scope::Session,
        None => Scope::Family,
    };
    Ok(Target { session, scope })
}

/// The problem as an answer; a 401's challenge names the resource metadata (RFC 9728 §5.1), so
/// a standard MCP client finds where to get a token.
fn refused(gate: &Gate, mut problem: Problem) -> Response {
    if problem.status == StatusCode::UNAUTHORIZED {
        let base = gate.options.public_url.trim_end_matches('/');
        let metadata = format!("{base}{METADATA_PATH}{MCP_PATH}");
        let challenge = problem
            .headers
            .iter()
            .find(|(name, _)| name == header::WWW_AUTHENTICATE)
            .and_then(|(_, value)| value.to_str().ok())
            .unwrap_or("Bearer realm=\"sessionlog\"")
            .to_string();
        problem
            .headers
            .retain(|(name, _)| name != header::WWW_AUTHENTICATE);
        if let Ok(value) =
            HeaderValue::from_str(&format!("{challenge}, resource_metadata=\"{metadata}\""))
        {
            problem.headers.push((header::WWW_AUTHENTICATE, value));
        }
    }
    problem.into_response()
}
