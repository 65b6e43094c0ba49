//! One router shape for every sessionlog HTTP service: its API under `/v1` behind the
//! [`Authenticator`], `/health` and `/metrics` unversioned beside it, `/v1/openapi.json`
//! generated from the handlers, problems for unknown routes, wrong methods and panics, a
//! request counter and a tracing span per request.

use crate::problem::ProblemCode;
use crate::{Liveness, Problem, Readiness, ReadinessReport};
use axum::Router;
use axum::extract::{Extension, MatchedPath, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The prefix of every API route; infrastructure routes (`/health`, `/metrics`) have none.
pub const API_PREFIX: &str = "/v1";

/// What a service is, for its OpenAPI document and its metrics.
#[derive(Debug, Clone, Copy)]
pub struct ServiceInfo {
    /// The document's title, e.g. `sessionlog ingest`.
    pub title: &'static str,
    /// What the service is for, for the document.
    pub description: &'static str,
    /// The counter of answered requests, labelled `method`, `route` and `status`.
    pub requests_metric: &'static str,
    /// The counter of problem answers, labelled `code`, if the service keeps one.
    pub problems_metric: Option<&'static str>,
}

/// Decides whether a request to an API (`/v1`) route may go on.
///
/// This is the one place access control plugs in: the shared router runs the service's
/// authenticator before every `/v1` handler (not for `/health` and `/metrics`, which stay open
/// to probes and scrapers). An implementation checks the request's credentials, may record
/// who the caller is in `request.extensions` for the handlers, and refuses with a problem
/// (401 or 403). Today's only implementation is [`Unauthenticated`].
pub trait Authenticator: Send + Sync + 'static {
    /// `Ok` lets the request through; `Err` answers it with the problem.
    fn authenticate<'a>(
        &'a self,
        request: &'a mut axum::http::request::Parts,
    ) -> Pin<Box<dyn Future<Output = Result<(), Problem>> + Send + 'a>>;
}

/// No access control: every caller may use every route. The services run inside a trusted
/// network until an authenticator replaces this.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unauthenticated;

impl Authenticator for Unauthenticated {
    fn authenticate<'a>(
        &'a self,
        _request: &'a mut axum::http::request::Parts,
    ) -> Pin<Box<dyn Future<Output = Result<(), Problem>> + Send + 'a>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A service's routes before they are served: the API (mounted under [`API_PREFIX`]) and the
/// unversioned infrastructure, both annotated with `#[utoipa::path]`.
pub struct Service<S> {
    info: ServiceInfo,
    api: OpenApiRouter<S>,
    infrastructure: OpenApiRouter<S>,
    before_scrape: Option<ScrapeHook>,
    readiness: Readiness,
}

/// Runs before `/metrics` renders, to set gauges read from the service's state.
type ScrapeHook = Arc<dyn Fn() + Send + Sync>;

