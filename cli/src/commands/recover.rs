//! `sessionlog recover`: a session rebuilt from the log, its texts opened.

use crate::args::{Globals, parse_session};
use crate::describe;
use crate::output::Output;
use anyhow::Result;
use sessionlog_recovery::Recovery;

/// The arguments of `sessionlog recover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session id.
    session: String,
}

/// Rebuilds the session from its latest verified checkpoint.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    let recovery = Recovery::connect(&globals.settings).await?;
    let mut rebuilt = recovery.rebuild(session).await?;
    // The digest covers the sealed form; what is printed has the texts opened.
    let digest = rebuilt.state.digest();
    let opener = recovery
        .opener_for(session, &rebuilt.state, rebuilt.state.erased)
        .await?;
    rebuilt.state = sessionlog_recovery::reveal::opened_state(&opener, &rebuilt.state);
    let text = format!(
        "recovered session from the log: partition {}, {}; read {} records, \
         folded {} events\n{}",
        rebuilt.partition,
        describe::start(&rebuilt.start),
        rebuilt.records_read,
        rebuilt.events_folded,
        describe::state(&rebuilt.state, &digest)
    );
    Output::new(
        &serde_json::json!({
            "rebuilt": rebuilt,
            "digest": digest,
        }),
        text,
    )
}
