//! Problem answers for `#[utoipa::path(responses(...))]`, in named groups: a route lists the
//! groups it may answer instead of repeating each problem's lines. [`problems!`] declares a
//! group; the groups here are the ones both services share.
//!
//! [`problems!`]: crate::problems

use crate::PROBLEM_JSON;
use std::collections::BTreeMap;
use utoipa::openapi::schema::Ref;
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};

/// The answers of a group, by status, as `IntoResponses` gives them.
pub type Answers = BTreeMap<String, RefOr<Response>>;

/// Declares a group of problem answers to list among a route's `responses(...)`: a unit
/// struct whose `IntoResponses` answers each status with its description and a `Problem`
/// document (`application/problem+json`), then the statuses of the groups named after `+`
/// that it does not describe itself (its own description of a status wins).
///
/// ```ignore
/// sessionlog_http::problems! {
///     /// What an append may refuse beyond what every session route may.
///     pub AppendProblems {
///         409 => "`wrong_seq`, `fenced`",
///         413 => "`too_large`, `too_many_events`",
///     } + sessionlog_http::SessionBodyProblems
/// }
/// ```
#[macro_export]
macro_rules! problems {
    (
        $(#[$doc:meta])*
        $vis:vis $name:ident { $($status:literal => $description:expr),* $(,)? }
        $(+ $($group:ident)::+)*
    ) => {
        $(#[$doc])*
        $vis struct $name;

        impl $crate::__utoipa::IntoResponses for $name {
            fn responses() -> $crate::responses::Answers {
                $crate::responses::group(
                    &[$((stringify!($status), $description)),*],
                    &[$(<$($group)::+ as $crate::__utoipa::IntoResponses>::responses),*],
                )
            }
        }
    };
}

/// The answers of a group: its own `(status, description)` problems, then each status of
/// `groups` it does not describe itself. [`problems!`](crate::problems) calls it.
#[doc(hidden)]
pub fn group(own: &[(&str, &str)], groups: &[fn() -> Answers]) -> Answers {
    let mut answers = problems(own);
    for answers_of in groups {
        for (status, answer) in answers_of() {
            answers.entry(status).or_insert(answer);
        }
    }
    answers
}

crate::problems! {
    /// What any route may answer when it is not the request's fault: 500 for a bug (retrying
    /// will not help), 503 when a server behind the service is unavailable (retry the same
    /// request).
    pub ServerProblems {
        500 => "`internal`: a bug in the service; retrying will not help",
        503 => "a server behind the service is unavailable (`unavailable`, `not_acknowledged`, \
                `backpressure`, `registry_unavailable`): retry the same request",
    }
}

crate::problems! {
    /// What a route with a session id in its path and a JSON body may answer about their form.
    pub BodyProblems {
        400 => "`malformed_json`: the body is not JSON; `bad_session_id`: the path's session id \
                is not a UUID",
        415 => "`unsupported_media_type`: send `content-type: application/json`",
    }
}

crate::problems! {
    /// A session the caller cannot see: it does not exist, or it is another tenant's (404
    /// either way, so nobody learns of another tenant's sessions).
    pub UnknownSession {
        404 => "`unknown_session`",
    }
}

crate::problems! {
    /// A JSON body of the wrong shape.
    pub InvalidRequest {
        422 => "`invalid_request`",
    }
}

crate::problems! {
    /// What a route with a session id in its path and no body may answer besides its own:
    /// the id is not one, the session is unknown, a server failed.
    pub SessionProblems {
        400 => "`bad_session_id`",
    } + UnknownSession + ServerProblems
}

crate::problems! {
    /// What a route with a session id in its path and a JSON body may answer besides its own:
    /// the body or the id is malformed, the session is unknown, a server failed.
    pub SessionBodyProblems {} + BodyProblems + UnknownSession + ServerProblems
}

/// Problem responses with these statuses and descriptions.
pub fn problems(answers: &[(&str, &str)]) -> Answers {
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

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::IntoResponses;

    fn descriptions(answers: Answers) -> Vec<(String, String)> {
        answers
            .into_iter()
            .map(|(status, answer)| match answer {
                RefOr::T(response) => (status, response.description),
                RefOr::Ref(_) => (status, "a reference".into()),
            })
            .collect()
    }

    crate::problems! {
        /// Describes 404 itself and takes the rest from the session groups.
        Own {
            404 => "`unknown_session`: not in the log",
            409 => "`fenced`",
        } + SessionProblems + InvalidRequest
    }

    #[test]
    fn a_group_answers_its_own_statuses_then_the_others_of_the_groups_it_names() {
        let answers = descriptions(Own::responses());
        let statuses: Vec<&str> = answers.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(statuses, ["400", "404", "409", "422", "500", "503"]);
        assert_eq!(answers[1].1, "`unknown_session`: not in the log");
        assert_eq!(answers[0].1, "`bad_session_id`");
        assert_eq!(answers[3].1, "`invalid_request`");
    }

    #[test]
    fn every_answer_is_a_problem_document() {
        for (_, answer) in SessionBodyProblems::responses() {
            let json = serde_json::to_value(&answer).unwrap_or_default();
            assert_eq!(
                json["content"][PROBLEM_JSON]["schema"]["$ref"], "#/components/schemas/Problem",
                "{json}"
            );
        }
        assert_eq!(
            descriptions(SessionBodyProblems::responses()).len(),
            5,
            "400, 404, 415, 500, 503"
        );
    }
}
