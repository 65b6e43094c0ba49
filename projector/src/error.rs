//! Errors of the projector.

/// What can go wrong projecting the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The CQL store: unreachable, refused a statement, or holds a row it cannot read.
    #[error(transparent)]
    Store(#[from] sessionlog_store::Error),
    /// The schema registry failed.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
}

/// Result with the projector's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
