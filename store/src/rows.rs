//! Row shaping: what the projector's fold becomes in each table, with its values bound.
//!
//! Every row is keyed by `(session_id, seq)`, by log position or by what it lists, and rows
//! that change over time are written `USING TIMESTAMP` a log offset, so writing a row again
//! (after a crash, a rebalance, in a replay) leaves what was there.

use crate::read::ProjectedSession;
use scylla::serialize::row::SerializeRow;
use scylla::value::MaybeUnset;
use sessionlog_schemas::{Content, EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::context::{ContextWindow, Turn, TurnChange};
use sessionlog_session::trace::SpanWrite;
use sessionlog_session::usage::{UsageKey, UsageTotals};
use sessionlog_session::{Rejection, SessionState, SessionStatus};
use uuid::Uuid;

/// The `sessions` row, column by column, then the write timestamp. Some columns are unset when
/// they have not changed since this instance last wrote the row (see [`LastWritten`]).
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct SessionRow {
    session_id: Uuid,
    status: MaybeUnset<&'static str>,
    agent: MaybeUnset<Option<String>>,
    title: MaybeUnset<Option<String>>,
    epoch: MaybeUnset<i64>,
    writer: MaybeUnset<Option<String>>,
    last_seq: MaybeUnset<i64>,
    parent_session_id: MaybeUnset<Option<Uuid>>,
    parent_seq: MaybeUnset<Option<i64>>,
    started_at_us: MaybeUnset<i64>,
    updated_at_us: MaybeUnset<i64>,
    tokens_in: MaybeUnset<i64>,
    tokens_out: MaybeUnset<i64>,
    cost_micros: MaybeUnset<i64>,
    pending_calls: MaybeUnset<i32>,
    pending_approvals: MaybeUnset<i32>,
    log_partition: MaybeUnset<i32>,
    applied_offset: MaybeUnset<i64>,
    state_digest: MaybeUnset<Option<String>>,
    state_json: MaybeUnset<String>,
    last_model_seq: MaybeUnset<Option<i64>>,
    write_timestamp: i64,
}

impl From<&ProjectedSession> for SessionRow {
    fn from(projected: &ProjectedSession) -> Self {
        use MaybeUnset::Set;
        let s = &projected.state;
        Self {
            session_id: s.session_id.0,
            status: Set(s.status().as_str()),
            agent: Set(s.agent.clone()),
            // Only plain titles (sessions written without encryption) have a column; a sealed
            // one stays in the stored state, for a reader with the key.
            title: Set(s
                .title
                .as_ref()
                .and_then(Content::as_plain)
                .map(String::from)),
            epoch: Set(to_i64(s.epoch)),
            writer: Set(s.writer.clone()),
            last_seq: Set(to_i64(s.last_seq)),
            parent_session_id: Set(s.parent.as_ref().map(|p| p.parent_session_id.0)),
            parent_seq: Set(s.parent.as_ref().map(|p| to_i64(p.parent_seq))),
            started_at_us: Set(s.started_at),
            updated_at_us: Set(s.updated_at),
            tokens_in: Set(to_i64(s.tokens_in)),
            tokens_out: Set(to_i64(s.tokens_out)),
            cost_micros: Set(to_i64(s.cost_micros)),
            pending_calls: Set(s.pending_calls.len() as i32),
            pending_approvals: Set(s.pending_approvals.len() as i32),
            log_partition: Set(projected.partition),
            applied_offset: Set(projected.applied_offset),
            // No reader needs the digest (a checkpoint's is computed when it is verified): the
            // column is cleared of one an earlier release wrote, then left unset.
            state_digest: Set(None),
            state_json: Set(crate::stored::state_json(s)),
            last_model_seq: Set(projected.last_model_call.map(to_i64)),
            write_timestamp: projected.applied_offset,
        }
    }
}

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

/// The `context_view` row, column by column, then the write timestamp; unset like
/// [`SessionRow`].
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct ContextRow {
    session_id: Uuid,
    applied_offset: MaybeUnset<i64>,
    last_seq: MaybeUnset<i64>,
    /// No longer written: a reader of the view takes the plan from the session's state. Cleared
    /// (like the two below) of what an earlier release wrote, which would otherwise outlive an
    /// erasure and, without the TTL the rest of an ended session's row gets, the row.
    plan: MaybeUnset<Option<String>>,
    /// Superseded by `context_turns` (migration 3); cleared in case an older projector wrote it.
    recent_turns: MaybeUnset<Option<String>>,
    first_turn_seq: MaybeUnset<Option<i64>>,
    /// No longer written: the view's unresolved calls are the state's. Cleared like `plan`.
    unresolved_calls: MaybeUnset<Option<String>>,
    older_ranges: MaybeUnset<String>,
    left_out: MaybeUnset<String>,
    summaries: MaybeUnset<String>,
    policy: MaybeUnset<String>,
    write_timestamp: i64,
    /// Not a column: whether the view's summaries have so far only gained newer ones (no
    /// retraction withdrew one), which is what lets an unchanged `summaries` go unset.
    #[scylla(skip)]
    summaries_one_way: bool,
}

/// Unsets each listed column of `row` whose value equals the one in `written`.
macro_rules! unset_unchanged {
    ($row:ident, $written:ident: $($column:ident),+ $(,)?) => {
        $(
            if let (MaybeUnset::Set(now), MaybeUnset::Set(then)) = (&$row.$column, &$written.$column)
                && now == then
            {
                $row.$column = MaybeUnset::Unset;
            }
        )+
    };
}

/// A row rewritten in every batch that touches its session.
pub(crate) trait Rewritten: Clone {
    /// This row with its one-way columns that equal `written`'s unset.
    fn unset_unchanged(self, written: &Self) -> Self;
}

// Only one-way columns are ever left unset: set once (agent, parent, start), or only growing
// (epoch, totals, older ranges, left-out counts). A write from an instance that has just lost
// the partition can still land between two of the new owner's writes, with a higher timestamp
// than the first; a one-way column equal in both has that value in between too, so the stale
// cell is right. A column that can return to an earlier value (status, writer, pending counts,
// plan, unresolved calls) could keep the stale cell, so it is always sent.
impl Rewritten for SessionRow {
    fn unset_unchanged(mut self, written: &Self) -> Self {
        unset_unchanged!(self, written: agent, title, epoch, parent_session_id, parent_seq,
            started_at_us, tokens_in, tokens_out, cost_micros, log_partition, last_model_seq,
            state_digest);
        self
    }
}

impl ContextRow {
    /// The row of `window` for `state`'s session, every column set.
    fn of(window: &ContextWindow, state: &SessionState) -> Self {
        use MaybeUnset::Set;
        ContextRow {
            session_id: state.session_id.0,
            applied_offset: Set(window.applied_offset),
            last_seq: Set(to_i64(state.last_seq)),
            plan: Set(None),
            recent_turns: Set(None),
            first_turn_seq: Set(window.recent.front().map(|t| to_i64(t.seq))),
            unresolved_calls: Set(None),
            older_ranges: Set(crate::stored::older_json(&window.older)),
            left_out: Set(crate::stored::left_out_json(&window.left_out)),
            summaries: Set(to_json(&window.summaries)),
            policy: Set(to_json(&window.policy)),
            write_timestamp: window.applied_offset,
            summaries_one_way: window.left_out.retracted_summaries == 0,
        }
    }
}

impl Rewritten for ContextRow {
    fn unset_unchanged(mut self, written: &Self) -> Self {
        // Not `older_ranges` or `first_turn_seq`: a summary can take a range or every recent
        // turn out again, back to an earlier value. Summaries only ever gain a newer one (or
        // lose their texts, once) until a retraction withdraws one, which can take them back
        // to an earlier value: from then on they are always sent. The policy is set when the
        // session starts.
        unset_unchanged!(self, written: plan, recent_turns, unresolved_calls, left_out, policy);
        if self.summaries_one_way {
            unset_unchanged!(self, written: summaries);
        }
        self
    }
}

/// What this instance last wrote in a session's `sessions` and `context_view` rows.
///
/// Both rows are rewritten in every batch that touches the session, but many of their columns
/// (agent, parent, totals, older ranges) rarely change, and the store's work per batch grows
/// with the cells written. So such a column equal to the one last written is sent unset and
/// the store keeps its cell. This relies on this instance's writes of the session landing in
/// order, so it lives and is forgotten with the projector's session cache; the first write
/// after a load sends every column.
#[derive(Default)]
pub struct LastWritten {
    session: Option<SessionRow>,
    context: Option<ContextRow>,
}

/// `row` with the columns it need not send unset (none without `written`); `row` becomes the
/// last written.
pub(crate) fn changes<R: Rewritten>(row: R, written: &mut Option<R>) -> R {
    let sent = match written.as_ref() {
        Some(written) => row.clone().unset_unchanged(written),
        None => row.clone(),
    };
    *written = Some(row);
    sent
}

/// Rows written again with a TTL per request when a session ends (all in its partition).
pub(crate) const ROWS_PER_REWRITE: usize = crate::ROWS_PER_BATCH;

/// Which table (and prepared statement) a [`CqlRow`] goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Sessions,
    EventIndex,
    WriterClaims,
    Checkpoints,
    RejectedEvents,
    SpansBySession,
    /// `trace_spans_by_tenant_day` (since migration 14; `trace_spans_by_day_bucket` is no
    /// longer written).
    SpansByTenantDay,
    /// `trace_tenant_day_buckets`: the (tenant, bucket) partitions a day's spans went to.
    TenantDayBuckets,
    /// `usage_rollups`.
    UsageRollups,
    ContextView,
    ContextTurns,
    ErasedTurns,
    /// The turns a summary replaced (or a retraction withdrew), by seq range.
    SummarizedTurns,
    /// Every checkpoint row of an erased session.
    ErasedCheckpoints,
    PartitionProgress,
    SessionChildren,
    AwaitingInsert,
    AwaitingDelete,
    /// `session_starts`: every started id, kept for good.
    SessionStarts,
}

