//! `sessionlog inspect`: a session as the projector last wrote it, waiting for a seq if asked.

use crate::args::{Globals, parse_session};
use crate::describe;
use crate::output::Output;
use anyhow::{Context, Result, bail};
use sessionlog_store::ProjectionStore;
use std::time::{Duration, Instant};

/// The arguments of `sessionlog inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session id.
    session: String,
    /// Wait (up to --timeout) until the projection reaches this seq.
    #[arg(long)]
    wait_for_seq: Option<u64>,
    /// How long --wait-for-seq waits: `30s`, `2m`, `500ms` (a bare number is seconds).
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse)]
    timeout: Duration,
}

/// Reads the session's projected row, polling until it reaches `--wait-for-seq`.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    // Read-only: a missing or outdated keyspace is an error naming the command to run.
    let store = ProjectionStore::open(&globals.settings.cql).await?;
    let deadline = Instant::now() + args.timeout;
    let projected = loop {
        let row = store.load_session(session).await?;
        let reached = match (&row, args.wait_for_seq) {
            (Some(p), Some(seq)) => p.state.last_seq >= seq,
            (Some(_), None) => true,
            (None, None) => bail!("session {session} is not in the projection (yet?)"),
            (None, Some(_)) => false,
        };
        if reached {
            break row.context("checked above")?;
        }
        if Instant::now() > deadline {
            bail!(
                "session {session} did not reach seq {} in the projection within {} \
                 (is `sessionlog project` running? a longer --timeout waits more)",
                args.wait_for_seq.unwrap_or_default(),
                crate::duration::show(args.timeout)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let digest = projected.state.digest();
    let text = format!(
        "projected session (partition {}, applied offset {})\n{}",
        projected.partition,
        projected.applied_offset,
        describe::state(&projected.state, &digest)
    );
    Output::new(
        &serde_json::json!({
            "state": projected.state,
            "partition": projected.partition,
            "applied_offset": projected.applied_offset,
            "digest": digest,
        }),
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Inspect {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn inspect_takes_a_timeout_with_units() {
        let id = "0190e5b8-0000-7000-8000-000000000001";
        let timeout = |extra: &[&str]| {
            Inspect::try_parse_from(["inspect", id].iter().chain(extra))
                .ok()
                .map(|i| i.args.timeout)
        };
        assert_eq!(
            timeout(&["--wait-for-seq", "2", "--timeout", "30s"]),
            Some(Duration::from_secs(30))
        );
        assert_eq!(timeout(&["--timeout", "60"]), Some(Duration::from_secs(60)));
        assert_eq!(timeout(&[]), Some(Duration::from_secs(60)));
        assert_eq!(timeout(&["--timeout", "soon"]), None);
    }
}
