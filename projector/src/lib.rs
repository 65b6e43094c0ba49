//! The projector: consumer-group workers that fold the session log into tables in CQL.
//!
//! - [`apply`]: fold records into rows and make them durable ([`apply::Applier`]), shared by
//!   the live worker and the ops replay;
//! - [`worker`]: the consume → fold → write → commit loop of a group member ([`Projector`]);
//! - [`replay`]: rebuild the projections into a keyspace from chosen log positions;
//! - [`observe`]: metrics (names, and [`describe_metrics`] for their help texts) and health.
//!
//! The folds are pure and live in `sessionlog-session` (the session state, the context window,
//! the trace spans); the tables, their migrations and every statement live in
//! `sessionlog-store`. The projector connects them: it opens the store with
//! [`ProjectionStore::migrate`], so a projector (or a replay) brings its keyspace up to date.
//!
//! Every write is keyed by `(session_id, seq)`, by log position or by what it lists, and each
//! session's row stores the offset of the last event folded into it, so a crash, a rebalance
//! or a replay leaves the same tables. Kafka offsets are committed only after the writes they
//! cover.

pub mod apply;
mod error;
pub mod observe;
pub mod replay;
pub mod worker;

pub use error::{Error, Result};
pub use observe::describe_metrics;
pub use sessionlog_store::{ProjectedSession, ProjectionStore};
pub use worker::Projector;
