//! Exit statuses every command keeps, and errors as JSON with `--json`.
//!
//! - 0: done.
//! - 1: a difference (`verify`), a failed check (`schemas check`), or any other failure the
//!   command reports.
//! - 2: usage: arguments clap refuses (an unknown flag, a bad value).
//! - 3: a server unavailable: Kafka, the schema registry or CQL could not be reached (see
//!   [`unavailable`] for what is recognised as such).

use serde::Serialize;
use std::error::Error as StdError;
use std::process::ExitCode;

/// Done.
pub const OK: u8 = 0;
/// A difference, a failed check, or another failure.
pub const FAILED: u8 = 1;
/// The arguments were refused.
pub const USAGE: u8 = 2;
/// A server could not be reached.
pub const UNAVAILABLE: u8 = 3;

/// What `--json` prints on stderr for an error.
#[derive(Debug, Serialize)]
struct JsonError<'a> {
    error: &'a str,
    exit_code: u8,
}

/// The exit status for a command's error: [`UNAVAILABLE`] when any error in its chain says a
/// server could not be reached, [`FAILED`] otherwise.
pub fn code(error: &anyhow::Error) -> u8 {
    if error.chain().any(unavailable) {
        UNAVAILABLE
    } else {
        FAILED
    }
}

/// Prints a command's error on stderr (a JSON object with `json`) and returns its status.
pub fn report(error: &anyhow::Error, json: bool) -> ExitCode {
    let code = code(error);
    print(&format!("{error:#}"), code, json);
    ExitCode::from(code)
}

/// Handles arguments clap refused: help and version as clap prints them (status 0), anything
/// else as a usage error (status 2), a JSON object when the arguments asked for `--json`.
pub fn usage(error: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    let printable = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    if printable || !json {
        let _ = error.print();
        return ExitCode::from(if printable { OK } else { USAGE });
    }
    print(error.to_string().trim_end(), USAGE, true);
    ExitCode::from(USAGE)
}

fn print(message: &str, code: u8, json: bool) {
    if json {
        let value = JsonError {
            error: message,
            exit_code: code,
        };
        match serde_json::to_string(&value) {
            Ok(line) => eprintln!("{line}"),
            Err(_) => eprintln!("error: {message}"),
        }
    } else {
        eprintln!("error: {message}");
    }
}

