//! Redactions (schema v8): one sealed field of an earlier event made unreadable for good by
//! destroying its own key, recorded by a `PayloadRedacted` event. The fold only keeps the
//! record (which field, who, why); it runs on ciphertext, so no digest changes, and readers
//! that open texts learn from the record that a field reads as redacted, whatever key they hold.

use crate::state::SessionState;
use crate::{Rejection, Verdict};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{EventEnvelope, SEALED_FIELDS, Seq, SessionEvent};

/// What the state keeps of one redaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    /// Who redacted it.
    pub redacted_by: String,
    /// Why (readable: it must not hold personal data).
    pub reason: String,
    /// The seq of the `PayloadRedacted` event.
    pub redaction_seq: Seq,
}

impl SessionState {
    /// The redaction rules, whoever writes: a redaction is an operator's, signed by the
    /// recovery service; it says who and why; it names an earlier event of this session and
    /// one of the sealed fields; and a field is redacted once.
    pub(crate) fn judge_redaction(&self, e: &EventEnvelope) -> Verdict {
        let SessionEvent::PayloadRedacted {
            redacted_seq,
            field,
            redacted_by,
            reason,
            ..
        } = &e.event
        else {
            return Verdict::Accepted;
        };
        if !crate::attest::is_signed(e) {
            return Verdict::Rejected(Rejection::Unsigned {
                kind: "a redaction".into(),
            });
        }
        // Every reader shows the reason in the field's place: a redaction without one (or
        // without its operator) would read as empty text, whichever producer wrote it.
        if reason.trim().is_empty() {
            return invalid(
                "a redaction needs a reason (what was removed and under which policy)".into(),
            );
        }
        if redacted_by.trim().is_empty() {
            return invalid("a redaction names the operator who made it".into());
        }
        if *redacted_seq == 0 || *redacted_seq >= e.seq {
            return invalid(format!(
                "a redaction names an earlier event of its session: seq {redacted_seq} is not \
                 before {}",
                e.seq
            ));
        }
        if !SEALED_FIELDS.contains(&field.as_str()) {
            return invalid(format!(
                "{field:?} is not a field that can be redacted (one of {})",
                SEALED_FIELDS.join(", ")
            ));
        }
        if self.redaction(*redacted_seq, field).is_some() {
            return invalid(format!("{field} of seq {redacted_seq} is already redacted"));
        }
        Verdict::Accepted
    }

    /// The redaction of field `field` of event `seq`, if it was redacted.
    pub fn redaction(&self, seq: Seq, field: &str) -> Option<&Redaction> {
        self.redacted.get(&seq).and_then(|fields| fields.get(field))
    }

    /// Every redaction as (seq, field, reason): what an `Opener` is told
    /// (`sessionlog_keys::Opener::redacted`).
    pub fn redactions(&self) -> impl Iterator<Item = (Seq, String, String)> + '_ {
        self.redacted.iter().flat_map(|(seq, fields)| {
            fields
                .iter()
                .map(|(field, r)| (*seq, field.clone(), r.reason.clone()))
        })
    }

    /// Records an accepted redaction.
    pub(crate) fn accept_redaction(&mut self, e: &EventEnvelope) {
        if let SessionEvent::PayloadRedacted {
            redacted_seq,
            field,
            redacted_by,
            reason,
            ..
        } = &e.event
        {
            self.redacted.entry(*redacted_seq).or_default().insert(
                field.clone(),
                Redaction {
                    redacted_by: redacted_by.clone(),
                    reason: reason.clone(),
                    redaction_seq: e.seq,
                },
            );
        }
    }
}

fn invalid(why: String) -> Verdict {
    Verdict::Rejected(Rejection::Invalid(why))
}
