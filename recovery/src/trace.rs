//! A session's trace as a tree of spans, read from `trace_spans_by_session`.
//!
//! The projector records each span's parent (see `sessionlog_session::trace`): the session
//! span is the root, model calls, steering and approvals hang off it, and tool calls off the
//! model call that asked for them. A span whose parent is not stored (rows projected before
//! spans had parents, or a parent the projector has not written yet) is a root of its own,
//! so nothing stored is left out of the tree.
//!
//! [`SpanQuery`] lists spans by time, a page at a time, filtered by agent, model, tool and
//! outcome: a tenant's from its own partitions of `trace_spans_by_tenant_day`, an operator's
//! (no tenant) from every tenant's.

use crate::history::bad;
use crate::{Error, Result};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sessionlog_schemas::SessionId;
use sessionlog_store::{DaySpanRow, ProjectionStore, SpanRow, SpanSearch};
use std::collections::{BTreeSet, HashMap};
use uuid::Uuid;

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

/// The trace of `session` as the projector has written it; [`Error::NoSpans`] when it has
/// no span (an unknown session, one the projector has not reached yet, or one whose rows
/// expired).
pub async fn session_trace(store: &ProjectionStore, session: SessionId) -> Result<SessionTrace> {
    let rows = store.spans(session).await?;
    if rows.is_empty() {
        return Err(Error::NoSpans(session.to_string()));
    }
    Ok(SessionTrace::from_rows(session, rows))
}

/// Spans a page holds when the caller does not say.
pub const DEFAULT_SPANS: usize = 100;
/// The most spans one page may hold.
pub const MAX_SPANS: usize = 1_000;

/// A listing of every session's spans by start time, as `GET /v1/spans` asks for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanQuery {
    /// RFC 3339: spans that began at or after it.
    pub from: String,
    /// RFC 3339: and before it (default: now); at most 31 days after `from`.
    pub to: Option<String>,
    /// Only spans of sessions of this agent.
    pub agent: Option<String>,
    /// Only calls of this model.
    pub model: Option<String>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Only spans with this outcome.
    pub outcome: Option<String>,
    /// Spans a page, 1 to 1000 (default 100).
    pub limit: Option<usize>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A page of spans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SpanPage {
    /// By start time, then session and seq.
    pub spans: Vec<DaySpanRow>,
    /// Pass as `cursor` (with the same other parameters) for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// The version byte that starts a span cursor.
const SPAN_CURSOR_VERSION: u8 = 1;
/// Version, start, session, seq.
const SPAN_CURSOR_BYTES: usize = 1 + 8 + 16 + 8;

fn encode_cursor((start_us, session, seq): (i64, Uuid, i64)) -> String {
    let mut bytes = Vec::with_capacity(SPAN_CURSOR_BYTES);
    bytes.push(SPAN_CURSOR_VERSION);
    bytes.extend_from_slice(&start_us.to_be_bytes());
    bytes.extend_from_slice(session.as_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

fn decode_cursor(text: &str) -> Result<(i64, Uuid, i64)> {
    let malformed = || {
        bad(
            "bad_cursor",
            "the cursor is not one this service gave out: pass a page's next_cursor as it came",
        )
    };
    // The length first: a long string is refused before it is decoded.
    if text.len() != (SPAN_CURSOR_BYTES * 4).div_ceil(3) {
        return Err(malformed());
    }
    let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| malformed())?;
    match bytes.split_first() {
        Some((&SPAN_CURSOR_VERSION, rest)) if rest.len() == SPAN_CURSOR_BYTES - 1 => {
            let (start, rest) = rest.split_at(8);
            let (session, seq) = rest.split_at(16);
            let number = |b: &[u8]| {
                b.try_into()
                    .map(i64::from_be_bytes)
                    .map_err(|_| malformed())
            };
            let session = Uuid::from_slice(session).map_err(|_| malformed())?;
            Ok((number(start)?, session, number(seq)?))
        }
        _ => Err(malformed()),
    }
}

/// Microseconds since the Unix epoch of an RFC 3339 time; `name` says which parameter.
fn micros(name: &str, text: &str) -> Result<i64> {
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            bad(
                "bad_range",
                format!(
                    "{name} must be an RFC 3339 time like 2026-12-01T00:00:00Z, not {:?}",
                    crate::history::clip(text)
                ),
            )
        })?;
    i64::try_from(time.unix_timestamp_nanos() / 1_000).map_err(|_| bad("bad_range", "out of range"))
}

impl SpanQuery {
    /// A page of spans, seen as `tenant` (`None`: every tenant's). Bad input is an
    /// [`Error::BadRange`] whose code names what is wrong.
    pub async fn page(&self, store: &ProjectionStore, tenant: Option<&str>) -> Result<SpanPage> {
        let from_us = micros("from", &self.from)?;
        let to_us = match &self.to {
            Some(to) => micros("to", to)?,
            None => sessionlog_schemas::now_micros(),
        };
        if to_us <= from_us {
            return Err(bad("bad_range", "to must be after from"));
        }
        let limit = self.limit.unwrap_or(DEFAULT_SPANS);
        if !(1..=MAX_SPANS).contains(&limit) {
            return Err(bad(
                "bad_limit",
                format!("limit must be 1 to {MAX_SPANS} (default {DEFAULT_SPANS})"),
            ));
        }
        let after = self.cursor.as_deref().map(decode_cursor).transpose()?;
        // The store reads only the tenant's partitions: what its listing costs does not grow
        // with other tenants' spans, and none of theirs is ever read to be filtered out.
        let search = SpanSearch {
            from_us,
            to_us,
            after,
            limit,
            tenant: tenant.map(String::from),
        };
        let is = |wanted: &Option<String>, value: Option<&str>| {
            wanted.as_deref().is_none_or(|w| Some(w) == value)
        };
        let call = |kind: &str, wanted: &Option<String>, row: &DaySpanRow| {
            wanted
                .as_deref()
                .is_none_or(|w| row.span_kind == kind && row.name == w)
        };
        let keep = |row: &DaySpanRow| {
            is(&self.agent, row.agent.as_deref())
                && is(&self.outcome, Some(row.outcome.as_str()))
                && call(sessionlog_session::trace::MODEL_CALL, &self.model, row)
                && call(sessionlog_session::trace::TOOL_CALL, &self.tool, row)
        };
        let listing = match store.spans_between(&search, keep).await {
            Err(sessionlog_store::Error::SpanRangeTooWide { max, .. }) => {
                return Err(bad(
                    "bad_range",
                    format!("from and to are more than {max} days apart: ask for less"),
                ));
            }
            other => other?,
        };
        let spans = listing.spans;
        let next_cursor = (spans.len() == limit)
            .then(|| spans.last().map(|s| encode_cursor(s.order_key())))
            .flatten();
        Ok(SpanPage { spans, next_cursor })
    }
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
    fn a_span_cursor_reads_back_and_anything_else_is_refused() {
        let key = (-5, Uuid::now_v7(), i64::MAX);
        assert_eq!(decode_cursor(&encode_cursor(key)).ok(), Some(key));
        let mut tampered = encode_cursor(key);
        tampered.replace_range(0..1, "B");
        for bad in ["", "x", &"A".repeat(44), &tampered, &"A".repeat(10_000)] {
            assert!(
                matches!(
                    decode_cursor(bad),
                    Err(Error::BadRange {
                        code: "bad_cursor",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert!(micros("from", "2026-12-01T00:00:00Z").is_ok());
        assert!(micros("from", "yesterday").is_err());
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
