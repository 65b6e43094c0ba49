//! `sessionlog pause|unpause|steer SESSION`: an operator's hand on a running session.
//!
//! Each takes the session over as a writer named `operator:<by>` (claiming the next epoch, as
//! `approve` and `resolve` do), so the harness that was writing is fenced: its next append is
//! refused and it must resume. A paused session cannot be resumed until it is unpaused.

use crate::recovery::{Output, parse_session, recorded};
use anyhow::{Context, Result};
use clap::Args;
use sessionlog_log::Settings;
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::Recovery;
use sessionlog_schemas::{Content, SessionEvent};
use std::sync::Arc;

/// `sessionlog pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The session.
    pub session: String,
    /// Why it is paused (kept in the log, sealed like any text).
    #[arg(long)]
    pub reason: String,
    /// Who pauses it (the claim's writer is `operator:<by>`).
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

/// `sessionlog unpause`.
#[derive(Debug, Args)]
pub struct UnpauseArgs {
    /// The session.
    pub session: String,
    /// Who unpauses it.
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

/// `sessionlog steer`.
#[derive(Debug, Args)]
pub struct SteerArgs {
    /// The session.
    pub session: String,
    /// The message for the agent.
    #[arg(long)]
    pub text: String,
    /// Who says it (the message's author).
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

/// Pauses a session: appends `SessionPaused` with the reason.
pub async fn pause(settings: &Settings, args: &PauseArgs) -> Result<Output> {
    let event = SessionEvent::SessionPaused {
        reason: Some(Content::from(args.reason.clone())),
    };
    append(settings, &args.session, &args.by, event, "pause").await
}

/// Unpauses a session: appends `SessionResumed`.
pub async fn unpause(settings: &Settings, args: &UnpauseArgs) -> Result<Output> {
    append(
        settings,
        &args.session,
        &args.by,
        SessionEvent::SessionResumed {},
        "unpause",
    )
    .await
}

/// Appends a `SteeringMessage` from `--by`.
pub async fn steer(settings: &Settings, args: &SteerArgs) -> Result<Output> {
    let event = SessionEvent::SteeringMessage {
        author: args.by.clone(),
        content: Content::from(args.text.clone()),
    };
    append(settings, &args.session, &args.by, event, "steering message").await
}

/// Rebuilds the session, takes it over as `operator:<by>` and appends `event`. Pausing a
/// paused session or unpausing a running one is refused and nothing is appended (not even
/// the claim).
async fn append(
    settings: &Settings,
    session: &str,
    by: &str,
    event: SessionEvent,
    what: &str,
) -> Result<Output> {
    let session = parse_session(session)?;
    let recovery = Recovery::connect(settings)
        .await
        .context("connecting to the log, the registry and the store")?;
    let rebuilt = recovery.rebuild(session).await?;
    if rebuilt.state.terminal.is_some() || rebuilt.state.erased {
        anyhow::bail!("session {session} has ended; there is nothing to {what}");
    }
    // The fold's own refusals, looked at before the claim so that a refused event fences no
    // one (the writer's fold judges the event again when it is appended).
    match (&event, rebuilt.state.paused) {
        (SessionEvent::SessionPaused { .. }, true) => {
            anyhow::bail!("session {session} is already paused (`sessionlog unpause` lifts it)")
        }
        (SessionEvent::SessionResumed {}, false) => {
            anyhow::bail!("session {session} is not paused; there is nothing to unpause")
        }
        _ => {}
    }
    let (mut writer, _) = SessionWriter::claim_from(
        Arc::clone(recovery.log()),
        rebuilt.state,
        rebuilt.partition,
        rebuilt.end_offset,
        &format!("operator:{by}"),
    )
    .await
    .with_context(|| format!("taking over session {session} to append the {what}"))?;
    // Confirmed: the answer names an event the fold accepted, not only one Kafka took.
    let appended = writer.append_with_confirmed(event, None, None).await?;
    let mut output = recorded(appended, what)?;
    output
        .human
        .push_str("; the harness that was writing is fenced");
    Ok(output)
}
