//! `sessionlog export-otlp`: the session log as OpenTelemetry GenAI spans, sent over OTLP to
//! a trace server (Arize Phoenix, Jaeger, an OpenTelemetry Collector).
//!
//! - [`genai`]: what a session's events turn into (pure): span names, attributes, the tree
//!   and the ids a re-export reproduces;
//! - `erasure`: before every request, the texts of sessions erased since they were opened
//!   are taken off the spans;
//! - [`observe`]: the metrics a running export keeps;
//! - [`probe`]: whether a receiver answers, and what it is (`sessionlog doctor`);
//! - `receiver`: sending spans to the receiver and acting on its answers (retry, split,
//!   count rejected spans, or stop on a refusal no retry fixes);
//! - [`worker`]: the consumer group that reads the log, follows each session and exports the
//!   spans, committing its offsets only once the receiver took them.

mod erasure;
pub mod error;
pub mod genai;
pub mod observe;
pub mod probe;
mod receiver;
pub mod worker;

pub use error::{Error, Refusal, Result};
pub use genai::{LogPosition, Trail, span_id, trace_id};
pub use observe::describe_metrics;
pub use probe::{ReceiverProbe, probe_receiver};
pub use worker::{ExportOptions, ExportSummary, export};
