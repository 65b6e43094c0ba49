//! `sessionlog pause|unpause|steer SESSION`: an operator's hand on a running session.
//!
//! Each takes the session over as a writer named `operator:<by>` (claiming the next epoch, as
//! `approve` and `resolve` do), so the harness that was writing is fenced: its next append is
//! refused and it must resume. A paused session cannot be resumed until it is unpaused. The
//! events are signed with the recovery service's key, like a decision: the same act over HTTP
//! is `POST /v1/sessions/{id}/pause|unpause|steering`, in the caller's verified name.

use crate::args::parse_session;
use crate::recovery::{Output, recorded};
use anyhow::{Context, Result};
use clap::Args;
use sessionlog_log::Settings;
use sessionlog_recovery::{OperatorAct, Recovery};
use sessionlog_schemas::Micros;

/// `sessionlog pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The session.
    pub session: String,
    /// Why it is paused (kept in the log, sealed like any text).
    #[arg(long)]
    pub reason: String,
    /// When the pause lapses and the session wants its harness again: an RFC 3339 time
    /// (`2026-12-05T09:00:00Z`) or a time from now (`+45s`, `+30m`, `+2h`). Without it the
    /// session stays paused until someone unpauses it.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub until: Option<Micros>,
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

/// Pauses a session: appends `SessionPaused` with the reason, and when it lapses if given.
pub async fn pause(settings: &Settings, args: &PauseArgs) -> Result<Output> {
    let act = OperatorAct::Pause {
        reason: args.reason.clone(),
        until: args.until,
    };
    operate(settings, &args.session, &args.by, act).await
}

/// Reads `--until`: an RFC 3339 time to come, or `+` and a duration from now (`+30m`), as
/// microseconds since the Unix epoch. clap calls it as a value parser.
fn parse_until(text: &str) -> std::result::Result<Micros, String> {
    parse_until_at(text, sessionlog_schemas::now_micros())
}

/// [`parse_until`] with "now" given, so a time from now can be tested.
fn parse_until_at(text: &str, now: Micros) -> std::result::Result<Micros, String> {
    let text = text.trim();
    let Some(ahead) = text.strip_prefix('+') else {
        return sessionlog_recovery::pause_until(text, now)
            .map_err(|why| format!("{why}, or a time from now like +30m"));
    };
    let ahead = humantime::parse_duration(ahead.trim()).map_err(|e| {
        format!("{text:?} is not a time from now ({e}): write e.g. +45s, +30m, +2h")
    })?;
    if ahead.is_zero() {
        return Err(format!("{text:?}: a pause lapses at a time to come"));
    }
    i64::try_from(ahead.as_micros())
        .ok()
        .and_then(|ahead| now.checked_add(ahead))
        .ok_or_else(|| format!("{text:?} is too far ahead"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-05T09:00:00Z.
    const AT: Micros = 1_796_461_200_000_000;
    const SECOND: Micros = 1_000_000;

    #[test]
    fn until_reads_rfc3339_and_times_from_now() {
        assert_eq!(parse_until_at("2026-12-05T09:00:00Z", AT - SECOND), Ok(AT));
        assert_eq!(parse_until_at("+45s", AT), Ok(AT + 45 * SECOND));
        assert_eq!(parse_until_at("+30m", AT), Ok(AT + 30 * 60 * SECOND));
        assert_eq!(parse_until_at("+2h", AT), Ok(AT + 2 * 3_600 * SECOND));
        assert_eq!(parse_until_at(" +1h 30m ", AT), Ok(AT + 5_400 * SECOND));
    }

    #[test]
    fn until_refuses_what_is_no_time_to_come() {
        for (text, why) in [
            ("2026-12-05T09:00:00Z", "has passed"),
            ("30m", "+30m"),
            ("+", "+30m"),
            ("+soon", "+30m"),
            ("+-5s", "+30m"),
            ("+0s", "time to come"),
            ("+100000000000000000000s", ""),
            ("+500000000y", "too far ahead"),
        ] {
            let error = parse_until_at(text, AT).expect_err(text);
            assert!(error.contains(why), "{text}: {error}");
        }
        assert!(parse_until_at("+1s", Micros::MAX).is_err(), "overflow");
    }
}
