//! Row shaping: what the projector's fold becomes in each table, with its values bound.
//!
//! Every row is keyed by `(session_id, seq)`, by log position or by what it lists, and rows
//! that change over time are written `USING TIMESTAMP` a log offset, so writing a row again
//! (after a crash, a rebalance, in a replay) leaves what was there.
//!
//! Beside the rows themselves: `rewritten`, the `sessions` and `context_view` rows rewritten in
//! every batch, which send only what changed; `table`, which table each row goes to; `wait`,
//! whom a waiting session waits for.

mod rewritten;
mod table;
mod wait;

pub use rewritten::LastWritten;
use rewritten::{ContextRow, SessionRow, changes};
pub(crate) use table::Table;
pub use wait::Wait;

use crate::read::ProjectedSession;
use scylla::serialize::row::SerializeRow;
use scylla::value::MaybeUnset;
use sessionlog_schemas::{EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::context::{ContextWindow, Turn, TurnChange};
use sessionlog_session::trace::SpanWrite;
use sessionlog_session::usage::{UsageKey, UsageTotals};
use sessionlog_session::{Rejection, SessionState};
use uuid::Uuid;

/// The columns both span tables share, in their statements' order, then the write
/// timestamp. A write sets what its event knows and leaves the rest unset: the opening write
/// the parent and opening offset, the closing one the end, totals and closing offset.
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SpanColumns {
    end_seq: MaybeUnset<i64>,
    end_us: MaybeUnset<i64>,
    duration_us: MaybeUnset<i64>,
    tokens_in: MaybeUnset<i64>,
    tokens_out: MaybeUnset<i64>,
    cost_micros: MaybeUnset<i64>,
    outcome: &'static str,
    parent_seq: MaybeUnset<i64>,
    log_partition: i32,
    open_offset: MaybeUnset<i64>,
    close_offset: MaybeUnset<i64>,
    write_timestamp: i64,
}

impl SpanColumns {
    fn of(span: &SpanWrite, partition: i32, offset: i64) -> Self {
        let as_i64 = |v: Option<u64>| unset_or(v.map(to_i64));
        Self {
            end_seq: as_i64(span.end_seq),
            end_us: unset_or(span.end_us),
            duration_us: unset_or(span.duration_us()),
            tokens_in: as_i64(span.tokens_in),
            tokens_out: as_i64(span.tokens_out),
            cost_micros: as_i64(span.cost_micros),
            outcome: span.outcome,
            parent_seq: as_i64(span.parent_seq),
            log_partition: partition,
            open_offset: unset_or(span.opens.then_some(offset)),
            close_offset: unset_or(span.closes().then_some(offset)),
            write_timestamp: offset,
        }
    }
}

/// A `usage_rollups` write.
#[derive(scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct UsageValues {
    day: String,
    dimension: &'static str,
    tenant: String,
    key: String,
    log_partition: i32,
    calls: i64,
    errors: i64,
    tokens_in: i64,
    tokens_out: i64,
    cost_micros: i64,
    latency: String,
    applied_offset: i64,
    write_timestamp: i64,
}

/// A `trace_spans_by_session` write.
#[derive(scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SessionSpanValues {
    session_id: Uuid,
    span_seq: i64,
    span_kind: &'static str,
    name: String,
    start_us: i64,
    #[scylla(flatten)]
    columns: SpanColumns,
}

/// A `trace_spans_by_tenant_day` write.
#[derive(scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct DaySpanValues {
    tenant: String,
    day: String,
    bucket: i32,
    start_us: i64,
    session_id: Uuid,
    span_seq: i64,
    span_kind: &'static str,
    name: String,
    agent: MaybeUnset<String>,
    #[scylla(flatten)]
    columns: SpanColumns,
}

/// Rows written again with a TTL per request when a session ends (all in its partition).
pub(crate) const ROWS_PER_REWRITE: usize = crate::ROWS_PER_BATCH;

/// One row to write, with its values bound: built while folding, written later in a batch.
pub struct CqlRow {
    pub(crate) table: Table,
    pub(crate) values: Box<dyn SerializeRow + Send + Sync>,
    /// Written with the ended-session TTL, if the store has one and the table expires.
    pub(crate) expires: bool,
}

impl CqlRow {
    fn new(table: Table, values: impl SerializeRow + Send + Sync + 'static) -> Self {
        Self {
            table,
            values: Box::new(values),
            expires: false,
        }
    }

    /// Marks this row as one of an ended session: a store with an ended-session TTL writes
    /// it `USING TTL` when its table's rows expire; others write it as any row.
    pub fn set_expiring(&mut self) {
        self.expires = true;
    }

