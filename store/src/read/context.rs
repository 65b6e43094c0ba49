//! The stored context window of a session: its `context_view` row and `context_turns`.

use crate::stored::{read_left_out, read_older};
use crate::{Error, ProjectionStore, Result};
use serde::Serialize;
use sessionlog_schemas::SessionId;
use sessionlog_session::context::{ContextWindow, Turn};
use std::collections::VecDeque;

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
