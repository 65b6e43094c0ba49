//! What the commands that act on sessions through the recovery library share: connecting to
//! it, taking a session over as an operator, and what a command that appended an event prints.

use crate::args::parse_session;
use crate::output::Output;
use anyhow::{Context, Result};
use sessionlog_log::Settings;
use sessionlog_recovery::{OperatorAct, Recovery};

/// Connects recovery (a writer's: it signs what it appends).
pub async fn connect(settings: &Settings) -> Result<Recovery> {
    Recovery::connect(settings)
        .await
        .context("connecting recovery to the log, the registry and the store")
}

/// Takes the session over as `operator:<by>` and appends the act, signed with the recovery
/// service's key (`[recovery] signing_key_file`): in a session started under schema v6 the
/// fold refuses these kinds unsigned, so no harness can pause a session or speak as an
/// operator. An act that does not apply is refused and nothing is appended (not even the
/// claim).
pub async fn operate(
    settings: &Settings,
    session: &str,
    by: &str,
    act: OperatorAct,
) -> Result<Output> {
    let session = parse_session(session)?;
    let recovery = Recovery::connect(settings)
        .await
        .context("connecting to the log, the registry and the store")?;
    let what = act.name();
    let appended = recovery.operate(session, by, act).await?;
    recorded(appended, what, "; the harness that was writing is fenced")
}

/// What a command that appended `what` prints: its seq, epoch and offset, then `more`.
pub fn recorded(appended: sessionlog_producer::Appended, what: &str, more: &str) -> Result<Output> {
    let text = format!(
        "recorded the {what} as seq {} of session {} (epoch {}, offset {}){more}",
        appended.envelope.seq,
        appended.envelope.session_id,
        appended.envelope.writer_epoch,
        appended.position.offset
    );
    Output::new(
        &serde_json::json!({"recorded": appended.envelope, "offset": appended.position.offset}),
        text,
    )
}
