//! `sessionlog approve`: a decision on a pending approval.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::Result;

/// A decision on a pending approval.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The approval's id.
    #[arg(long)]
    approval: String,
    /// Deny instead of approve.
    #[arg(long)]
    deny: bool,
    /// Who decides.
    #[arg(long, env = "USER")]
    by: String,
    /// Why.
    #[arg(long)]
    reason: Option<String>,
}

/// Records the decision.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let appended = crate::recovery::connect(&globals.settings)
        .await?
        .decide_approval(
            parse_session(&args.session)?,
            &args.approval,
            !args.deny,
            &args.by,
            args.reason,
        )
        .await?;
    crate::recovery::recorded(appended, "decision", "")
}
