//! A session's trace as a tree of spans, read from `trace_spans_by_session`.
//!
//! The projector records each span's parent (see `sessionlog_session::trace`): the session
//! span is the root, model calls, steering and approvals hang off it, and tool calls off the
//! model call that asked for them. A span whose parent is not stored (rows projected before
//! spans had parents, or a parent the projector has not written yet) is a root of its own,
//! so nothing stored is left out of the tree.

use crate::{Error, Result};
use serde::Serialize;
use sessionlog_schemas::SessionId;
use sessionlog_store::{ProjectionStore, SpanRow};
use std::collections::{BTreeSet, HashMap};

/// A session's spans, as a tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionTrace {
    /// The session.
    #[schema(value_type = uuid::Uuid)]
    pub session_id: SessionId,
    /// The roots, by the seq that opened each: normally the session's span alone.
    pub spans: Vec<TraceSpan>,
    /// How many spans the tree holds.
    pub span_count: usize,
}

/// One span (its `trace_spans_by_session` row) and the spans under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TraceSpan {
    /// The span as stored.
    #[serde(flatten)]
    pub span: SpanRow,
    /// The spans under it, by seq.
    #[schema(no_recursion)]
    pub children: Vec<TraceSpan>,
}

impl SessionTrace {
    /// The tree of `rows`. Built without recursion, from the last seq to the first: a parent
    /// always opened before its children, so a span's children are complete when it is
    /// reached. A parent that is not an earlier stored span makes the span a root (which
    /// also keeps a damaged row from making a cycle).
    pub fn from_rows(session_id: SessionId, mut rows: Vec<SpanRow>) -> Self {
        rows.sort_by_key(|r| r.span_seq);
        let span_count = rows.len();
        let seqs: BTreeSet<i64> = rows.iter().map(|r| r.span_seq).collect();
        let mut children: HashMap<i64, Vec<TraceSpan>> = HashMap::new();
        let mut spans = Vec::new();
        for span in rows.into_iter().rev() {
            let seq = span.span_seq;
            let mut node = TraceSpan {
                children: children.remove(&seq).unwrap_or_default(),
                span,
            };
            node.children.reverse();
            match node.span.parent_seq {
                Some(parent) if parent < seq && seqs.contains(&parent) => {
                    children.entry(parent).or_default().push(node);
                }
                _ => spans.push(node),
            }
        }
        spans.reverse();
        Self {
            session_id,
            spans,
            span_count,
        }
    }

    /// Every span, depth first in seq order, with its depth (roots at 0).
    pub fn walk(&self) -> Vec<(usize, &TraceSpan)> {
        let mut out = Vec::with_capacity(self.span_count);
        let mut stack: Vec<(usize, &TraceSpan)> = self.spans.iter().rev().map(|s| (0, s)).collect();
        while let Some((depth, span)) = stack.pop() {
            out.push((depth, span));
            stack.extend(span.children.iter().rev().map(|c| (depth + 1, c)));
        }
        out
    }
}

/// The trace of `session` as the projector has written it; [`Error::UnknownSession`] when it
/// has no span (an unknown session, or one the projector has not reached yet).
pub async fn session_trace(store: &ProjectionStore, session: SessionId) -> Result<SessionTrace> {
    let rows = store.spans(session).await?;
    if rows.is_empty() {
        return Err(Error::UnknownSession(session.to_string()));
    }
    Ok(SessionTrace::from_rows(session, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn row(seq: i64, kind: &str, parent: Option<i64>) -> SpanRow {
        SpanRow {
            span_seq: seq,
            span_kind: kind.into(),
            name: format!("{kind}-{seq}"),
            start_us: seq * 10,
            end_seq: None,
            end_us: None,
            duration_us: None,
            tokens_in: None,
            tokens_out: None,
            cost_micros: None,
            outcome: "ok".into(),
            parent_seq: parent,
            log_partition: Some(0),
            open_offset: Some(seq),
            close_offset: None,
        }
    }

    #[test]
    fn spans_hang_off_their_parents_in_seq_order() {
        let session = SessionId(Uuid::now_v7());
        let rows = vec![
            row(4, "tool_call", Some(3)),
            row(1, "session", None),
            row(6, "tool_call", Some(3)),
            row(3, "model_call", Some(1)),
            row(8, "steering", Some(1)),
            // Projected before spans had parents: a root of its own.
            row(9, "tool_call", None),
            // A parent that is not stored, and one that is not earlier: roots too.
            row(10, "tool_call", Some(5)),
            row(11, "tool_call", Some(12)),
            row(12, "model_call", Some(1)),
        ];
        let trace = SessionTrace::from_rows(session, rows);
        assert_eq!(trace.span_count, 9);
        let walked: Vec<(usize, i64)> = trace
            .walk()
            .iter()
            .map(|(d, s)| (*d, s.span.span_seq))
            .collect();
        assert_eq!(
            walked,
            [
                (0, 1),
                (1, 3),
                (2, 4),
                (2, 6),
                (1, 8),
                (1, 12),
                (0, 9),
                (0, 10),
                (0, 11)
            ]
        );
    }
}
