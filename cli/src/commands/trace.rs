//! `sessionlog trace`: a session's span tree, as the projector wrote it, drawn as a terminal
//! waterfall.

use crate::args::{Globals, parse_session};
use crate::duration::show_micros;
use crate::output::{Output, dollars};
use crate::when::{Precision, timestamp};
use anyhow::Result;
use sessionlog_recovery::SessionTrace;
use sessionlog_store::{ProjectionStore, SpanRow};

/// Columns of the timeline.
const TIMELINE: usize = 40;

/// The arguments of `sessionlog trace`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session id.
    session: String,
}

/// Reads the trace from the projection (no Kafka needed).
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let session = parse_session(&args.session)?;
    let store = ProjectionStore::open(&globals.settings.cql).await?;
    let trace = sessionlog_recovery::trace::session_trace(&store, session).await?;
    // As a JSON value: its keys sorted, as `trace --json` has always printed them.
    Output::new(&serde_json::to_value(&trace)?, waterfall(&trace))
}

/// The trace as a table with a timeline: one line per span, indented under its parent.
fn waterfall(trace: &SessionTrace) -> String {
    let spans: Vec<(usize, &SpanRow)> = trace
        .walk()
        .into_iter()
        .map(|(d, s)| (d, &s.span))
        .collect();
    // The timeline runs from the first start to the last end (or start, for spans that have
    // not ended). Times come from clients: the arithmetic is in i128 and clamped.
    let t0 = spans.iter().map(|(_, s)| s.start_us).min().unwrap_or(0);
    let t1 = spans
        .iter()
        .map(|(_, s)| s.end_us.unwrap_or(s.start_us).max(s.start_us))
        .max()
        .unwrap_or(t0);
    let total = (i128::from(t1) - i128::from(t0)).max(1);
    let column = |at: i64| -> usize {
        let offset = (i128::from(at) - i128::from(t0)).clamp(0, total);
        usize::try_from(offset * TIMELINE as i128 / total).unwrap_or(TIMELINE)
    };
    let labels: Vec<String> = spans
        .iter()
        .map(|(depth, s)| format!("{}{} {}", "  ".repeat(*depth), s.span_kind, s.name))
        .collect();
    let label_width = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    // When it began, for a trace with spans (an empty one has no time to tell).
    let began = if spans.is_empty() {
        String::new()
    } else {
        format!(
            ", started {}",
            timestamp(t0, Precision::Seconds, Some(crate::when::now()))
        )
    };
    let mut out = format!(
        "trace of session {}: {} spans{began}\n{:<label_width$}  {:>9}  {:>9}  {:>13}  {:>10}  {:<11}  {}",
        trace.session_id,
        trace.span_count,
        "SPAN",
        "START",
        "DURATION",
        "TOKENS IN/OUT",
        "COST $",
        "OUTCOME",
        "TIMELINE",
    );
    for ((_, span), label) in spans.iter().zip(&labels) {
        out.push('\n');
        let start = column(span.start_us).min(TIMELINE - 1);
        let end = span.end_us.map_or(TIMELINE, column).max(start + 1);
        let mark = if span.end_us.is_none() { '░' } else { '█' };
        let bar: String = (0..TIMELINE)
            .map(|i| if (start..end).contains(&i) { mark } else { ' ' })
            .collect();
        out.push_str(&format!(
            "{label:<label_width$}  {:>9}  {:>9}  {:>13}  {:>10}  {:<11}  |{bar}|",
            format!(
                "+{}",
                show_micros((i128::from(span.start_us) - i128::from(t0)).max(0))
            ),
            span.duration_us
                .map_or("running".into(), |d| show_micros(i128::from(d))),
            tokens(span),
            span.cost_micros.map_or("-".into(), dollars),
            span.outcome,
        ));
    }
    out
}

fn tokens(span: &SpanRow) -> String {
    match (span.tokens_in, span.tokens_out) {
        (None, None) => "-".into(),
        (i, o) => format!(
            "{}/{}",
            i.map_or("-".into(), |v| v.to_string()),
            o.map_or("-".into(), |v| v.to_string())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::SessionId;

    fn row(
        seq: i64,
        kind: &str,
        name: &str,
        parent: Option<i64>,
        start: i64,
        end: Option<i64>,
    ) -> SpanRow {
        SpanRow {
            span_seq: seq,
            span_kind: kind.into(),
            name: name.into(),
            start_us: start,
            end_seq: end.map(|_| seq + 1),
            end_us: end,
            duration_us: end.map(|e| e.saturating_sub(start)),
            tokens_in: (kind == "model_call").then_some(1200),
            tokens_out: (kind == "model_call").then_some(300),
            cost_micros: (kind == "model_call").then_some(4_500),
            outcome: if end.is_some() { "ok" } else { "running" }.into(),
            parent_seq: parent,
            log_partition: Some(0),
            open_offset: Some(seq),
            close_offset: None,
        }
    }

    #[test]
    fn a_waterfall_indents_children_and_places_their_bars_in_time() {
        let session = SessionId::new();
        let trace = SessionTrace::from_rows(
            session,
            vec![
                row(1, "session", "planner", None, 0, None),
                row(2, "model_call", "model-x", Some(1), 0, Some(500_000)),
                row(3, "tool_call", "grep", Some(2), 500_000, Some(1_000_000)),
            ],
        );
        let text = waterfall(&trace);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].contains(&session.to_string()) && lines[0].contains("3 spans"));
        assert!(
            lines[0].contains(", started 1970-01-01T00:00:00Z (") && lines[0].ends_with(" ago)"),
            "{text}"
        );
        assert!(lines[2].starts_with("session planner") && lines[2].contains("running"));
        assert!(lines[3].starts_with("  model_call model-x"), "{text}");
        assert!(lines[3].contains("1200/300") && lines[3].contains("0.004500"));
        assert!(lines[4].starts_with("    tool_call grep") && lines[4].contains("500.0 ms"));
        // The model call fills the first half of the timeline, the tool call the second; the
        // session, still running, all of it, drawn open.
        let bar = |line: &str| line.split('|').nth(1).unwrap_or_default().to_string();
        let half = TIMELINE / 2;
        assert_eq!(
            bar(lines[3]),
            format!("{}{}", "█".repeat(half), " ".repeat(half))
        );
        assert_eq!(
            bar(lines[4]),
            format!("{}{}", " ".repeat(half), "█".repeat(half))
        );
        assert_eq!(bar(lines[2]), "░".repeat(TIMELINE));
    }

    #[test]
    fn extreme_client_times_neither_panic_nor_wrap() {
        let session = SessionId::new();
        let trace = SessionTrace::from_rows(
            session,
            vec![
                row(1, "session", "a", None, i64::MIN, Some(i64::MAX)),
                row(2, "model_call", "m", Some(1), i64::MAX, Some(i64::MIN)),
            ],
        );
        let text = waterfall(&trace);
        assert_eq!(text.lines().count(), 4, "{text}");
    }
}
