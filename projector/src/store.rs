//! The projection tables in CQL.

use crate::context::{ContextWindow, Turn, TurnChange};
use crate::migrations::{AddedColumn, MIGRATIONS};
use crate::trace::SpanWrite;
use crate::{Error, Result};
use futures::stream::{self, TryStreamExt};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;
use scylla::statement::batch::{Batch, BatchStatement, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use sessionlog_log::CqlSettings;
use sessionlog_schemas::{EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::{DUPLICATE_WINDOW, Rejection, SessionState};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// A session's projected row: its folded state and how far into the log it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectedSession {
    /// The folded state.
    pub state: SessionState,
    /// The session's partition.
    pub partition: i32,
    /// The offset of the last record folded into `state` (accepted or not).
    pub applied_offset: i64,
}

/// The `sessions` row, column by column, then the write timestamp. Some columns are unset when
/// they have not changed since this instance last wrote the row (see [`LastWritten`]).
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SessionRow {
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
    state_digest: MaybeUnset<String>,
    state_json: MaybeUnset<String>,
    write_timestamp: i64,
}

impl From<&ProjectedSession> for SessionRow {
    fn from(projected: &ProjectedSession) -> Self {
        use MaybeUnset::Set;
        let s = &projected.state;
        // One serialisation serves both the stored state and its digest.
        let state_json = s.canonical_json();
        Self {
            session_id: s.session_id.0,
            status: Set(s.status().as_str()),
            agent: Set(s.agent.clone()),
            title: Set(s.title.clone()),
            epoch: Set(s.epoch as i64),
            writer: Set(s.writer.clone()),
            last_seq: Set(s.last_seq as i64),
            parent_session_id: Set(s.parent.as_ref().map(|p| p.parent_session_id.0)),
            parent_seq: Set(s.parent.as_ref().map(|p| p.parent_seq as i64)),
            started_at_us: Set(s.started_at),
            updated_at_us: Set(s.updated_at),
            tokens_in: Set(s.tokens_in as i64),
            tokens_out: Set(s.tokens_out as i64),
            cost_micros: Set(s.cost_micros as i64),
            pending_calls: Set(s.pending_calls.len() as i32),
            pending_approvals: Set(s.pending_approvals.len() as i32),
            log_partition: Set(projected.partition),
            applied_offset: Set(projected.applied_offset),
            state_digest: Set(SessionState::digest_of(&state_json)),
            state_json: Set(state_json),
            write_timestamp: projected.applied_offset,
        }
    }
}

/// The `context_view` row, column by column, then the write timestamp; unset like
/// [`SessionRow`].
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ContextRow {
    session_id: Uuid,
    applied_offset: MaybeUnset<i64>,
    last_seq: MaybeUnset<i64>,
    plan: MaybeUnset<Option<String>>,
    /// Superseded by `context_turns` (migration 3); cleared in case an older projector wrote it.
    recent_turns: MaybeUnset<Option<String>>,
    first_turn_seq: MaybeUnset<Option<i64>>,
    unresolved_calls: MaybeUnset<String>,
    older_ranges: MaybeUnset<String>,
    left_out: MaybeUnset<String>,
    write_timestamp: i64,
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
trait Rewritten: Clone {
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
            started_at_us, tokens_in, tokens_out, cost_micros, log_partition);
        self
    }
}

