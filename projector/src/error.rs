//! Errors of the projector.

/// What can go wrong projecting the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The CQL store could not be reached or refused a statement.
    #[error("cql {action}: {message}")]
    Store {
        /// What we were doing.
        action: &'static str,
        /// The driver's error.
        message: String,
    },
    /// The schema registry failed.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// A stored row could not be read back (e.g. state written by an incompatible version).
    #[error("stored row of session {session}: {message}")]
    CorruptRow {
        /// Which session.
        session: String,
        /// What was wrong.
        message: String,
    },
}

impl Error {
    /// Wraps a driver error with what we were doing.
    pub fn store<E: std::fmt::Display>(action: &'static str) -> impl FnOnce(E) -> Self {
        move |e| Self::Store {
            action,
            message: e.to_string(),
        }
    }
}

/// Result with the projector's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
