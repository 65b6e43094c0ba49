//! Errors of the recovery service.

/// What can go wrong recovering a session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The registry, or a record that does not decode.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// The projection store.
    #[error(transparent)]
    Store(#[from] sessionlog_projector::Error),
    /// No event of the session is in the log.
    #[error("unknown session {0}: no event of it is in the log")]
    UnknownSession(String),
}

/// Result with recovery's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
