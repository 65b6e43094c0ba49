//! `sessionlog steer`: a message for the agent, appended as the operator `operator:<by>` (see
//! `pause`); the harness sees it when it resumes.

use crate::args::Globals;
use crate::output::Output;
use anyhow::Result;
use sessionlog_recovery::OperatorAct;

/// The arguments of `sessionlog steer`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The message for the agent.
    #[arg(long)]
    text: String,
    /// Who says it (the message's author).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

/// Appends a `SteeringMessage` from `--by`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let act = OperatorAct::Steer { text: args.text };
    crate::recovery::operate(&globals.settings, &args.session, &args.by, act).await
}
