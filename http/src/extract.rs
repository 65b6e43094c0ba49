//! Axum's JSON body, path and query extractors, refusing with a [`Problem`] instead of plain
//! text, and the two every session route takes: [`SessionPath`], the session its path names,
//! and [`WriterToken`], the token a writer presents.

use crate::Problem;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use sessionlog_schemas::SessionId;

/// A JSON request body; a body that is not JSON is a 400 problem, JSON that does not fit the
/// type a 422, a missing `content-type: application/json` a 415, a body over the limit a 413.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Problem> {
        let axum::Json(value) = axum::Json::<T>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// Path parameters; ones that do not fit the type are a 400 problem.
#[derive(Debug, Clone)]
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// Query parameters; a query that does not fit the type (a repeated parameter, say) is a 400
/// problem (`bad_query`). Routes whose parameters need their own messages take them as text
/// and parse them themselves.
#[derive(Debug, Clone)]
pub struct QueryParams<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The session a route's path names (`{session_id}`), parsed once: a segment that is not a
/// session id is a 400 problem (`bad_session_id`) that does not echo the segment (it may be
/// kilobytes long, or someone's own identifier); a segment that is not UTF-8 a 400 `bad_path`.
/// Its OpenAPI parameter is "the session"; a route that says more of it (the parent, the fork)
/// describes the parameter itself.
#[derive(Debug, Clone, Copy, utoipa::IntoParams)]
#[into_params(names("session_id"), parameter_in = Path)]
pub struct SessionPath(
    /// the session
    #[param(value_type = uuid::Uuid)]
    pub SessionId,
);

impl<S: Send + Sync> FromRequestParts<S> for SessionPath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        /// The one parameter this extractor reads; a route's others are left to theirs.
        #[derive(serde::Deserialize)]
        struct Segment {
            session_id: String,
        }
        let PathParams(Segment { session_id }) =
            PathParams::from_request_parts(parts, state).await?;
        crate::session_id(&session_id).map(Self)
    }
}

/// The header a writer presents its token in (create, claim and resume answer the token).
pub const WRITER_TOKEN_HEADER: &str = "sessionlog-writer-token";

/// The writer token a request presents (`Sessionlog-Writer-Token`), if any: a value that is
/// not plain text is a 400 problem (`invalid_request`). Whether a token is needed, and whose
/// it is, is the session's writer's to judge.
#[derive(Debug, Clone, Default, utoipa::IntoParams)]
#[into_params(names("Sessionlog-Writer-Token"), parameter_in = Header)]
pub struct WriterToken(
    /// the writer token create, claim or resume answered; required when the session's writer holds one
    pub Option<String>,
);

impl WriterToken {
    /// The token, if the request presented one.
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for WriterToken {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        parts
            .headers
            .get(WRITER_TOKEN_HEADER)
            .map(|value| {
                value.to_str().map(str::to_string).map_err(|_| {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        "the Sessionlog-Writer-Token header is not plain text",
                    )
                })
            })
            .transpose()
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use tower::ServiceExt;
    use utoipa::IntoParams;

    /// A session route that answers the id and token its extractors found.
    fn route() -> Router {
        Router::new().route(
            "/sessions/{session_id}/{approval_id}",
            post(
                |SessionPath(id): SessionPath, token: WriterToken| async move {
                    format!("{id} {}", token.as_deref().unwrap_or("-"))
                },
            ),
        )
    }

    async fn answer(uri: &str, token: Option<&[u8]>) -> (StatusCode, String) {
        let mut request = Request::post(uri);
        if let Some(token) = token {
            request = request.header(WRITER_TOKEN_HEADER, token);
        }
        let request = request.body(Body::empty()).unwrap_or_default();
        let response = match route().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn code(body: &str) -> String {
        let document: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        document["code"].as_str().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn a_session_path_is_parsed_once_and_a_bad_one_is_the_handlers_old_400() {
        let id = SessionId::new();
        let (status, body) = answer(&format!("/sessions/{id}/a"), Some(b"t0k")).await;
        assert_eq!((status, body), (StatusCode::OK, format!("{id} t0k")));
        let (status, body) = answer(&format!("/sessions/{id}/a"), None).await;
        assert_eq!((status, body), (StatusCode::OK, format!("{id} -")));

        let long = "x".repeat(4_000);
        let (status, body) = answer(&format!("/sessions/{long}/a"), None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "bad_session_id".into())
        );
        assert!(!body.contains("xxxx"), "the segment is not echoed: {body}");
        let refused = crate::session_id("not-a-uuid").err().map(|p| p.document());
        let document: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        assert_eq!(
            document["detail"],
            refused.map(|d| d.detail).unwrap_or_default()
        );

        let (status, body) = answer("/sessions/%FF/a", None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "bad_path".into())
        );
    }

    #[tokio::test]
    async fn a_writer_token_that_is_not_text_is_a_400() {
        let id = SessionId::new();
        let (status, body) = answer(&format!("/sessions/{id}/a"), Some(b"\xff\xfe")).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request".into())
        );
        assert!(body.contains("Sessionlog-Writer-Token"), "{body}");
    }

    #[test]
    fn the_parameters_are_documented_as_the_routes_wrote_them_by_hand() {
        let documented = |params: Vec<utoipa::openapi::path::Parameter>| {
            serde_json::to_value(params).unwrap_or_default()
        };
        assert_eq!(
            documented(SessionPath::into_params(|| None)),
            serde_json::json!([{
                "name": "session_id", "in": "path", "description": "the session",
                "required": true, "schema": { "type": "string", "format": "uuid" }
            }])
        );
        assert_eq!(
            documented(WriterToken::into_params(|| None)),
            serde_json::json!([{
                "name": "Sessionlog-Writer-Token", "in": "header",
                "description": "the writer token create, claim or resume answered; required when the session's writer holds one",
                "required": false, "schema": { "type": ["string", "null"] }
            }])
        );
    }
}
