//! The `sessionlog` command as a library: the clap command tree ([`Cli`]) and [`run`], so that
//! the binary is a thin `main.rs` and tests can inspect the commands without parsing source.
//!
//! `commands` is the tree and its dispatch, with one module per subcommand under it; the other
//! modules are what the commands share, and depend on none of them.

mod args;
mod commands;
mod describe;
mod duration;
pub mod example;
pub mod exit;
mod output;
mod recovery;
mod serve;
mod signal;
mod when;

pub use commands::{Cli, LogFormat, init_logging, run};
pub use signal::shutdown_signal;
