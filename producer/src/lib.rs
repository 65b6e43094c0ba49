//! The harness side of sessionlog: append a session's events to the log, in order, durably.
//!
//! - [`EventLog`]: one per process, shared by every session it runs: the Kafka producer
//!   (`acks=all`, idempotent, murmur2 partitioning), the encoder with its schema id resolved
//!   once, a bounded in-flight window (backpressure), and read-backs of a partition.
//! - [`SessionWriter`]: one per session a harness runs: creates, claims or forks a session,
//!   assigns seq, event id, epoch and time, checks each event against its own fold of the
//!   session before sending, awaits the ack, and learns when another writer fenced it.
//!
//! - [`LogBackend`]: what the log needs of the topics under it: [`KafkaBackend`], or, for unit
//!   tests, the topics in memory (`testing::MemoryLog`, feature `test-util`).
//!
//! The same over HTTP, for harnesses not written in Rust, is the `sessionlog-ingest` crate.

mod backend;
mod catch_up;
mod epochs;
mod error;
mod event_log;
mod kafka;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod writer;

pub use backend::{LogBackend, LogResult};
pub use error::{Error, Result};
pub use event_log::{
    Attester, EventLog, LentReader, OFFSET_GAP, Position, ProducerOptions, WhenFull,
};
pub use kafka::{KafkaBackend, KafkaDelivery};
pub use writer::{Appended, Confirmed, PendingClaim, SessionWriter, WriterToken, is_intent};