impl<S: Clone + Send + Sync + 'static> Service<S> {
    /// A service with `api` routes (paths relative to `/v1`; `/openapi.json` is added) and
    /// `infrastructure` routes (`/metrics`, `/health`, `/health/live` and `/health/ready` are
    /// added).
    pub fn new(info: ServiceInfo, api: OpenApiRouter<S>, infrastructure: OpenApiRouter<S>) -> Self {
        Self {
            info,
            api: api.routes(routes!(openapi_document)),
            infrastructure,
            before_scrape: None,
            readiness: Readiness::new(),
        }
    }

    /// What `/health/ready` (and `/health`) asks; without it the service is always ready.
    pub fn readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = readiness;
        self
    }

    /// Runs `hook` before each `/metrics` rendering, e.g. to set gauges from the state.
    pub fn before_scrape(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.before_scrape = Some(Arc::new(hook));
        self
    }

    /// Every route with its OpenAPI path, the shared ones included.
    fn assemble(self) -> OpenApiRouter<S> {
        let base = OpenApiBuilder::new()
            // The problem responses refer to it by name.
            .components(Some(
                ComponentsBuilder::new()
                    .schema_from::<crate::ProblemDocument>()
                    .build(),
            ))
            .info(
                InfoBuilder::new()
                    .title(self.info.title)
                    .version(env!("CARGO_PKG_VERSION"))
                    .description(Some(self.info.description))
                    .build(),
            )
            .build();
        OpenApiRouter::with_openapi(base)
            .nest(API_PREFIX, self.api)
            .merge(self.infrastructure)
            .routes(routes!(render_metrics))
            .routes(routes!(health))
            .routes(routes!(ready))
            .routes(routes!(live))
    }

    /// The OpenAPI 3.1 document: what `/v1/openapi.json` serves. Needs no state or servers.
    pub fn openapi(self) -> OpenApi {
        secured(self.assemble().into_openapi())
    }

    /// The router, with `authenticator` in front of every `/v1` route.
    pub fn router(
        mut self,
        state: S,
        metrics: PrometheusHandle,
        authenticator: Arc<dyn Authenticator>,
    ) -> Router {
        let counters = Counters {
            requests: self.info.requests_metric,
            problems: self.info.problems_metric,
        };
        let scrape = Scrape {
            metrics,
            before: self.before_scrape.take(),
        };
        self.api = self.api.route_layer(middleware::from_fn_with_state(
            Arc::clone(&authenticator),
            authenticate,
        ));
        let readiness = Probe {
            readiness: self.readiness.clone(),
            authenticator,
        };
        let (router, document) = self.assemble().with_state(state).split_for_parts();
        let document = secured(document);
        let document = Arc::new(serde_json::to_value(&document).unwrap_or_default());
        router
            .fallback(no_such_route)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(Extension(OpenApiJson(document)))
            .layer(Extension(scrape))
            .layer(Extension(readiness))
            // Innermost: a panic becomes a 500 problem that the counter and the span see.
            .layer(CatchPanicLayer::custom(panicked))
            .layer(middleware::from_fn_with_state(counters, count))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(|request: &Request| {
                        // Method and route only: the URI holds ids and bodies hold payloads.
                        tracing::info_span!(
                            "http",
                            method = %request.method(),
                            route = route_of(request),
                            status = tracing::field::Empty,
                        )
                    })
                    .on_response(
                        |response: &Response,
                         latency: std::time::Duration,
                         span: &tracing::Span| {
                            span.record("status", response.status().as_u16());
                            tracing::debug!(latency_ms = latency.as_millis() as u64, "answered");
                        },
                    ),
            )
    }
}

/// The document with its access model: a bearer scheme (a JWT or an API key) required by
/// every `/v1` operation, each of which may answer 401 and 403.
fn secured(mut document: OpenApi) -> OpenApi {
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };
    let components = document.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A JWT (RS256 or ES256, from the JWKS the service trusts) or an API key \
                     (`slk_...`). `sessionlog token mint` makes a development token.",
                ))
                .build(),
        ),
    );
    let answers = crate::responses::problems(&[
        (
            "401",
            "`unauthenticated`: no credential; `invalid_token`: expired, wrong issuer or audience, \
             unknown key or bad signature (see `WWW-Authenticate`)",
        ),
        (
            "403",
            "`forbidden`: the caller lacks the role this operation needs, or its credential is \
             narrowed to one session",
        ),
    ]);
    for (path, item) in document.paths.paths.iter_mut() {
        if !path.starts_with(API_PREFIX) {
            continue;
        }
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            operation.security = Some(vec![SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
            for (status, answer) in &answers {
                operation
                    .responses
                    .responses
                    .entry(status.clone())
                    .or_insert_with(|| answer.clone());
            }
        }
    }
    document
}

/// What `/metrics` renders.
#[derive(Clone)]
struct Scrape {
    metrics: PrometheusHandle,
    before: Option<ScrapeHook>,
}

/// The served document, shared by every request.
#[derive(Clone)]
struct OpenApiJson(Arc<serde_json::Value>);

/// The route template a request matched, e.g. `/v1/sessions/{session_id}/events`.
fn route_of(request: &Request) -> String {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string())
}

async fn authenticate(
    State(authenticator): State<Arc<dyn Authenticator>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Err(problem) = authenticator.authenticate(&mut parts).await {
        return problem.into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// The metrics every answer counts in.
#[derive(Clone, Copy)]
struct Counters {
    requests: &'static str,
    problems: Option<&'static str>,
}

async fn count(State(counters): State<Counters>, request: Request, next: Next) -> Response {
    let (method, route) = (request.method().to_string(), route_of(&request));
    let response = next.run(request).await;
    if let (Some(name), Some(ProblemCode(code))) = (
        counters.problems,
        response.extensions().get::<ProblemCode>(),
    ) {
        metrics::counter!(name, "code" => *code).increment(1);
    }
    metrics::counter!(
        counters.requests,
        "method" => method,
        "route" => route,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}

fn panicked(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a handler panicked".to_string());
    tracing::error!(panic = %message, "handler panicked");
    Problem::internal(format!(
        "the service hit a bug and answered nothing: {message}"
    ))
    .into_response()
}

async fn no_such_route(uri: Uri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
        format!(
            "no route {}; GET {API_PREFIX}/openapi.json lists them",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not answer {method}; GET {API_PREFIX}/openapi.json lists its methods",
            uri.path()
        ),
    )
}

/// This service's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "infrastructure",
    responses((status = 200, description = "the OpenAPI 3.1 document", body = Object, content_type = "application/json"))
)]
async fn openapi_document(Extension(OpenApiJson(document)): Extension<OpenApiJson>) -> Response {
    axum::Json(document.as_ref().clone()).into_response()
}

