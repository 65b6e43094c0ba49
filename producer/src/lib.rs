//! The harness side of sessionlog: append a session's events to the log, in order, durably.
//!
//! - [`EventLog`]: one per process, shared by every session it runs: the Kafka producer
//!   (`acks=all`, idempotent, murmur2 partitioning), the encoder with its schema id resolved
//!   once, a bounded in-flight window (backpressure), and read-backs of a partition.
//! - [`SessionWriter`]: one per session a harness runs: creates, claims or forks a session,
//!   assigns seq, event id, epoch and time, checks each event against its own fold of the
//!   session before sending, awaits the ack, and learns when another writer fenced it.
//!
//! The same over HTTP, for harnesses not written in Rust, is the `sessionlog-ingest` crate.

mod catch_up;
mod error;
mod event_log;
mod writer;

pub use error::{Error, Result};
pub use event_log::{
    Attester, EventLog, LentReader, OFFSET_GAP, Position, ProducerOptions, WhenFull,
};
pub use writer::{Appended, Confirmed, PendingClaim, SessionWriter, WriterToken, is_intent};
