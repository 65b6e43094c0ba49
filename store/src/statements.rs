//! The prepared statements: reads, prepared by every store, and writes, prepared only by a
//! store that migrated (a read-only CQL role can open the store for reading).

use crate::rows::{CqlRow, Table};
use crate::stored::STORED_SESSION_COLUMNS;
use crate::{Error, Result};
use scylla::client::session::Session;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement;
use sessionlog_session::DUPLICATE_WINDOW;

pub(crate) async fn prepare(
    session: &Session,
    cql: String,
    consistency: Consistency,
) -> Result<PreparedStatement> {
    let mut statement = session.prepare(cql).await.map_err(Error::cql("prepare"))?;
    // Every statement is a read, or a write keyed by position or (session, seq): repeating it
    // is harmless, so the driver may retry it.
    statement.set_is_idempotent(true);
    statement.set_consistency(consistency);
    Ok(statement)
}

/// The reads recovery, the projector and the commands use.
pub(crate) struct Reads {
    pub load_session: PreparedStatement,
    pub session_summary: PreparedStatement,
    pub recent_index: PreparedStatement,
    pub claims: PreparedStatement,
    pub locate: PreparedStatement,
    pub index_offsets_after: PreparedStatement,
    pub index_range: PreparedStatement,
    pub claim_offsets: PreparedStatement,
    pub checkpoint_marks: PreparedStatement,
    pub checkpoint_state: PreparedStatement,
    pub load_context: PreparedStatement,
    pub load_turns: PreparedStatement,
    pub load_progress: PreparedStatement,
    pub load_progress_marks: PreparedStatement,
    pub load_dead_letter_marks: PreparedStatement,
    pub children: PreparedStatement,
    pub awaiting: PreparedStatement,
    pub session_start: PreparedStatement,
    /// A tenant's span partitions of a day.
    pub tenant_span_partitions: PreparedStatement,
    /// Every tenant's span partitions of a day.
    pub day_span_partitions: PreparedStatement,
    /// One span partition's spans in a time range.
    pub partition_spans: PreparedStatement,
}

impl Reads {
    /// Prepares every read at `consistency` (`[cql.consistency] reads`).
    pub async fn prepare(session: &Session, ks: &str, consistency: Consistency) -> Result<Self> {
        let p = |cql: String| prepare(session, cql, consistency);
        Ok(Self {
            load_session: p(format!(
                "SELECT {STORED_SESSION_COLUMNS} FROM {ks}.sessions WHERE session_id = ?"
            ))
            .await?,
            session_summary: p(format!(
                "SELECT status, last_seq FROM {ks}.sessions WHERE session_id = ?"
            ))
            .await?,
            recent_index: p(format!(
                "SELECT seq, event_id, log_offset FROM {ks}.event_index
                 WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT {DUPLICATE_WINDOW}"
            ))
            .await?,
            claims: p(format!(
                "SELECT claim_seq, event_id, log_offset FROM {ks}.writer_claims WHERE session_id = ?"
            ))
            .await?,
            locate: p(format!(
                "SELECT log_partition, log_offset FROM {ks}.event_index WHERE session_id = ? AND seq = ?"
            ))
            .await?,
            index_offsets_after: p(format!(
                "SELECT log_offset FROM {ks}.event_index WHERE session_id = ? AND seq > ?"
            ))
            .await?,
            // A range of a session's index by seq, its size bounded by the bound LIMIT: what a
            // range read costs follows the range asked for, not the session's length.
            index_range: p(format!(
                "SELECT seq, log_partition, log_offset, kind, event_id, epoch, occurred_at_us
                 FROM {ks}.event_index WHERE session_id = ? AND seq >= ? AND seq <= ? LIMIT ?"
            ))
            .await?,
            claim_offsets: p(format!(
                "SELECT log_offset FROM {ks}.writer_claims WHERE session_id = ?"
            ))
            .await?,
            checkpoint_marks: p(format!(
                "SELECT seq, log_offset, verified FROM {ks}.checkpoints WHERE session_id = ? AND seq <= ?"
            ))
            .await?,
            checkpoint_state: p(format!(
                "SELECT state_json, context_json FROM {ks}.checkpoints WHERE session_id = ?
                 AND seq = ?"
            ))
            .await?,
            load_context: p(format!(
                "SELECT applied_offset, last_seq, first_turn_seq, older_ranges, left_out,
                 summaries, policy FROM {ks}.context_view WHERE session_id = ?"
            ))
            .await?,
            load_turns: p(format!(
                "SELECT seq, role, name, call_seq, text, truncated, sealed, occurred_at_us,
                 sealed_text FROM {ks}.context_turns WHERE session_id = ? AND seq >= ? AND seq <= ?"
            ))
            .await?,
            load_dead_letter_marks: p(format!(
                "SELECT log_partition, dead_letter_mark FROM {ks}.partition_progress WHERE topic = ?"
            ))
            .await?,
            load_progress: p(format!(
                "SELECT log_partition, next_offset FROM {ks}.partition_progress WHERE topic = ?"
            ))
            .await?,
            load_progress_marks: p(format!(
                "SELECT log_partition, next_offset, last_key, last_timestamp_ms
                 FROM {ks}.partition_progress WHERE topic = ?"
            ))
            .await?,
            children: p(format!(
                "SELECT child_session_id, parent_seq FROM {ks}.session_children
                 WHERE parent_session_id = ?"
            ))
            .await?,
            awaiting: p(format!(
                "SELECT session_id, since_seq, since_us FROM {ks}.sessions_awaiting
                 WHERE waiting_for = ?"
            ))
            .await?,
            session_start: p(format!(
                "SELECT log_partition, start_offset FROM {ks}.session_starts WHERE session_id = ?"
            ))
            .await?,
            tenant_span_partitions: p(format!(
                "SELECT tenant, bucket FROM {ks}.trace_tenant_day_buckets
                 WHERE day = ? AND tenant = ?"
            ))
            .await?,
            day_span_partitions: p(format!(
                "SELECT tenant, bucket FROM {ks}.trace_tenant_day_buckets WHERE day = ?"
            ))
            .await?,
            partition_spans: p(format!(
                "SELECT start_us, session_id, span_seq, span_kind, name, agent, end_seq, end_us,
                 duration_us, tokens_in, tokens_out, cost_micros, outcome, parent_seq,
                 log_partition, open_offset, close_offset, tenant
                 FROM {ks}.trace_spans_by_tenant_day
                 WHERE tenant = ? AND day = ? AND bucket = ? AND start_us >= ? AND start_us < ?"
            ))
            .await?,
        })
    }
}

