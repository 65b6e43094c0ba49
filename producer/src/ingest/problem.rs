//! What the ingest service answers when a request cannot be served: a status and a JSON body
//! `{"error": <stable code>, "message": <what is wrong>, ...details}`.

use crate::Error;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sessionlog_schemas::Error as SchemaError;
use sessionlog_session::Rejection;

/// A request the service refused, or could not serve.
#[derive(Debug)]
pub struct Problem {
    /// The HTTP status: 4xx for anything about the input, 5xx only for the servers behind us.
    pub status: StatusCode,
    /// A stable, machine-readable code (`wrong_seq`, `stale_epoch`, ...).
    pub code: &'static str,
    /// What is wrong, for a human.
    pub message: String,
    /// Extra fields (e.g. `expected_seq`), merged into the body.
    pub details: Map<String, Value>,
}

impl Problem {
    /// A problem without details.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds a detail field to the body.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut body = self.details.clone();
        body.insert("error".into(), json!(self.code));
        body.insert("message".into(), json!(self.message));
        Value::Object(body)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
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

impl From<Error> for Problem {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::Refused(rejection) => from_rejection(rejection, message),
            Error::Fenced { epoch, current } => {
                Self::new(StatusCode::CONFLICT, "stale_epoch", message)
                    .with("epoch", epoch)
                    .with("current_epoch", current)
            }
            Error::LostClaim { epoch, current } => {
                Self::new(StatusCode::CONFLICT, "lost_claim", message)
                    .with("epoch", epoch)
                    .with("current_epoch", current)
            }
            Error::TooLarge { size, limit } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
                    .with("size", size)
                    .with("limit", limit)
            }
            Error::BatchTooLong { events, limit } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_many_events", message)
                    .with("events", events)
                    .with("limit", limit)
            }
            Error::UnknownSession(_) => {
                Self::new(StatusCode::NOT_FOUND, "unknown_session", message)
            }
            // Numbers the Avro schema cannot carry, and the like: the event's fault.
            Error::Schema(
                SchemaError::OutOfRange { .. }
                | SchemaError::Encode(_)
                | SchemaError::Malformed { .. },
            ) => Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event", message),
            Error::Backpressure { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "backpressure", message)
            }
            Error::NotAcknowledged { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "not_acknowledged", message)
            }
            Error::RegistryUnavailable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "registry_unavailable",
                message,
            ),
            Error::Schema(e) if e.is_retriable() => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "registry_unavailable",
                message,
            ),
            Error::Log(_) | Error::Schema(_) | Error::Unconfirmed { .. } | Error::Serve(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
            }
        }
    }
}

fn from_rejection(rejection: Rejection, message: String) -> Problem {
    let conflict = |code| Problem::new(StatusCode::CONFLICT, code, message.clone());
    match rejection {
        Rejection::Gap { expected, got } => conflict("wrong_seq")
            .with("expected_seq", expected)
            .with("seq", got),
        Rejection::SeqConflict { seq } => conflict("seq_conflict").with("seq", seq),
        Rejection::Zombie { epoch, current }
        | Rejection::UnclaimedEpoch { epoch, current }
        | Rejection::StaleClaim { epoch, current } => conflict("stale_epoch")
            .with("epoch", epoch)
            .with("current_epoch", current),
        Rejection::AfterTerminal => conflict("session_ended"),
        Rejection::NotStarted | Rejection::AlreadyStarted => conflict(rejection.label()),
        Rejection::Invalid(_) => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event", message)
        }
    }
}
