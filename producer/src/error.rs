//! Errors of the producer library.

use sessionlog_session::Rejection;

/// What can go wrong appending to the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Settings or topic set-up failed.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// Encoding, or the schema registry, failed.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// Kafka did not acknowledge the event. It may or may not be in the log: retry the same
    /// envelope (same seq and event id), which the fold treats as a harmless duplicate.
    #[error("kafka did not acknowledge event seq {seq} of session {session}: {source}")]
    NotAcknowledged {
        /// The session.
        session: String,
        /// The event's seq.
        seq: u64,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The event breaks the session's rules and was not sent.
    #[error("event refused before sending: {0}")]
    Refused(Rejection),
    /// Another harness claimed the session with a later epoch: this writer must stop.
    #[error("fenced: epoch {epoch} was superseded by epoch {current}")]
    Fenced {
        /// This writer's epoch.
        epoch: u64,
        /// The session's current epoch.
        current: u64,
    },
    /// The encoded event is larger than the configured limit.
    #[error("event of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// Result with the producer's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
