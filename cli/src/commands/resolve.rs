//! `sessionlog resolve`: an operator's outcome for an in-doubt tool call.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::Result;
use sessionlog_recovery::Resolution;
use sessionlog_schemas::CallOutcome;

/// An operator's outcome for an in-doubt call.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The seq of the tool call in doubt (`sessionlog recover` lists pending calls).
    #[arg(long)]
    call_seq: u64,
    /// The call had its effect (default) or failed.
    #[arg(long, value_parser = ["succeeded", "failed"], default_value = "succeeded")]
    outcome: String,
    /// What it returned, as far as you know.
    #[arg(long, default_value = "")]
    output: String,
    /// Who you are.
    #[arg(long, env = "USER")]
    operator: String,
    /// Why you believe it.
    #[arg(long)]
    reason: String,
}

/// Records the outcome.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let appended = crate::recovery::connect(&globals.settings)
        .await?
        .record_resolution(
            parse_session(&args.session)?,
            Resolution {
                call_seq: args.call_seq,
                outcome: if args.outcome == "failed" {
                    CallOutcome::Failed
                } else {
                    CallOutcome::Succeeded
                },
                output: args.output,
                operator: args.operator,
                reason: args.reason,
            },
        )
        .await?;
    crate::recovery::recorded(appended, "outcome", "")
}
