//! Redacting one field of a session: its own key destroyed, a signed `PayloadRedacted`
//! appended, a receipt; and the session's redactions listed, each as its receipt.
//!
//! Unlike an erasure, the session lives on: every other text still opens, and it resumes and
//! forks. The field's own key is destroyed first (one conditional write of the key store), so
//! every sealed copy of that field (topic, dead letters, projections, checkpoints, backups)
//! is unreadable, then the event records the redaction for every reader: the fold runs on
//! ciphertext, so no digest changes and checkpoints stay verified. Redacting again answers
//! the same receipt (and finishes a redaction whose event was not written).
//!
//! What a redaction costs does not grow with the session: one rebuild from its latest verified
//! checkpoint (which the claim that appends the event reuses), and the redacted event (and an
//! earlier redaction of it) read by seq where the projection indexes it.

use crate::rebuild::{LoggedEvent, RebuiltSession};
use crate::{Error, Recovery, Result};
use serde::Serialize;
use sessionlog_keys::sensitive_fields;
use sessionlog_log::retry::{self, Retryable};
use sessionlog_schemas::{
    Content, Micros, SEALED_FIELDS, Seq, SessionEvent, SessionId, now_micros,
};
use sessionlog_session::SessionState;

/// How many times a redaction starts again after losing a race for the session.
const RACE_TRIES: usize = 8;

/// What a redaction did: shown like an erasure's receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RedactionReceipt {
    /// The session.
    pub session_id: SessionId,
    /// The seq of the event whose field was redacted.
    pub seq: Seq,
    /// The field.
    pub field: String,
    /// The verified operator who redacted it.
    pub requested_by: String,
    /// Why (readable: it must not hold personal data).
    pub reason: String,
    /// When the field's key was destroyed (microseconds since the epoch).
    pub redacted_at: Micros,
    /// The seq of the `PayloadRedacted` event.
    pub redaction_seq: Seq,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset.
    pub log_offset: i64,
    /// Which key: the field's key id (`dk2g:{seq}:{field}` is its own key).
    pub key_id: String,
    /// The KEK that wraps the session's key (none: written without encryption).
    pub kek_id: Option<String>,
    /// Whether the field's own key was destroyed. `false`: sealed under the session's key
    /// before schema v8 (it reads as redacted; only erasing the session destroys its key), or
    /// written without encryption (its text stays in the topic until retention removes it).
    pub key_destroyed: bool,
}

impl RedactionReceipt {
    /// The receipt a logged `PayloadRedacted` event records (`None`: another kind of event).
    fn of(event: &LoggedEvent, partition: i32, kek_id: Option<String>) -> Option<Self> {
        let SessionEvent::PayloadRedacted {
            redacted_seq,
            field,
            redacted_by,
            reason,
            redacted_at,
            key_id,
            key_destroyed,
        } = &event.envelope.event
        else {
            return None;
        };
        Some(Self {
            session_id: event.envelope.session_id,
            seq: *redacted_seq,
            field: field.clone(),
            requested_by: redacted_by.clone(),
            reason: reason.clone(),
            redacted_at: *redacted_at,
            redaction_seq: event.envelope.seq,
            log_partition: partition,
            log_offset: event.offset,
            key_id: key_id.clone(),
            kek_id,
            key_destroyed: *key_destroyed,
        })
    }
}

