//! `sessionlog lineage`: a session's ancestors and the sessions forked from it.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::Result;

/// The arguments of `sessionlog lineage`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session id.
    session: String,
}

/// Reads the session's lineage.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let lineage = crate::recovery::connect(&globals.settings)
        .await?
        .lineage(parse_session(&args.session)?)
        .await?;
    let mut text = format!("session {}", lineage.session_id);
    for a in &lineage.ancestors {
        text.push_str(&format!(
            "\n  forked from {} at seq {}",
            a.parent_session_id, a.parent_seq
        ));
    }
    for (child, seq) in &lineage.children {
        text.push_str(&format!("\n  fork {child} at seq {seq}"));
    }
    // As a JSON value: its keys sorted, as `lineage --json` has always printed them.
    Output::new(&serde_json::to_value(&lineage)?, text)
}