impl Table {
    /// Every table, in the order of the prepared writes.
    pub(crate) const ALL: [Table; 19] = [
        Table::Sessions,
        Table::EventIndex,
        Table::WriterClaims,
        Table::Checkpoints,
        Table::RejectedEvents,
        Table::SpansBySession,
        Table::SpansByTenantDay,
        Table::TenantDayBuckets,
        Table::UsageRollups,
        Table::ContextView,
        Table::ContextTurns,
        Table::ErasedTurns,
        Table::SummarizedTurns,
        Table::ErasedCheckpoints,
        Table::PartitionProgress,
        Table::SessionChildren,
        Table::AwaitingInsert,
        Table::AwaitingDelete,
        Table::SessionStarts,
    ];

    /// The CQL table this write changes (a deletion's: the one it deletes from).
    pub(crate) fn cql_name(self) -> &'static str {
        match self {
            Table::Sessions => "sessions",
            Table::EventIndex => "event_index",
            Table::WriterClaims => "writer_claims",
            Table::Checkpoints | Table::ErasedCheckpoints => "checkpoints",
            Table::RejectedEvents => "rejected_events",
            Table::SpansBySession => "trace_spans_by_session",
            Table::SpansByTenantDay => "trace_spans_by_tenant_day",
            Table::TenantDayBuckets => "trace_tenant_day_buckets",
            Table::UsageRollups => "usage_rollups",
            Table::ContextView => "context_view",
            Table::ContextTurns | Table::ErasedTurns | Table::SummarizedTurns => "context_turns",
            Table::PartitionProgress => "partition_progress",
            Table::SessionChildren => "session_children",
            Table::AwaitingInsert | Table::AwaitingDelete => "sessions_awaiting",
            Table::SessionStarts => "session_starts",
        }
    }

    /// `delete` for a deletion, `insert` for the others.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Table::ErasedTurns
            | Table::SummarizedTurns
            | Table::ErasedCheckpoints
            | Table::AwaitingDelete => "delete",
            _ => "insert",
        }
    }

    /// Whether an ended session's rows in this table are written with the ended-session TTL
    /// (`[retention] ended_session_ttl_secs`): the tables whose partition is the session,
    /// which hold what it said and did. Not the lists keyed by something else: spans by tenant
    /// and day (a view of load, partitioned by tenant and day: rewriting it would mean a read
    /// of another partition per span, and it holds span names, timings and token counts, no
    /// content), a parent's children (the parent's lineage, which outlives a child), sessions
    /// awaiting someone (an ended session awaits no one: its row is already deleted) and the
    /// partitions' progress; nor the record that an id was started (`session_starts`), which
    /// outlives the session on purpose. A deletion (`ErasedTurns`) cannot carry a TTL.
    pub(crate) fn expires(self) -> bool {
        matches!(
            self,
            Table::Sessions
                | Table::EventIndex
                | Table::WriterClaims
                | Table::Checkpoints
                | Table::RejectedEvents
                | Table::SpansBySession
                | Table::ContextView
                | Table::ContextTurns
        )
    }
}

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