    /// A session's row: the commit point of everything folded into it.
    ///
    /// The write timestamp is the applied offset: offsets only grow within the session's
    /// partition, so a late write from an instance that lost the partition in a rebalance
    /// can never overwrite a newer state, whatever order the writes arrive in.
    /// Columns unchanged since `written` are left unset.
    pub fn session(projected: &ProjectedSession, written: &mut LastWritten) -> Self {
        let row = changes(SessionRow::from(projected), &mut written.session);
        Self::new(Table::Sessions, row)
    }

    /// An accepted event: its index row (a claim's `writer_claims` row instead). For a
    /// checkpoint, `after` is the state including it, stored in `checkpoints` for recovery
    /// to start from.
    pub fn accepted(
        event: &EventEnvelope,
        partition: i32,
        offset: i64,
        after: Option<(&SessionState, Option<&ContextWindow>)>,
    ) -> Vec<Self> {
        let session = event.session_id.0;
        if let SessionEvent::WriterClaimed { writer, .. } = &event.event {
            let values = (
                session,
                to_i64(event.writer_epoch),
                writer.clone(),
                partition,
                offset,
                event.event_id,
                event.occurred_at,
                to_i64(event.seq),
            );
            return vec![Self::new(Table::WriterClaims, values)];
        }
        let index = (
            session,
            to_i64(event.seq),
            partition,
            offset,
            event.event.kind(),
            event.event_id,
            to_i64(event.writer_epoch),
            event.occurred_at,
        );
        let mut rows = vec![Self::new(Table::EventIndex, index)];
        if matches!(event.event, SessionEvent::SessionErased { .. }) {
            // The states stored at its checkpoints hold the session's texts (sealed, or plain
            // if written without encryption): an erasure takes them. An erased session is not
            // resumed, so nothing needs them again. Checkpoint rows are written `USING
            // TIMESTAMP` their offset; the deletion takes the server's time, which is later
            // than any offset, so it also takes rows an older release wrote with server time.
            rows.push(Self::new(Table::ErasedCheckpoints, (session,)));
        }
        let checkpoint = after.and_then(|(s, window)| {
            s.last_checkpoint
                .as_ref()
                .filter(|m| m.seq == event.seq)
                .map(|m| (m, s, window))
        });
        if let Some((mark, after, window)) = checkpoint {
            let values = (
                session,
                to_i64(event.seq),
                partition,
                offset,
                mark.declared_digest.clone(),
                mark.computed_digest.clone(),
                mark.verified(),
                after.canonical_json(),
                window.map(to_json),
                offset,
            );
            rows.push(Self::new(Table::Checkpoints, values));
        }
        rows
    }

    /// An event the fold rejected, with its reason.
    pub fn rejected(event: &EventEnvelope, partition: i32, offset: i64, why: &Rejection) -> Self {
        let values = (
            event.session_id.0,
            partition,
            offset,
            to_i64(event.seq),
            to_i64(event.writer_epoch),
            event.event_id,
            event.event.kind(),
            why.label(),
            why.to_string(),
        );
        Self::new(Table::RejectedEvents, values)
    }

    /// A span's rows: by session, and by tenant and day (whose partition is the session's
    /// tenant, the day and `bucket`, the session's bucket of it: see
    /// [`CqlRow::tenant_day_bucket`]). `partition` and `offset` are the event's log position;
    /// `offset` is the write timestamp, so the write of the event that completes a span wins
    /// over the one that opened it. `tenant` is the session's (`default` without one), so a
    /// tenant's listing reads only its own partitions; `agent` is kept on the day's rows for
    /// analytics by agent.
    pub fn span(
        span: &SpanWrite,
        partition: i32,
        offset: i64,
        (tenant, agent): (&str, Option<&str>),
        bucket: i32,
    ) -> [Self; 2] {
        let columns = SpanColumns::of(span, partition, offset);
        let by_day = DaySpanValues {
            tenant: tenant.to_string(),
            day: span.day(),
            bucket,
            start_us: span.start_us,
            session_id: span.session_id.0,
            span_seq: to_i64(span.span_seq),
            span_kind: span.span_kind,
            name: span.name.clone(),
            agent: unset_or(agent.map(String::from)),
            columns: columns.clone(),
        };
        let by_session = SessionSpanValues {
            session_id: span.session_id.0,
            span_seq: to_i64(span.span_seq),
            span_kind: span.span_kind,
            name: span.name.clone(),
            start_us: span.start_us,
            columns,
        };
        [
            Self::new(Table::SpansBySession, by_session),
            Self::new(Table::SpansByTenantDay, by_day),
        ]
    }