impl Rewritten for ContextRow {
    fn unset_unchanged(mut self, written: &Self) -> Self {
        unset_unchanged!(self, written: recent_turns, first_turn_seq, older_ranges, left_out);
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
fn changes<R: Rewritten>(row: R, written: &mut Option<R>) -> R {
    let sent = match written.as_ref() {
        Some(written) => row.clone().unset_unchanged(written),
        None => row.clone(),
    };
    *written = Some(row);
    sent
}

/// Which table (and prepared statement) a [`CqlRow`] goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Sessions,
    EventIndex,
    WriterClaims,
    Checkpoints,
    RejectedEvents,
    SpansBySession,
    SpansByDay,
    ContextView,
    ContextTurns,
    ErasedTurns,
    PartitionProgress,
}

/// Rows of one session written in one request at most: a session with more in a batch (a
/// replay) is written in several, in order, its session row in the last.
pub const ROWS_PER_BATCH: usize = 256;
/// Sessions sharing one request at most: Cassandra's default
/// `unlogged_batch_across_partitions_warn_threshold`.
pub const SESSIONS_PER_REQUEST: usize = 10;
/// Bytes of bound values in a shared request at most. Cassandra refuses a batch of more than
/// one partition above `batch_size_fail_threshold` (50 KiB by default). It counts its own
/// per-cell overhead too: about 1.6 times these bytes for the projector's rows, so 16 KiB
/// stays near 26 KiB by its count. ScyllaDB's limit is 1 MiB.
pub const REQUEST_BYTES: usize = 16 * 1024;

/// One row to write, with its values bound: built while folding, written later in a batch.
pub struct CqlRow {
    table: Table,
    values: Box<dyn SerializeRow + Send + Sync>,
}

impl CqlRow {
    fn new(table: Table, values: impl SerializeRow + Send + Sync + 'static) -> Self {
        Self {
            table,
            values: Box::new(values),
        }
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
        after: Option<&SessionState>,
    ) -> Vec<Self> {
        let session = event.session_id.0;
        if let SessionEvent::WriterClaimed { writer } = &event.event {
            let values = (
                session,
                event.writer_epoch as i64,
                writer.clone(),
                partition,
                offset,
                event.event_id,
                event.occurred_at,
                event.seq as i64,
            );
            return vec![Self::new(Table::WriterClaims, values)];
        }
        let index = (
            session,
            event.seq as i64,
            partition,
            offset,
            event.event.kind(),
            event.event_id,
            event.writer_epoch as i64,
            event.occurred_at,
        );
        let mut rows = vec![Self::new(Table::EventIndex, index)];
        let checkpoint = after.and_then(|s| {
            s.last_checkpoint
                .as_ref()
                .filter(|m| m.seq == event.seq)
                .map(|m| (m, s))
        });
        if let Some((mark, after)) = checkpoint {
            let values = (
                session,
                event.seq as i64,
                partition,
                offset,
                mark.declared_digest.clone(),
                mark.computed_digest.clone(),
                mark.verified(),
                after.canonical_json(),
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
            event.seq as i64,
            event.writer_epoch as i64,
            event.event_id,
            event.event.kind(),
            why.label(),
            why.to_string(),
        );
        Self::new(Table::RejectedEvents, values)
    }

    /// A span's two rows: by session, and by day (whose partition is the day).
    /// `offset` (the event's log offset) is the write timestamp, so the write of the event
    /// that completes a span wins over the one that opened it.
    pub fn span(span: &SpanWrite, offset: i64) -> (Self, Self) {
        let as_i64 = |v: Option<u64>| unset_or(v.map(|v| v as i64));
        let end_seq = as_i64(span.end_seq);
        let (end_us, duration_us) = (unset_or(span.end_us), unset_or(span.duration_us()));
        let (tokens_in, tokens_out, cost) = (
            as_i64(span.tokens_in),
            as_i64(span.tokens_out),
            as_i64(span.cost_micros),
        );
        let (session, seq) = (span.session_id.0, span.span_seq as i64);
        let by_session = (
            session,
            seq,
            span.span_kind,
            span.name.clone(),
            span.start_us,
            end_seq,
            end_us,
            duration_us,
            tokens_in,
            tokens_out,
            cost,
            span.outcome,
            offset,
        );
        let by_day = (
            span.day(),
            span.start_us,
            session,
            seq,
            span.span_kind,
            span.name.clone(),
            end_seq,
            end_us,
            duration_us,
            tokens_in,
            tokens_out,
            cost,
            span.outcome,
            offset,
        );
        (
            Self::new(Table::SpansBySession, by_session),
            Self::new(Table::SpansByDay, by_day),
        )
    }

    /// A session's context view: the window, plus the plan and unresolved calls of `state`.
    /// Written `USING TIMESTAMP` the window's applied offset, like the session row; columns
    /// unchanged since `written` are left unset.
    pub fn context(
        window: &ContextWindow,
        state: &SessionState,
        written: &mut LastWritten,
    ) -> Self {
        use MaybeUnset::Set;
        let row = ContextRow {
            session_id: state.session_id.0,
            applied_offset: Set(window.applied_offset),
            last_seq: Set(state.last_seq as i64),
            plan: Set(ContextWindow::plan_text(state)),
            recent_turns: Set(None),
            first_turn_seq: Set(window.recent.front().map(|t| t.seq as i64)),
            unresolved_calls: Set(to_json(&ContextWindow::unresolved_calls(state))),
            older_ranges: Set(to_json(&window.older)),
            left_out: Set(to_json(&window.left_out)),
            write_timestamp: window.applied_offset,
        };
        Self::new(Table::ContextView, changes(row, &mut written.context))
    }

    /// The `context_turns` rows an event at `offset` changed: the turn it added, or, when it
    /// erased the session, a deletion of every turn (older ones included) and the window's
    /// turns again without their text. Each turn is written once, so a batch costs what its
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
                t.seq as i64,
                t.role.clone(),
                unset_or(t.name.clone()),
                unset_or(t.call_seq.map(|s| s as i64)),
                unset_or(t.text.clone()),
                t.truncated,
                t.sealed,
                t.occurred_at,
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
            TurnChange::Erased => {
                std::iter::once(Self::new(Table::ErasedTurns, (offset, session.0)))
                    .chain(window.recent.iter().map(|t| turn(t, offset + 1)))
                    .collect()
            }
        }
    }

