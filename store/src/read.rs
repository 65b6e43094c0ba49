//! Typed reads of the projection tables: what the projector reloads, what recovery starts
//! from, the lists operators ask for, and the rows tests check.

use crate::rows::Wait;
use crate::stored::{StoredSession, read_left_out, read_older, read_state};
use crate::{Error, ProjectionStore, Result};
use futures::{StreamExt, TryStreamExt};
use scylla::deserialize::row::DeserializeRow;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use serde::Serialize;
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
use sessionlog_session::context::{ContextWindow, Turn};
use sessionlog_session::usage::{Dimension, UsageKey, UsageTotals};
use std::collections::{BTreeMap, VecDeque};
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
    /// The seq of the last model call accepted: the parent of the next tool call's span.
    pub last_model_call: Option<u64>,
}

/// A checkpoint the projector verified, with the state it stored at that point.
#[derive(Clone, Debug)]
pub struct VerifiedCheckpoint {
    /// The checkpoint's seq.
    pub seq: u64,
    /// Its offset in the session's partition.
    pub offset: i64,
    /// The session's state including the checkpoint.
    pub state: SessionState,
    /// The session's context window including the checkpoint, if the projector stored one
    /// (from migration 8 on).
    pub context: Option<ContextWindow>,
}

/// A session waiting for someone, as `sessions_awaiting` lists it, with its status and last
/// seq from its `sessions` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AwaitingSession {
    /// The session.
    pub session_id: SessionId,
    /// Whom it waits for.
    pub waiting_for: Wait,
    /// The seq of the event that made it wait.
    pub since_seq: i64,
    /// When that event happened (microseconds since the Unix epoch).
    pub since_us: i64,
    /// Its projected status (`awaiting_approval`, `needs_resolution`).
    pub status: String,
    /// Its projected last seq.
    pub last_seq: i64,
}

/// A `rejected_events` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct RejectedRow {
    /// The record's partition.
    pub log_partition: i32,
    /// The record's offset.
    pub log_offset: i64,
    /// The seq it claimed.
    pub seq: i64,
    /// The epoch it claimed.
    pub epoch: i64,
    /// Its event id.
    pub event_id: Uuid,
    /// Its kind.
    pub kind: String,
    /// The rejection's label (`zombie`, `gap`, ...).
    pub label: String,
    /// Why, in words.
    pub reason: String,
}

/// A `checkpoints` row, without the stored state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct CheckpointRow {
    /// The checkpoint's seq.
    pub seq: i64,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset.
    pub log_offset: i64,
    /// The digest its writer declared.
    pub declared_digest: String,
    /// The digest the projector computed.
    pub computed_digest: String,
    /// Whether the two agree.
    pub verified: bool,
}

/// A `trace_spans_by_session` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct SpanRow {
    /// The seq that opened the span.
    pub span_seq: i64,
    /// `session`, `model_call`, `tool_call`, `steering` or `approval`.
    pub span_kind: String,
    /// The agent (session), model, tool, `steering`, or the approval's id.
    pub name: String,
    /// When it began.
    pub start_us: i64,
    /// The seq that closed it.
    pub end_seq: Option<i64>,
    /// When it ended.
    pub end_us: Option<i64>,
    /// How long it took.
    pub duration_us: Option<i64>,
    /// Prompt tokens.
    pub tokens_in: Option<i64>,
    /// Completion tokens.
    pub tokens_out: Option<i64>,
    /// Cost in millionths of a US dollar.
    pub cost_micros: Option<i64>,
    /// `running`, `ok`, `pending`, `succeeded`, `failed`, ...
    pub outcome: String,
    /// The span it hangs off (none for the session's own span, and for spans projected
    /// before migration 9).
    pub parent_seq: Option<i64>,
    /// The session's log partition.
    pub log_partition: Option<i32>,
    /// The log offset of the event that opened it.
    pub open_offset: Option<i64>,
    /// The log offset of the event that closed it.
    pub close_offset: Option<i64>,
}