/// Prometheus metrics of this process, in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "infrastructure",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"))
)]
async fn render_metrics(Extension(scrape): Extension<Scrape>) -> Response {
    if let Some(before) = &scrape.before {
        before();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        scrape.metrics.render(),
    )
        .into_response()
}

/// Readiness (as `/health/ready`): whether the servers the service needs answer.
#[utoipa::path(
    get,
    path = "/health",
    tag = "infrastructure",
    responses(
        (status = 200, description = "ready (each check's outcome for a caller with the operator role)", body = ReadinessReport),
        (status = 503, description = "a server the service needs does not answer (which one, for a caller with the operator role)", body = ReadinessReport),
    )
)]
async fn health(Extension(probe): Extension<Probe>, request: Request) -> Response {
    probe.answer(request).await
}

/// What the readiness routes need: the checks, and the authenticator that tells an operator
/// (who sees each check's outcome) from anyone else (who sees ready or not ready).
#[derive(Clone)]
struct Probe {
    readiness: Readiness,
    authenticator: Arc<dyn Authenticator>,
}

impl Probe {
    /// The readiness report; its details (each check, and what failed, which names internal
    /// addresses) only for a caller authenticated with the operator role.
    async fn answer(&self, request: Request) -> Response {
        let (mut parts, _) = request.into_parts();
        let operator = parts
            .headers
            .contains_key(axum::http::header::AUTHORIZATION)
            && self.authenticator.authenticate(&mut parts).await.is_ok()
            && parts
                .extensions
                .get::<crate::Caller>()
                .is_some_and(|caller| caller.roles.contains(&sessionlog_log::Role::Operator));
        let (status, axum::Json(mut report)) = self.readiness.answer().await;
        if !operator {
            report.checks.clear();
        }
        (status, axum::Json(report)).into_response()
    }
}

/// Readiness: every server the service needs answers; 503 names those that do not.
#[utoipa::path(
    get,
    path = "/health/ready",
    tag = "infrastructure",
    responses(
        (status = 200, description = "ready (each check's outcome for a caller with the operator role)", body = ReadinessReport),
        (status = 503, description = "a server the service needs does not answer (which one, for a caller with the operator role)", body = ReadinessReport),
    )
)]
async fn ready(Extension(probe): Extension<Probe>, request: Request) -> Response {
    probe.answer(request).await
}

