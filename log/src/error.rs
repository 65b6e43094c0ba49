//! Errors of the log crate.

/// What can go wrong talking to the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file or environment could not be read.
    // The source (figment's error) names the key and the file or variable it came from;
    // anyhow's chain prints it after this line, so it is not repeated here.
    #[error("invalid settings (fix the key in the file or the SESSIONLOG_* variable named here)")]
    Config(#[from] Box<figment::Error>),
    /// Kafka refused or failed an operation.
    #[error("kafka {action}: {source}")]
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
}

impl Error {
    /// Wraps a Kafka error with what we were doing.
    pub fn kafka(action: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| Self::Kafka { action, source }
    }
}

/// Result with the log crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
