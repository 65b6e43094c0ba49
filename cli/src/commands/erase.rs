//! `sessionlog erase`: a session's erasure (`SessionErased`, its data key destroyed, a
//! receipt kept), or where it stands.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use crate::when::{Precision, timestamp};
use anyhow::{Context, Result};

/// The arguments of `sessionlog erase`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// Why (kept readable in the log and the receipt: name the request or policy, not the
    /// person). Required unless --status.
    #[arg(long, required_unless_present = "status")]
    reason: Option<String>,
    /// Who asks.
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
    /// Print where the session's erasure stands instead of erasing it.
    #[arg(long)]
    status: bool,
}

/// Erases the session, or with `--status` says where its erasure stands.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    let recovery = sessionlog_recovery::Recovery::connect(&globals.settings)
        .await
        .context("connecting recovery to the log, the registry, the store and the key store")?;
    if args.status {
        let status = recovery.erasure_status(session).await?;
        let mut human = format!(
            "session {session}: {} in the log; projection: {}; data key: {}",
            if status.erased_in_log {
                "erased"
            } else {
                "not erased"
            },
            status
                .projected_status
                .as_deref()
                .unwrap_or("not projected"),
            status.data_key
        );
        if let Some(r) = &status.receipt {
            human.push_str(&format!(
                "\nreceipt: erased at {} by {} at seq {} (partition {}, offset {}); reason: {}; key wrapped by {}",
                timestamp(r.erased_at, Precision::Seconds, Some(crate::when::now())),
                r.requested_by,
                r.erased_seq,
                r.log_partition,
                r.log_offset,
                r.reason,
                r.destroyed_kek_id.as_deref().unwrap_or("no key (written without encryption)")
            ));
        }
        // As a JSON value: its keys sorted, as `erase --status --json` has always printed them.
        return Output::new(&serde_json::to_value(&status)?, human);
    }
    let reason = args.reason.as_deref().unwrap_or_default();
    let receipt = recovery.erase(session, &args.by, reason).await?;
    let text = format!(
        "erased session {session}: SessionErased at seq {} (offset {}), data key destroyed{}",
        receipt.erased_seq,
        receipt.log_offset,
        if receipt.destroyed_kek_id.is_none() {
            " (it had none: its text was written without encryption and stays in the topic until retention removes it)"
        } else {
            ""
        }
    );
    // As a JSON value: its keys sorted, as `erase --json` has always printed them.
    Output::new(&serde_json::to_value(&receipt)?, text)
}
