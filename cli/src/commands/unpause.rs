//! `sessionlog unpause`: lifts a pause, as the operator `operator:<by>` (see `pause`).

use crate::args::Globals;
use crate::output::Output;
use anyhow::Result;
use sessionlog_recovery::OperatorAct;

/// The arguments of `sessionlog unpause`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// Who unpauses it.
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

/// Unpauses a session: appends `SessionResumed`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    crate::recovery::operate(
        &globals.settings,
        &args.session,
        &args.by,
        OperatorAct::Unpause,
    )
    .await
}