    /// A usage rollup of one log partition, with the offset of the last record folded into
    /// it, which is also its write timestamp: a late write from an instance that lost the
    /// partition cannot overwrite newer totals.
    pub fn usage(
        key: &UsageKey,
        partition: i32,
        totals: &UsageTotals,
        applied_offset: i64,
    ) -> Self {
        let values = UsageValues {
            day: key.day.clone(),
            dimension: key.dimension.as_str(),
            tenant: key.tenant.clone(),
            key: key.key.clone(),
            log_partition: partition,
            calls: to_i64(totals.calls),
            errors: to_i64(totals.errors),
            tokens_in: to_i64(totals.tokens_in),
            tokens_out: to_i64(totals.tokens_out),
            cost_micros: to_i64(totals.cost_micros),
            latency: to_json(&totals.latency),
            applied_offset,
            write_timestamp: applied_offset,
        };
        Self::new(Table::UsageRollups, values)
    }

    /// The note that `tenant`'s spans of `day` went to `bucket` (of
    /// `trace_spans_by_tenant_day`), which tells readers which partitions to query.
    pub fn tenant_day_bucket(tenant: String, day: String, bucket: i32) -> Self {
        Self::new(Table::TenantDayBuckets, (day, tenant, bucket))
    }

    /// A session's context view: the window, plus the plan and unresolved calls of `state`.
    /// Written `USING TIMESTAMP` the window's applied offset, like the session row; columns
    /// unchanged since `written` are left unset.
    pub fn context(
        window: &ContextWindow,
        state: &SessionState,
        written: &mut LastWritten,
    ) -> Self {
        let row = ContextRow::of(window, state);
        Self::new(Table::ContextView, changes(row, &mut written.context))
    }

    /// The `context_turns` rows an event at `offset` changed: the turn it added, the turns a
    /// summary or a retraction took out of the window, or, when it erased the session, a
    /// deletion of every turn (older ones included) and the window's turns again without
    /// their text. Each turn is written once, so a batch costs what its
    /// events add, not the whole window again. Write timestamps are offsets, the rewrite's one
    /// above the deletion's, so writing these again after a crash changes nothing. Absent
    /// values stay unset rather than null: a turn row is only ever written over its deletion,
    /// so there is no older cell to clear, and a null would cost a tombstone.
    pub fn turns(
        session: SessionId,
        window: &ContextWindow,
        change: TurnChange,
        offset: i64,
    ) -> Vec<Self> {
        let turn = |t: &Turn, timestamp: i64| {
            let values = (
                session.0,
                to_i64(t.seq),
                t.role.clone(),
                unset_or(t.name.clone()),
                unset_or(t.call_seq.map(to_i64)),
                unset_or(t.text.clone()),
                t.truncated,
                t.sealed,
                t.occurred_at,
                unset_or(t.sealed_text.as_ref().map(to_json)),
                timestamp,
            );
            Self::new(Table::ContextTurns, values)
        };
        match change {
            TurnChange::None => Vec::new(),
            TurnChange::Added => window
                .recent
                .back()
                .map(|t| turn(t, offset))
                .into_iter()
                .collect(),
            // A deletion at the summary's offset: a replay writing the turns again at their
            // own (lower) offsets leaves them deleted.
            TurnChange::Summarized {
                first_seq,
                last_seq,
            } => vec![Self::new(
                Table::SummarizedTurns,
                (offset, session.0, to_i64(first_seq), to_i64(last_seq)),
            )],
            // The same deletion for the one turn a retraction withdrew, at the retraction's
            // offset, so the stored window loads without it.
            TurnChange::Retracted { seq } => vec![Self::new(
                Table::SummarizedTurns,
                (offset, session.0, to_i64(seq), to_i64(seq)),
            )],
            TurnChange::Erased => {
                std::iter::once(Self::new(Table::ErasedTurns, (offset, session.0)))
                    .chain(window.recent.iter().map(|t| turn(t, offset + 1)))
                    .collect()
            }
        }
    }

    /// A fork's row in its parent's `session_children`, when `event` (accepted) is the
    /// child's `SessionForked`. Its values never change, so writing it again changes nothing;
    /// it is written `USING TIMESTAMP` the event's offset like the other listing rows.
    pub fn child(event: &EventEnvelope, offset: i64) -> Option<Self> {
        let SessionEvent::SessionForked { fork_point, .. } = &event.event else {
            return None;
        };
        let values = (
            fork_point.parent_session_id.0,
            event.session_id.0,
            to_i64(fork_point.parent_seq),
            offset,
        );
        Some(Self::new(Table::SessionChildren, values))
    }

    /// The `session_starts` row of a session whose first event (a start or a fork) the fold
    /// accepted at `offset`: an id is started once, and this row outlives the session's other
    /// rows. Its values never change, so writing it again changes nothing.
    pub fn start(event: &EventEnvelope, partition: i32, offset: i64) -> Option<Self> {
        let is_start = matches!(
            event.event,
            SessionEvent::SessionStarted { .. } | SessionEvent::SessionForked { .. }
        );
        (is_start && event.seq == 1).then(|| {
            Self::new(
                Table::SessionStarts,
                (event.session_id.0, partition, offset, offset),
            )
        })
    }