/// Servers a command found unreachable among other findings it reported (`sessionlog
/// doctor` checks every server and prints what it found before it fails): exit status 3.
#[derive(Debug)]
pub struct Unreachable(pub String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Unreachable {}

/// Whether `error` says a server could not be reached, as opposed to refused us or failed a
/// request it understood. Recognised: the registry unreachable (network errors, timeouts and
/// 5xx answers, in the registry client and `schemas list|check`); CQL nodes that cannot be
/// connected to (not those that refuse the credentials or TLS); Kafka's all brokers down,
/// transport failures, resolve failures and timed-out operations or messages; a refused,
/// reset or timed-out connection anywhere; and [`Unreachable`].
pub fn unavailable(error: &(dyn StdError + 'static)) -> bool {
    if error.is::<Unreachable>() {
        return true;
    }
    if let Some(e) = error.downcast_ref::<sessionlog_schemas::Error>() {
        return matches!(e, sessionlog_schemas::Error::RegistryUnreachable { .. });
    }
    if let Some(e) = error.downcast_ref::<sessionlog_store::Error>() {
        return store_unavailable(e);
    }
    if let Some(e) = error.downcast_ref::<sessionlog_log::Error>() {
        return log_unavailable(e);
    }
    if let Some(e) = error.downcast_ref::<rdkafka::error::KafkaError>() {
        return kafka_unavailable(e);
    }
    // Wrappers whose variants are `#[error(transparent)]`: the chain skips the inner error,
    // so it is looked at here.
    if let Some(e) = error.downcast_ref::<sessionlog_producer::Error>() {
        use sessionlog_producer::Error as P;
        return match e {
            P::RegistryUnavailable { .. } => true,
            P::Log(e) => log_unavailable(e),
            P::Schema(e) => unavailable(e),
            P::Projection(e) => store_unavailable(e),
            P::NotAcknowledged { source, .. } => kafka_unavailable(source),
            _ => false,
        };
    }
    if let Some(e) = error.downcast_ref::<sessionlog_recovery::Error>() {
        use sessionlog_recovery::Error as R;
        return match e {
            R::Log(e) => log_unavailable(e),
            R::Schema(e) => unavailable(e),
            R::Store(e) => store_unavailable(e),
            R::Producer(e) => unavailable(e),
            _ => false,
        };
    }
    if let Some(e) = error.downcast_ref::<reqwest::Error>() {
        return e.is_connect() || e.is_timeout();
    }
    if let Some(e) = error.downcast_ref::<std::io::Error>() {
        use std::io::ErrorKind as K;
        return matches!(
            e.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::TimedOut
                | K::HostUnreachable
                | K::NetworkUnreachable
        );
    }
    false
}

fn store_unavailable(error: &sessionlog_store::Error) -> bool {
    // The store words its connect hint from the driver's error: credentials and TLS are
    // settings to fix, anything else is a node not reached.
    matches!(error, sessionlog_store::Error::Connect { hint, .. } if hint.starts_with("is the store up"))
}

fn log_unavailable(error: &sessionlog_log::Error) -> bool {
    matches!(error, sessionlog_log::Error::Kafka { source, .. } if kafka_unavailable(source))
}

fn kafka_unavailable(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;
    let code = match error {
        KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    matches!(
        code,
        Some(
            C::AllBrokersDown
                | C::BrokerTransportFailure
                | C::Resolve
                | C::OperationTimedOut
                | C::MessageTimedOut
                | C::RequestTimedOut
                | C::BrokerNotAvailable
                | C::NetworkException
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    fn registry_unreachable() -> sessionlog_schemas::Error {
        sessionlog_schemas::Error::RegistryUnreachable {
            url: "http://127.0.0.1:1".into(),
            source: "connection refused".into(),
        }
    }

    #[test]
    fn a_server_not_reached_is_3_through_contexts_and_wrappers() {
        let registry = anyhow::Error::new(registry_unreachable()).context("registering");
        assert_eq!(code(&registry), UNAVAILABLE);
        let wrapped =
            anyhow::Error::new(sessionlog_recovery::Error::Schema(registry_unreachable()));
        assert_eq!(code(&wrapped), UNAVAILABLE);
        let kafka = sessionlog_log::Error::Kafka {
            action: "fetching metadata",
            source: KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown),
        };
        assert_eq!(code(&anyhow::Error::new(kafka)), UNAVAILABLE);
        let admin = sessionlog_producer::Error::Log(sessionlog_log::Error::Kafka {
            action: "creating topics",
            source: KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut),
        });
        assert_eq!(code(&anyhow::Error::new(admin)), UNAVAILABLE);
        let store = sessionlog_store::Error::Connect {
            nodes: "127.0.0.1:1".into(),
            hint: "is the store up? cql.nodes names it",
            source: "refused".into(),
        };
        assert_eq!(code(&anyhow::Error::new(store)), UNAVAILABLE);
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            code(&Err::<(), _>(io).context("dialling").unwrap_err()),
            UNAVAILABLE
        );
    }

    #[test]
    fn refusals_and_other_failures_are_1() {
        let refused = sessionlog_schemas::Error::Registry {
            url: "http://r".into(),
            message: "401".into(),
        };
        assert_eq!(code(&anyhow::Error::new(refused)), FAILED);
        let credentials = sessionlog_store::Error::Connect {
            nodes: "n".into(),
            hint: "check cql.username and cql.password",
            source: "bad credentials".into(),
        };
        assert_eq!(code(&anyhow::Error::new(credentials)), FAILED);
        let topic = sessionlog_log::Error::Kafka {
            action: "creating topics",
            source: KafkaError::AdminOp(RDKafkaErrorCode::TopicAuthorizationFailed),
        };
        assert_eq!(code(&anyhow::Error::new(topic)), FAILED);
        assert_eq!(code(&anyhow::anyhow!("keyspaces a and b differ")), FAILED);
    }

    #[test]
    fn usage_errors_are_2() {
        use clap::Parser;
        let error = crate::Cli::try_parse_from(["sessionlog", "--no-such-flag"])
            .expect_err("an unknown flag is refused");
        assert_eq!(usage(error, true), ExitCode::from(USAGE));
    }
}
