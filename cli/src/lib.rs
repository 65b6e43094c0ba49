//! The `sessionlog` command as a library: the clap command tree ([`Cli`]) and [`run`], so that
//! the binary is a thin `main.rs` and tests can inspect the commands without parsing source.

mod args;
mod commands;
mod dlq;
mod doctor;
mod duration;
pub mod example;
pub mod exit;
mod export;
mod ingest;
mod keys;
mod mcp;
mod operate;
mod recovery;
mod replay;
mod schemas;
mod serve;
mod signal;
mod status;
mod token;
mod trace;
mod wake;
mod when;

pub use commands::{Cli, LogFormat, init_logging, run};
pub use signal::shutdown_signal;
