//! `sessionlog usage`: the usage rollups over whole UTC days, as a table.

use crate::args::Globals;
use crate::duration::show_micros;
use crate::output::{Output, dollars};
use anyhow::Result;
use sessionlog_recovery::{UsageBy, UsageReport};
use sessionlog_store::ProjectionStore;

/// The arguments of `sessionlog usage`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The first day, YYYY-MM-DD (UTC).
    #[arg(long)]
    from: String,
    /// The last day, included (default: --from).
    #[arg(long)]
    to: Option<String>,
    /// What the lines are by.
    #[arg(long, value_parser = ["model", "agent", "tool", "day"], default_value = "model")]
    by: String,
}

/// Every tenant's usage, from the rollups in the projection.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let by = UsageBy::parse(&args.by).ok_or_else(|| {
        anyhow::anyhow!("--by takes model, agent, tool or day, not {:?}", args.by)
    })?;
    let store = ProjectionStore::open(&globals.settings.cql).await?;
    let to = args.to.as_deref().unwrap_or(&args.from);
    let report = sessionlog_recovery::usage::usage(&store, None, &args.from, to, by).await?;
    // As a JSON value: its keys sorted, as `usage --json` has always printed them.
    Output::new(&serde_json::to_value(&report)?, usage_table(&report))
}

/// The report as a table, with a total line.
fn usage_table(report: &UsageReport) -> String {
    let by = serde_json::to_value(report.by)
        .ok()
        .and_then(|v| v.as_str().map(str::to_uppercase))
        .unwrap_or_default();
    let width = report
        .lines
        .iter()
        .map(|l| l.key.chars().count())
        .chain([by.len(), 5])
        .max()
        .unwrap_or(5);
    let latency = |v: Option<i64>| v.map_or("-".into(), |us| show_micros(i128::from(us)));
    let mut out = format!(
        "usage from {} to {}\n{by:<width$}  {:>8}  {:>6}  {:>12}  {:>12}  {:>12}  {:>9}  {:>9}  {:>9}",
        report.from,
        report.to,
        "CALLS",
        "ERRORS",
        "TOKENS IN",
        "TOKENS OUT",
        "COST $",
        "P50",
        "P90",
        "P99",
    );
    let (mut calls, mut errors, mut tokens_in, mut tokens_out, mut cost) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for l in &report.lines {
        out.push_str(&format!(
            "\n{:<width$}  {:>8}  {:>6}  {:>12}  {:>12}  {:>12}  {:>9}  {:>9}  {:>9}",
            l.key,
            l.calls,
            l.errors,
            l.tokens_in,
            l.tokens_out,
            dollars(i64::try_from(l.cost_micros).unwrap_or(i64::MAX)),
            latency(l.latency_p50_us),
            latency(l.latency_p90_us),
            latency(l.latency_p99_us),
        ));
        calls = calls.saturating_add(l.calls);
        errors = errors.saturating_add(l.errors);
        tokens_in = tokens_in.saturating_add(l.tokens_in);
        tokens_out = tokens_out.saturating_add(l.tokens_out);
        cost = cost.saturating_add(l.cost_micros);
    }
    // Agents and days count every call once; models and tools are disjoint; so a total adds up.
    out.push_str(&format!(
        "\n{:<width$}  {calls:>8}  {errors:>6}  {tokens_in:>12}  {tokens_out:>12}  {:>12}",
        "TOTAL",
        dollars(i64::try_from(cost).unwrap_or(i64::MAX)),
    ));
    out
}
