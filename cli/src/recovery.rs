//! Recovery subcommands: resume, fork, lineage, diff, resolve, approve, and the HTTP service.

use anyhow::{Context, Result, bail};
use clap::Args;
use sessionlog_http::Access;
use sessionlog_log::Settings;
use sessionlog_recovery::{ForkAt, Recovery, Resolution};
use sessionlog_schemas::{CallOutcome, SessionId};
use std::sync::Arc;

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

/// A command's result: structured for `--json`, and a few lines for people.
pub struct Output {
    /// What `--json` prints.
    pub json: serde_json::Value,
    /// What is printed by default.
    pub human: String,
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
    context_tokens: Option<usize>,
) -> Result<Output> {
    let bundle = connect(settings)
        .await?
        .resume(parse_session(session)?, writer, context_tokens)
        .await?;
    let mut human = format!(
        "resumed {} as {writer}: epoch {}, next seq {}, {} outcome(s) recorded from resolvers, \
         context {} turn(s) in ~{} of {} tokens",
        bundle.state.session_id,
        bundle.epoch,
        bundle.next_seq,
        bundle.resolved.len(),
        bundle.context.turns.len(),
        bundle.context.estimated_tokens,
        bundle.context.budget_tokens,
    );
    for call in &bundle.in_doubt {
        human.push_str(&format!(
            "\n  in doubt: seq {} {} ({:?}) -> {:?}",
            call.call.seq, call.call.tool, call.call.effect, call.action
        ));
    }
    Ok(Output {
        json: serde_json::to_value(&bundle)?,
        human,
    })
}

/// `sessionlog fork`.
pub async fn fork(settings: &Settings, args: &ForkArgs) -> Result<Output> {
    let at = match (args.at_seq, args.at_checkpoint) {
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(seq)) => ForkAt::Checkpoint(seq),
        _ => bail!("say where to fork: --at-seq N or --at-checkpoint N"),
    };
    let first = connect(settings)
        .await?
        .fork(parse_session(&args.session)?, at, &args.agent)
        .await?;
    let human = format!(
        "forked {} at seq {} into new session {} (partition {}, offset {})",
        args.session,
        args.at_seq.or(args.at_checkpoint).unwrap_or_default(),
        first.envelope.session_id,
        first.position.partition,
        first.position.offset
    );
    Ok(Output {
        json: serde_json::json!({
            "session_id": first.envelope.session_id,
            "fork_event": first.envelope,
            "partition": first.position.partition,
            "offset": first.position.offset,
        }),
        human,
    })
}

/// `sessionlog lineage`.
pub async fn lineage(settings: &Settings, session: &str) -> Result<Output> {
    let lineage = connect(settings)
        .await?
        .lineage(parse_session(session)?)
        .await?;
    let mut human = format!("session {}", lineage.session_id);
    for a in &lineage.ancestors {
        human.push_str(&format!(
            "\n  forked from {} at seq {}",
            a.parent_session_id, a.parent_seq
        ));
    }
    for (child, seq) in &lineage.children {
        human.push_str(&format!("\n  fork {child} at seq {seq}"));
    }
    Ok(Output {
        json: serde_json::to_value(&lineage)?,
        human,
    })
}

/// `sessionlog diff`.
pub async fn diff(settings: &Settings, child: &str) -> Result<Output> {
    let diff = connect(settings).await?.diff(parse_session(child)?).await?;
    let side = |events: &[sessionlog_recovery::LoggedEvent]| {
        events
            .iter()
            .map(|e| format!("\n    seq {} {}", e.envelope.seq, e.envelope.event.kind()))
            .collect::<String>()
    };
    let human = format!(
        "fork point: {} seq {}\n  parent only ({}):{}\n  child only ({}):{}",
        diff.fork_point.parent_session_id,
        diff.fork_point.parent_seq,
        diff.parent_only.len(),
        side(&diff.parent_only),
        diff.child_only.len(),
        side(&diff.child_only)
    );
    Ok(Output {
        json: serde_json::to_value(&diff)?,
        human,
    })
}

/// `sessionlog resolve`.
pub async fn resolve(settings: &Settings, args: &ResolveArgs) -> Result<Output> {
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
    recorded(appended, "outcome")
}

/// `sessionlog approve`.
pub async fn approve(settings: &Settings, args: &ApproveArgs) -> Result<Output> {
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
    recorded(appended, "decision")
}

fn recorded(appended: sessionlog_producer::Appended, what: &str) -> Result<Output> {
    let human = format!(
        "recorded the {what} as seq {} of session {} (epoch {}, offset {})",
        appended.envelope.seq,
        appended.envelope.session_id,
        appended.envelope.writer_epoch,
        appended.position.offset
    );
    Ok(Output {
        json: serde_json::json!({"recorded": appended.envelope, "offset": appended.position.offset}),
        human,
    })
}

/// `sessionlog serve-recovery`: the recovery HTTP service until interrupted.
pub async fn serve(settings: &Settings, listen: Option<String>) -> Result<()> {
    let address = listen.unwrap_or_else(|| settings.recovery.listen.clone());
    let metrics = sessionlog_http::metrics::install(&[
        sessionlog_recovery::http::describe_metrics,
        sessionlog_recovery::describe_metrics,
        sessionlog_http::auth::describe_metrics,
    ]);
    let access = Arc::new(Access::from_settings(&settings.auth).await?);
    let app = sessionlog_recovery::http::router(connect(settings).await?, metrics, access);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding {address} (is another service on it? use --listen)"))?;
    tracing::info!(%address, "recovery service listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::commands::shutdown_signal())
        .await?;
    Ok(())
}