    /// The `sessions_awaiting` rows an event at `offset` changes when it moves its session
    /// from waiting for `before` to waiting for `after`: the old row deleted, the new one
    /// inserted, both `USING TIMESTAMP` the offset. A later leave deletes over an earlier
    /// enter whatever order the writes land in, and a replay writes the same rows again.
    pub fn awaiting(
        event: &EventEnvelope,
        offset: i64,
        before: Option<Wait>,
        after: Option<Wait>,
    ) -> Vec<Self> {
        if before == after {
            return Vec::new();
        }
        let session = event.session_id.0;
        let mut rows = Vec::new();
        if let Some(wait) = before {
            rows.push(Self::new(
                Table::AwaitingDelete,
                (offset, wait.as_str(), session),
            ));
        }
        if let Some(wait) = after {
            let values = (
                wait.as_str(),
                session,
                to_i64(event.seq),
                event.occurred_at,
                offset,
            );
            rows.push(Self::new(Table::AwaitingInsert, values));
        }
        rows
    }

    /// Every record of `topic[partition]` before `next_offset` is applied, and the dead letters
    /// of the records after it, if any were sent, are at or after `dead_letter_mark` in the
    /// dead-letter topic (unset: the mark stays as it was). The write timestamp is the offset,
    /// so progress never moves back.
    ///
    /// `last` is the record just before `next_offset`, which tells the topic this progress was
    /// made on from another one of the same name (see [`crate::ProjectionStore::check_topic`]).
    pub fn progress(
        topic: &str,
        partition: i32,
        next_offset: i64,
        dead_letter_mark: Option<i64>,
        last: &crate::LastRecord,
    ) -> Self {
        let values = (
            topic.to_string(),
            partition,
            next_offset,
            unset_or(dead_letter_mark),
            last.key.clone(),
            last.timestamp_ms,
            next_offset,
        );
        Self::new(Table::PartitionProgress, values)
    }
}

/// The columns of a span write that are absent stay unset, so a later write never erases them.
pub(crate) fn unset_or<T>(value: Option<T>) -> MaybeUnset<T> {
    value.map_or(MaybeUnset::Unset, MaybeUnset::Set)
}

/// A count or seq as CQL's `bigint`: the client supplies some of these numbers (token counts,
/// cost), so one beyond `i64::MAX` is stored as `i64::MAX` rather than wrapping negative.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A JSON column's text (serialising plain data cannot fail; empty if it somehow did).
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_session::SessionStatus;

    /// A retracted turn's row is deleted at the retraction's offset, like a summary's turns.
    #[test]
    fn a_retracted_turn_is_deleted_at_the_retractions_offset() {
        let session = SessionId(Uuid::now_v7());
        let rows = CqlRow::turns(
            session,
            &ContextWindow::default(),
            TurnChange::Retracted { seq: 8 },
            41,
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].table, Table::SummarizedTurns);
    }

    #[test]
    fn a_wait_writes_only_when_it_changes() {
        let event = EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: SessionId(Uuid::now_v7()),
            seq: 7,
            writer_epoch: 1,
            occurred_at: 1,
            causation_id: None,
            idempotency_key: None,
            schema_version: 1,
            event: SessionEvent::UserRequest {
                content: sessionlog_schemas::Content::plain("x"),
            },
            attestation: None,
        };
        let tables = |rows: Vec<CqlRow>| rows.iter().map(|r| r.table).collect::<Vec<_>>();
        let same = Some(Wait::Approval);
        assert!(CqlRow::awaiting(&event, 3, same, same).is_empty());
        assert_eq!(
            tables(CqlRow::awaiting(&event, 3, None, Some(Wait::Operator))),
            [Table::AwaitingInsert]
        );
        assert_eq!(
            tables(CqlRow::awaiting(&event, 3, Some(Wait::Approval), None)),
            [Table::AwaitingDelete]
        );
        assert_eq!(
            tables(CqlRow::awaiting(&event, 3, same, Some(Wait::Operator))),
            [Table::AwaitingDelete, Table::AwaitingInsert]
        );
        assert!(CqlRow::child(&event, 3).is_none());
        assert_eq!(
            Wait::of(SessionStatus::NeedsResolution),
            Some(Wait::Operator)
        );
        assert_eq!(Wait::of(SessionStatus::Paused), None);
    }

    #[test]
    fn client_numbers_beyond_bigint_saturate() {
        assert_eq!(to_i64(u64::MAX), i64::MAX);
        assert_eq!(to_i64(5), 5);
    }
}