    /// Every record of `topic[partition]` before `next_offset` is applied. The write timestamp
    /// is the offset, so progress never moves back.
    pub fn progress(topic: &str, partition: i32, next_offset: i64) -> Self {
        let values = (topic.to_string(), partition, next_offset, next_offset);
        Self::new(Table::PartitionProgress, values)
    }
}

/// Reads and writes the projection tables. Cheap to clone.
#[derive(Clone)]
pub struct ProjectionStore {
    session: Arc<Session>,
    keyspace: String,
    statements: Arc<Statements>,
}

struct Statements {
    load_session: PreparedStatement,
    recent_index: PreparedStatement,
    claims: PreparedStatement,
    save_session: PreparedStatement,
    put_index: PreparedStatement,
    put_claim: PreparedStatement,
    put_checkpoint: PreparedStatement,
    put_rejected: PreparedStatement,
    put_span_by_session: PreparedStatement,
    put_span_by_day: PreparedStatement,
    save_context: PreparedStatement,
    load_context: PreparedStatement,
    put_turn: PreparedStatement,
    erase_turns: PreparedStatement,
    load_turns: PreparedStatement,
    save_progress: PreparedStatement,
    load_progress: PreparedStatement,
}

impl ProjectionStore {
    /// Connects, creates the keyspace, applies pending migrations and prepares the statements.
    pub async fn connect(settings: &CqlSettings) -> Result<Self> {
        let session = SessionBuilder::new()
            .known_nodes(settings.node_list())
            .connection_timeout(Duration::from_secs(10))
            .build()
            .await
            .map_err(Error::store("connect"))?;
        let keyspace = settings.keyspace.clone();
        migrate(&session, &keyspace, settings.replication_factor).await?;
        let statements = Statements::prepare(&session, &keyspace).await?;
        Ok(Self {
            session: Arc::new(session),
            keyspace,
            statements: Arc::new(statements),
        })
    }

    /// The keyspace written to.
    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// The driver session, for queries the store does not wrap.
    pub fn cql(&self) -> &Session {
        &self.session
    }

    /// Runs a prepared query and decodes all its rows; `action` names it in errors.
    async fn select<R>(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        action: &'static str,
    ) -> Result<Vec<R>>
    where
        R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata>,
    {
        let result = self
            .session
            .execute_unpaged(statement, values)
            .await
            .map_err(Error::store(action))?
            .into_rows_result()
            .map_err(Error::store(action))?;
        result
            .rows::<R>()
            .map_err(Error::store(action))?
            .map(|row| row.map_err(Error::store(action)))
            .collect()
    }

