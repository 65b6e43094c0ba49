//! `sessionlog events`: a range of a session's history, page after page, as a table or one
//! JSON object per event.

use crate::args::{Globals, parse_session};
use crate::output::{Output, Stream, one_line};
use crate::when::{Precision, timestamp};
use anyhow::Result;
use sessionlog_recovery::{EventRange, HistoryEvent};
use sessionlog_schemas::{Content, SessionEvent};

/// A range of a session's history.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    session: String,
    /// The first seq of the session's own events (default 1).
    #[arg(long = "from")]
    from_seq: Option<u64>,
    /// The last seq of the session's own events (default: its last).
    #[arg(long = "to")]
    to_seq: Option<u64>,
    /// Only these kinds, comma-separated (UserRequest,ModelResponse,...).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Events read per page, 1 to 1000 (default 100); every page is printed.
    #[arg(long)]
    limit: Option<u64>,
    /// A fork's inherited events first: each ancestor's through its fork point, oldest first.
    /// --from and --to apply to the session's own seqs only.
    #[arg(long)]
    inherited: bool,
}

/// Prints the range page after page (following each page's cursor) until it is done, so a long
/// one starts at once: a table or, with `--json`, one JSON object per event and line. Stops
/// quietly when stdout is closed (`| head`). Returns nothing more to print.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let json = globals.json;
    let session = parse_session(&args.session)?;
    let recovery = crate::recovery::connect(&globals.settings).await?;
    let mut out = Stream::stdout();
    let mut cursor = None;
    let mut printed = 0u64;
    loop {
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
        if !out.write(&lines)? {
            return Ok(Output::none());
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if !json && printed == 0 {
        if !out.write("(no events in that range)\n")? {
            return Ok(Output::none());
        }
    } else {
        out.flush()?;
    }
    Ok(Output::none())
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
        SessionEvent::PayloadRedacted {
            redacted_seq,
            field,
            redacted_by,
            reason,
            ..
        } => format!("redacts {field} of seq {redacted_seq} by {redacted_by}: {reason}"),
    };
    one_line(&line, 60)
}