/// The CQL of each [`Table`]'s write.
fn write_cql(table: Table, ks: &str) -> String {
    match table {
        Table::Sessions => format!(
            "INSERT INTO {ks}.sessions (session_id, status, agent, title, epoch, writer, last_seq,
                 parent_session_id, parent_seq, started_at_us, updated_at_us, tokens_in, tokens_out,
                 cost_micros, pending_calls, pending_approvals, log_partition, applied_offset,
                 state_digest, state_json, last_model_seq)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
        ),
        Table::EventIndex => format!(
            "INSERT INTO {ks}.event_index (session_id, seq, log_partition, log_offset, kind,
                 event_id, epoch, occurred_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        Table::WriterClaims => format!(
            "INSERT INTO {ks}.writer_claims (session_id, epoch, writer, log_partition, log_offset,
                 event_id, occurred_at_us, claim_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        Table::Checkpoints => format!(
            "INSERT INTO {ks}.checkpoints (session_id, seq, log_partition, log_offset,
                 declared_digest, computed_digest, verified, state_json, context_json)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::RejectedEvents => format!(
            "INSERT INTO {ks}.rejected_events (session_id, log_partition, log_offset, seq, epoch,
                 event_id, kind, label, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        Table::SpansBySession => format!(
            "INSERT INTO {ks}.trace_spans_by_session (session_id, span_seq, span_kind, name,
                 start_us, end_seq, end_us, duration_us, tokens_in, tokens_out, cost_micros, outcome,
                 parent_seq, log_partition, open_offset, close_offset)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::SpansByTenantDay => format!(
            "INSERT INTO {ks}.trace_spans_by_tenant_day (tenant, day, bucket, start_us,
                 session_id, span_seq, span_kind, name, agent, end_seq, end_us, duration_us,
                 tokens_in, tokens_out, cost_micros, outcome, parent_seq, log_partition,
                 open_offset, close_offset)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::UsageRollups => format!(
            "INSERT INTO {ks}.usage_rollups (day, dimension, tenant, key, log_partition, calls,
                 errors, tokens_in, tokens_out, cost_micros, latency, applied_offset)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::TenantDayBuckets => format!(
            "INSERT INTO {ks}.trace_tenant_day_buckets (day, tenant, bucket) VALUES (?, ?, ?)"
        ),
        Table::ContextView => format!(
            "INSERT INTO {ks}.context_view (session_id, applied_offset, last_seq, plan,
                 recent_turns, first_turn_seq, unresolved_calls, older_ranges, left_out,
                 summaries, policy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::ContextTurns => format!(
            "INSERT INTO {ks}.context_turns (session_id, seq, role, name, call_seq, text,
                 truncated, sealed, occurred_at_us, sealed_text)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::ErasedTurns => format!(
            "DELETE FROM {ks}.context_turns USING TIMESTAMP ? WHERE session_id = ?"
        ),
        Table::SummarizedTurns => format!(
            "DELETE FROM {ks}.context_turns USING TIMESTAMP ? WHERE session_id = ? AND seq >= ?
                 AND seq <= ?"
        ),
        Table::ErasedCheckpoints => format!("DELETE FROM {ks}.checkpoints WHERE session_id = ?"),
        Table::PartitionProgress => format!(
            "INSERT INTO {ks}.partition_progress (topic, log_partition, next_offset,
                 dead_letter_mark, last_key, last_timestamp_ms) VALUES (?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
        ),
        Table::SessionChildren => format!(
            "INSERT INTO {ks}.session_children (parent_session_id, child_session_id, parent_seq)
                 VALUES (?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::AwaitingInsert => format!(
            "INSERT INTO {ks}.sessions_awaiting (waiting_for, session_id, since_seq, since_us)
                 VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
        ),
        Table::AwaitingDelete => format!(
            "DELETE FROM {ks}.sessions_awaiting USING TIMESTAMP ?
                 WHERE waiting_for = ? AND session_id = ?"
        ),
        Table::SessionStarts => format!(
            "INSERT INTO {ks}.session_starts (session_id, log_partition, start_offset)
                 VALUES (?, ?, ?) USING TIMESTAMP ?"
        ),
    }
}

/// `cql` (an insert) with its values written `USING TTL ttl` as well: after its write
/// timestamp when it has one. The TTL is a deployment constant, so it is part of the text.
fn with_ttl(cql: &str, ttl: u32) -> String {
    const TIMESTAMP: &str = "USING TIMESTAMP ?";
    if cql.contains(TIMESTAMP) {
        cql.replace(TIMESTAMP, &format!("{TIMESTAMP} AND TTL {ttl}"))
    } else {
        format!("{cql} USING TTL {ttl}")
    }
}

/// The projector's writes, one per [`Table`], and, with an ended-session TTL, the same
/// inserts with the TTL for the tables whose rows expire ([`Table::expires`]).
pub(crate) struct Writes {
    /// Indexed by `Table as usize`.
    statements: Vec<PreparedStatement>,
    /// Indexed the same; `None` for a table whose rows never expire, or without a TTL.
    expiring: Vec<Option<PreparedStatement>>,
    /// The TTL of an ended session's rows, in seconds, if any.
    pub ttl: Option<u32>,
    /// With a TTL: how an ended session's earlier rows are written again with it.
    pub rewrites: Vec<crate::expire::Rewrite>,
    /// Every write's and batch's consistency (`[cql.consistency] writes`).
    pub consistency: Consistency,
}

impl Writes {
    pub fn of(&self, table: Table) -> &PreparedStatement {
        &self.statements[table as usize]
    }

    /// The statement that writes `row`: with the TTL when the row is an ended session's and
    /// its table expires.
    pub fn for_row(&self, row: &CqlRow) -> &PreparedStatement {
        match (&self.expiring[row.table as usize], row.expires) {
            (Some(statement), true) => statement,
            _ => self.of(row.table),
        }
    }

    pub async fn prepare(
        session: &Session,
        ks: &str,
        ttl: Option<u32>,
        consistency: Consistency,
    ) -> Result<Self> {
        let statements = futures::future::try_join_all(
            Table::ALL.map(|table| prepare(session, write_cql(table, ks), consistency)),
        )
        .await?;
        let expiring = futures::future::try_join_all(Table::ALL.map(|table| async move {
            match ttl {
                Some(ttl) if table.expires() => Ok(Some(
                    prepare(session, with_ttl(&write_cql(table, ks), ttl), consistency).await?,
                )),
                _ => Ok::<_, Error>(None),
            }
        }))
        .await?;
        let rewrites = match ttl {
            Some(ttl) => crate::expire::prepare_rewrites(session, ks, ttl, consistency).await?,
            None => Vec::new(),
        };
        Ok(Self {
            statements,
            expiring,
            ttl,
            rewrites,
            consistency,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_follows_the_write_timestamp_or_ends_the_insert() {
        let ks = "k";
        assert!(
            with_ttl(&write_cql(Table::Sessions, ks), 60).ends_with("USING TIMESTAMP ? AND TTL 60")
        );
        assert!(with_ttl(&write_cql(Table::EventIndex, ks), 60).ends_with(") USING TTL 60"));
        // Every table that expires is written with an insert (a delete cannot carry a TTL).
        for table in Table::ALL.into_iter().filter(|t| t.expires()) {
            assert!(
                write_cql(table, ks).trim_start().starts_with("INSERT"),
                "{table:?}"
            );
        }
    }

    /// The labels the write counters carry (see [`crate::written`]) name what each write's CQL
    /// does.
    #[test]
    fn each_write_is_counted_under_its_table_and_op() {
        for table in Table::ALL {
            let cql = write_cql(table, "k");
            assert!(
                cql.contains(&format!("k.{} ", table.cql_name())),
                "{table:?} is counted under {} but writes {cql}",
                table.cql_name()
            );
            let op = cql.split_whitespace().next().unwrap_or_default();
            assert!(op.eq_ignore_ascii_case(table.op()), "{table:?}: {op}");
        }
    }
}
