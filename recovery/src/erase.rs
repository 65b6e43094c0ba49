//! Erasing a session: the `SessionErased` event, the data key destroyed, a receipt.
//!
//! Nothing of the log is rewritten: the event marks the session erased for every reader (the
//! fold stops accepting its events, and the projector drops its texts, turns and stored
//! checkpoint states when it applies the event), and destroying the data key makes every
//! sealed copy of its texts unreadable wherever it sits: the topic, the dead letters, the
//! projections, backups. The receipt says what was destroyed, when and for whom.
//!
//! Each session has its own key, so erasing a parent makes the prefix its forks inherit read
//! as erased (their own events stay readable), and erasing a fork leaves its parent untouched.

use crate::{Error, Recovery, Result};
use serde::Serialize;
use sessionlog_keys::{DataKeyStore, ErasureReceipt};
use sessionlog_producer::SessionWriter;
use sessionlog_schemas::{SessionEvent, SessionId, now_micros};
use std::sync::Arc;

/// Where an erasure stands, for `sessionlog erase --status` and `GET .../erasure`.
#[derive(Clone, Debug, Serialize)]
pub struct ErasureStatus {
    /// The session.
    pub session_id: SessionId,
    /// Whether the log marks it erased (its `SessionErased` event was accepted).
    pub erased_in_log: bool,
    /// The session's status in the projection (`erased` once the projector applied the event:
    /// its texts, context turns and stored checkpoint states are gone from the tables).
    pub projected_status: Option<String>,
    /// The data key: `destroyed`, `live` (not erased, or the erasure did not finish: erase
    /// again), or `absent` (written without encryption, or never started).
    pub data_key: &'static str,
    /// The receipt, once the key was destroyed.
    pub receipt: Option<ErasureReceipt>,
}

impl Recovery {
    /// Erases `session` for `requested_by`: appends `SessionErased` (unless the log already
    /// has it), destroys the data key and records the receipt. Erasing again finishes an
    /// erasure that stopped half-way and answers the same receipt.
    #[tracing::instrument(skip(self, reason), fields(%session))]
    pub async fn erase(
        &self,
        session: SessionId,
        requested_by: &str,
        reason: &str,
    ) -> Result<ErasureReceipt> {
        // Checked here, not at one door: HTTP, the CLI and the console all call this.
        if reason.trim().is_empty() {
            return Err(Error::ReasonRequired {
                action: "an erasure",
                hint: "which request or policy asked for it",
            });
        }
        if let Some(receipt) = self.key_table().receipt(session).await? {
            return Ok(receipt);
        }
        let mut erased_at = None;
        let rebuilt = self
            .rebuild_with(session, None, |e, _| {
                if e.accepted && matches!(e.envelope.event, SessionEvent::SessionErased { .. }) {
                    erased_at = Some((e.envelope.seq, e.offset, e.envelope.event.clone()));
                }
            })
            .await?;
        if !rebuilt.state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        let (erased_seq, log_offset, requested_by, reason) = match erased_at {
            Some((
                seq,
                offset,
                SessionEvent::SessionErased {
                    requested_by,
                    reason,
                },
            )) => (seq, offset, requested_by, reason),
            _ => {
                // The claim fences the harness: nothing it writes afterwards is accepted.
                let (mut writer, _) = SessionWriter::claim_from(
                    Arc::clone(self.log()),
                    rebuilt.state,
                    rebuilt.partition,
                    rebuilt.end_offset,
                    &format!("eraser:{requested_by}"),
                )
                .await?;
                // Confirmed: the receipt names an erasure the fold accepted.
                let appended = writer
                    .append_with_confirmed(
                        SessionEvent::SessionErased {
                            requested_by: requested_by.to_string(),
                            reason: reason.to_string(),
                        },
                        None,
                        None,
                    )
                    .await?;
                (
                    appended.envelope.seq,
                    appended.position.offset,
                    requested_by.to_string(),
                    reason.to_string(),
                )
            }
        };
        let receipt = ErasureReceipt {
            session_id: session,
            requested_by,
            reason,
            erased_at: now_micros(),
            erased_seq,
            log_partition: rebuilt.partition,
            log_offset,
            destroyed_kek_id: self.key_table().wrapping_kek_id(session).await?,
        };
        match self.log().keyring() {
            // Through the keyring, so this process stops opening the session at once.
            Some(keyring) => keyring.destroy(receipt.clone()).await?,
            None => self.key_table().destroy(receipt.clone()).await?,
        }
        metrics::counter!(crate::observe::ERASURES).increment(1);
        // The receipt is the record (and the HTTP route writes its audit line): a log line at
        // info would only repeat it, next to what `sessionlog erase` prints.
        tracing::debug!(seq = erased_seq, "session erased: data key destroyed");
        Ok(receipt)
    }

    /// Where the erasure of `session` stands.
    pub async fn erasure_status(&self, session: SessionId) -> Result<ErasureStatus> {
        let rebuilt = self.rebuild(session).await?;
        if !rebuilt.state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        let data_key = match self.key_table().get(session).await? {
            Some(sessionlog_keys::StoredKey::Live(_)) => "live",
            Some(sessionlog_keys::StoredKey::Destroyed { .. }) => "destroyed",
            None => "absent",
        };
        // A destroyed key is not opened again by this process, whatever it cached.
        if let (Some(keyring), "destroyed") = (self.log().keyring(), data_key) {
            keyring.forget(session);
        }
        Ok(ErasureStatus {
            session_id: session,
            erased_in_log: rebuilt.state.erased,
            projected_status: self.store().session_status(session).await?,
            data_key,
            receipt: self.key_table().receipt(session).await?,
        })
    }
}
