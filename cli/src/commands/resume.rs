//! `sessionlog resume`: take a session over as a new writer and print the resume bundle.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::Result;

/// The arguments of `sessionlog resume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session id.
    session: String,
    /// Who takes over.
    #[arg(long, default_value = "sessionlog-cli")]
    writer: String,
    /// Token budget of the context view in the bundle (default: the session's context
    /// policy's, `[context]`).
    #[arg(long)]
    context_tokens: Option<usize>,
}

/// Claims the next epoch, settles in-doubt tool calls, and returns the bundle.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let bundle = crate::recovery::connect(&globals.settings)
        .await?
        .resume(
            parse_session(&args.session)?,
            &args.writer,
            args.context_tokens,
        )
        .await?;
    let mut text = format!(
        "resumed {} as {}: epoch {}, next seq {}, {} outcome(s) recorded from resolvers, \
         context {} turn(s) in ~{} of {} tokens",
        bundle.state.session_id,
        args.writer,
        bundle.epoch,
        bundle.next_seq,
        bundle.resolved.len(),
        bundle.context.turns.len(),
        bundle.context.estimated_tokens,
        bundle.context.budget_tokens,
    );
    for call in &bundle.in_doubt {
        text.push_str(&format!(
            "\n  in doubt: seq {} {} ({:?}) -> {:?}",
            call.call.seq, call.call.tool, call.call.effect, call.action
        ));
    }
    // As a JSON value: its keys sorted, as `resume --json` has always printed them.
    Output::new(&serde_json::to_value(&bundle)?, text)
}
