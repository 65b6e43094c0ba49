//! The harness side of sessionlog: append a session's events to the log, in order, durably.
//!
//! - [`EventLog`]: one per process, shared by every session it runs: the Kafka producer
//!   (`acks=all`, idempotent, murmur2 partitioning) and the encoder with its schema id.
//! - [`SessionWriter`]: one per session a harness runs: assigns seq, event id, epoch and time,
//!   checks each event against its own fold of the session before sending, and awaits the ack.

mod error;
mod event_log;
pub mod example;
mod writer;

pub use error::{Error, Result};
pub use event_log::{EventLog, Position, ProducerOptions};
pub use writer::{Appended, SessionWriter};
