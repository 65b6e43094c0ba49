//! Recovery subcommands: resume, fork, lineage, diff, resolve, approve, and the HTTP service.

use anyhow::{Context, Result, bail};
use clap::Args;
use sessionlog_log::Settings;
use sessionlog_recovery::{ForkAt, Recovery, Resolution};
use sessionlog_schemas::{CallOutcome, SessionId};

/// Where to fork: exactly one of `--at-seq` or `--at-checkpoint`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The parent session.
    pub session: String,
    /// Fork after this seq.
    #[arg(long, conflicts_with = "at_checkpoint")]
    pub at_seq: Option<u64>,
    /// Fork at the checkpoint with this seq.
    #[arg(long)]
    pub at_checkpoint: Option<u64>,
    /// The agent that runs the branch.
    #[arg(long, default_value = "sessionlog-cli")]
    pub agent: String,
}

/// An operator's outcome for an in-doubt call.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The session.
    pub session: String,
    /// The seq of the tool call in doubt (`sessionlog recover` lists pending calls).
    #[arg(long)]
    pub call_seq: u64,
    /// The call had its effect (default) or failed.
    #[arg(long, value_parser = ["succeeded", "failed"], default_value = "succeeded")]
    pub outcome: String,
    /// What it returned, as far as you know.
    #[arg(long, default_value = "")]
    pub output: String,
    /// Who you are.
    #[arg(long, env = "USER")]
    pub operator: String,
    /// Why you believe it.
    #[arg(long)]
    pub reason: String,
}

/// A decision on a pending approval.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The session.
    pub session: String,
    /// The approval's id.
    #[arg(long)]
    pub approval: String,
    /// Deny instead of approve.
    #[arg(long)]
    pub deny: bool,
    /// Who decides.
    #[arg(long, env = "USER")]
    pub by: String,
    /// Why.
    #[arg(long)]
    pub reason: Option<String>,
}

/// Parses a session id with a message that says what one looks like.
pub fn parse_session(text: &str) -> Result<SessionId> {
    text.parse().map_err(|_| {
        anyhow::anyhow!(
            "{text:?} is not a session id: expected a UUID such as 0190c6e2-5b7a-7c3e-9f00-1a2b3c4d5e6f \
             (`sessionlog example` prints one)"
        )
    })
}

async fn connect(settings: &Settings) -> Result<Recovery> {
    Recovery::connect(settings)
        .await
        .context("connecting recovery to the log, the registry and the store")
}

/// `sessionlog resume`: claims the next epoch and prints the resume bundle.
pub async fn resume(
    settings: &Settings,
    session: &str,
    writer: &str,
    context_tokens: usize,
) -> Result<serde_json::Value> {
    let bundle = connect(settings)
        .await?
        .resume(parse_session(session)?, writer, context_tokens)
        .await?;
    Ok(serde_json::to_value(&bundle)?)
}

/// `sessionlog fork`.
pub async fn fork(settings: &Settings, args: &ForkArgs) -> Result<serde_json::Value> {
    let at = match (args.at_seq, args.at_checkpoint) {
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(seq)) => ForkAt::Checkpoint(seq),
        _ => bail!("say where to fork: --at-seq N or --at-checkpoint N"),
    };
    let first = connect(settings)
        .await?
        .fork(parse_session(&args.session)?, at, &args.agent)
        .await?;
    Ok(serde_json::json!({
        "session_id": first.envelope.session_id,
        "fork_event": first.envelope,
        "partition": first.position.partition,
        "offset": first.position.offset,
    }))
}

/// `sessionlog lineage`.
pub async fn lineage(settings: &Settings, session: &str) -> Result<serde_json::Value> {
    let lineage = connect(settings)
        .await?
        .lineage(parse_session(session)?)
        .await?;
    Ok(serde_json::to_value(lineage)?)
}

/// `sessionlog diff`.
pub async fn diff(settings: &Settings, child: &str) -> Result<serde_json::Value> {
    let diff = connect(settings).await?.diff(parse_session(child)?).await?;
    Ok(serde_json::to_value(diff)?)
}

/// `sessionlog resolve`.
pub async fn resolve(settings: &Settings, args: &ResolveArgs) -> Result<serde_json::Value> {
    let appended = connect(settings)
        .await?
        .record_resolution(
            parse_session(&args.session)?,
            Resolution {
                call_seq: args.call_seq,
                outcome: if args.outcome == "failed" {
                    CallOutcome::Failed
                } else {
                    CallOutcome::Succeeded
                },
                output: args.output.clone(),
                operator: args.operator.clone(),
                reason: args.reason.clone(),
            },
        )
        .await?;
    Ok(serde_json::json!({"recorded": appended.envelope, "offset": appended.position.offset}))
}

/// `sessionlog approve`.
pub async fn approve(settings: &Settings, args: &ApproveArgs) -> Result<serde_json::Value> {
    let appended = connect(settings)
        .await?
        .decide_approval(
            parse_session(&args.session)?,
            &args.approval,
            !args.deny,
            &args.by,
            args.reason.clone(),
        )
        .await?;
    Ok(serde_json::json!({"recorded": appended.envelope, "offset": appended.position.offset}))
}

/// `sessionlog serve-recovery`: the recovery HTTP service until interrupted.
pub async fn serve(settings: &Settings, listen: Option<String>) -> Result<()> {
    let address = listen.unwrap_or_else(|| settings.recovery.listen.clone());
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .ok();
    let app = sessionlog_recovery::http::router(connect(settings).await?, metrics);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding {address} (is another service on it? use --listen)"))?;
    tracing::info!(%address, "recovery service listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::commands::shutdown_signal())
        .await?;
    Ok(())
}
