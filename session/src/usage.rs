//! Usage rollups: cost, tokens, calls, errors and a latency sketch by day × model, day × agent
//! and day × tool, folded from the spans the log closes.
//!
//! A call counts once, when its span closes (a model call's one event, a tool call's result),
//! on the UTC day its span started. The projector keeps one [`UsageTotals`] per rollup key and
//! log partition, with the offset of the last record folded into it: a record at or below it
//! is not added again, so a batch folded twice (a crash before its progress was stored) counts
//! once, and a replay gives the same rows.
//!
//! Pure: no I/O.

use crate::trace::{MODEL_CALL, SpanWrite, TOOL_CALL};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a rollup is by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dimension {
    /// Model calls by model.
    Model,
    /// Model and tool calls by the session's agent.
    Agent,
    /// Tool calls by tool.
    Tool,
}

impl Dimension {
    /// Every dimension.
    pub const ALL: [Dimension; 3] = [Dimension::Model, Dimension::Agent, Dimension::Tool];

    /// Its stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Model => "model",
            Dimension::Agent => "agent",
            Dimension::Tool => "tool",
        }
    }

    /// The dimension named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

/// One rollup row's identity, within a log partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsageKey {
    /// `YYYY-MM-DD`, UTC, of the span's start.
    pub day: String,
    /// What it is by.
    pub dimension: Dimension,
    /// The tenant of the sessions it counts: a tenant's credential reads its own.
    pub tenant: String,
    /// The model, agent or tool.
    pub key: String,
}

/// What one closed call adds to a rollup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contribution {
    /// 1 for a model call or a finished tool call.
    pub calls: u64,
    /// 1 for a failed tool call.
    pub errors: u64,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Cost in millionths of a US dollar.
    pub cost_micros: u64,
    /// How long the call took (clients' clocks: negative counts as 0).
    pub latency_us: i64,
}

/// The rollups a span write of a session of `tenant` run by `agent` adds to: none unless it
/// closes a model or tool call.
pub fn contributions(
    span: &SpanWrite,
    tenant: &str,
    agent: Option<&str>,
) -> Vec<(UsageKey, Contribution)> {
    let Some(latency_us) = span.duration_us().filter(|_| span.closes()) else {
        return Vec::new();
    };
    let dimension = match span.span_kind {
        MODEL_CALL => Dimension::Model,
        TOOL_CALL => Dimension::Tool,
        _ => return Vec::new(),
    };
    // A tool call in doubt ends with `resolution_required` first; it is not closed until its
    // result, so only `failed` is an error here.
    let contribution = Contribution {
        calls: 1,
        errors: u64::from(span.outcome == "failed"),
        tokens_in: span.tokens_in.unwrap_or(0),
        tokens_out: span.tokens_out.unwrap_or(0),
        cost_micros: span.cost_micros.unwrap_or(0),
        latency_us,
    };
    let day = span.day();
    let mut out = vec![(
        UsageKey {
            day: day.clone(),
            dimension,
            tenant: tenant.to_string(),
            key: span.name.clone(),
        },
        contribution,
    )];
    if let Some(agent) = agent {
        out.push((
            UsageKey {
                day,
                dimension: Dimension::Agent,
                tenant: tenant.to_string(),
                key: agent.to_string(),
            },
            contribution,
        ));
    }
    out
}

/// A rollup's totals. Sums saturate: the numbers come from clients.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// Calls.
    pub calls: u64,
    /// Failed tool calls.
    pub errors: u64,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Cost in millionths of a US dollar.
    pub cost_micros: u64,
    /// The calls' latencies.
    pub latency: LatencySketch,
}

impl UsageTotals {
    /// Adds one call.
    pub fn add(&mut self, c: &Contribution) {
        // Per call on the projector's fold: no sketch is built to be merged.
        self.add_counts([c.calls, c.errors, c.tokens_in, c.tokens_out, c.cost_micros]);
        self.latency.insert(c.latency_us);
    }

    /// Adds another rollup's totals (another partition's, another day's).
    pub fn merge(&mut self, other: &UsageTotals) {
        let o = other;
        self.add_counts([o.calls, o.errors, o.tokens_in, o.tokens_out, o.cost_micros]);
        self.latency.merge(&other.latency);
    }

    /// Adds calls, errors, tokens in, tokens out and cost, in that order.
    fn add_counts(&mut self, [calls, errors, tokens_in, tokens_out, cost]: [u64; 5]) {
        self.calls = self.calls.saturating_add(calls);
        self.errors = self.errors.saturating_add(errors);
        self.tokens_in = self.tokens_in.saturating_add(tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(tokens_out);
        self.cost_micros = self.cost_micros.saturating_add(cost);
    }
}

/// Relative width of a sketch bucket: a quantile is answered within 2.5% of a value the
/// sketch holds.
const GAMMA: f64 = 1.05;

/// A mergeable latency sketch: counts in logarithmic buckets of microseconds (the scheme of
/// DDSketch, written here because the rollup is stored as plain CQL columns and must
/// serialise the same way on every projector: a `BTreeMap` of small integers does). Two
/// sketches merge by adding counts, so partitions' and days' sketches combine exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySketch {
    /// Latencies of at most 1 µs (negative ones included).
    pub zero: u64,
    /// Counts by bucket: bucket `i` holds latencies in `(GAMMA^(i-1), GAMMA^i]` µs.
    pub buckets: BTreeMap<i32, u64>,
}

