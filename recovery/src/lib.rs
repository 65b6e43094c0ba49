//! Recovery: rebuild a session from the log, resume it without repeating a side effect,
//! settle in-doubt tool calls, gate on approvals, and fork with lineage.
//!
//! The tables are a cache of the log, never its authority: a rebuild always reads the
//! session's partition to its end and folds with the same code as the projector (the pure
//! folds of `sessionlog-session`), so it is correct even when the projector is behind or down.
//! It reads the tables through `sessionlog-store`, opened read-only: recovery never creates or
//! migrates a keyspace. Lists come from tables the projector maintains (a session's children,
//! sessions awaiting an operator or an approval), never from scans.
//!
//! [`history`] reads any range of a session's history (with a fork's inherited prefix) by the
//! event index, reading exactly the records of the range from the log.
//!
//! [`trace`] reads a session's spans as a tree; [`usage`] adds up the usage rollups over days.
//!
//! [`observe`] names the metrics and registers their help texts ([`describe_metrics`]).

pub mod context;
mod erase;
mod error;
mod fork;
pub mod history;
pub mod http;
pub mod index;
mod lease;
pub mod mcp_access;
pub mod notary;
pub mod observe;
mod operator;
mod rebuild;
mod redact;
pub mod resolver;
mod resume;
pub mod reveal;
mod routes;
pub mod trace;
pub mod usage;
mod view;
pub mod work;
pub mod worker;

pub use erase::ErasureStatus;
pub use error::{Error, Result};
pub use fork::{BranchDiff, ForkAt, Lineage, Scope};
pub use history::{Cursor, EventPage, EventRange, HistoryEvent};
pub use lease::LeaseStatus;
pub use observe::describe_metrics;
pub use operator::{OperatorAct, Resolution, StuckSession, pause_until};
pub use rebuild::{LoggedEvent, RebuiltSession, Recovery, StartPoint};
pub use redact::RedactionReceipt;
pub use resolver::{HttpResolver, Resolvers, ToolOutcome, ToolResolver};
pub use resume::{InDoubtAction, InDoubtCall, ResumeBundle};
pub use trace::{SessionTrace, SpanPage, SpanQuery, TraceSpan};
pub use usage::{UsageBy, UsageLine, UsageReport};
pub use view::{INHERITED_DEPTH, InheritedContext, WindowAt};
