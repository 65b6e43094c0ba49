//! The HTTP layer the sessionlog services (ingest, recovery) share, so that they answer alike:
//!
//! - [`Problem`]: every error answer, an RFC 9457 `application/problem+json` document with a
//!   stable `code` member; [`JsonBody`], [`PathParams`] and [`QueryParams`] refuse bad input
//!   with one.
//! - The route kit: [`SessionPath`] (the session a path names, parsed once), [`WriterToken`]
//!   (the writer's header), [`Authorized`] (the role an operation needs, checked before the
//!   body is read), and named groups of problem answers for the OpenAPI document
//!   ([`problems!`], [`ServerProblems`], [`SessionProblems`], ...).
//! - [`Service`]: a service's `#[utoipa::path]` handlers become its router and its OpenAPI
//!   document at once: the API under `/v1` behind the [`Authenticator`] (where access control
//!   plugs in), `/health` and `/metrics` unversioned, `/v1/openapi.json`, 404/405 problems,
//!   panics as 500 problems, a request counter and a tracing span per request.
//! - [`Access`]: who may call (bearer JWTs against a JWKS, hashed API keys), and the
//!   [`Caller`] each handler asks for the role its operation needs.
//! - [`metrics::install`]: the process's Prometheus recorder, installed once.
//! - [`Readiness`]: the checks behind `/health/ready`: the servers a service needs.

pub mod auth;
mod error;
mod extract;
pub mod metrics;
mod problem;
mod producer;
mod ready;
pub mod responses;
mod service;

pub use auth::{Access, Approver, Authorized, Caller, Harness, Operator, Reader};
pub use error::Error;
pub use extract::{
    JsonBody, PathParams, QueryParams, SessionPath, WRITER_TOKEN_HEADER, WriterToken,
};
pub use problem::{PROBLEM_JSON, Problem, ProblemDocument, identifier, session_id};
pub use producer::{from_keys, log_error_status, store_error_status};
pub use ready::{CHECK_TIMEOUT, CheckOutcome, Liveness, Readiness, ReadinessReport};
pub use responses::{
    BodyProblems, InvalidRequest, ServerProblems, SessionBodyProblems, SessionProblems,
    UnknownSession,
};
pub use service::{API_PREFIX, Authenticator, Service, ServiceInfo, Unauthenticated};

/// For [`problems!`]: the `utoipa` the groups implement `IntoResponses` of.
#[doc(hidden)]
pub use utoipa as __utoipa;
