//! Recovery: rebuild a session from the log, starting at its latest verified checkpoint.
//!
//! The tables are a cache of the log, never its authority: a rebuild always reads the
//! session's partition to its end and folds with the same code as the projector, so it is
//! correct even when the projector is behind or down.

mod error;
mod rebuild;

pub use error::{Error, Result};
pub use rebuild::{RebuiltSession, Recovery, StartPoint};
