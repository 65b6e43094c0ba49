//! Expiring an ended session's projection (`[retention] ended_session_ttl_secs`).
//!
//! CQL has no statement that gives existing rows a TTL: a TTL belongs to each written cell.
//! So when a session ends, the projector (1) writes every row of the batch that ends it, and
//! any later row of it, with the TTL ([`crate::CqlRow::set_expiring`]), and (2) before that
//! batch's session row (its commit point) is written, writes the session's earlier rows again,
//! the same values, with the TTL ([`ProjectionStore::expire_session`]). A crash between the two
//! leaves the session row behind, so the batch is folded and both are done again.
//!
//! Expiring tables (their partition is the session): `sessions`, `context_view`,
//! `event_index`, `writer_claims`, `checkpoints`, `rejected_events`, `trace_spans_by_session`,
//! `context_turns`. Not expiring: `trace_spans_by_tenant_day` and `trace_tenant_day_buckets`,
//! `session_children`, `sessions_awaiting`, `partition_progress`, `session_starts` (see [`crate::rows`]
//! `Table::expires` for why).

use crate::rows::ROWS_PER_REWRITE;
use crate::{Error, ProjectionStore, Result};
use futures::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use sessionlog_schemas::SessionId;

/// The tables whose earlier rows are written again with the TTL, and whether their rows are
/// written `USING TIMESTAMP` a log offset (the others carry the store's clock). `sessions` and
/// `context_view` are not here: the batch that ends the session writes them whole.
const REWRITTEN: [(&str, bool); 6] = [
    ("event_index", false),
    ("writer_claims", false),
    ("checkpoints", true),
    ("rejected_events", false),
    ("trace_spans_by_session", true),
    ("context_turns", true),
];

/// One table's read of a session's rows as JSON and its write of one row back with the TTL.
pub(crate) struct Rewrite {
    select: PreparedStatement,
    insert: PreparedStatement,
    offset_timestamps: bool,
}

/// Prepares the rewrites of every table in [`REWRITTEN`] for `ttl`.
pub(crate) async fn prepare_rewrites(
    session: &Session,
    ks: &str,
    ttl: u32,
    consistency: scylla::statement::Consistency,
) -> Result<Vec<Rewrite>> {
    let mut rewrites = Vec::with_capacity(REWRITTEN.len());
    for (table, offset_timestamps) in REWRITTEN {
        let select = format!("SELECT JSON * FROM {ks}.{table} WHERE session_id = ?");
        // The values are the row's own: DEFAULT UNSET leaves the columns it lacks (nulls are
        // dropped below) as they are instead of writing tombstones.
        let using = if offset_timestamps {
            format!("USING TIMESTAMP ? AND TTL {ttl}")
        } else {
            format!("USING TTL {ttl}")
        };
        let insert = format!("INSERT INTO {ks}.{table} JSON ? DEFAULT UNSET {using}");
        let prepare = |cql: String| crate::statements::prepare(session, cql, consistency);
        rewrites.push(Rewrite {
            select: prepare(select).await?,
            insert: prepare(insert).await?,
            offset_timestamps,
        });
    }
    Ok(rewrites)
}

/// A row as `SELECT JSON` returns it, without its null columns.
fn without_nulls(json: &str) -> Result<String> {
    let mut value: serde_json::Value =
        serde_json::from_str(json).map_err(Error::cql("read a row as JSON"))?;
    if let Some(object) = value.as_object_mut() {
        object.retain(|_, v| !v.is_null());
    }
    Ok(value.to_string())
}

impl ProjectionStore {
    /// Writes `session`'s rows in the expiring tables again, unchanged, with the ended-session
    /// TTL; returns how many. Rows written `USING TIMESTAMP` an offset are written at
    /// `timestamp`, the session's applied offset, so they win over every earlier write of
    /// them; the others at the store's clock, which is later than their first write. Without a
    /// TTL it does nothing. Repeating it is harmless.
    pub async fn expire_session(&self, session: SessionId, timestamp: i64) -> Result<usize> {
        let writes = self.writes()?;
        let mut rewritten = 0;
        for rewrite in &writes.rewrites {
            let rows: Vec<(String,)> = self
                .session
                .execute_iter(rewrite.select.clone(), (session.0,))
                .await
                .map_err(Error::cql("read rows to expire"))?
                .rows_stream::<(String,)>()
                .map_err(Error::cql("read rows to expire"))?
                .map_err(Error::cql("read rows to expire"))
                .try_collect()
                .await?;
            // Every row is in the session's partition: a batch of them is one mutation.
            for chunk in rows.chunks(ROWS_PER_REWRITE) {
                let mut batch = Batch::new(BatchType::Unlogged);
                let mut values = Vec::with_capacity(chunk.len());
                for (json,) in chunk {
                    batch.append_statement(rewrite.insert.clone());
                    values.push((without_nulls(json)?, timestamp));
                }
                batch.set_is_idempotent(true);
                batch.set_consistency(writes.consistency);
                let result = if rewrite.offset_timestamps {
                    self.session.batch(&batch, values).await
                } else {
                    let values: Vec<(String,)> = values.into_iter().map(|(j, _)| (j,)).collect();
                    self.session.batch(&batch, values).await
                };
                result.map_err(Error::cql("rewrite rows with a TTL"))?;
                rewritten += chunk.len();
            }
        }
        Ok(rewritten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_columns_are_left_out_of_the_rewritten_row() {
        let row = r#"{"session_id": "5b3c", "seq": 3, "name": null, "text": "hi"}"#;
        let kept: serde_json::Value = serde_json::from_str(&without_nulls(row).unwrap()).unwrap();
        assert_eq!(
            kept,
            serde_json::json!({"session_id": "5b3c", "seq": 3, "text": "hi"})
        );
    }
}
