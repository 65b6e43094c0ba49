//! Usage over a range of days, from the rollups the projector keeps (`usage_rollups`): one
//! read per day, never a scan of spans.

use crate::{Error, Result};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sessionlog_session::trace::{day_number, day_of};
use sessionlog_session::usage::{Dimension, UsageTotals};
use sessionlog_store::ProjectionStore;
use std::collections::BTreeMap;

/// The most days one usage report may cover.
pub const MAX_USAGE_DAYS: i64 = 366;

/// What a usage report is grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    /// Model calls by model.
    Model,
    /// Model and tool calls by agent.
    Agent,
    /// Tool calls by tool.
    Tool,
    /// Model and tool calls by day.
    Day,
}

impl UsageBy {
    /// The grouping named `name` (`model`, `agent`, `tool` or `day`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "model" => Some(Self::Model),
            "agent" => Some(Self::Agent),
            "tool" => Some(Self::Tool),
            "day" => Some(Self::Day),
            _ => None,
        }
    }

    /// The rollup read: by day adds up the agent rollups, which count every call.
    fn dimension(self) -> Dimension {
        match self {
            Self::Model => Dimension::Model,
            Self::Agent | Self::Day => Dimension::Agent,
            Self::Tool => Dimension::Tool,
        }
    }
}

/// Usage over a range of days.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageReport {
    /// The first day, `YYYY-MM-DD` (UTC).
    pub from: String,
    /// The last day, included.
    pub to: String,
    /// What the lines are by.
    pub by: UsageBy,
    /// One line per model, agent, tool or day, by key.
    pub lines: Vec<UsageLine>,
}

/// One group's totals.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageLine {
    /// The model, agent, tool or day.
    pub key: String,
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
    /// Median latency in microseconds (within 2.5%).
    pub latency_p50_us: Option<i64>,
    /// 90th percentile latency.
    pub latency_p90_us: Option<i64>,
    /// 99th percentile latency.
    pub latency_p99_us: Option<i64>,
}

impl UsageLine {
    fn of(key: String, totals: &UsageTotals) -> Self {
        Self {
            key,
            calls: totals.calls,
            errors: totals.errors,
            tokens_in: totals.tokens_in,
            tokens_out: totals.tokens_out,
            cost_micros: totals.cost_micros,
            latency_p50_us: totals.latency.quantile(0.5),
            latency_p90_us: totals.latency.quantile(0.9),
            latency_p99_us: totals.latency.quantile(0.99),
        }
    }
}

/// The days from `from` to `to` (`YYYY-MM-DD`, both included), checked.
fn days(from: &str, to: &str) -> Result<(i64, i64)> {
    let parse = |name: &str, text: &str| {
        day_number(text).ok_or_else(|| Error::BadRange {
            code: "bad_range",
            reason: format!(
                "{name} must be a date as YYYY-MM-DD (UTC), not {:?}",
                crate::history::clip(text)
            ),
        })
    };
    let (first, last) = (parse("from", from)?, parse("to", to)?);
    if last < first {
        return Err(Error::BadRange {
            code: "bad_range",
            reason: format!("to ({to}) is before from ({from})"),
        });
    }
    if last - first + 1 > MAX_USAGE_DAYS {
        return Err(Error::BadRange {
            code: "bad_range",
            reason: format!("ask for at most {MAX_USAGE_DAYS} days at a time"),
        });
    }
    Ok((first, last))
}

/// Usage of `tenant`'s sessions (`None`: every tenant's) from `from` to `to` (`YYYY-MM-DD`,
/// both included) by `by`, from the rollups.
pub async fn usage(
    store: &ProjectionStore,
    tenant: Option<&str>,
    from: &str,
    to: &str,
    by: UsageBy,
) -> Result<UsageReport> {
    let (first, last) = days(from, to)?;
    let dimension = by.dimension();
    let reads = (first..=last).map(|day| {
        let day = day_of(day.saturating_mul(86_400_000_000));
        async move {
            let rows = store.usage_on(&day, dimension, tenant).await?;
            Ok::<_, Error>((day, rows))
        }
    });
    // A few days at a time: a year of days at once would be hundreds of reads in flight.
    let days: Vec<_> = futures::stream::iter(reads)
        .buffered(8)
        .try_collect()
        .await?;
    let mut grouped: BTreeMap<String, UsageTotals> = BTreeMap::new();
    for (day, rows) in days {
        for (key, totals) in rows {
            let group = if by == UsageBy::Day { day.clone() } else { key };
            grouped.entry(group).or_default().merge(&totals);
        }
    }
    Ok(UsageReport {
        from: from.to_string(),
        to: to.to_string(),
        by,
        lines: grouped
            .iter()
            .map(|(key, totals)| UsageLine::of(key.clone(), totals))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_whole_days_in_order_and_bounded() {
        assert_eq!(
            days("2026-12-01", "2026-12-01").ok(),
            Some((20_788, 20_788))
        );
        assert!(days("2026-12-02", "2026-12-01").is_err(), "backwards");
        assert!(days("2026-12-01", "2028-12-01").is_err(), "over a year");
        assert!(days("yesterday", "2026-12-01").is_err());
        assert!(matches!(
            days("2026-02-30", "2026-03-01"),
            Err(Error::BadRange { .. })
        ));
        assert_eq!(UsageBy::parse("tool"), Some(UsageBy::Tool));
        assert_eq!(UsageBy::parse("cost"), None);
    }
}