/// Whom a waiting session waits for, as `sessions_awaiting` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// A human's decision on a pending approval (status `awaiting_approval`).
    Approval,
    /// An operator's outcome for an in-doubt tool call (status `needs_resolution`).
    Operator,
}

impl Wait {
    /// Whom a session of `status` waits for, if anyone.
    pub fn of(status: SessionStatus) -> Option<Self> {
        match status {
            SessionStatus::AwaitingApproval => Some(Self::Approval),
            SessionStatus::NeedsResolution => Some(Self::Operator),
            _ => None,
        }
    }

    /// The status of a session waiting for this.
    pub fn status(self) -> SessionStatus {
        match self {
            Self::Approval => SessionStatus::AwaitingApproval,
            Self::Operator => SessionStatus::NeedsResolution,
        }
    }

    /// The partition key in `sessions_awaiting`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Operator => "operator",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_set<T>(column: &MaybeUnset<T>) -> bool {
        matches!(column, MaybeUnset::Set(_))
    }

    /// A summary can empty the window, so the first turn can go back to an earlier value: a
    /// stale write from an instance that lost the partition could then outlive an unset cell
    /// (review of the context-offloading change). A retraction can take the summaries back to
    /// an earlier value too ([A] → [A, B] → [A]): once one withdrew a summary, they are sent
    /// every time.
    #[test]
    fn a_context_row_always_sends_what_a_summary_can_take_back() {
        let state = SessionState::empty(SessionId(Uuid::now_v7()));
        let mut window = ContextWindow::default();
        let mut written = None;
        let first = changes(ContextRow::of(&window, &state), &mut written);
        assert!(
            matches!(first.plan, MaybeUnset::Set(None))
                && matches!(first.unresolved_calls, MaybeUnset::Set(None)),
            "an instance's first write clears what an earlier release wrote"
        );
        window.applied_offset = 7;
        let again = changes(ContextRow::of(&window, &state), &mut written);
        assert!(is_set(&again.first_turn_seq), "first_turn_seq left unset");
        assert!(is_set(&again.older_ranges), "older_ranges left unset");
        assert!(!is_set(&again.policy), "the policy is set once");
        assert!(
            !is_set(&again.plan) && !is_set(&again.unresolved_calls),
            "the cleared columns are cleared once"
        );
        assert!(!is_set(&again.summaries), "unchanged summaries sent");
        window.left_out.retracted_summaries = 1;
        let _ = changes(ContextRow::of(&window, &state), &mut written);
        let again = changes(ContextRow::of(&window, &state), &mut written);
        assert!(
            is_set(&again.summaries),
            "summaries left unset after a retraction"
        );
    }

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
    fn a_rewritten_row_sends_only_the_columns_that_changed() {
        let mut projected = ProjectedSession {
            state: SessionState::empty(SessionId(Uuid::now_v7())),
            partition: 3,
            applied_offset: 10,
            last_model_call: None,
        };
        let mut written = None;
        let first = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&first.title) && is_set(&first.log_partition) && is_set(&first.state_json));

        projected.applied_offset = 11;
        let second = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&second.applied_offset));
        assert!(!is_set(&second.title) && !is_set(&second.log_partition));
        assert!(!is_set(&second.tokens_in) && !is_set(&second.epoch));
        assert_eq!(second.write_timestamp, 11);

        projected.state.title = Some("renamed".into());
        let third = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&third.title) && is_set(&third.state_json));
        assert!(!is_set(&third.agent) && !is_set(&third.cost_micros));

        // A column that returns to null is sent as null, not left holding the old value.
        projected.state.title = None;
        let fourth = changes(SessionRow::from(&projected), &mut written);
        assert!(matches!(fourth.title, MaybeUnset::Set(None)));
    }

    #[test]
    fn columns_that_can_return_to_an_earlier_value_are_always_sent() {
        let projected = ProjectedSession {
            state: SessionState::empty(SessionId(Uuid::now_v7())),
            partition: 0,
            applied_offset: 5,
            last_model_call: None,
        };
        let mut written = None;
        changes(SessionRow::from(&projected), &mut written);
        let again = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&again.status) && is_set(&again.state_json));
        // The digest is not written: cleared once, then left as it is.
        assert!(!is_set(&again.state_digest));
        assert!(is_set(&again.writer));
        assert!(is_set(&again.pending_calls) && is_set(&again.pending_approvals));
        assert!(!is_set(&again.started_at_us));
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