    /// The projected row of a session, if the projector has seen it.
    pub async fn load_session(&self, session: SessionId) -> Result<Option<ProjectedSession>> {
        type Row = (Option<String>, Option<i32>, Option<i64>);
        let rows: Vec<Row> = self
            .select(&self.statements.load_session, (session.0,), "load session")
            .await?;
        let Some((state_json, partition, applied_offset)) = rows.into_iter().next() else {
            return Ok(None);
        };
        let mut state: SessionState = serde_json::from_str(state_json.as_deref().unwrap_or(""))
            .map_err(|e| Error::CorruptRow {
                session: session.to_string(),
                message: e.to_string(),
            })?;
        let applied_offset = applied_offset.unwrap_or(-1);
        state.remember_recent(self.accepted_through(&state, applied_offset).await?);
        Ok(Some(ProjectedSession {
            state,
            partition: partition.unwrap_or_default(),
            applied_offset,
        }))
    }

    /// The last accepted `(seq, event_id)` pairs of `state`'s session up to `offset`, in the
    /// order they were accepted (log order), from its event index and writer claims: what
    /// [`SessionState::remember_recent`] needs for a state read back from a table. Rows past
    /// `offset` (a replay writes a long session in several batches) are not part of the state.
    pub async fn accepted_through(
        &self,
        state: &SessionState,
        offset: i64,
    ) -> Result<Vec<(u64, Uuid)>> {
        let session = state.session_id.0;
        type Row = (Option<i64>, Option<Uuid>, Option<i64>);
        let (index, claims) = futures::try_join!(
            self.select::<Row>(
                &self.statements.recent_index,
                (session, state.last_seq as i64),
                "load duplicate window",
            ),
            self.select::<Row>(&self.statements.claims, (session,), "load duplicate window"),
        )?;
        // A claim written before `claim_seq` existed cannot be matched; leave it out.
        let accepted_so_far = |(seq, id, at): Row| match (seq, id, at) {
            (Some(seq), Some(id), Some(at)) if at <= offset => Some((at, seq as u64, id)),
            _ => None,
        };
        let mut accepted: Vec<(i64, u64, Uuid)> = index
            .into_iter()
            .chain(claims)
            .filter_map(accepted_so_far)
            .collect();
        accepted.sort_unstable();
        Ok(accepted.into_iter().map(|(_, seq, id)| (seq, id)).collect())
    }

    /// The `(partition, offset)` of a session's event at `seq`, from the index.
    pub async fn locate(&self, session: SessionId, seq: u64) -> Result<Option<(i32, i64)>> {
        let query = format!(
            "SELECT log_partition, log_offset FROM {}.event_index WHERE session_id = ? AND seq = ?",
            self.keyspace
        );
        let rows = self
            .session
            .query_unpaged(query, (session.0, seq as i64))
            .await
            .map_err(Error::store("locate event"))?
            .into_rows_result()
            .map_err(Error::store("locate event"))?;
        rows.maybe_first_row::<(i32, i64)>()
            .map_err(Error::store("locate event"))
    }
}

/// The columns of a span write that are absent stay unset, so a later write never erases them.
fn unset_or<T>(value: Option<T>) -> MaybeUnset<T> {
    value.map_or(MaybeUnset::Unset, MaybeUnset::Set)
}