/// A `trace_spans_by_tenant_day` row: a span of any session, found by its tenant and when it
/// began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct DaySpanRow {
    /// When it began.
    pub start_us: i64,
    /// The session.
    pub session_id: Uuid,
    /// The seq that opened it.
    pub span_seq: i64,
    /// `session`, `model_call`, `tool_call`, `steering` or `approval`.
    pub span_kind: String,
    /// The agent (session), model, tool, `steering`, or the approval's id.
    pub name: String,
    /// The session's agent.
    pub agent: Option<String>,
    /// The seq that closed it.
    pub end_seq: Option<i64>,
    /// When it ended.
    pub end_us: Option<i64>,
    /// How long it took.
    pub duration_us: Option<i64>,
    /// Prompt tokens.
    pub tokens_in: Option<i64>,
    /// Completion tokens.
    pub tokens_out: Option<i64>,
    /// Cost in millionths of a US dollar.
    pub cost_micros: Option<i64>,
    /// `running`, `ok`, `pending`, `succeeded`, `failed`, ...
    pub outcome: String,
    /// The span it hangs off.
    pub parent_seq: Option<i64>,
    /// The session's log partition.
    pub log_partition: Option<i32>,
    /// The log offset of the event that opened it.
    pub open_offset: Option<i64>,
    /// The log offset of the event that closed it.
    pub close_offset: Option<i64>,
    /// The session's tenant (`default` for sessions without one). Always present since
    /// migration 14, where it is part of the partition key; optional as the answer's schema
    /// has always had it.
    pub tenant: Option<String>,
}

/// A time-ordered read of spans ([`ProjectionStore::spans_between`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanSearch {
    /// Spans that began at or after this, µs since the Unix epoch.
    pub from_us: i64,
    /// And before this.
    pub to_us: i64,
    /// Only spans after this one in read order (the previous page's last
    /// [`DaySpanRow::order_key`]).
    pub after: Option<(i64, Uuid, i64)>,
    /// At most this many.
    pub limit: usize,
    /// Only this tenant's spans, read from its own partitions alone; `None`: every tenant's
    /// (an operator's listing, which reads every tenant's partitions of each day).
    pub tenant: Option<String>,
}

/// One `trace_spans_by_tenant_day` partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpanPartition {
    /// The tenant.
    pub tenant: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// The bucket of the day (by session id).
    pub bucket: i32,
}

/// The spans a read by time found ([`ProjectionStore::spans_between`]), and what it read to
/// find them: which partitions it queried and how many rows it took from them, so what a
/// listing costs can be checked (a tenant's must not grow with other tenants' spans).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanListing {
    /// The spans, by [`DaySpanRow::order_key`].
    pub spans: Vec<DaySpanRow>,
    /// Every span partition queried, in the order the day indexes listed them.
    pub partitions: Vec<SpanPartition>,
    /// Span rows taken from those partitions, kept or filtered out. The driver fetches a page
    /// at a time, so a partition read that stopped early may have fetched up to a page more.
    pub rows_read: u64,
}

/// Span partitions one read by time queries at once: an operator's listing of a day queries
/// every tenant's, which can be many.
const SPAN_PARTITION_READS: usize = 16;

/// What a read of one span partition is called in errors.
const SPANS_BY_DAY: &str = "read trace spans by day";

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

/// The most days one read of spans by time may touch ([`ProjectionStore::spans_between`]).
pub const MAX_SPAN_DAYS: i64 = 31;

impl DaySpanRow {
    /// The order spans are read back in: by start, then session and seq (the table's own
    /// clustering order within a bucket).
    pub fn order_key(&self) -> (i64, Uuid, i64) {
        (self.start_us, self.session_id, self.span_seq)
    }
}

/// An `event_index` row: where one accepted event of a session sits in the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexRow {
    /// The event's seq.
    pub seq: u64,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset.
    pub log_offset: i64,
    /// Its kind (`SessionEvent::kind`).
    pub kind: String,
    /// Its event id.
    pub event_id: Uuid,
    /// The epoch of the writer that appended it.
    pub epoch: u64,
    /// When it happened (microseconds since the Unix epoch).
    pub occurred_at_us: i64,
}

/// The most rows one query of [`ProjectionStore::index_range`] asks for: a page of the index
/// never grows with the range or the session, whatever the caller's limit.
pub const INDEX_PAGE_ROWS: usize = 1000;

/// The smallest page [`ProjectionStore::index_range`] reads when a kinds filter may drop rows:
/// a page the size of a small limit would take a round trip per few rows of a sparse kind.
const FILTERED_PAGE_ROWS: usize = 100;

