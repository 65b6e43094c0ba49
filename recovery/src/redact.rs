//! Redacting one field of a session: its own key destroyed, a signed `PayloadRedacted`
//! appended, a receipt.
//!
//! Unlike an erasure, the session lives on: every other text still opens, and it resumes and
//! forks. The field's own key is destroyed first (one conditional write of the key store), so
//! every sealed copy of that field (topic, dead letters, projections, checkpoints, backups)
//! is unreadable, then the event records the redaction for every reader: the fold runs on
//! ciphertext, so no digest changes and checkpoints stay verified. Redacting again answers
//! the same receipt (and finishes a redaction whose event was not written).

use crate::{Error, Recovery, Result};
use serde::Serialize;
use sessionlog_keys::sensitive_fields;
use sessionlog_log::retry::{self, Retryable};
use sessionlog_schemas::{
    Content, Micros, SEALED_FIELDS, Seq, SessionEvent, SessionId, now_micros,
};

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
        // Checked here, not at one door: HTTP, the CLI and the console all call this.
        if reason.trim().is_empty() {
            return Err(not_redactable(
                "a redaction needs a reason (what was removed and under which policy)".into(),
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
        // The event and its field, and an earlier redaction of it (where it sits).
        let mut target: Option<Option<Content>> = None;
        let mut earlier = None;
        let rebuilt = self
            .rebuild_with(session, Some(seq.saturating_sub(1)), |e, _| {
                if !e.accepted {
                    return;
                }
                if e.envelope.seq == seq {
                    let mut event = e.envelope.event.clone();
                    let mut found = None;
                    sensitive_fields(&mut event, |f, content| {
                        if f == field {
                            found = Some(content.clone());
                        }
                    });
                    target = Some(found);
                }
                if let SessionEvent::PayloadRedacted {
                    redacted_seq,
                    field: redacted,
                    ..
                } = &e.envelope.event
                    && (*redacted_seq, redacted.as_str()) == (seq, field)
                {
                    earlier = Some((e.envelope.clone(), e.offset));
                }
            })
            .await?;
        if !rebuilt.state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        if rebuilt.state.erased {
            return Err(not_redactable(
                "the session is erased: every text of it is gone already".into(),
            ));
        }
        let content = match target {
            None => {
                return Err(not_redactable(
                    "no such event in this session (a fork's inherited events are redacted in \
                     the parent, whose key they share)"
                        .into(),
                ));
            }
            Some(None) => {
                return Err(not_redactable(format!("that event has no {field} field")));
            }
            Some(Some(content)) => content,
        };
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
        if let Some((envelope, offset)) = earlier
            && let SessionEvent::PayloadRedacted {
                redacted_by,
                reason,
                redacted_at,
                key_id,
                key_destroyed,
                ..
            } = envelope.event
        {
            return Ok(RedactionReceipt {
                session_id: session,
                seq,
                field: field.to_string(),
                requested_by: redacted_by,
                reason,
                redacted_at,
                redaction_seq: envelope.seq,
                log_partition: rebuilt.partition,
                log_offset: offset,
                key_id,
                kek_id,
                key_destroyed,
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
        let appended = (|| {
            self.claim_and_append(session, &writer, |state| {
                if state.redaction(seq, field).is_some() {
                    return Err(Error::NothingToDo {
                        session: session.to_string(),
                        reason: "has that field redacted already (redact again for its receipt)",
                    });
                }
                Ok((event.clone(), None, None))
            })
        })
        .retry(retry::tries(RACE_TRIES))
        .when(crate::operator::lost_a_race)
        .await?;
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
}
