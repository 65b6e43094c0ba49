//! The projector: consumer-group workers that fold the session log into tables in CQL.
//!
//! - [`store`]: the CQL tables ([`ProjectionStore`]) and their versioned [`migrations`];
//! - [`apply`]: fold records into rows and make them durable ([`apply::Applier`]), shared by
//!   the live worker and the ops replay;
//! - [`worker`]: the consume → fold → write → commit loop of a group member ([`Projector`]);
//! - [`trace`] and [`context`]: the trace spans and the context view derived from events;
//! - [`replay`]: rebuild the projections into a keyspace from chosen log positions;
//! - [`verify`]: compare two keyspaces table by table;
//! - [`observe`]: metrics and health.
//!
//! Every write is keyed by `(session_id, seq)` or by log position, and each session's row
//! stores the offset of the last event folded into it, so a crash, a rebalance or a replay
//! leaves the same tables. Kafka offsets are committed only after the writes they cover.

pub mod apply;
pub mod context;
mod error;
pub mod migrations;
pub mod observe;
pub mod replay;
pub mod store;
pub mod trace;
pub mod verify;
pub mod worker;

pub use error::{Error, Result};
pub use store::{ProjectedSession, ProjectionStore};
pub use worker::Projector;
