//! What a service answers when it cannot serve a request: an RFC 9457 problem document
//! (`application/problem+json`) with a stable `code` member that clients match on.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// The media type of every error answer (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A request a service refused, or could not serve.
///
/// 4xx for anything about the request; 503 only when a server behind the service (Kafka, the
/// registry, CQL) is unavailable, so a retry may succeed; 500 for everything else, which is a
/// bug and not worth retrying.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`wrong_seq`, `fenced`, ...).
    pub code: &'static str,
    /// What is wrong with this request, for a human.
    pub detail: String,
    /// Extension members (e.g. `expected_seq`), merged into the document.
    pub extensions: Map<String, Value>,
    /// Headers the answer carries besides the content type (`WWW-Authenticate` on a 401).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// The JSON document of a [`Problem`], as the services send it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemDocument {
    /// Identifies the problem type; `about:blank`: the `code` member tells the kinds apart.
    #[serde(rename = "type")]
    #[schema(example = "about:blank")]
    pub problem_type: String,
    /// The HTTP status's reason phrase.
    #[schema(example = "Conflict")]
    pub title: String,
    /// The HTTP status code.
    #[schema(example = 409)]
    pub status: u16,
    /// What is wrong with this request, for a human.
    #[schema(example = "expected seq 5, got 7")]
    pub detail: String,
    /// A stable, machine-readable code to match on.
    #[schema(example = "wrong_seq")]
    pub code: String,
    /// Extension members some codes carry (`expected_seq`, `current_epoch`, ...).
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}

impl Problem {
    /// A problem without extension members.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            extensions: Map::new(),
            headers: Vec::new(),
        }
    }

    /// A 500: a bug, not the request's fault and not worth retrying.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }

    /// Adds an extension member to the document.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_string(), value.into());
        self
    }

    /// Adds `Retry-After: seconds`: when a retry of this request may succeed.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.headers
            .push((header::RETRY_AFTER, HeaderValue::from(seconds)));
        self
    }

    /// The document sent as the body.
    pub fn document(&self) -> ProblemDocument {
        ProblemDocument {
            problem_type: "about:blank".into(),
            title: self
                .status
                .canonical_reason()
                .unwrap_or("Error")
                .to_string(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code.to_string(),
            extensions: self.extensions.clone(),
        }
    }
}

/// Marks a response as a problem with this code, for the service's problem counter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProblemCode(pub(crate) &'static str);

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), code = self.code, detail = %self.detail, "request failed");
        } else {
            tracing::debug!(status = self.status.as_u16(), code = self.code, detail = %self.detail, "request refused");
        }
        let mut response = (self.status, axum::Json(self.document())).into_response();
        response.headers_mut().extend(self.headers);
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response.extensions_mut().insert(ProblemCode(self.code));
        response
    }
}

impl From<JsonRejection> for Problem {
    fn from(rejection: JsonRejection) -> Self {
        let code = match &rejection {
            JsonRejection::JsonSyntaxError(_) => "malformed_json",
            JsonRejection::JsonDataError(_) => "invalid_request",
            JsonRejection::MissingJsonContentType(_) => "unsupported_media_type",
            _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            _ => "unreadable_body",
        };
        Self::new(rejection.status(), code, rejection.body_text())
    }
}

impl From<PathRejection> for Problem {
    fn from(rejection: PathRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_path", rejection.body_text())
    }
}

impl From<QueryRejection> for Problem {
    fn from(rejection: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
    }
}

/// Parses a session id from a path segment. The answer does not echo the segment: it may be
/// kilobytes long, or someone's own identifier.
pub fn session_id(text: &str) -> Result<sessionlog_schemas::SessionId, Problem> {
    text.parse().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_session_id",
            "the path's session id is not a session id (a UUID)",
        )
    })
}

/// Answers 422 `invalid_identifier` with the rule a client-chosen identifier breaks (see
/// [`sessionlog_session::limits`]), before anything is read or written.
pub fn identifier(
    kind: sessionlog_session::limits::IdentifierKind,
    text: &str,
) -> Result<(), Problem> {
    sessionlog_session::limits::check(kind, text).map_err(|bad| {
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_identifier",
            bad.to_string(),
        )
        .with("field", kind.field())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_the_rfc_9457_members_the_code_and_the_extensions() {
        let problem = Problem::new(StatusCode::CONFLICT, "wrong_seq", "expected seq 5, got 7")
            .with("expected_seq", 5);
        let document = serde_json::to_value(problem.document()).unwrap_or_default();
        assert_eq!(
            document,
            serde_json::json!({
                "type": "about:blank", "title": "Conflict", "status": 409,
                "detail": "expected seq 5, got 7", "code": "wrong_seq", "expected_seq": 5
            })
        );
        let response = problem.into_response();
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    }
}