impl LatencySketch {
    /// Adds one latency.
    pub fn insert(&mut self, latency_us: i64) {
        if latency_us <= 1 {
            self.zero = self.zero.saturating_add(1);
            return;
        }
        // ln(i64::MAX) / ln(1.05) is under 900: the cast cannot overflow.
        let index = ((latency_us as f64).ln() / GAMMA.ln()).ceil() as i32;
        let count = self.buckets.entry(index).or_default();
        *count = count.saturating_add(1);
    }

    /// Adds another sketch's counts.
    pub fn merge(&mut self, other: &LatencySketch) {
        self.zero = self.zero.saturating_add(other.zero);
        for (index, count) in &other.buckets {
            let mine = self.buckets.entry(*index).or_default();
            *mine = mine.saturating_add(*count);
        }
    }

    /// How many latencies it holds.
    pub fn count(&self) -> u64 {
        self.buckets
            .values()
            .fold(self.zero, |sum, count| sum.saturating_add(*count))
    }

    /// The latency at quantile `q` (0 to 1) in µs, within 2.5%; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        // The nearest rank, 0-based: of two latencies, p90 is the larger.
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).clamp(1, count) - 1;
        if rank < self.zero {
            return Some(0);
        }
        let mut seen = self.zero;
        for (index, n) in &self.buckets {
            seen = seen.saturating_add(*n);
            if seen > rank {
                // The middle of the bucket, in relative terms.
                let value = 2.0 * GAMMA.powi(*index) / (1.0 + GAMMA);
                return Some(value.round() as i64);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::SessionId;

    #[test]
    fn quantiles_are_within_the_sketchs_error_and_merging_is_adding() {
        let mut one = LatencySketch::default();
        let mut two = LatencySketch::default();
        for latency in 1..=1_000i64 {
            let sketch = if latency % 2 == 0 { &mut one } else { &mut two };
            sketch.insert(latency * 1_000);
        }
        one.merge(&two);
        assert_eq!(one.count(), 1_000);
        for (q, exact) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = one.quantile(q).expect("a value") as f64;
            assert!(
                (got - exact).abs() / exact < 0.03,
                "q{q}: {got} against {exact}"
            );
        }
        assert_eq!(LatencySketch::default().quantile(0.5), None);
        let mut two = LatencySketch::default();
        two.insert(200);
        two.insert(60_000);
        assert!(
            two.quantile(0.5).expect("a value") < 210,
            "the median of two is the lower"
        );
        assert!(
            two.quantile(0.9).expect("a value") > 58_000,
            "p90 of two is the higher"
        );
    }

    #[test]
    fn extreme_latencies_neither_panic_nor_wrap() {
        let mut sketch = LatencySketch::default();
        for latency in [i64::MIN, -1, 0, 1, 2, i64::MAX] {
            sketch.insert(latency);
        }
        assert_eq!(sketch.zero, 4);
        assert_eq!(sketch.count(), 6);
        assert!(sketch.quantile(1.0).expect("a value") > 1_000_000_000_000);
        let mut totals = UsageTotals {
            cost_micros: u64::MAX,
            ..UsageTotals::default()
        };
        totals.add(&Contribution {
            calls: 1,
            cost_micros: 5,
            ..Contribution::default()
        });
        assert_eq!(totals.cost_micros, u64::MAX);
    }

    #[test]
    fn only_closed_model_and_tool_calls_count() {
        let span = |kind, outcome, end: Option<i64>| SpanWrite {
            session_id: SessionId::new(),
            span_seq: 3,
            span_kind: kind,
            name: "x".into(),
            parent_seq: None,
            start_us: 0,
            opens: true,
            end_seq: end.map(|_| 4),
            end_us: end,
            tokens_in: Some(10),
            tokens_out: None,
            cost_micros: Some(7),
            outcome,
        };
        assert!(contributions(&span(TOOL_CALL, "pending", None), "t", Some("a")).is_empty());
        assert!(
            contributions(
                &span(crate::trace::SESSION, "completed", Some(9)),
                "t",
                None
            )
            .is_empty()
        );
        let failed = contributions(&span(TOOL_CALL, "failed", Some(9)), "t", Some("a"));
        let dims: Vec<Dimension> = failed.iter().map(|(k, _)| k.dimension).collect();
        assert_eq!(dims, [Dimension::Tool, Dimension::Agent]);
        assert!(failed.iter().all(|(k, _)| k.tenant == "t"));
        assert_eq!((failed[0].1.errors, failed[0].1.latency_us), (1, 9));
        let model = contributions(&span(MODEL_CALL, "ok", Some(9)), "t", None);
        assert_eq!(model.len(), 1, "no agent, no agent rollup");
        assert_eq!((model[0].1.tokens_in, model[0].1.cost_micros), (10, 7));
    }
}
