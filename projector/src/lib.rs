//! The projector: consumer-group workers that fold the session log into tables in CQL.
//!
//! - [`store`]: the CQL tables ([`ProjectionStore`]) and their versioned migrations;
//! - [`worker`]: the consume → fold → write → commit loop ([`Projector`]).
//!
//! Every write is keyed by `(session_id, seq)` or by log position, and each session's row
//! stores the offset of the last event folded into it, so a crash, a rebalance or a replay
//! leaves the same tables. Kafka offsets are committed only after the writes they cover.

mod error;
pub mod migrations;
pub mod store;
pub mod worker;

pub use error::{Error, Result};
pub use store::{ProjectedSession, ProjectionStore};
pub use worker::Projector;