/// Liveness: the process serves requests, whatever the servers behind it do.
#[utoipa::path(
    get,
    path = "/health/live",
    tag = "infrastructure",
    responses((status = 200, description = "serving", body = Liveness))
)]
async fn live() -> axum::Json<Liveness> {
    axum::Json(Liveness::LIVE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JsonBody, PathParams};
    use axum::body::Body;
    use serde::Deserialize;
    use serde_json::Value;
    use tower::ServiceExt;

    #[derive(Deserialize, utoipa::ToSchema)]
    struct Greeting {
        name: String,
    }

    /// Greets.
    #[utoipa::path(post, path = "/greetings/{count}", request_body = Greeting,
        params(("count" = u32, Path, description = "how often")),
        responses((status = 200, description = "greeted", body = String)))]
    async fn greet(PathParams(count): PathParams<u32>, JsonBody(g): JsonBody<Greeting>) -> String {
        format!("hello {} x{count}", g.name)
    }

    /// Panics.
    #[utoipa::path(get, path = "/panic", responses((status = 500, description = "always")))]
    async fn panic_here() -> String {
        panic!("a bug in a handler")
    }

    const INFO: ServiceInfo = ServiceInfo {
        title: "test",
        description: "a test service",
        requests_metric: "sessionlog_http_test_requests_total",
        problems_metric: Some("sessionlog_http_test_problems_total"),
    };

    fn service() -> Service<()> {
        Service::new(
            INFO,
            OpenApiRouter::new()
                .routes(routes!(greet))
                .routes(routes!(panic_here)),
            OpenApiRouter::new(),
        )
    }

    /// Refuses requests without `x-test-key: yes`.
    struct KeyRequired;

    impl Authenticator for KeyRequired {
        fn authenticate<'a>(
            &'a self,
            request: &'a mut axum::http::request::Parts,
        ) -> Pin<Box<dyn Future<Output = Result<(), Problem>> + Send + 'a>> {
            let allowed = request
                .headers
                .get("x-test-key")
                .is_some_and(|v| v == "yes");
            Box::pin(async move {
                allowed.then_some(()).ok_or_else(|| {
                    Problem::new(StatusCode::UNAUTHORIZED, "unauthenticated", "no key")
                })
            })
        }
    }

    async fn call(
        router: &Router,
        method: &str,
        uri: &str,
        body: &str,
    ) -> (StatusCode, String, Value) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap_or_default();
        let response = router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, content_type, body)
    }

    fn router() -> Router {
        service().router((), crate::metrics::install(&[]), Arc::new(Unauthenticated))
    }

    #[tokio::test]
    async fn api_routes_live_under_v1_and_infrastructure_beside_it() {
        let router = router();
        let (status, _, body) =
            call(&router, "POST", "/v1/greetings/2", r#"{"name": "ada"}"#).await;
        assert_eq!(
            call(&router, "POST", "/v1/greetings/2", "{").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            (status, body),
            (StatusCode::OK, Value::from("hello ada x2"))
        );
        assert_eq!(call(&router, "GET", "/health", "").await.0, StatusCode::OK);
        let (status, _, metrics) = call(&router, "GET", "/metrics", "").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            metrics
                .as_str()
                .is_some_and(|m| m.contains("sessionlog_http_test_requests_total")
                    && m.contains("sessionlog_http_test_problems_total{code=\"malformed_json\"}")),
            "{metrics}"
        );
        let (status, _, document) = call(&router, "GET", "/v1/openapi.json", "").await;
        assert_eq!(status, StatusCode::OK);
        let mut paths: Vec<_> = document["paths"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        paths.sort();
        assert_eq!(
            paths,
            [
                "/health",
                "/health/live",
                "/health/ready",
                "/metrics",
                "/v1/greetings/{count}",
                "/v1/openapi.json",
                "/v1/panic"
            ]
        );
        assert_eq!(
            document,
            serde_json::to_value(service().openapi()).unwrap_or_default()
        );
    }

    #[tokio::test]
    async fn bad_input_unknown_routes_wrong_methods_and_panics_are_problems() {
        let router = router();
        let cases = [
            (
                "POST",
                "/v1/greetings/2",
                "{",
                StatusCode::BAD_REQUEST,
                "malformed_json",
            ),
            (
                "POST",
                "/v1/greetings/2",
                "{}",
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
            ),
            (
                "POST",
                "/v1/greetings/two",
                r#"{"name": "a"}"#,
                StatusCode::BAD_REQUEST,
                "bad_path",
            ),
            (
                "GET",
                "/v1/nowhere",
                "",
                StatusCode::NOT_FOUND,
                "no_such_route",
            ),
            (
                "GET",
                "/v1/greetings/2",
                "",
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            ),
            (
                "POST",
                "/health",
                "",
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            ),
            (
                "GET",
                "/v1/panic",
                "",
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
            ),
        ];
        for (method, uri, body, status, code) in cases {
            let (got, content_type, problem) = call(&router, method, uri, body).await;
            assert_eq!(
                (got, problem["code"].as_str()),
                (status, Some(code)),
                "{method} {uri}: {problem}"
            );
            assert_eq!(content_type, crate::PROBLEM_JSON, "{method} {uri}");
            assert_eq!(problem["status"], status.as_u16(), "{method} {uri}");
            assert!(
                problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{problem}"
            );
        }
    }

    #[tokio::test]
    async fn the_authenticator_guards_every_v1_route_and_nothing_else() {
        let router = service().router((), crate::metrics::install(&[]), Arc::new(KeyRequired));
        for uri in ["/v1/greetings/1", "/v1/openapi.json"] {
            let method = if uri.contains("greetings") {
                "POST"
            } else {
                "GET"
            };
            let (status, _, problem) = call(&router, method, uri, r#"{"name": "a"}"#).await;
            assert_eq!(
                (status, problem["code"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthenticated")),
                "{uri}"
            );
        }
        assert_eq!(call(&router, "GET", "/health", "").await.0, StatusCode::OK);
        assert_eq!(call(&router, "GET", "/metrics", "").await.0, StatusCode::OK);
    }
}
