//! `sessionlog redact`: one field of one event redacted (its own key destroyed, a signed
//! `PayloadRedacted` appended), and the receipt; or, with `--status`, the session's redactions.

use crate::args::{Globals, parse_session};
use crate::output::Output;
use crate::when::{Precision, timestamp};
use anyhow::{Context, Result};
use sessionlog_recovery::RedactionReceipt;

/// The arguments of `sessionlog redact`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The seq of the event whose field to redact. Required unless --status.
    #[arg(long, required_unless_present = "status")]
    seq: Option<u64>,
    /// The sealed field: output, arguments, content, note, plan, summary, state, action,
    /// reason or title.
    #[arg(long, default_value = "output")]
    field: String,
    /// Why (kept readable in the log and the receipt: say what and which policy, not the text).
    /// Required unless --status.
    #[arg(long, required_unless_present = "status")]
    reason: Option<String>,
    /// Who asks.
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
    /// List the session's redactions (seq, field, who, why, when, which key) instead of
    /// redacting.
    #[arg(long, conflicts_with_all = ["seq", "reason"])]
    status: bool,
}

/// Redacts the field and prints the receipt, or with `--status` lists the session's redactions.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    let reason = args.reason.as_deref().unwrap_or_default();
    if !args.status && reason.trim().is_empty() {
        anyhow::bail!("a redaction needs a reason: --reason WHY (what and which policy)");
    }
    let recovery = sessionlog_recovery::Recovery::connect(&globals.settings)
        .await
        .context("connecting recovery to the log, the registry, the store and the key store")?;
    if args.status {
        let receipts = recovery.redactions(session).await?;
        let text = if receipts.is_empty() {
            format!("session {session} has no redactions")
        } else {
            receipts
                .iter()
                .map(receipt_line)
                .collect::<Vec<_>>()
                .join("\n")
        };
        return Output::new(&serde_json::to_value(&receipts)?, text);
    }
    let seq = args.seq.context("--seq N names the event to redact")?;
    let r = recovery
        .redact(session, seq, &args.field, &args.by, reason)
        .await?;
    Output::new(&serde_json::to_value(&r)?, receipt_line(&r))
}

/// One receipt as a line: what, where its event is, when, who, why and what became of its key.
fn receipt_line(r: &RedactionReceipt) -> String {
    format!(
        "redacted {} of seq {} of session {}: PayloadRedacted at seq {} (partition {}, offset {}) at {} by {}; reason: {}; key {}{}",
        r.field,
        r.seq,
        r.session_id,
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
    )
}
