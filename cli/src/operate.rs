//! `sessionlog pause|unpause|steer SESSION`: an operator's hand on a running session.
//!
//! Each takes the session over as a writer named `operator:<by>` (claiming the next epoch, as
//! `approve` and `resolve` do), so the harness that was writing is fenced: its next append is
//! refused and it must resume. A paused session cannot be resumed until it is unpaused. The
//! events are signed with the recovery service's key, like a decision: the same act over HTTP
//! is `POST /v1/sessions/{id}/pause|unpause|steering`, in the caller's verified name.

use crate::recovery::{Output, parse_session, recorded};
use anyhow::{Context, Result};
use clap::Args;
use sessionlog_log::Settings;
use sessionlog_recovery::{OperatorAct, Recovery};

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
    let act = OperatorAct::Pause {
        reason: args.reason.clone(),
    };
    operate(settings, &args.session, &args.by, act).await
}

/// Unpauses a session: appends `SessionResumed`.
pub async fn unpause(settings: &Settings, args: &UnpauseArgs) -> Result<Output> {
    operate(settings, &args.session, &args.by, OperatorAct::Unpause).await
}

/// Appends a `SteeringMessage` from `--by`.
pub async fn steer(settings: &Settings, args: &SteerArgs) -> Result<Output> {
    let act = OperatorAct::Steer {
        text: args.text.clone(),
    };
    operate(settings, &args.session, &args.by, act).await
}

/// Takes the session over as `operator:<by>` and appends the act, signed with the recovery
/// service's key (`[recovery] signing_key_file`): in a session started under schema v6 the
/// fold refuses these kinds unsigned, so no harness can pause a session or speak as an
/// operator. An act that does not apply is refused and nothing is appended (not even the
/// claim).
async fn operate(settings: &Settings, session: &str, by: &str, act: OperatorAct) -> Result<Output> {
    let session = parse_session(session)?;
    let recovery = Recovery::connect(settings)
        .await
        .context("connecting to the log, the registry and the store")?;
    let what = act.name();
    let appended = recovery.operate(session, by, act).await?;
    let mut output = recorded(appended, what)?;
    output
        .human
        .push_str("; the harness that was writing is fenced");
    Ok(output)
}
