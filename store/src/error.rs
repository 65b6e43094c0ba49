//! Errors of the store, each saying what to do about it where something can be done.

/// A CQL driver error, kept whole as the source of [`Error::Cql`] and [`Error::Connect`].
pub type DriverError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong reading or writing the projection tables.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No CQL node could be reached, or none let us in.
    #[error("cannot connect to CQL at {nodes}: {source} ({hint})")]
    Connect {
        /// The nodes tried.
        nodes: String,
        /// The settings that most likely fix it, judged from the driver's error.
        hint: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A read of spans by time asked for a range the tables cannot answer in one read.
    #[error(
        "spans from {from_us} to {to_us} (microseconds since the epoch) span {days} days; \
         ask for at most {max} days at a time"
    )]
    SpanRangeTooWide {
        /// The range's start.
        from_us: i64,
        /// The range's end.
        to_us: i64,
        /// The days it touches.
        days: i64,
        /// The most days one read may touch.
        max: i64,
    },
    /// A writer's setting differs from the one the keyspace's rows were written with.
    #[error(
        "keyspace {keyspace} spreads a day's spans over {stored} buckets and \
         [projector] trace_day_buckets is {wanted}: set it back to {stored} \
         (SESSIONLOG_PROJECTOR__TRACE_DAY_BUCKETS), or replay into a fresh keyspace with the \
         new value (`sessionlog replay --keyspace NEW`) and switch readers to it"
    )]
    TraceDayBucketsDiffer {
        /// The keyspace.
        keyspace: String,
        /// The count its rows were written with.
        stored: u16,
        /// The count configured.
        wanted: u16,
    },
    /// The store refused or failed a statement.
    #[error("cql {action}: {source}")]
    Cql {
        /// What we were doing.
        action: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// The `[cql] tls_ca_file` could not be read as PEM certificates.
    #[error("cql.tls_ca_file {path}: {message} (SESSIONLOG_CQL__TLS_CA_FILE names a PEM file)")]
    TlsCaFile {
        /// The file named.
        path: String,
        /// What was wrong with it.
        message: String,
    },
    /// A read-only command named a keyspace that is not there.
    #[error("keyspace {keyspace} does not exist; run `sessionlog init` to create it")]
    NoKeyspace {
        /// The keyspace.
        keyspace: String,
    },
    /// A read-only command found a keyspace this build cannot read yet.
    #[error(
        "keyspace {keyspace} has schema version {found}, older than this build's {wanted}; \
         run `sessionlog init` (or start `sessionlog project`) to upgrade it"
    )]
    SchemaBehind {
        /// The keyspace.
        keyspace: String,
        /// The newest migration it records (0: none).
        found: i32,
        /// The newest migration this build knows.
        wanted: i32,
    },
    /// A keyspace name that CQL would not take unquoted (it is put into statements as is).
    #[error(
        "{keyspace:?} is not a keyspace name: use letters, digits and underscores, starting \
         with a letter, at most 48 characters"
    )]
    BadKeyspaceName {
        /// The name given.
        keyspace: String,
    },
    /// A stored row could not be read back (e.g. state written by an incompatible version).
    #[error(
        "stored row of session {session}: {message}; replay the keyspace (`sessionlog replay`)"
    )]
    CorruptRow {
        /// Which session.
        session: String,
        /// What was wrong.
        message: String,
    },
    /// A usage rollup's stored latency sketch cannot be read.
    #[error(
        "stored usage rollup {day} {dimension} {key} (partition {partition}): {message}; \
         replay into a fresh keyspace (`sessionlog replay --keyspace NEW`) and switch to it, \
         or delete that row and replay its partition"
    )]
    CorruptRollup {
        /// Its day.
        day: String,
        /// Its dimension.
        dimension: String,
        /// Its model, agent or tool.
        key: String,
        /// Its log partition.
        partition: i32,
        /// What was wrong.
        message: String,
    },
    /// The topic's partition holds other records where the stored progress says it applied
    /// some: the topic was deleted and created again under the same name (or lost records).
    #[error(
        "topic {topic} partition {partition} is not the log keyspace {keyspace} was projected          from: {found}. The topic was deleted and created again under the same name (or the          cluster lost records), and this keyspace's rows describe the old log. Project the new          topic into a fresh keyspace: set [cql] keyspace (SESSIONLOG_CQL__KEYSPACE) to a new          name, run `sessionlog init`, start the projector, point every service at it, and drop          the old keyspace once nothing reads it"
    )]
    TopicRecreated {
        /// The topic.
        topic: String,
        /// The partition found different.
        partition: i32,
        /// The keyspace whose progress does not match.
        keyspace: String,
        /// What was found where the last applied record should be.
        found: String,
    },
    /// Reading the log to check it failed.
    #[error("reading topic {topic} to check it against the stored progress: {source}")]
    Log {
        /// The topic.
        topic: String,
        /// The log's error (boxed: it is large, and this enum travels in every result).
        #[source]
        source: Box<sessionlog_log::Error>,
    },
    /// A conditional write kept losing to changes of the same row: retrying the request
    /// after a moment is safe.
    #[error("{what} changed while it was being written; try the request again")]
    Contended {
        /// What was written.
        what: &'static str,
    },
    /// A write through a store opened without migrating.
    #[error(
        "the store of keyspace {keyspace} was opened read-only; writers open it with \
         `ProjectionStore::migrate`"
    )]
    ReadOnly {
        /// The keyspace.
        keyspace: String,
    },
}

impl Error {
    /// Wraps a driver error with what we were doing.
    pub fn cql<E: Into<DriverError>>(action: &'static str) -> impl Fn(E) -> Self {
        move |e| Self::Cql {
            action,
            source: e.into(),
        }
    }
}

/// Result with the store's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
