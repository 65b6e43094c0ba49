//! The wake component's errors.

/// What can stop the wake component.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The projection store, read for each session's state.
    #[error(transparent)]
    Store(#[from] sessionlog_store::Error),
    /// The registry, unreachable while decoding events.
    #[error(transparent)]
    Schemas(#[from] sessionlog_schemas::Error),
    /// A blocking task (the group's first commit) did not finish.
    #[error("the wake component's start-up task failed: {0}")]
    Task(String),
}

/// Result with the wake component's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
