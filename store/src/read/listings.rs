//! The lists operators ask for (a session's forks, sessions awaiting someone) and the rows
//! tests check (rejected events, checkpoints).

use crate::rows::Wait;
use crate::{Error, ProjectionStore, Result};
use serde::Serialize;
use sessionlog_schemas::SessionId;
use uuid::Uuid;

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

impl ProjectionStore {
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
}
