//! Errors of the log crate.

/// What can go wrong talking to the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file or environment could not be read.
    // The source (figment's error) names the key and the file or variable it came from;
    // anyhow's chain prints it after this line, so it is not repeated here.
    #[error("invalid settings (fix the key in the file or the SESSIONLOG_* variable named here)")]
    Config(#[from] Box<figment::Error>),
    /// A setting has a value the servers would refuse.
    #[error("invalid setting {key}: {problem} (fix it in the file or its SESSIONLOG_* variable)")]
    BadSetting {
        /// The setting, as `section.key`.
        key: String,
        /// What is wrong with its value.
        problem: String,
    },
    /// Kafka refused or failed an operation.
    #[error("kafka {action}: {source}{hint}", hint = kafka_hint(source))]
    Kafka {
        /// What we were doing.
        action: &'static str,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The topic exists but its shape does not match the configuration.
    #[error("topic {topic}: {problem}")]
    TopicMismatch {
        /// Which topic.
        topic: String,
        /// What differs.
        problem: String,
    },
    /// The schema registry could not be asked for a record's schema (an outage: try again).
    #[error("reading a record's schema from the registry (registry.url)")]
    Registry(#[source] sessionlog_schemas::Error),
    /// A topic the settings name is not on the cluster.
    #[error("topic {topic} does not exist (`sessionlog init` creates it; {setting} names it)")]
    TopicMissing {
        /// Which topic.
        topic: String,
        /// The setting that names it.
        setting: &'static str,
    },
    /// A dead letter's address is not `PARTITION:OFFSET`.
    #[error(
        "{text:?} is not a dead letter: expected PARTITION:OFFSET of the dead-letter topic, \
         such as 0:17 (`sessionlog dlq list` shows them)"
    )]
    BadDeadLetterId {
        /// What was given.
        text: String,
    },
    /// A blocking Kafka call's task died.
    #[error("background task failed: {0}")]
    Task(String),
    /// A condition was not met before its deadline.
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: String,
        /// How long.
        seconds: u64,
    },
    /// The process's tail of the log had not read as far as an append's own records when
    /// the wait for it ran out: the consumer is behind the partition (a burst beyond what it
    /// reads, or brokers away). Nothing is wrong with the append: retry it (same seq and event
    /// id), which answers it once the tail catches up.
    #[error(
        "the log tail of partition {partition} is {behind} records behind the append after          waiting {waited_ms} ms; retry (the same seq and event id answer the append once it          catches up), or raise [producer] tail_wait_ms"
    )]
    TailBehind {
        /// The partition.
        partition: i32,
        /// Records between what the tail read and what the append waits for.
        behind: i64,
        /// How long the append waited.
        waited_ms: u64,
    },
    /// An operational record (a lease, a wake) could not be encoded as JSON: a bug, not the
    /// input's fault; nothing was written.
    #[error("encoding a {kind} record as JSON: {source} (a bug in sessionlog: please report it)")]
    Encode {
        /// Which record (`lease`, `wake`).
        kind: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Wraps a Kafka error with what we were doing.
    pub fn kafka(action: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| Self::Kafka { action, source }
    }
}

/// The settings most likely to fix a Kafka error, for the operator reading it.
fn kafka_hint(error: &rdkafka::error::KafkaError) -> &'static str {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;
    // An admin operation's code is not exposed by `rdkafka_error_code`.
    let code = match error {
        KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    match code {
        Some(C::Authentication | C::SaslAuthenticationFailed) => {
            " (the brokers refused the credentials: check kafka.librdkafka sasl.username and \
             sasl.password, SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_USERNAME and _SASL_PASSWORD)"
        }
        Some(C::SSL) => {
            " (TLS failed: kafka.librdkafka ssl.ca.location must name the CA that signed the \
             brokers' certificates, SESSIONLOG_KAFKA__LIBRDKAFKA__SSL_CA_LOCATION)"
        }
        Some(
            C::OperationTimedOut
            | C::AllBrokersDown
            | C::BrokerTransportFailure
            | C::MessageTimedOut,
        ) => {
            " (are the brokers up at kafka.bootstrap? on a secured cluster also check \
             kafka.librdkafka security.protocol, ssl.ca.location, sasl.username and sasl.password)"
        }
        _ => "",
    }
}

/// Result with the log crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