impl ProjectionStore {
    /// The stored context window of a session, if any.
    pub async fn load_context(&self, session: SessionId) -> Result<Option<ContextWindow>> {
        type Row = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = self
            .select(&self.statements.load_context, (session.0,), "load context")
            .await?;
        let Some((offset, last_seq, first_turn, older, left_out)) = rows.into_iter().next() else {
            return Ok(None);
        };
        let corrupt = |e: serde_json::Error| Error::CorruptRow {
            session: session.to_string(),
            message: format!("context view: {e}"),
        };
        let parse = |text: Option<String>, empty: &str| text.unwrap_or_else(|| empty.into());
        // Turn rows past the view's last seq belong to a batch not yet whole (a replay writes
        // a long session in several): they are not part of this window.
        let recent = match (first_turn, last_seq) {
            (Some(first), Some(last)) => self.load_turns(session, first, last).await?,
            _ => VecDeque::new(),
        };
        Ok(Some(ContextWindow {
            applied_offset: offset.unwrap_or(-1),
            recent,
            older: serde_json::from_str(&parse(older, "[]")).map_err(corrupt)?,
            left_out: serde_json::from_str(&parse(left_out, "{}")).map_err(corrupt)?,
        }))
    }

    async fn load_turns(
        &self,
        session: SessionId,
        first: i64,
        last: i64,
    ) -> Result<VecDeque<Turn>> {
        type Row = (
            i64,
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<bool>,
            Option<bool>,
            Option<i64>,
        );
        let rows: Vec<Row> = self
            .select(
                &self.statements.load_turns,
                (session.0, first, last),
                "load context turns",
            )
            .await?;
        let mut turns = VecDeque::new();
        for (seq, role, name, call_seq, text, truncated, sealed, occurred_at) in rows {
            turns.push_back(Turn {
                seq: seq as u64,
                role,
                name,
                call_seq: call_seq.map(|s| s as u64),
                text,
                truncated: truncated.unwrap_or_default(),
                sealed: sealed.unwrap_or_default(),
                occurred_at: occurred_at.unwrap_or_default(),
            });
        }
        Ok(turns)
    }

    /// Writes `rows` as one logged batch, in order. Rows that share a partition key (one
    /// session's rows, one day's spans, one topic's progress) become a single mutation, which
    /// both Cassandra and ScyllaDB apply atomically: a session's row, its commit point, is
    /// never durable without the event rows written with it. On Cassandra a single-partition
    /// logged batch skips the batch log, so it costs one request instead of one per row.
    pub async fn write_rows(&self, rows: &[CqlRow]) -> Result<()> {
        self.write_batch(rows.iter(), BatchType::Logged).await
    }

    /// Writes each session's rows (`sessions`, one slice each, in order), up to `concurrency`
    /// requests at a time; returns the number of requests. Small sessions share a request: an
    /// unlogged batch still applies each session's rows as one atomic mutation, and it costs
    /// the server one request where there were up to [`SESSIONS_PER_REQUEST`]. A session too
    /// big to share is written alone, in logged batches of at most [`ROWS_PER_BATCH`] rows,
    /// its session row in the last.
    pub async fn write_sessions(
        &self,
        sessions: &[&[CqlRow]],
        concurrency: usize,
    ) -> Result<usize> {
        let sizes: Vec<(usize, usize)> = sessions
            .iter()
            .map(|rows| {
                let bytes = rows.iter().map(|row| self.value_bytes(row));
                (rows.len(), bytes.fold(0, usize::saturating_add))
            })
            .collect();
        let requests = share_requests(&sizes);
        let count = requests.len();
        stream::iter(requests.into_iter().map(Ok::<_, Error>))
            .try_for_each_concurrent(concurrency.max(1), |request| async move {
                if request.len() > 1 {
                    let rows = request.iter().flat_map(|&i| sessions[i].iter());
                    match self.write_batch(rows, BatchType::Unlogged).await {
                        Ok(()) => return Ok(()),
                        // A server with lower batch limits than ours refuses the request:
                        // each session alone is always within them.
                        Err(e) => tracing::debug!(error = %e, "shared write failed; one by one"),
                    }
                }
                for i in request {
                    for chunk in sessions[i].chunks(ROWS_PER_BATCH) {
                        self.write_rows(chunk).await?;
                    }
                }
                Ok(())
            })
            .await?;
        Ok(count)
    }

