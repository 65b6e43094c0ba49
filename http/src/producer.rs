//! How the producer library's errors answer over HTTP, for every service that appends.

use crate::Problem;
use axum::http::StatusCode;
use sessionlog_producer::Error;
use sessionlog_schemas::Error as SchemaError;
use sessionlog_session::Rejection;

impl From<Error> for Problem {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::Refused(rejection) => from_rejection(rejection, message),
            Error::Fenced { epoch, current } => Self::new(StatusCode::CONFLICT, "fenced", message)
                .with("epoch", epoch)
                .with("current_epoch", current),
            Error::Rejected {
                seq,
                offset,
                rejection,
            } => from_rejection(rejection, message)
                .with("seq", seq)
                .with("offset", offset),
            Error::Projection(e) => {
                let (status, code) = store_error_status(&e);
                Self::new(status, code, message)
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
            Error::StartDeleted { .. } => Self::new(StatusCode::CONFLICT, "start_deleted", message),
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
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "backpressure", message).retry_after(1)
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
            Error::ProjectionBehind {
                partition,
                unprojected,
                limit,
            } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "projection_behind",
                message,
            )
            .with("partition", partition)
            .with("lag", unprojected)
            .with("limit", limit)
            .retry_after(1),
            Error::Log(sessionlog_log::Error::TailBehind {
                partition, behind, ..
            }) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "tail_behind", message)
                .with("partition", partition)
                .with("behind", behind)
                .retry_after(1),
            Error::Log(e) => {
                let (status, code) = log_error_status(&e);
                Self::new(status, code, message)
            }
            Error::Keys(e) => from_keys(&e, message),
            Error::Schema(_)
            | Error::Unconfirmed { .. }
            | Error::KeyStore(_)
            | Error::Attestation { .. } => Self::internal(message),
        }
    }
}

/// How an error of the log answers: Kafka failing or too slow is an outage a retry may outlive
/// (503 `unavailable`); anything else (a setting, a bug) is a 500 `internal`.
pub fn log_error_status(error: &sessionlog_log::Error) -> (StatusCode, &'static str) {
    match error {
        sessionlog_log::Error::Kafka { .. } | sessionlog_log::Error::Timeout { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// How an error of the store answers: CQL down or failing is an outage a retry may outlive
/// (503 `unavailable`); a missing or old keyspace, a bad name or a corrupt row is fixed by a
/// setting or a command, not by a retry (500 `internal`).
pub fn store_error_status(error: &sessionlog_store::Error) -> (StatusCode, &'static str) {
    match error {
        sessionlog_store::Error::Connect { .. } | sessionlog_store::Error::Cql { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
        sessionlog_store::Error::Contended { .. } => (StatusCode::SERVICE_UNAVAILABLE, "contended"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl From<sessionlog_store::Error> for Problem {
    fn from(error: sessionlog_store::Error) -> Self {
        let (status, code) = store_error_status(&error);
        Self::new(status, code, error.to_string())
    }
}

/// How a sealing error answers: the caller's content (sealed by someone else), the session's
/// state (erased), the key store being away (retry), or a setting (the operator's to fix).
pub fn from_keys(error: &sessionlog_keys::Error, message: String) -> Problem {
    use sessionlog_keys::Error as K;
    match error {
        K::AlreadySealed { seq, .. } => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "sealed_content", message)
                .with("seq", *seq)
        }
        K::Erased(_) => Problem::new(StatusCode::CONFLICT, "session_erased", message),
        K::SecretNotSealable { seq, field, rule } => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "secret_detected", message)
                .with("seq", *seq)
                .with("field", *field)
                .with("rule", rule.as_str())
        }
        K::Store(_) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "key_store_unavailable",
            message,
        ),
        K::NoKek
        | K::KekFile { .. }
        | K::KekFormat { .. }
        | K::UnknownKek { .. }
        | K::Unwrap { .. }
        | K::SecretRules { .. } => Problem::internal(message),
    }
}

fn from_rejection(rejection: Rejection, message: String) -> Problem {
    let conflict = |code| Problem::new(StatusCode::CONFLICT, code, message.clone());
    match rejection {
        Rejection::Gap { expected, got } => conflict("wrong_seq")
            .with("expected_seq", expected)
            .with("seq", got),
        Rejection::SeqConflict { seq } => conflict("seq_conflict").with("seq", seq),
        Rejection::Zombie { epoch, current } => conflict("fenced")
            .with("epoch", epoch)
            .with("current_epoch", current),
        Rejection::UnclaimedEpoch { epoch, current } => conflict("unknown_epoch")
            .with("epoch", epoch)
            .with("current_epoch", current),
        Rejection::StaleClaim { epoch, current } => conflict("lost_claim")
            .with("epoch", epoch)
            .with("current_epoch", current),
        Rejection::AfterTerminal => conflict("session_ended"),
        Rejection::NotStarted | Rejection::AlreadyStarted => conflict(rejection.label()),
        Rejection::Invalid(_) => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event", message)
        }
        Rejection::Gated(gate) => from_gate(&gate, message),
        Rejection::Unsigned { .. } => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "unsigned", message)
        }
        Rejection::WriterTokenRequired => conflict("writer_token_required"),
        // The right epoch with another writer's token: fenced, as an older epoch is.
        Rejection::WrongWriterToken { epoch } => conflict("fenced").with("epoch", epoch),
    }
}

/// A session waiting for someone (an operator, a decision, an unpause), or a takeover that
/// would leave a call in doubt: 409 with the wait's stable code, naming what it waits on.
pub fn from_gate(gate: &sessionlog_session::Gate, message: String) -> Problem {
    use sessionlog_session::Gate;
    let problem = Problem::new(StatusCode::CONFLICT, gate.label(), message);
    match gate {
        Gate::NeedsResolution { calls } | Gate::CallInDoubt { calls } => {
            problem.with("calls", calls.clone())
        }
        Gate::AwaitingApproval { approvals } => problem.with("approvals", approvals.clone()),
        Gate::Paused => problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kafka_outage_is_retryable_not_a_bug() {
        for log_error in [
            sessionlog_log::Error::Timeout {
                what: "read-back".into(),
                seconds: 30,
            },
            sessionlog_log::Error::Kafka {
                action: "read",
                source: rdkafka::error::KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::AllBrokersDown,
                ),
            },
        ] {
            let problem = Problem::from(Error::Log(log_error));
            assert_eq!(problem.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(problem.code, "unavailable");
        }
    }
}
