//! Typed reads of the projection tables: what the projector reloads, what recovery starts
//! from, the lists operators ask for, and the rows tests check.
//!
//! This module holds the query helpers every read goes through and the reads of a session's
//! own row; the others are grouped by what they serve:
//!
//! - `index`: where a session's events sit in the log, and ranges of its index;
//! - `resume`: where the projector and recovery start from (progress, dead-letter marks,
//!   verified checkpoints and the offsets after them);
//! - `context`: the stored context window and its turns;
//! - `listings`: the lists operators ask for and the rows tests check (forks, waiting
//!   sessions, rejections, checkpoints);
//! - `spans`: trace spans, by session and by tenant and day;
//! - `usage`: usage rollups.

mod context;
mod index;
mod listings;
mod resume;
mod spans;
mod usage;

pub use context::ContextViewRow;
pub use index::{INDEX_PAGE_ROWS, IndexRow};
pub use listings::{AwaitingSession, CheckpointRow, RejectedRow};
pub use resume::VerifiedCheckpoint;
pub use spans::{DaySpanRow, MAX_SPAN_DAYS, SpanListing, SpanPartition, SpanRow, SpanSearch};

use crate::stored::{StoredSession, read_state};
use crate::{Error, ProjectionStore, Result};
use futures::TryStreamExt;
use scylla::deserialize::row::DeserializeRow;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
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
}
