//! Usage rollups: one partition's as stored, and a day's by dimension, added up.

use crate::{Error, ProjectionStore, Result};
use sessionlog_session::usage::{Dimension, UsageKey, UsageTotals};
use std::collections::BTreeMap;

/// A `usage_rollups` row as stored.
#[derive(scylla::DeserializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct UsageRow {
    tenant: String,
    key: String,
    log_partition: i32,
    calls: Option<i64>,
    errors: Option<i64>,
    tokens_in: Option<i64>,
    tokens_out: Option<i64>,
    cost_micros: Option<i64>,
    latency: Option<String>,
    applied_offset: Option<i64>,
}

impl UsageRow {
    /// Its totals and applied offset; `key` names it in an error.
    fn totals(self, key: &UsageKey) -> Result<(UsageTotals, i64)> {
        let count = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
        let latency = match self.latency.as_deref() {
            None | Some("") => Default::default(),
            Some(json) => serde_json::from_str(json).map_err(|e| Error::CorruptRollup {
                day: key.day.clone(),
                dimension: key.dimension.as_str().to_string(),
                key: format!("{}/{}", key.tenant, key.key),
                partition: self.log_partition,
                message: e.to_string(),
            })?,
        };
        let totals = UsageTotals {
            calls: count(self.calls),
            errors: count(self.errors),
            tokens_in: count(self.tokens_in),
            tokens_out: count(self.tokens_out),
            cost_micros: count(self.cost_micros),
            latency,
        };
        Ok((totals, self.applied_offset.unwrap_or(-1)))
    }
}

impl ProjectionStore {
    /// A usage rollup of `partition` as stored, with the offset of the last record folded
    /// into it.
    pub async fn load_usage(
        &self,
        key: &UsageKey,
        partition: i32,
    ) -> Result<Option<(UsageTotals, i64)>> {
        let ks = &self.keyspace;
        let rows: Vec<UsageRow> = self
            .query_paged(
                format!(
                    "SELECT tenant, key, log_partition, calls, errors, tokens_in, tokens_out,
                     cost_micros, latency, applied_offset FROM {ks}.usage_rollups
                     WHERE day = ? AND dimension = ? AND tenant = ? AND key = ?
                     AND log_partition = ?"
                ),
                (
                    key.day.as_str(),
                    key.dimension.as_str(),
                    key.tenant.as_str(),
                    key.key.as_str(),
                    partition,
                ),
                "read usage rollup",
            )
            .await?;
        rows.into_iter()
            .next()
            .map(|row| row.totals(key))
            .transpose()
    }

    /// The usage rollups of `day` by `dimension`, of `tenant` (`None`: every tenant), each
    /// key's partitions (and tenants) added up.
    pub async fn usage_on(
        &self,
        day: &str,
        dimension: Dimension,
        tenant: Option<&str>,
    ) -> Result<BTreeMap<String, UsageTotals>> {
        let ks = &self.keyspace;
        let select = format!(
            "SELECT tenant, key, log_partition, calls, errors, tokens_in, tokens_out, cost_micros,
             latency, applied_offset FROM {ks}.usage_rollups WHERE day = ? AND dimension = ?"
        );
        let rows: Vec<UsageRow> = match tenant {
            Some(tenant) => {
                self.query_paged(
                    format!("{select} AND tenant = ?"),
                    (day, dimension.as_str(), tenant),
                    "read usage rollups",
                )
                .await?
            }
            None => {
                self.query_paged(select, (day, dimension.as_str()), "read usage rollups")
                    .await?
            }
        };
        let mut by_key: BTreeMap<String, UsageTotals> = BTreeMap::new();
        for row in rows {
            let key = UsageKey {
                day: day.to_string(),
                dimension,
                tenant: row.tenant.clone(),
                key: row.key.clone(),
            };
            let (totals, _) = row.totals(&key)?;
            by_key.entry(key.key).or_default().merge(&totals);
        }
        Ok(by_key)
    }
}
