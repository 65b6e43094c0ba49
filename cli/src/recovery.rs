//! Recovery subcommands: resume, fork, lineage, diff, events, resolve, approve, and the HTTP
//! service.

use crate::args::parse_session;
use crate::when::{Precision, timestamp};
use anyhow::{Context, Result, bail};
use clap::Args;
use sessionlog_http::Access;
use sessionlog_log::Settings;
use sessionlog_recovery::{EventRange, ForkAt, HistoryEvent, Recovery, Resolution};
use sessionlog_schemas::{CallOutcome, Content, SessionEvent};
use std::io::Write;
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
    /// The new session's id (a UUID); a fresh one when absent. Refused if it is taken.
    #[arg(long = "child", value_name = "ID")]
    pub child: Option<String>,
    /// A granted approval of the parent the branch carries over (repeat for several); none is
    /// carried over unless named. Each may be acted on once in the branch.
    #[arg(long = "inherit-approval", value_name = "APPROVAL_ID")]
    pub inherit_approval: Vec<String>,
}

/// A range of a session's history.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The session.
    pub session: String,
    /// The first seq of the session's own events (default 1).
    #[arg(long = "from")]
    pub from_seq: Option<u64>,
    /// The last seq of the session's own events (default: its last).
    #[arg(long = "to")]
    pub to_seq: Option<u64>,
    /// Only these kinds, comma-separated (UserRequest,ModelResponse,...).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// Events read per page, 1 to 1000 (default 100); every page is printed.
    #[arg(long)]
    pub limit: Option<u64>,
    /// A fork's inherited events first: each ancestor's through its fork point, oldest first.
    /// --from and --to apply to the session's own seqs only.
    #[arg(long)]
    pub inherited: bool,
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
    let child = args.child.as_deref().map(parse_session).transpose()?;
    let first = connect(settings)
        .await?
        .fork_by(
            parse_session(&args.session)?,
            at,
            &args.agent,
            None,
            child,
            &args.inherit_approval,
        )
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

