//! What goes wrong: [`Error`] for starting the console, [`Refused`] for a request the console
//! answers with an error page (the status and the reason, escaped like every value).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sessionlog_http::Problem;

/// Why the console could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The deployment's services run without authentication, and the console was not told it
    /// may too.
    #[error(
        "[auth] mode is \"disabled\": the services let anyone in, so the console cannot check a \
         login; pass `--no-auth` to serve it without one (on a trusted network only)"
    )]
    AuthDisabled,
}

/// A request answered with an error page.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) detail: String,
}

impl Refused {
    pub(crate) fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_string(),
            detail: detail.into(),
        }
    }
}

impl From<Problem> for Refused {
    fn from(problem: Problem) -> Self {
        Self {
            status: problem.status,
            code: problem.code.to_string(),
            detail: problem.detail,
        }
    }
}

impl From<sessionlog_recovery::Error> for Refused {
    fn from(e: sessionlog_recovery::Error) -> Self {
        Problem::from(e).into()
    }
}

impl From<sessionlog_store::Error> for Refused {
    fn from(e: sessionlog_store::Error) -> Self {
        sessionlog_recovery::Error::from(e).into()
    }
}

impl From<sessionlog_wake::Error> for Refused {
    fn from(e: sessionlog_wake::Error) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the lease topic could not be read: {e}"),
        )
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let page = crate::pages::refused(&self);
        (self.status, page).into_response()
    }
}
