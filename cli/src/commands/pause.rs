//! `sessionlog pause`: an operator's hand on a running session.
//!
//! Like `unpause` and `steer`, it takes the session over as a writer named `operator:<by>`
//! (claiming the next epoch, as `approve` and `resolve` do), so the harness that was writing
//! is fenced: its next append is refused and it must resume. A paused session cannot be
//! resumed until it is unpaused. The events are signed with the recovery service's key, like
//! a decision: the same act over HTTP is `POST /v1/sessions/{id}/pause|unpause|steering`, in
//! the caller's verified name.

use crate::args::Globals;
use crate::output::Output;
use anyhow::Result;
use sessionlog_recovery::OperatorAct;
use sessionlog_schemas::Micros;

/// The arguments of `sessionlog pause`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// Why it is paused (kept in the log, sealed like any text).
    #[arg(long)]
    reason: String,
    /// When the pause lapses and the session wants its harness again: an RFC 3339 time
    /// (`2026-12-05T09:00:00Z`) or a time from now (`+45s`, `+30m`, `+2h`). Without it the
    /// session stays paused until someone unpauses it.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    until: Option<Micros>,
    /// Who pauses it (the claim's writer is `operator:<by>`).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

/// Pauses a session: appends `SessionPaused` with the reason, and when it lapses if given.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let act = OperatorAct::Pause {
        reason: args.reason,
        until: args.until,
    };
    crate::recovery::operate(&globals.settings, &args.session, &args.by, act).await
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
