//! `sessionlog fork`: a new session branching from another at a seq or a checkpoint.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use anyhow::{Result, bail};
use sessionlog_recovery::ForkAt;

/// Where to fork: exactly one of `--at-seq` or `--at-checkpoint`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The parent session.
    session: String,
    /// Fork after this seq.
    #[arg(long, conflicts_with = "at_checkpoint")]
    at_seq: Option<u64>,
    /// Fork at the checkpoint with this seq.
    #[arg(long)]
    at_checkpoint: Option<u64>,
    /// The agent that runs the branch.
    #[arg(long, default_value = "sessionlog-cli")]
    agent: String,
    /// The new session's id (a UUID); a fresh one when absent. Refused if it is taken.
    #[arg(long = "child", value_name = "ID")]
    child: Option<String>,
    /// A granted approval of the parent the branch carries over (repeat for several); none is
    /// carried over unless named. Each may be acted on once in the branch.
    #[arg(long = "inherit-approval", value_name = "APPROVAL_ID")]
    inherit_approval: Vec<String>,
}

/// Appends the fork's first event, naming its parent.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let at = match (args.at_seq, args.at_checkpoint) {
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(seq)) => ForkAt::Checkpoint(seq),
        _ => bail!("say where to fork: --at-seq N or --at-checkpoint N"),
    };
    let child = args.child.as_deref().map(parse_session).transpose()?;
    let first = crate::recovery::connect(&globals.settings)
        .await?
        .fork_by(
            parse_session(&args.session)?,
            at,
            &args.agent,
            None,
            child,
            &args.inherit_approval,
        )
        .await?;
    let text = format!(
        "forked {} at seq {} into new session {} (partition {}, offset {})",
        args.session,
        args.at_seq.or(args.at_checkpoint).unwrap_or_default(),
        first.envelope.session_id,
        first.position.partition,
        first.position.offset
    );
    Output::new(
        &serde_json::json!({
            "session_id": first.envelope.session_id,
            "fork_event": first.envelope,
            "partition": first.position.partition,
            "offset": first.position.offset,
        }),
        text,
    )
}
