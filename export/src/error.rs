//! What can stop an export.

/// An export's errors; each says which setting or command fixes it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka or settings.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// The registry.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// Rebuilding a session the export met mid-way (the store or the log).
    #[error(transparent)]
    Recovery(#[from] sessionlog_recovery::Error),
    /// The OTLP exporter could not be built from the options.
    #[error("cannot export to {endpoint}: {source} (check --endpoint and --header)")]
    Exporter {
        /// The endpoint asked for.
        endpoint: String,
        /// Why.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The receiver did not answer (`sessionlog doctor`).
    #[error(
        "the OTLP receiver at {endpoint} did not answer: {source} (is it up? --otlp-endpoint or \
         SESSIONLOG_OTLP_ENDPOINT names it, /v1/traces included)"
    )]
    ReceiverUnreachable {
        /// The endpoint asked.
        endpoint: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP client for the receiver could not be built.
    #[error("cannot build the HTTP client for the receiver: {0}")]
    Client(#[source] reqwest::Error),
    /// Resetting the group's offsets was refused: the group has members.
    #[error(
        "cannot move consumer group {group} to the requested start: {source} (stop every `sessionlog export-otlp --group {group}` first)"
    )]
    Reset {
        /// The consumer group.
        group: String,
        /// Kafka's answer.
        source: rdkafka::error::KafkaError,
    },
}

/// The export's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