    /// The size of a row's bound values as sent; a row that does not serialise counts as
    /// too big to share (its write then reports the error).
    fn value_bytes(&self, row: &CqlRow) -> usize {
        let specs = self.statements.of(row.table).get_variable_col_specs();
        let context = RowSerializationContext::from_specs(specs.as_slice());
        let mut buffer = Vec::new();
        match row
            .values
            .serialize(&context, &mut RowWriter::new(&mut buffer))
        {
            Ok(()) => buffer.len(),
            Err(_) => usize::MAX,
        }
    }

    async fn write_batch<'r>(
        &self,
        rows: impl Iterator<Item = &'r CqlRow> + Clone,
        kind: BatchType,
    ) -> Result<()> {
        let statements: Vec<BatchStatement> = rows
            .clone()
            .map(|row| BatchStatement::from(self.statements.of(row.table).clone()))
            .collect();
        if statements.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new_with_statements(kind, statements);
        batch.set_is_idempotent(true);
        let values: Vec<&(dyn SerializeRow + Send + Sync)> =
            rows.map(|row| row.values.as_ref()).collect();
        self.session
            .batch(&batch, values)
            .await
            .map_err(Error::store("write rows"))?;
        Ok(())
    }

    /// The stored next offset to apply, by partition of `topic`.
    pub async fn load_progress(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        let rows: Vec<(i32, Option<i64>)> = self
            .select(
                &self.statements.load_progress,
                (topic,),
                "load partition progress",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(partition, next)| (partition, next.unwrap_or_default()))
            .collect())
    }
}

/// Which sessions share a request, given each session's rows and bytes of values: runs of
/// session indexes of at most [`SESSIONS_PER_REQUEST`] sessions and [`REQUEST_BYTES`]; a
/// session bigger than that, or with more than [`ROWS_PER_BATCH`] rows, alone.
fn share_requests(sizes: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut requests = Vec::new();
    let (mut shared, mut shared_bytes) = (Vec::new(), 0);
    for (i, &(rows, bytes)) in sizes.iter().enumerate() {
        if bytes > REQUEST_BYTES || rows > ROWS_PER_BATCH {
            requests.push(vec![i]);
            continue;
        }
        if shared.len() == SESSIONS_PER_REQUEST || shared_bytes + bytes > REQUEST_BYTES {
            requests.push(std::mem::take(&mut shared));
            shared_bytes = 0;
        }
        shared.push(i);
        shared_bytes += bytes;
    }
    if !shared.is_empty() {
        requests.push(shared);
    }
    requests
}

/// A JSON column's text (serialising plain data cannot fail; empty if it somehow did).
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