/// `sessionlog events`: the range, page after page (following each page's cursor) until it
/// is done, as a table or, with `--json`, one JSON object per event and line. Stops quietly
/// when stdout is closed (`| head`).
pub async fn events(settings: &Settings, args: &EventsArgs, json: bool) -> Result<()> {
    let session = parse_session(&args.session)?;
    let recovery = connect(settings).await?;
    let mut out = std::io::stdout().lock();
    let mut cursor = None;
    let mut printed = 0u64;
    let written = loop {
        let range = EventRange {
            from_seq: args.from_seq,
            to_seq: args.to_seq,
            kinds: args.kinds.clone(),
            limit: args.limit,
            cursor: cursor.take(),
            inherited: args.inherited,
        };
        let page = recovery.events(session, range).await?;
        let mut lines = String::new();
        if !json && printed == 0 {
            lines.push_str(&event_header(args.inherited));
        }
        for event in &page.events {
            if json {
                lines.push_str(&serde_json::to_string(event)?);
            } else {
                lines.push_str(&event_line(event, args.inherited));
            }
            lines.push('\n');
            printed += 1;
        }
        if let Err(e) = out.write_all(lines.as_bytes()) {
            break Err(e);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => {
                if !json && printed == 0 {
                    break writeln!(out, "(no events in that range)");
                }
                break out.flush();
            }
        }
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn event_header(inherited: bool) -> String {
    let session = if inherited { "SESSION   " } else { "" };
    format!(
        "{session}{:>6}  {:<18}  {:<24}  TEXT\n",
        "SEQ", "KIND", "TIME"
    )
}

/// One event as a table line: seq, kind, time and a short text (with `inherited`, the last
/// characters of its session id first: a UUIDv7 begins with its creation time, which a fork
/// made soon after its parent shares).
fn event_line(event: &HistoryEvent, inherited: bool) -> String {
    let session = if inherited {
        let id = event.session_id.to_string();
        format!("{:<10}", &id[id.len().saturating_sub(8)..])
    } else {
        String::new()
    };
    format!(
        "{session}{:>6}  {:<18}  {:<24}  {}",
        event.seq,
        event.kind,
        timestamp(event.occurred_at, Precision::Millis, None),
        short_text(event)
    )
}

/// The gist of an event on one line: its main text (cut to 60 characters) or what it did.
fn short_text(event: &HistoryEvent) -> String {
    let Some(body) = &event.event else {
        return format!("[{}]", event.missing.as_deref().unwrap_or("missing"));
    };
    // A text that did not open shows why (erased, sealed, unreadable) instead.
    let why = event.unopened.values().next().map(String::as_str);
    let text = |content: &Content| match (content, why) {
        (Content::Plain(text), _) if !text.is_empty() => text.clone(),
        (_, Some(why)) => format!("[{why}]"),
        (Content::Plain(_), None) => String::new(),
        (Content::Sealed { .. }, None) => "[sealed]".to_string(),
    };
    let maybe = |content: &Option<Content>| content.as_ref().map(text).unwrap_or_default();
    let line = match body {
        SessionEvent::SessionStarted { agent, title, .. } => {
            format!("{agent}: {}", maybe(title))
        }
        SessionEvent::UserRequest { content } | SessionEvent::SteeringMessage { content, .. } => {
            text(content)
        }
        SessionEvent::ModelResponse { model, content, .. } => format!("{model}: {}", text(content)),
        SessionEvent::ToolCallRequested {
            tool, arguments, ..
        } => format!("{tool}({})", text(arguments)),
        SessionEvent::ToolCallResult {
            call_seq,
            outcome,
            output,
            ..
        } => format!("call {call_seq} {outcome:?}: {}", text(output)),
        SessionEvent::PlanUpdated { plan } => text(plan),
        SessionEvent::ApprovalRequested {
            approval_id,
            action,
            ..
        } => format!("{approval_id}: {}", text(action)),
        SessionEvent::ApprovalDecided {
            approval_id,
            approved,
            decided_by,
            ..
        } => format!(
            "{approval_id} {} by {decided_by}",
            if *approved { "approved" } else { "denied" }
        ),
        SessionEvent::Checkpoint { state_digest, .. } => format!("digest {state_digest}"),
        SessionEvent::WriterClaimed { writer, .. } => {
            format!("epoch {} {writer}", event.writer_epoch)
        }
        SessionEvent::SessionForked { fork_point, .. } => format!(
            "from {} at seq {}",
            fork_point.parent_session_id, fork_point.parent_seq
        ),
        SessionEvent::ResolutionRequired { call_seq, reason } => {
            format!("call {call_seq}: {}", text(reason))
        }
        SessionEvent::SessionPaused {
            reason,
            until: Some(until),
        } => format!(
            "until {} {}",
            timestamp(*until, Precision::Seconds, None),
            maybe(reason)
        ),
        SessionEvent::SessionPaused { reason, .. } => maybe(reason),
        SessionEvent::SessionResumed {} => String::new(),
        SessionEvent::SessionEnded { outcome, reason } => {
            format!("{outcome:?} {}", maybe(reason))
        }
        SessionEvent::SessionErased { requested_by, .. } => format!("by {requested_by}"),
        SessionEvent::ContextSummarized {
            first_seq,
            last_seq,
            summary,
            ..
        } => format!("seqs {first_seq}..={last_seq}: {}", text(summary)),
        SessionEvent::EventRetracted {
            retracted_seq,
            retracted_by,
        } => format!("retracts seq {retracted_seq} ({retracted_by})"),
        // The framework and its key, never the state: it is the framework's, and large.
        SessionEvent::FrameworkStateSaved { framework, key, .. } => format!("{framework} {key}"),
    };
    one_line(&line, 60)
}

/// `text` on one line (line breaks as spaces), cut to `max` characters with an ellipsis.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &flat[..end]),
        None => flat,
    }
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

/// What a command that appended `what` prints: its seq, epoch and offset.
pub(crate) fn recorded(appended: sessionlog_producer::Appended, what: &str) -> Result<Output> {
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
    // Bound first: the port is held while connecting takes seconds, and a taken port is said
    // at once.
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding {address} (is another service on it? use --listen)"))?;
    let access = Arc::new(Access::from_settings(&settings.auth).await?);
    let recovery = connect(settings).await?;
    // Started now, as ingest starts its own: every claim confirms through it, and a rebuild of
    // a session written since reads it from memory instead of a pooled reader.
    recovery.log().start_tail().await;
    // Said once, by the service that would sign: the one-shot commands that sign fail naming
    // the setting instead, and the others never need the key.
    if !recovery.notary().can_sign() {
        tracing::warn!("{}", sessionlog_recovery::notary::Notary::UNSIGNED_WARNING);
    }
    let app = sessionlog_recovery::http::router(recovery, metrics, access);
    tracing::info!(%address, "recovery service listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::signal::shutdown_signal())
        .await?;
    Ok(())
}
