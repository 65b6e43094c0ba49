//! The crate's one error type.

/// A boxed error cause, so that network errors from reqwest and from
/// schema_registry_converter fit one variant.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while encoding, decoding or talking to the registry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kept `.avsc` file, or a schema fetched from the registry, is not a valid Avro schema.
    #[error("invalid Avro schema ({context}): {source}")]
    Schema {
        /// Which schema (a kept version or a registry id).
        context: String,
        /// The parser's complaint.
        #[source]
        source: apache_avro::Error,
    },
    /// The Avro writer refused an envelope (a bug: the envelope did not fit the schema).
    #[error("Avro encoding failed: {0}")]
    Encode(#[source] apache_avro::Error),
    /// The bytes are not a datum of the writer schema, or cannot be resolved into the reader schema.
    #[error("Avro decoding failed: {0}")]
    Decode(#[source] apache_avro::Error),
    /// An envelope holds something an older schema version cannot carry (a sealed text where
    /// it had a plain string, a field it lacks set to anything but its default): write it with
    /// the current version instead.
    #[error(
        "schema v{version} cannot carry {what}: write this event with the current schema version"
    )]
    Unrepresentable {
        /// The older version asked for.
        version: u32,
        /// What it cannot carry, and where.
        what: String,
    },
    /// The body ended in the middle of the datum.
    #[error("malformed Avro body: truncated")]
    Truncated,
    /// The datum decoded but did not fill the whole body.
    #[error("malformed Avro body: {0} trailing bytes after the datum")]
    TrailingBytes(usize),
    /// A decoded value does not have the shape the event model expects.
    #[error("malformed event: field `{field}`: {reason}")]
    Malformed {
        /// The dotted path of the offending field.
        field: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A number does not fit the Avro type that carries it (e.g. a `u64` above `i64::MAX`).
    #[error("field `{field}` is out of range: {value}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The offending value, printed.
        value: String,
    },
    /// A Kafka record value of zero bytes (e.g. a tombstone) where an event was expected.
    #[error(
        "empty message: expected the Confluent wire format (magic byte 0, schema id, Avro body)"
    )]
    EmptyMessage,
    /// The first byte is not the Confluent magic byte 0.
    #[error("bad magic byte {0:#04x}: not the Confluent wire format")]
    BadMagic(u8),
    /// Fewer than the five header bytes of the Confluent wire format.
    #[error("message too short for the Confluent wire format: {0} bytes, need at least 5")]
    TooShort(usize),
    /// The registry does not know this schema id: the record cannot ever be decoded (dead-letter it).
    #[error("unknown schema id {0}: the registry has no such schema")]
    UnknownSchemaId(u32),
    /// The registry could not be reached or answered with a transient failure: retry later.
    #[error("schema registry at {url} is unreachable: {source}")]
    RegistryUnreachable {
        /// The registry base URL.
        url: String,
        /// The network or HTTP error.
        #[source]
        source: BoxError,
    },
    /// The registry answered, but with an error that retrying will not fix.
    #[error("schema registry at {url} refused the request: {message}")]
    Registry {
        /// The registry base URL.
        url: String,
        /// What it said.
        message: String,
    },
}

impl Error {
    /// Whether retrying the same operation later may succeed. Consumers retry these and
    /// dead-letter everything else.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::RegistryUnreachable { .. })
    }

    pub(crate) fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Malformed {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
