//! `sessionlog completions`: a shell completion script. Needs no servers and no settings.

use crate::output::Output;
use anyhow::{Context, Result};

/// The arguments of `sessionlog completions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// The script completing `command`, the whole command tree.
pub fn run(args: Args, mut command: clap::Command) -> Result<Output> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "sessionlog", &mut script);
    let script = String::from_utf8(script).context("the completion script is not UTF-8")?;
    Ok(Output::none().raw(script))
}
