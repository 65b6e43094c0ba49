//! Errors of the producer library.

use sessionlog_schemas::{Epoch, SessionId};
use sessionlog_session::Rejection;

/// What can go wrong appending to the log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Settings or topic set-up failed.
    #[error(transparent)]
    Log(#[from] sessionlog_log::Error),
    /// Encoding, decoding, or the schema registry, failed.
    #[error(transparent)]
    Schema(#[from] sessionlog_schemas::Error),
    /// The registry could not be reached at start-up: without the schema id no event can be
    /// encoded, so the process cannot write at all.
    #[error(
        "cannot start producing: the schema registry at {url} is unreachable, and without it no \
         schema id is known to encode events with (is the registry up? check [registry] url or \
         SESSIONLOG_REGISTRY__URL): {source}"
    )]
    RegistryUnavailable {
        /// The registry URL tried.
        url: String,
        /// What the registry client saw.
        #[source]
        source: sessionlog_schemas::Error,
    },
    /// Kafka did not acknowledge the event. It may or may not be in the log: retry the same
    /// envelope (same seq and event id), which the fold treats as a harmless duplicate.
    #[error("kafka did not acknowledge event seq {seq} of session {session}: {source}")]
    NotAcknowledged {
        /// The session.
        session: String,
        /// The event's seq.
        seq: u64,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The process already has `limit` events in flight and the caller asked not to wait.
    /// Nothing was sent; retry later or use the waiting variant.
    #[error(
        "backpressure: {limit} events are already in flight (asked for {wanted} more); nothing was sent"
    )]
    Backpressure {
        /// The configured `max_in_flight`.
        limit: usize,
        /// How many events the refused call wanted to send.
        wanted: usize,
    },
    /// The event breaks the session's rules and was not sent.
    #[error("event refused before sending: {0}")]
    Refused(Rejection),
    /// The event was written, and the fold rejected it (read back by a confirmed append): it is
    /// not part of the session. Another writer of the same epoch took its seq, say.
    #[error("the log rejected event seq {seq} (offset {offset}): {rejection}")]
    Rejected {
        /// The event's seq.
        seq: u64,
        /// Where the rejected record sits.
        offset: i64,
        /// The fold's reason.
        rejection: Rejection,
    },
    /// The projection could not be read to catch a session up.
    #[error("reading the projection to catch the session up: {0}")]
    Projection(#[from] sessionlog_store::Error),
    /// Another harness claimed the session with a later epoch: this writer must stop.
    #[error("fenced: epoch {epoch} was superseded by epoch {current}")]
    Fenced {
        /// This writer's epoch.
        epoch: Epoch,
        /// The session's current epoch.
        current: Epoch,
    },
    /// Another claim of the same or a later epoch reached the log first: this claimant did not
    /// take the session over and must not write to it.
    #[error("lost the claim: epoch {epoch} lost to the session's current epoch {current}")]
    LostClaim {
        /// The epoch this claimant asked for.
        epoch: Epoch,
        /// The epoch the log established.
        current: Epoch,
    },
    /// The session has no accepted start event in its partition.
    #[error("session {0} is not in the log (no accepted start event on its partition)")]
    UnknownSession(SessionId),
    /// The session's events are in its partition but its start is not: retention deleted the
    /// partition's early records, so the session cannot be folded from the log alone.
    #[error(
        "session {session}: the log no longer holds its start (partition {partition} now begins \
         at offset {low_watermark}: retention deleted the session's first events), so it cannot \
         be claimed by folding it from the log; recover it through the recovery service, which \
         starts from its last checkpoint (`sessionlog resume {session}`, or POST \
         /v1/sessions/{session}/resume on `sessionlog serve-recovery`)"
    )]
    StartDeleted {
        /// The session.
        session: SessionId,
        /// Its partition.
        partition: i32,
        /// The partition's first offset now.
        low_watermark: i64,
    },
    /// Catching a session up would read more records after the projection's position than
    /// `[producer] max_unprojected_records` allows: the projector is that far behind the
    /// partition (or stopped). Nothing was written; retry once it catches up.
    #[error(
        "the projection is {unprojected} records behind partition {partition}; catching the \
         session up would read them all (limit {limit}, [producer] max_unprojected_records): \
         retry once the projector catches up (`sessionlog status` shows its lag; start more \
         projectors with `sessionlog project`)"
    )]
    ProjectionBehind {
        /// The session's partition.
        partition: i32,
        /// Records of the partition after what the projection holds.
        unprojected: i64,
        /// The limit.
        limit: i64,
    },
    /// A read-back did not find an event the log had acknowledged at that position.
    #[error(
        "read-back of partition {partition} did not find the event acknowledged at offset {offset}"
    )]
    Unconfirmed {
        /// The partition read.
        partition: i32,
        /// The acknowledged offset.
        offset: i64,
    },
    /// Sealing failed: the session was erased, the key store is unreachable, a KEK is missing,
    /// or the event came with content sealed by someone else.
    #[error(transparent)]
    Keys(#[from] sessionlog_keys::Error),
    /// The key store could not be opened at start-up.
    #[error("cannot start producing: {0}")]
    KeyStore(#[from] sessionlog_store::KeyringError),
    /// The encoded event is larger than the configured limit.
    #[error("event of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The claim or fork could not be signed by the log's attester (the recovery service's
    /// signing key: `[recovery] signing_key_file`).
    #[error("cannot sign the {what}: {reason}")]
    Attestation {
        /// What was to be signed.
        what: &'static str,
        /// Why not.
        reason: String,
    },
    /// A batch holds more events than the fold's duplicate window: a retry of it could not be
    /// told from a conflicting write. Split it.
    #[error(
        "a batch of {events} events exceeds the limit of {limit}; append it in smaller batches"
    )]
    BatchTooLong {
        /// Events in the batch.
        events: usize,
        /// The limit ([`sessionlog_session::DUPLICATE_WINDOW`]).
        limit: usize,
    },
}

/// Result with the producer's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