/// A `context_view` row as stored: the JSON columns as their text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct ContextViewRow {
    /// The offset of the last record folded into the view.
    pub applied_offset: i64,
    /// The session's last seq.
    pub last_seq: i64,
    /// The first turn of the window.
    pub first_turn_seq: Option<i64>,
    /// References to older turns, as JSON: objects, or `[first, last, turns(, summary)]`
    /// arrays as this release stores them.
    pub older_ranges: String,
    /// What the view left out, as JSON (this release leaves out zero counts).
    pub left_out: String,
    /// The summaries kept, as JSON (none before migration 8).
    pub summaries: Option<String>,
    /// The policy the view is built with, as JSON (none before migration 8).
    pub policy: Option<String>,
}

impl ProjectionStore {
    /// Runs a prepared query and decodes all its rows; `action` names it in errors.
    pub(crate) async fn select<R>(
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
            .map_err(Error::cql(action))?
            .into_rows_result()
            .map_err(Error::cql(action))?;
        result
            .rows::<R>()
            .map_err(Error::cql(action))?
            .map(|row| row.map_err(Error::cql(action)))
            .collect()
    }

    /// The projected row of a session, if the projector has seen it, with the state's window
    /// of recently accepted events (what a fold continued from it needs to tell duplicates).
    pub async fn load_session(&self, session: SessionId) -> Result<Option<ProjectedSession>> {
        let Some(mut projected) = self.session_row(session).await? else {
            return Ok(None);
        };
        let recent = self
            .accepted_through(&projected.state, projected.applied_offset)
            .await?;
        projected.state.remember_recent(recent);
        Ok(Some(projected))
    }

    /// The projected state of a session, if the projector has seen it, without the window of
    /// recent events [`Self::load_session`] reads besides (two more queries): for a reader
    /// that looks at the state (its status, parent, erasure) and folds nothing onto it.
    pub async fn session_state(&self, session: SessionId) -> Result<Option<SessionState>> {
        Ok(self.session_row(session).await?.map(|row| row.state))
    }

