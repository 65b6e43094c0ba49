//! The prepared statements: reads, prepared by every store, and writes, prepared only by a
//! store that migrated (a read-only CQL role can open the store for reading).

use crate::rows::Table;
use crate::{Error, Result};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use sessionlog_session::DUPLICATE_WINDOW;

async fn prepare(session: &Session, cql: String) -> Result<PreparedStatement> {
    let mut statement = session.prepare(cql).await.map_err(Error::cql("prepare"))?;
    // Every statement is a read, or a write keyed by position or (session, seq): repeating it
    // is harmless, so the driver may retry it.
    statement.set_is_idempotent(true);
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
    pub claim_offsets: PreparedStatement,
    pub checkpoint_marks: PreparedStatement,
    pub checkpoint_state: PreparedStatement,
    pub load_context: PreparedStatement,
    pub load_turns: PreparedStatement,
    pub load_progress: PreparedStatement,
    pub children: PreparedStatement,
    pub awaiting: PreparedStatement,
}

impl Reads {
    pub async fn prepare(session: &Session, ks: &str) -> Result<Self> {
        let p = |cql: String| prepare(session, cql);
        Ok(Self {
            load_session: p(format!(
                "SELECT state_json, log_partition, applied_offset FROM {ks}.sessions WHERE session_id = ?"
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
            claim_offsets: p(format!(
                "SELECT log_offset FROM {ks}.writer_claims WHERE session_id = ?"
            ))
            .await?,
            checkpoint_marks: p(format!(
                "SELECT seq, log_offset, verified FROM {ks}.checkpoints WHERE session_id = ? AND seq <= ?"
            ))
            .await?,
            checkpoint_state: p(format!(
                "SELECT state_json FROM {ks}.checkpoints WHERE session_id = ? AND seq = ?"
            ))
            .await?,
            load_context: p(format!(
                "SELECT applied_offset, last_seq, first_turn_seq, older_ranges, left_out
                 FROM {ks}.context_view WHERE session_id = ?"
            ))
            .await?,
            load_turns: p(format!(
                "SELECT seq, role, name, call_seq, text, truncated, sealed, occurred_at_us,
                 sealed_text FROM {ks}.context_turns WHERE session_id = ? AND seq >= ? AND seq <= ?"
            ))
            .await?,
            load_progress: p(format!(
                "SELECT log_partition, next_offset FROM {ks}.partition_progress WHERE topic = ?"
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
        })
    }
}

/// The projector's writes, one per [`Table`].
pub(crate) struct Writes {
    save_session: PreparedStatement,
    put_index: PreparedStatement,
    put_claim: PreparedStatement,
    put_checkpoint: PreparedStatement,
    put_rejected: PreparedStatement,
    put_span_by_session: PreparedStatement,
    put_span_by_day: PreparedStatement,
    save_context: PreparedStatement,
    put_turn: PreparedStatement,
    erase_turns: PreparedStatement,
    erase_checkpoints: PreparedStatement,
    save_progress: PreparedStatement,
    put_child: PreparedStatement,
    put_awaiting: PreparedStatement,
    delete_awaiting: PreparedStatement,
}

impl Writes {
    pub fn of(&self, table: Table) -> &PreparedStatement {
        match table {
            Table::Sessions => &self.save_session,
            Table::EventIndex => &self.put_index,
            Table::WriterClaims => &self.put_claim,
            Table::Checkpoints => &self.put_checkpoint,
            Table::RejectedEvents => &self.put_rejected,
            Table::SpansBySession => &self.put_span_by_session,
            Table::SpansByDay => &self.put_span_by_day,
            Table::ContextView => &self.save_context,
            Table::ContextTurns => &self.put_turn,
            Table::ErasedTurns => &self.erase_turns,
            Table::ErasedCheckpoints => &self.erase_checkpoints,
            Table::PartitionProgress => &self.save_progress,
            Table::SessionChildren => &self.put_child,
            Table::AwaitingInsert => &self.put_awaiting,
            Table::AwaitingDelete => &self.delete_awaiting,
        }
    }

    pub async fn prepare(session: &Session, ks: &str) -> Result<Self> {
        let p = |cql: String| prepare(session, cql);
        Ok(Self {
            save_session: p(format!(
                "INSERT INTO {ks}.sessions (session_id, status, agent, title, epoch, writer, last_seq,
                 parent_session_id, parent_seq, started_at_us, updated_at_us, tokens_in, tokens_out,
                 cost_micros, pending_calls, pending_approvals, log_partition, applied_offset,
                 state_digest, state_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
            ))
            .await?,
            put_index: p(format!(
                "INSERT INTO {ks}.event_index (session_id, seq, log_partition, log_offset, kind,
                 event_id, epoch, occurred_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_claim: p(format!(
                "INSERT INTO {ks}.writer_claims (session_id, epoch, writer, log_partition, log_offset,
                 event_id, occurred_at_us, claim_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_checkpoint: p(format!(
                "INSERT INTO {ks}.checkpoints (session_id, seq, log_partition, log_offset,
                 declared_digest, computed_digest, verified, state_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
            ))
            .await?,
            put_rejected: p(format!(
                "INSERT INTO {ks}.rejected_events (session_id, log_partition, log_offset, seq, epoch,
                 event_id, kind, label, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_span_by_session: p(format!(
                "INSERT INTO {ks}.trace_spans_by_session (session_id, span_seq, span_kind, name,
                 start_us, end_seq, end_us, duration_us, tokens_in, tokens_out, cost_micros, outcome)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            put_span_by_day: p(format!(
                "INSERT INTO {ks}.trace_spans_by_day (day, start_us, session_id, span_seq, span_kind,
                 name, end_seq, end_us, duration_us, tokens_in, tokens_out, cost_micros, outcome)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            save_context: p(format!(
                "INSERT INTO {ks}.context_view (session_id, applied_offset, last_seq, plan,
                 recent_turns, first_turn_seq, unresolved_calls, older_ranges, left_out)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            put_turn: p(format!(
                "INSERT INTO {ks}.context_turns (session_id, seq, role, name, call_seq, text,
                 truncated, sealed, occurred_at_us, sealed_text)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            erase_turns: p(format!(
                "DELETE FROM {ks}.context_turns USING TIMESTAMP ? WHERE session_id = ?"
            ))
            .await?,
            erase_checkpoints: p(format!(
                "DELETE FROM {ks}.checkpoints WHERE session_id = ?"
            ))
            .await?,
            save_progress: p(format!(
                "INSERT INTO {ks}.partition_progress (topic, log_partition, next_offset)
                 VALUES (?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            put_child: p(format!(
                "INSERT INTO {ks}.session_children (parent_session_id, child_session_id, parent_seq)
                 VALUES (?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            put_awaiting: p(format!(
                "INSERT INTO {ks}.sessions_awaiting (waiting_for, session_id, since_seq, since_us)
                 VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            delete_awaiting: p(format!(
                "DELETE FROM {ks}.sessions_awaiting USING TIMESTAMP ?
                 WHERE waiting_for = ? AND session_id = ?"
            ))
            .await?,
        })
    }
}
