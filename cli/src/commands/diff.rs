//! `sessionlog diff`: the events after the fork point on each side of a fork.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::Result;

/// The arguments of `sessionlog diff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The forked (child) session id.
    session: String,
}

/// Compares the fork with its parent after the fork point.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let diff = crate::recovery::connect(&globals.settings)
        .await?
        .diff(parse_session(&args.session)?)
        .await?;
    let side = |events: &[sessionlog_recovery::LoggedEvent]| {
        events
            .iter()
            .map(|e| format!("\n    seq {} {}", e.envelope.seq, e.envelope.event.kind()))
            .collect::<String>()
    };
    let text = format!(
        "fork point: {} seq {}\n  parent only ({}):{}\n  child only ({}):{}",
        diff.fork_point.parent_session_id,
        diff.fork_point.parent_seq,
        diff.parent_only.len(),
        side(&diff.parent_only),
        diff.child_only.len(),
        side(&diff.child_only)
    );
    // As a JSON value: its keys sorted, as `diff --json` has always printed them.
    Output::new(&serde_json::to_value(&diff)?, text)
}
