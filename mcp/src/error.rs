//! The MCP server's errors: what a caller asked wrong, and what failed behind it.

use sessionlog_schemas::SessionId;

/// What went wrong serving a request, or starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be answered as asked (a bad range, kind, cursor, budget, seq).
    #[error("{0}")]
    Invalid(String),
    /// The session is unknown here: not projected yet, or not one this caller may read.
    #[error("unknown session {0}")]
    UnknownSession(SessionId),
    /// The index knows the event, and the topic no longer holds its record.
    #[error("the event's record is gone from the log: {0}")]
    Missing(String),
    /// A scan ran out of its time budget before it could answer.
    #[error("{0}")]
    OverBudget(String),
    /// A read task failed to finish.
    #[error("a read task failed: {0}")]
    Task(String),
    /// Reading the history failed.
    #[error(transparent)]
    Recovery(#[from] sessionlog_recovery::Error),
    /// The HTTP layer could not start (access settings, binding).
    #[error(transparent)]
    Http(#[from] sessionlog_http::Error),
    /// The listener or stdio failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The MCP transport failed.
    #[error("the MCP service stopped: {0}")]
    Service(String),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;