impl Statements {
    fn of(&self, table: Table) -> &PreparedStatement {
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
            Table::PartitionProgress => &self.save_progress,
        }
    }

    async fn prepare(session: &Session, ks: &str) -> Result<Self> {
        let prepare = |cql: String| async move {
            let mut statement = session
                .prepare(cql)
                .await
                .map_err(Error::store("prepare"))?;
            // Every write is keyed by position or (session, seq): repeating it is harmless,
            // so the driver may retry it.
            statement.set_is_idempotent(true);
            Ok::<_, Error>(statement)
        };
        Ok(Self {
            load_session: prepare(format!(
                "SELECT state_json, log_partition, applied_offset FROM {ks}.sessions WHERE session_id = ?"
            ))
            .await?,
            recent_index: prepare(format!(
                "SELECT seq, event_id, log_offset FROM {ks}.event_index
                 WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT {DUPLICATE_WINDOW}"
            ))
            .await?,
            claims: prepare(format!(
                "SELECT claim_seq, event_id, log_offset FROM {ks}.writer_claims WHERE session_id = ?"
            ))
            .await?,
            save_session: prepare(format!(
                "INSERT INTO {ks}.sessions (session_id, status, agent, title, epoch, writer, last_seq,
                 parent_session_id, parent_seq, started_at_us, updated_at_us, tokens_in, tokens_out,
                 cost_micros, pending_calls, pending_approvals, log_partition, applied_offset,
                 state_digest, state_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
            ))
            .await?,
            put_index: prepare(format!(
                "INSERT INTO {ks}.event_index (session_id, seq, log_partition, log_offset, kind,
                 event_id, epoch, occurred_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_claim: prepare(format!(
                "INSERT INTO {ks}.writer_claims (session_id, epoch, writer, log_partition, log_offset,
                 event_id, occurred_at_us, claim_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_checkpoint: prepare(format!(
                "INSERT INTO {ks}.checkpoints (session_id, seq, log_partition, log_offset,
                 declared_digest, computed_digest, verified, state_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_rejected: prepare(format!(
                "INSERT INTO {ks}.rejected_events (session_id, log_partition, log_offset, seq, epoch,
                 event_id, kind, label, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_span_by_session: prepare(format!(
                "INSERT INTO {ks}.trace_spans_by_session (session_id, span_seq, span_kind, name,
                 start_us, end_seq, end_us, duration_us, tokens_in, tokens_out, cost_micros, outcome)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            put_span_by_day: prepare(format!(
                "INSERT INTO {ks}.trace_spans_by_day (day, start_us, session_id, span_seq, span_kind,
                 name, end_seq, end_us, duration_us, tokens_in, tokens_out, cost_micros, outcome)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            save_context: prepare(format!(
                "INSERT INTO {ks}.context_view (session_id, applied_offset, last_seq, plan,
                 recent_turns, first_turn_seq, unresolved_calls, older_ranges, left_out)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            load_context: prepare(format!(
                "SELECT applied_offset, last_seq, first_turn_seq, older_ranges, left_out
                 FROM {ks}.context_view WHERE session_id = ?"
            ))
            .await?,
            put_turn: prepare(format!(
                "INSERT INTO {ks}.context_turns (session_id, seq, role, name, call_seq, text,
                 truncated, sealed, occurred_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                 USING TIMESTAMP ?"
            ))
            .await?,
            erase_turns: prepare(format!(
                "DELETE FROM {ks}.context_turns USING TIMESTAMP ? WHERE session_id = ?"
            ))
            .await?,
            load_turns: prepare(format!(
                "SELECT seq, role, name, call_seq, text, truncated, sealed, occurred_at_us
                 FROM {ks}.context_turns WHERE session_id = ? AND seq >= ? AND seq <= ?"
            ))
            .await?,
            save_progress: prepare(format!(
                "INSERT INTO {ks}.partition_progress (topic, log_partition, next_offset)
                 VALUES (?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            load_progress: prepare(format!(
                "SELECT log_partition, next_offset FROM {ks}.partition_progress WHERE topic = ?"
            ))
            .await?,
        })
    }
}

/// Creates the keyspace and applies every migration not yet recorded.
async fn migrate(session: &Session, ks: &str, replication_factor: u32) -> Result<()> {
    let ddl = |cql: String| async move {
        session
            .query_unpaged(cql, ())
            .await
            .map_err(Error::store("migrate"))?;
        Ok::<_, Error>(())
    };
    ddl(format!(
        "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
         {{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}"
    ))
    .await?;
    ddl(format!(
        "CREATE TABLE IF NOT EXISTS {ks}.schema_migrations (
            version int PRIMARY KEY, description text, applied_at_us bigint)"
    ))
    .await?;
    session
        .await_schema_agreement()
        .await
        .map_err(Error::store("schema agreement"))?;
    let applied: Vec<i32> = session
        .query_unpaged(format!("SELECT version FROM {ks}.schema_migrations"), ())
        .await
        .map_err(Error::store("read migrations"))?
        .into_rows_result()
        .map_err(Error::store("read migrations"))?
        .rows::<(i32,)>()
        .map_err(Error::store("read migrations"))?
        .filter_map(|r| r.ok().map(|(v,)| v))
        .collect();
    for migration in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        for statement in migration.statements {
            ddl(statement.replace("{ks}", ks)).await?;
        }
        for added in migration.columns {
            let AddedColumn {
                table,
                column,
                cql_type,
            } = added;
            if !has_column(session, ks, table, column).await? {
                // Another process (a second projector, a replay) may add it at the same
                // moment: its error is not ours if the column is there afterwards.
                let added = ddl(format!("ALTER TABLE {ks}.{table} ADD {column} {cql_type}")).await;
                if let Err(e) = added
                    && !has_column(session, ks, table, column).await?
                {
                    return Err(e);
                }
            }
            await_column(session, ks, table, column).await?;
        }
        session
            .await_schema_agreement()
            .await
            .map_err(Error::store("schema agreement"))?;
        session
            .query_unpaged(
                format!(
                    "INSERT INTO {ks}.schema_migrations (version, description, applied_at_us) VALUES (?, ?, ?)"
                ),
                (migration.version, migration.description, sessionlog_schemas::now_micros()),
            )
            .await
            .map_err(Error::store("record migration"))?;
        tracing::info!(version = migration.version, "applied CQL migration");
    }
    Ok(())
}

/// Whether `ks.table` has `column` (both Cassandra and ScyllaDB describe columns in
/// `system_schema.columns`).
async fn has_column(session: &Session, ks: &str, table: &str, column: &str) -> Result<bool> {
    let rows = session
        .query_unpaged(
            "SELECT column_name FROM system_schema.columns \
             WHERE keyspace_name = ? AND table_name = ? AND column_name = ?",
            (ks.to_lowercase(), table, column),
        )
        .await
        .map_err(Error::store("read schema"))?
        .into_rows_result()
        .map_err(Error::store("read schema"))?;
    Ok(rows.rows_num() > 0)
}

/// Waits until queries can name `column`: when another process has just added it,
/// `system_schema` can list it a moment before statements may use it.
async fn await_column(session: &Session, ks: &str, table: &str, column: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let probe = format!("SELECT {column} FROM {ks}.{table} LIMIT 1");
        match session.query_unpaged(probe, ()).await {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(Error::store("migrate")(e));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions_of(requests: &[Vec<usize>]) -> Vec<usize> {
        let mut all: Vec<usize> = requests.iter().flatten().copied().collect();
        all.sort_unstable();
        all
    }

    fn is_set<T>(column: &MaybeUnset<T>) -> bool {
        matches!(column, MaybeUnset::Set(_))
    }

    #[test]
    fn a_rewritten_row_sends_only_the_columns_that_changed() {
        let mut projected = ProjectedSession {
            state: SessionState::empty(SessionId(Uuid::now_v7())),
            partition: 3,
            applied_offset: 10,
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
        };
        let mut written = None;
        changes(SessionRow::from(&projected), &mut written);
        let again = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&again.status) && is_set(&again.state_digest) && is_set(&again.state_json));
        assert!(is_set(&again.writer));
        assert!(is_set(&again.pending_calls) && is_set(&again.pending_approvals));
        assert!(!is_set(&again.started_at_us));
    }

    #[test]
    fn small_sessions_share_requests_up_to_the_session_limit() {
        let sizes = vec![(3, 500); 25];
        let requests = share_requests(&sizes);
        let lens: Vec<usize> = requests.iter().map(Vec::len).collect();
        assert_eq!(lens, [SESSIONS_PER_REQUEST, SESSIONS_PER_REQUEST, 5]);
        assert_eq!(sessions_of(&requests), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn a_shared_request_stays_within_the_byte_limit() {
        let sizes = vec![(4, REQUEST_BYTES / 3 + 1); 7];
        let requests = share_requests(&sizes);
        for request in &requests {
            let bytes: usize = request.iter().map(|&i| sizes[i].1).sum();
            assert!(bytes <= REQUEST_BYTES, "{request:?} holds {bytes} bytes");
        }
        assert_eq!(requests.len(), 4);
        assert_eq!(sessions_of(&requests), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn a_big_session_is_written_alone() {
        let sizes = [
            (2, 100),
            (3, REQUEST_BYTES + 1),
            (ROWS_PER_BATCH + 1, 100),
            (2, 100),
        ];
        let requests = share_requests(&sizes);
        assert!(requests.contains(&vec![1]));
        assert!(requests.contains(&vec![2]));
        assert!(requests.contains(&vec![0, 3]));
        assert_eq!(requests.len(), 3);
    }
}