    async fn session_row(&self, session: SessionId) -> Result<Option<ProjectedSession>> {
        let rows: Vec<StoredSession> = self
            .select(&self.reads.load_session, (session.0,), "load session")
            .await?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let state = read_state(session, &row).map_err(|e| Error::CorruptRow {
            session: session.to_string(),
            message: e.to_string(),
        })?;
        Ok(Some(ProjectedSession {
            state,
            partition: row.log_partition.unwrap_or_default(),
            applied_offset: row.applied_offset.unwrap_or(-1),
            last_model_call: row.last_model_seq.and_then(|seq| u64::try_from(seq).ok()),
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
                &self.reads.recent_index,
                (session, state.last_seq as i64),
                "load duplicate window",
            ),
            self.select::<Row>(&self.reads.claims, (session,), "load duplicate window"),
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

    /// Runs a prepared query a page at a time and decodes every row; `action` names it in
    /// errors.
    async fn select_paged<R>(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        action: &'static str,
    ) -> Result<Vec<R>>
    where
        R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata> + 'static,
    {
        self.session
            .execute_iter(statement.clone(), values)
            .await
            .map_err(Error::cql(action))?
            .rows_stream::<R>()
            .map_err(Error::cql(action))?
            .map_err(Error::cql(action))
            .try_collect()
            .await
    }

    /// Runs an unprepared query (reads rarely made: tests, operators) a page at a time.
    async fn query_paged<R>(
        &self,
        cql: String,
        values: impl SerializeRow,
        action: &'static str,
    ) -> Result<Vec<R>>
    where
        R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata> + 'static,
    {
        self.query_rows(cql, values, action)
            .await?
            .try_collect()
            .await
    }

    /// The rows of an unprepared query as they arrive, page by page.
    async fn query_rows<R>(
        &self,
        cql: String,
        values: impl SerializeRow,
        action: &'static str,
    ) -> Result<impl futures::Stream<Item = Result<R>>>
    where
        R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata> + 'static,
    {
        Ok(self
            .session
            .query_iter(cql, values)
            .await
            .map_err(Error::cql(action))?
            .rows_stream::<R>()
            .map_err(Error::cql(action))?
            .map_err(Error::cql(action)))
    }

    /// The `(partition, offset)` of a session's event at `seq`, from the index.
    pub async fn locate(&self, session: SessionId, seq: u64) -> Result<Option<(i32, i64)>> {
        let rows: Vec<(i32, i64)> = self
            .select(
                &self.reads.locate,
                (session.0, crate::rows::to_i64(seq)),
                "locate event",
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// The index rows of `session` with `from_seq <= seq <= to_seq` and, when `kinds` is not
    /// empty, a kind among `kinds`: at most `limit` of them, by seq.
    ///
    /// Reads pages of at most [`INDEX_PAGE_ROWS`] rows, each with a CQL `LIMIT`, until `limit`
    /// rows match or the range ends: without a filter that is `limit` rows; with one, the
    /// pages go on past the rows of other kinds, a bounded page at a time, never one
    /// unbounded read of the rest of the range.
    pub async fn index_range(
        &self,
        session: SessionId,
        from_seq: u64,
        to_seq: u64,
        kinds: &[String],
        limit: usize,
    ) -> Result<Vec<IndexRow>> {
        type Row = (
            i64,
            i32,
            i64,
            Option<String>,
            Option<Uuid>,
            Option<i64>,
            Option<i64>,
        );
        let action = "read event index range";
        let mut found = Vec::new();
        if limit == 0 || from_seq > to_seq {
            return Ok(found);
        }
        let (mut next, last) = (crate::rows::to_i64(from_seq), crate::rows::to_i64(to_seq));
        let page = if kinds.is_empty() {
            limit
        } else {
            limit.max(FILTERED_PAGE_ROWS)
        }
        .min(INDEX_PAGE_ROWS);
        // `page` is at most INDEX_PAGE_ROWS, so it fits CQL's int.
        let page_limit = i32::try_from(page).unwrap_or(i32::MAX);
        loop {
            let rows: Vec<Row> = self
                .select(
                    &self.reads.index_range,
                    (session.0, next, last, page_limit),
                    action,
                )
                .await?;
            let full = rows.len() == page;
            let mut last_read = None;
            for (seq, log_partition, log_offset, kind, event_id, epoch, occurred_at_us) in rows {
                last_read = Some(seq);
                let kind = kind.unwrap_or_default();
                if !kinds.is_empty() && !kinds.contains(&kind) {
                    continue;
                }
                found.push(IndexRow {
                    seq: u64::try_from(seq).unwrap_or_default(),
                    log_partition,
                    log_offset,
                    kind,
                    event_id: event_id.unwrap_or_default(),
                    epoch: epoch
                        .and_then(|e| u64::try_from(e).ok())
                        .unwrap_or_default(),
                    occurred_at_us: occurred_at_us.unwrap_or_default(),
                });
                if found.len() == limit {
                    return Ok(found);
                }
            }
            // A short page is the end of the range; so is a full one that reached its last seq.
            match last_read {
                Some(seq) if full && seq < last => next = seq + 1,
                _ => return Ok(found),
            }
        }
    }

    /// The stored context window of a session, if any.
    pub async fn load_context(&self, session: SessionId) -> Result<Option<ContextWindow>> {
        type Row = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = self
            .select(&self.reads.load_context, (session.0,), "load context")
            .await?;
        let Some((offset, last_seq, first_turn, older, left_out, summaries, policy)) =
            rows.into_iter().next()
        else {
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
        // A view written before migration 8 has neither: the defaults it was built with.
        Ok(Some(ContextWindow {
            applied_offset: offset.unwrap_or(-1),
            // Lenient, unlike the settings: a policy a newer release wrote (a field this one
            // does not know, after a rollback) must not stall the partition as a corrupt row.
            policy: policy
                .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
                .map(lenient_policy)
                .unwrap_or_default(),
            summaries: serde_json::from_str(&parse(summaries, "[]")).map_err(corrupt)?,
            recent,
            older: read_older(&parse(older, "[]")).map_err(corrupt)?,
            left_out: read_left_out(&parse(left_out, "{}")).map_err(corrupt)?,
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
            Option<String>,
        );
        let rows: Vec<Row> = self
            .select(
                &self.reads.load_turns,
                (session.0, first, last),
                "load context turns",
            )
            .await?;
        let mut turns = VecDeque::new();
        for (seq, role, name, call_seq, text, truncated, sealed, occurred_at, sealed_text) in rows {
            let sealed_text = sealed_text
                .map(|json| serde_json::from_str(&json))
                .transpose()
                .map_err(|e| Error::CorruptRow {
                    session: session.to_string(),
                    message: format!("context turn {seq}: sealed text: {e}"),
                })?;
            turns.push_back(Turn {
                seq: seq as u64,
                role,
                name,
                call_seq: call_seq.map(|s| s as u64),
                text,
                truncated: truncated.unwrap_or_default(),
                sealed: sealed.unwrap_or_default(),
                sealed_text,
                occurred_at: occurred_at.unwrap_or_default(),
            });
        }
        Ok(turns)
    }

    /// Where each partition's dead letters not yet covered by its progress may begin in the
    /// dead-letter topic, by partition of `topic` (partitions with no mark yet are absent).
    pub async fn load_dead_letter_marks(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        let rows: Vec<(i32, Option<i64>)> = self
            .select(
                &self.reads.load_dead_letter_marks,
                (topic,),
                "load dead-letter marks",
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(partition, mark)| mark.map(|m| (partition, m)))
            .collect())
    }

    /// The stored next offset to apply, by partition of `topic`.
    pub async fn load_progress(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        let rows: Vec<(i32, Option<i64>)> = self
            .select(
                &self.reads.load_progress,
                (topic,),
                "load partition progress",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(partition, next)| (partition, next.unwrap_or_default()))
            .collect())
    }

    /// The newest checkpoint of `session` whose declared digest the projector confirmed,
    /// optionally no later than `at_most_seq`.
    ///
    /// Two steps: the checkpoint rows without their states (small), then the one state needed.
    /// A stored state leaves out the fold's duplicate window; it is restored from the index, so
    /// the state is exactly the fold's up to the checkpoint and a writer resumed from it still
    /// recognises a retry of the events just before it.
    pub async fn latest_verified_checkpoint(
        &self,
        session: SessionId,
        at_most_seq: Option<u64>,
    ) -> Result<Option<VerifiedCheckpoint>> {
        let action = "read checkpoints";
        let limit = at_most_seq.map_or(i64::MAX, crate::rows::to_i64);
        let mut rows = self
            .session
            .execute_iter(self.reads.checkpoint_marks.clone(), (session.0, limit))
            .await
            .map_err(Error::cql(action))?
            .rows_stream::<(i64, i64, Option<bool>)>()
            .map_err(Error::cql(action))?;
        // Clustering order is seq DESC: the first verified row is the latest.
        let mut latest = None;
        while let Some((seq, offset, verified)) =
            rows.try_next().await.map_err(Error::cql(action))?
        {
            if verified == Some(true) {
                latest = Some((seq, offset));
                break;
            }
        }
        let Some((seq, offset)) = latest else {
            return Ok(None);
        };
        let stored: Vec<(Option<String>, Option<String>)> = self
            .select(&self.reads.checkpoint_state, (session.0, seq), action)
            .await?;
        let Some((state_json, context_json)) = stored.into_iter().next() else {
            return Ok(None);
        };
        let state = state_json.and_then(|json| serde_json::from_str::<SessionState>(&json).ok());
        let Some(mut state) = state else {
            return Ok(None);
        };
        // A window that does not parse is only a lost shortcut: recovery folds it again.
        let context = context_json.and_then(|json| serde_json::from_str(&json).ok());
        state.remember_recent(self.accepted_through(&state, offset).await?);
        Ok(Some(VerifiedCheckpoint {
            seq: seq as u64,
            offset,
            state,
            context,
        }))
    }

    /// Offsets of `session`'s accepted events with `seq > after_seq` (the index) and of its
    /// accepted claims, restricted to `from..=until`: everything that changed its state there.
    pub async fn accepted_offsets(
        &self,
        session: SessionId,
        after_seq: u64,
        from: i64,
        until: i64,
    ) -> Result<Vec<i64>> {
        let action = "read event index";
        let after = (session.0, crate::rows::to_i64(after_seq));
        let (events, claims) = futures::try_join!(
            self.select_paged::<(i64,)>(&self.reads.index_offsets_after, after, action),
            self.select_paged::<(i64,)>(&self.reads.claim_offsets, (session.0,), action),
        )?;
        let mut offsets: Vec<i64> = events
            .into_iter()
            .chain(claims)
            .map(|(offset,)| offset)
            .filter(|o| (from..=until).contains(o))
            .collect();
        offsets.sort_unstable();
        Ok(offsets)
    }

    /// Where `session`'s first event sits (partition, offset), if the projector ever folded
    /// its start: kept for good, after the session's other rows expired.
    pub async fn session_start(&self, session: SessionId) -> Result<Option<(i32, i64)>> {
        let rows: Vec<(Option<i32>, Option<i64>)> = self
            .select(
                &self.reads.session_start,
                (session.0,),
                "read where a session started",
            )
            .await?;
        Ok(rows.into_iter().next().and_then(|row| match row {
            (Some(partition), Some(offset)) => Some((partition, offset)),
            _ => None,
        }))
    }

    /// The sessions forked from `parent`, with the parent seq each branched at, by child id.
    pub async fn children(&self, parent: SessionId) -> Result<Vec<(SessionId, u64)>> {
        let rows: Vec<(Uuid, Option<i64>)> = self
            .select_paged(&self.reads.children, (parent.0,), "list forks")
            .await?;
        let mut children: Vec<(SessionId, u64)> = rows
            .into_iter()
            .map(|(id, seq)| (SessionId(id), seq.unwrap_or_default().max(0) as u64))
            .collect();
        children.sort();
        Ok(children)
    }

    /// The projected status of a session (`running`, `erased`, ...), if the projector has seen it.
    pub async fn session_status(&self, session: SessionId) -> Result<Option<String>> {
        let rows: Vec<(Option<String>, Option<i64>)> = self
            .select(
                &self.reads.session_summary,
                (session.0,),
                "read session status",
            )
            .await?;
        Ok(rows.into_iter().next().and_then(|(status, _)| status))
    }

    /// The sessions waiting for `whom`, with their projected status and last seq, by id: those
    /// whose session row already says they wait (see the comment inside).
    pub async fn awaiting(&self, whom: Wait) -> Result<Vec<AwaitingSession>> {
        let action = "list waiting sessions";
        let rows: Vec<(Uuid, Option<i64>, Option<i64>)> = self
            .select_paged(&self.reads.awaiting, (whom.as_str(),), action)
            .await?;
        let summaries = rows.iter().map(|(id, _, _)| async move {
            let row: Vec<(Option<String>, Option<i64>)> = self
                .select(&self.reads.session_summary, (*id,), action)
                .await?;
            Ok::<_, Error>(row.into_iter().next())
        });
        let summaries = futures::future::try_join_all(summaries).await?;
        // The projector writes a batch's list rows before its session rows, the batch's commit
        // point, so a list row can run ahead of its session's row: list only the sessions whose
        // row already says they wait for `whom`.
        let mut waiting: Vec<AwaitingSession> = rows
            .into_iter()
            .zip(summaries)
            .filter_map(|((id, since_seq, since_us), summary)| {
                let (status, last_seq) = summary?;
                let status = status.filter(|status| status == whom.status().as_str())?;
                Some(AwaitingSession {
                    session_id: SessionId(id),
                    waiting_for: whom,
                    since_seq: since_seq.unwrap_or_default(),
                    since_us: since_us.unwrap_or_default(),
                    status,
                    last_seq: last_seq.unwrap_or_default(),
                })
            })
            .collect();
        waiting.sort_by_key(|w| w.session_id);
        Ok(waiting)
    }

    /// The events of `session` the fold rejected, by log position.
    pub async fn rejected_events(&self, session: SessionId) -> Result<Vec<RejectedRow>> {
        let ks = &self.keyspace;
        self.query_paged(
            format!(
                "SELECT log_partition, log_offset, seq, epoch, event_id, kind, label, reason
                 FROM {ks}.rejected_events WHERE session_id = ?"
            ),
            (session.0,),
            "read rejected events",
        )
        .await
    }

    /// The checkpoints of `session`, newest first, without their stored states.
    pub async fn checkpoints(&self, session: SessionId) -> Result<Vec<CheckpointRow>> {
        let ks = &self.keyspace;
        self.query_paged(
            format!(
                "SELECT seq, log_partition, log_offset, declared_digest, computed_digest, verified
                 FROM {ks}.checkpoints WHERE session_id = ?"
            ),
            (session.0,),
            "read checkpoints",
        )
        .await
    }

    /// The trace spans of `session`, by the seq that opened each.
    pub async fn spans(&self, session: SessionId) -> Result<Vec<SpanRow>> {
        let ks = &self.keyspace;
        self.query_paged(
            format!(
                "SELECT span_seq, span_kind, name, start_us, end_seq, end_us, duration_us,
                 tokens_in, tokens_out, cost_micros, outcome, parent_seq, log_partition,
                 open_offset, close_offset
                 FROM {ks}.trace_spans_by_session WHERE session_id = ?"
            ),
            (session.0,),
            "read trace spans",
        )
        .await
    }

    /// The first `search.limit` spans that began in `[from_us, to_us)`, come after
    /// `search.after` and that `keep` keeps, in start order (then session and seq), of
    /// `search.tenant`'s sessions (`None`: every tenant's), from `trace_spans_by_tenant_day`.
    /// Each day's partitions are those `trace_tenant_day_buckets` names: a tenant's slice of
    /// the day (so its listing reads its own partitions alone, whatever other tenants hold),
    /// or the whole day for every tenant. They are read and merged; a partition is read only
    /// until it has given as many spans as the page still lacks, which is all the merge can
    /// take from it; `keep` filters as rows stream in, so a narrow filter reads more of a day
    /// than it answers.
    pub async fn spans_between(
        &self,
        search: &SpanSearch,
        keep: impl Fn(&DaySpanRow) -> bool + Sync,
    ) -> Result<SpanListing> {
        let SpanSearch {
            from_us,
            to_us,
            after,
            limit,
            ref tenant,
        } = *search;
        // Spans at the cursor's start time can still follow it (a later session or seq).
        let from_us = after.map_or(from_us, |(start, _, _)| start.max(from_us));
        let mut listing = SpanListing::default();
        if from_us >= to_us || limit == 0 {
            return Ok(listing);
        }
        const DAY_US: i64 = 86_400_000_000;
        // Each day is at least one read, so a range is bounded in days.
        let (first_day, last_day) = (from_us.div_euclid(DAY_US), (to_us - 1).div_euclid(DAY_US));
        let days = last_day - first_day + 1;
        if days > MAX_SPAN_DAYS {
            return Err(Error::SpanRangeTooWide {
                from_us,
                to_us,
                days,
                max: MAX_SPAN_DAYS,
            });
        }
        // The first day's start can lie before i64::MIN µs: start the loop at the range's own
        // start then (days only serve to name partitions).
        let mut day_start = first_day.checked_mul(DAY_US).unwrap_or(from_us);
        let keep = &keep;
        while day_start < to_us && listing.spans.len() < limit {
            let day = sessionlog_session::trace::day_of(day_start);
            let partitions = self.span_partitions(&day, tenant.as_deref()).await?;
            listing.partitions.extend(partitions.iter().cloned());
            // Earlier days' spans all come first: a partition need give no more than this.
            let wanted = limit - listing.spans.len();
            let reads = partitions.into_iter().map(|partition| async move {
                let SpanPartition {
                    tenant,
                    day,
                    bucket,
                } = partition;
                let values = (tenant, day, bucket, from_us, to_us);
                let rows = self
                    .session
                    .execute_iter(self.reads.partition_spans.clone(), values)
                    .await
                    .map_err(Error::cql(SPANS_BY_DAY))?
                    .rows_stream::<DaySpanRow>()
                    .map_err(Error::cql(SPANS_BY_DAY))?
                    .map_err(Error::cql(SPANS_BY_DAY));
                let mut rows = std::pin::pin!(rows);
                let (mut kept, mut read) = (Vec::new(), 0u64);
                while kept.len() < wanted {
                    let Some(row) = rows.try_next().await? else {
                        break;
                    };
                    read += 1;
                    if after.is_none_or(|after| row.order_key() > after) && keep(&row) {
                        kept.push(row);
                    }
                }
                Ok::<_, Error>((kept, read))
            });
            let mut reads = futures::stream::iter(reads).buffer_unordered(SPAN_PARTITION_READS);
            let mut day_rows: Vec<DaySpanRow> = Vec::new();
            while let Some((rows, read)) = reads.try_next().await? {
                listing.rows_read += read;
                day_rows.extend(rows);
                // Only the day's first `wanted` can be answered: with many partitions (every
                // tenant's), the rest are dropped as they come, not held until the day is read.
                if day_rows.len() >= wanted.saturating_mul(2) {
                    day_rows.sort_by_key(DaySpanRow::order_key);
                    day_rows.truncate(wanted);
                }
            }
            day_rows.sort_by_key(DaySpanRow::order_key);
            day_rows.truncate(wanted);
            listing.spans.extend(day_rows);
            day_start = day_start.saturating_add(DAY_US);
        }
        Ok(listing)
    }

    /// The span partitions of `day` that `trace_tenant_day_buckets` names: `tenant`'s (a
    /// slice of the day's index) or, for `None`, every tenant's.
    async fn span_partitions(&self, day: &str, tenant: Option<&str>) -> Result<Vec<SpanPartition>> {
        let action = "read trace day partitions";
        let rows: Vec<(String, i32)> = match tenant {
            Some(tenant) => {
                let statement = &self.reads.tenant_span_partitions;
                self.select_paged(statement, (day, tenant), action).await?
            }
            None => {
                let statement = &self.reads.day_span_partitions;
                self.select_paged(statement, (day,), action).await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(tenant, bucket)| SpanPartition {
                tenant,
                day: day.to_string(),
                bucket,
            })
            .collect())
    }

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

    /// Checks `wanted` (`[projector] trace_day_buckets`) against the count the keyspace's spans
    /// were written with, recording it if this is the first writer. A span's opening and
    /// closing writes must pick the same bucket, so a projector or replay with another count
    /// refuses to start ([`Error::TraceDayBucketsDiffer`] says what to do).
    pub async fn fix_trace_day_buckets(&self, wanted: u16) -> Result<()> {
        let ks = &self.keyspace;
        let stored = || async {
            let rows: Vec<(Option<String>,)> = self
                .query_paged(
                    format!(
                        "SELECT value FROM {ks}.projection_settings WHERE name = 'trace_day_buckets'"
                    ),
                    (),
                    "read projection settings",
                )
                .await?;
            Ok::<_, Error>(
                rows.into_iter()
                    .next()
                    .and_then(|(v,)| v?.parse::<u16>().ok()),
            )
        };
        let stored = match stored().await? {
            Some(stored) => stored,
            None => {
                // Without LWT (not portable) two first writers could race; the read back
                // below makes the loser refuse, as any later writer with another count would.
                self.session
                    .query_unpaged(
                        format!(
                            "INSERT INTO {ks}.projection_settings (name, value)
                             VALUES ('trace_day_buckets', ?)"
                        ),
                        (wanted.to_string(),),
                    )
                    .await
                    .map_err(Error::cql("write projection settings"))?;
                stored().await?.unwrap_or(wanted)
            }
        };
        if stored == wanted {
            Ok(())
        } else {
            Err(Error::TraceDayBucketsDiffer {
                keyspace: ks.clone(),
                stored,
                wanted,
            })
        }
    }

    /// The `context_view` row of `session` as stored, if any.
    pub async fn context_view_row(&self, session: SessionId) -> Result<Option<ContextViewRow>> {
        let ks = &self.keyspace;
        let rows: Vec<ContextViewRow> = self
            .query_paged(
                format!(
                    "SELECT applied_offset, last_seq, first_turn_seq,
                     older_ranges, left_out, summaries, policy FROM {ks}.context_view
                     WHERE session_id = ?"
                ),
                (session.0,),
                "read context view",
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Every stored `context_turns` row of `session`, window or not, by seq.
    pub async fn context_turns(&self, session: SessionId) -> Result<VecDeque<Turn>> {
        self.load_turns(session, i64::MIN, i64::MAX).await
    }
}

/// A stored policy, its known fields read and any other ignored (see `load_context`).
fn lenient_policy(stored: serde_json::Value) -> sessionlog_session::context::ContextPolicy {
    let mut policy = serde_json::to_value(sessionlog_session::context::ContextPolicy::default())
        .unwrap_or_default();
    if let (Some(known), Some(stored)) = (policy.as_object_mut(), stored.as_object()) {
        for (field, value) in known.iter_mut() {
            if let Some(v) = stored.get(field) {
                *value = v.clone();
            }
        }
    }
    serde_json::from_value(policy).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::lenient_policy;

    #[test]
    fn a_stored_policy_with_a_field_this_release_does_not_know_still_reads() {
        let stored = serde_json::json!({ "recent_turns": 3, "from_a_newer_release": true });
        let policy = lenient_policy(stored);
        assert_eq!(policy.recent_turns, 3);
        assert_eq!(
            policy.turn_text_chars,
            sessionlog_session::context::TURN_TEXT_CHARS
        );
    }
}
