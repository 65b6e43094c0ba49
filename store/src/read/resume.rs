//! Where the projector and recovery start from: each partition's progress and dead-letter
//! mark, a session's newest verified checkpoint, and the offsets of what changed its state
//! after one.

use crate::{Error, ProjectionStore, Result};
use futures::TryStreamExt;
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
use sessionlog_session::context::ContextWindow;
use std::collections::BTreeMap;

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

impl ProjectionStore {
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
}
