//! `sessionlog example`: appends the scripted harness session (`crate::example`) and prints
//! what its writer folded.

use crate::args::Globals;
use crate::describe;
use crate::output::Output;
use anyhow::{Context, Result};
use sessionlog_producer::EventLog;
use std::sync::Arc;

/// The arguments of `sessionlog example`: none.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Appends the example session.
pub async fn run(_: Args, globals: &Globals) -> Result<Output> {
    let log = Arc::new(
        EventLog::from_settings(&globals.settings)
            .await
            .context("connecting to the log (did you run `sessionlog init`?)")?,
    );
    let (writer, _) = crate::example::run_example_session(log).await?;
    let state = writer.state().clone();
    let position = writer.last_position();
    let text = format!(
        "appended session {} ({} events) to partition {:?}\n{}",
        state.session_id,
        state.last_seq,
        position.map(|p| p.partition),
        describe::state(&state, &state.digest())
    );
    Output::new(
        &serde_json::json!({
            "session_id": state.session_id,
            "last_seq": state.last_seq,
            "partition": position.map(|p| p.partition),
            "last_offset": position.map(|p| p.offset),
            "state": state,
        }),
        text,
    )
}
