//! Errors of the ingest service.

/// What can stop the ingest service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener failed while serving.
    #[error("ingest service: serving HTTP failed: {0}")]
    Serve(#[source] std::io::Error),
    /// Connecting to the log, or flushing the events in flight at shutdown, failed.
    #[error(transparent)]
    Producer(#[from] sessionlog_producer::Error),
    /// The projection could not be opened (run `sessionlog init` to create its keyspace).
    #[error("ingest service: opening the projection: {0}")]
    Store(#[from] sessionlog_store::Error),
}

/// Result with the ingest service's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