impl Recovery {
    /// Redacts field `field` of event `seq` of `session` for `requested_by` (a verified
    /// operator): destroys the field's own key, then appends `PayloadRedacted`, signed and
    /// confirmed, as an operator's act (the harness writing is fenced and resumes).
    #[tracing::instrument(skip(self, reason), fields(%session))]
    pub async fn redact(
        &self,
        session: SessionId,
        seq: Seq,
        field: &str,
        requested_by: &str,
        reason: &str,
    ) -> Result<RedactionReceipt> {
        let not_redactable = |why: String| Error::NotRedactable {
            session: session.to_string(),
            seq,
            field: field.to_string(),
            reason: why,
        };
        // Checked here, not at one door: HTTP, the CLI and the console all call this (and the
        // fold refuses a blank reason from any other writer).
        if reason.trim().is_empty() {
            return Err(not_redactable(
                "a redaction needs a reason (what was removed and under which policy)".into(),
            ));
        }
        // The fold refuses a redaction that names no operator; refused here first, before
        // any key is destroyed, or the act would be half done.
        if requested_by.trim().is_empty() {
            return Err(not_redactable(
                "a redaction needs who asked for it (--by, or the caller's identity)".into(),
            ));
        }
        if !SEALED_FIELDS.contains(&field) {
            return Err(not_redactable(format!(
                "not a field that can be redacted (one of {})",
                SEALED_FIELDS.join(", ")
            )));
        }
        // Without a key nothing could be signed: fail before anything is destroyed.
        self.notary().signing_key()?;
        let rebuilt = self.rebuild(session).await?;
        if !rebuilt.state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        if rebuilt.state.erased {
            return Err(not_redactable(
                "the session is erased: every text of it is gone already".into(),
            ));
        }
        let no_such_event = || {
            not_redactable(
                "no such event in this session (a fork's inherited events are redacted in the \
                 parent, whose key they share)"
                    .into(),
            )
        };
        if seq == 0 || seq >= rebuilt.state.next_seq() {
            return Err(no_such_event());
        }
        let target = self
            .logged_event(session, seq)
            .await?
            .ok_or_else(no_such_event)?;
        let mut event = target.envelope.event;
        let mut content = None;
        sensitive_fields(&mut event, |f, c| {
            if f == field {
                content = Some(c.clone());
            }
        });
        let content =
            content.ok_or_else(|| not_redactable(format!("that event has no {field} field")))?;
        let key_id = match &content {
            Content::Sealed { key_id, .. } => key_id.clone(),
            Content::Plain(_) => String::new(),
        };
        let destroyed = match (self.log().keyring(), key_id.is_empty()) {
            (Some(keyring), false) => {
                keyring
                    .redact(
                        session,
                        seq,
                        field,
                        sessionlog_keys::sealed_per_record(&key_id),
                        reason,
                    )
                    .await?
            }
            _ => None,
        };
        let key_destroyed = destroyed.as_ref().is_some_and(|d| d.key_destroyed);
        let kek_id = destroyed.map(|d| d.kek_id);
        // Redacted already: the receipt its event records.
        if let Some(earlier) = rebuilt.state.redaction(seq, field) {
            let recorded = self.logged_event(session, earlier.redaction_seq).await?;
            return recorded
                .and_then(|e| RedactionReceipt::of(&e, rebuilt.partition, kek_id))
                .ok_or_else(|| {
                    not_redactable(format!(
                        "its redaction (seq {}) could not be read back",
                        earlier.redaction_seq
                    ))
                });
        }
        let redacted_at = now_micros();
        let writer = format!("operator:{requested_by}");
        let event = SessionEvent::PayloadRedacted {
            redacted_seq: seq,
            field: field.to_string(),
            redacted_by: requested_by.to_string(),
            reason: reason.to_string(),
            redacted_at,
            key_id: key_id.clone(),
            key_destroyed,
        };
        let judge = |state: &SessionState| {
            if state.redaction(seq, field).is_some() {
                return Err(Error::NothingToDo {
                    session: session.to_string(),
                    reason: "has that field redacted already (redact again for its receipt)",
                });
            }
            Ok((event.clone(), None, None))
        };
        // The session just rebuilt is claimed; only a lost race rebuilds it again.
        let appended = match self.claim_and_append_from(rebuilt, &writer, judge).await {
            Err(e) if crate::operator::lost_a_race(&e) => {
                (|| self.claim_and_append(session, &writer, judge))
                    .retry(retry::tries(RACE_TRIES))
                    .when(crate::operator::lost_a_race)
                    .await?
            }
            other => other?,
        };
        tracing::debug!(seq, field, "payload redacted: its key destroyed");
        Ok(RedactionReceipt {
            session_id: session,
            seq,
            field: field.to_string(),
            requested_by: requested_by.to_string(),
            reason: reason.to_string(),
            redacted_at,
            redaction_seq: appended.envelope.seq,
            log_partition: appended.position.partition,
            log_offset: appended.position.offset,
            key_id,
            kek_id,
            key_destroyed,
        })
    }

    /// Every redaction of `session`, oldest first, each as its receipt (what `sessionlog
    /// redact --status` and `GET /v1/sessions/{id}/redactions` show).
    pub async fn redactions(&self, session: SessionId) -> Result<Vec<RedactionReceipt>> {
        let rebuilt = self.rebuild(session).await?;
        if !rebuilt.state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        self.receipts(session, &rebuilt).await
    }

    /// The receipts of the redactions `rebuilt`'s state records, read back by seq.
    async fn receipts(
        &self,
        session: SessionId,
        rebuilt: &RebuiltSession,
    ) -> Result<Vec<RedactionReceipt>> {
        let mut seqs: Vec<Seq> = rebuilt
            .state
            .redactions()
            .filter_map(|(seq, field, _)| rebuilt.state.redaction(seq, &field))
            .map(|r| r.redaction_seq)
            .collect();
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        seqs.sort_unstable();
        let kek_id = match self.log().keyring() {
            Some(keyring) => keyring.wrapping_kek(session).await?,
            None => None,
        };
        let mut receipts = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let recorded = self.logged_event(session, seq).await?;
            receipts.extend(
                recorded.and_then(|e| RedactionReceipt::of(&e, rebuilt.partition, kek_id.clone())),
            );
        }
        Ok(receipts)
    }

    /// The accepted event `seq` of `session` as logged: read at the offset the projection
    /// indexes it at, or (not indexed yet: the projector is behind) from the session's log
    /// after the verified checkpoint before it.
    pub(crate) async fn logged_event(
        &self,
        session: SessionId,
        seq: Seq,
    ) -> Result<Option<LoggedEvent>> {
        if let Some((partition, offset)) = self.store().locate(session, seq).await?
            && let Some(envelope) = self
                .log()
                .read_at(partition, &[offset])
                .await?
                .remove(&offset)
            && envelope.session_id == session
            && envelope.seq == seq
        {
            return Ok(Some(LoggedEvent {
                offset,
                envelope,
                accepted: true,
            }));
        }
        let mut found = None;
        self.rebuild_with(session, Some(seq.saturating_sub(1)), |e, _| {
            if e.accepted && e.envelope.seq == seq {
                found = Some(e.clone());
            }
        })
        .await?;
        Ok(found)
    }
}
