//! Problem answers that many routes share, for `#[utoipa::path(responses(...))]`: list the
//! type among a route's responses instead of repeating the lines.

use crate::PROBLEM_JSON;
use std::collections::BTreeMap;
use utoipa::IntoResponses;
use utoipa::openapi::schema::Ref;
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};

/// What any route may answer when it is not the request's fault: 500 for a bug (retrying will
/// not help), 503 when a server behind the service is unavailable (retry the same request).
pub struct ServerProblems;

impl IntoResponses for ServerProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problems(&[
            (
                "500",
                "`internal`: a bug in the service; retrying will not help",
            ),
            (
                "503",
                "a server behind the service is unavailable (`unavailable`, `not_acknowledged`, \
                 `backpressure`, `registry_unavailable`): retry the same request",
            ),
        ])
    }
}

/// What a route with a session id in its path and a JSON body may answer about their form.
pub struct BodyProblems;

impl IntoResponses for BodyProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problems(&[
            (
                "400",
                "`malformed_json`: the body is not JSON; `bad_session_id`: the path's session id \
                 is not a UUID",
            ),
            (
                "415",
                "`unsupported_media_type`: send `content-type: application/json`",
            ),
        ])
    }
}

/// Problem responses with these statuses and descriptions.
pub fn problems(answers: &[(&str, &str)]) -> BTreeMap<String, RefOr<Response>> {
    answers
        .iter()
        .map(|(status, description)| {
            let response = ResponseBuilder::new()
                .description(*description)
                .content(
                    PROBLEM_JSON,
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build(),
                )
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}
