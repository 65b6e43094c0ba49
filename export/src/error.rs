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
    /// The key store: renewing a session's key, or asking whether a session was erased
    /// before its texts are sent.
    #[error("key store (is a session whose texts the export holds erased?): {0}")]
    Keys(#[from] sessionlog_keys::Error),
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
    /// The receiver refused a request in a way no retry changes. Nothing from the refused
    /// batch on is committed: after the fix, the export starts again there.
    #[error("the OTLP receiver at {endpoint} refused the spans with HTTP {status}: {refusal}")]
    ReceiverRefused {
        /// The endpoint.
        endpoint: String,
        /// Its answer.
        status: u16,
        /// What the status means, and the fix.
        refusal: Refusal,
    },
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

/// Why a receiver refused a request for good (see [`Error::ReceiverRefused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401 or 403.
    Credentials,
    /// 404 or 405.
    Endpoint,
    /// 413 for a request of one span: raise the receiver's limit.
    TooLarge,
    /// 415.
    Format,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Credentials => {
                "it refuses the credentials (missing, wrong or not allowed): pass its key with \
                 --header, e.g. --header \"authorization=Bearer <key>\""
            }
            Self::Endpoint => "no traces endpoint there: check --endpoint (/v1/traces included)",
            Self::TooLarge => {
                "a single span is larger than it takes: raise the receiver's request size limit"
            }
            Self::Format => {
                "it does not take OTLP/HTTP protobuf: point --endpoint at one that does"
            }
        })
    }
}

/// The export's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
impl Error {
    /// Whether the key store did not answer: worth waiting out, like a receiver's outage.
    pub fn is_key_store_outage(&self) -> bool {
        matches!(self, Self::Keys(e) if e.is_store())
    }
}
