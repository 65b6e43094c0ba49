//! `sessionlog redact`: one field of one event redacted (its own key destroyed, a signed
//! `PayloadRedacted` appended), and the receipt.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use crate::when::{Precision, timestamp};
use anyhow::{Context, Result};

/// The arguments of `sessionlog redact`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The seq of the event whose field to redact.
    #[arg(long)]
    seq: u64,
    /// The sealed field: output, arguments, content, note, plan, summary, state, action,
    /// reason or title.
    #[arg(long, default_value = "output")]
    field: String,
    /// Why (kept readable in the log and the receipt: say what and which policy, not the text).
    #[arg(long)]
    reason: String,
    /// Who asks.
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

/// Redacts the field and prints the receipt.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    if args.reason.trim().is_empty() {
        anyhow::bail!("a redaction needs a reason: --reason WHY (what and which policy)");
    }
    let recovery = sessionlog_recovery::Recovery::connect(&globals.settings)
        .await
        .context("connecting recovery to the log, the registry, the store and the key store")?;
    let r = recovery
        .redact(session, args.seq, &args.field, &args.by, &args.reason)
        .await?;
    let text = format!(
        "redacted {} of seq {} of session {session}: PayloadRedacted at seq {} (partition {}, offset {}) at {} by {}; reason: {}; key {}{}",
        r.field,
        r.seq,
        r.redaction_seq,
        r.log_partition,
        r.log_offset,
        timestamp(r.redacted_at, Precision::Seconds, Some(crate::when::now())),
        r.requested_by,
        r.reason,
        if r.key_id.is_empty() { "none" } else { &r.key_id },
        match (&r.kek_id, r.key_destroyed) {
            (Some(kek), true) => format!(" destroyed (the session's key is wrapped by {kek})"),
            (Some(_), false) => " not destroyed: sealed under the session's key before schema v8; it reads as redacted, and only erasing the session destroys it".to_string(),
            (None, _) => " (written without encryption: its text stays in the topic until retention removes it)".to_string(),
        }
    );
    Output::new(&serde_json::to_value(&r)?, text)
}
