//! A session's data key and the sealed fields it protects.

use chacha20poly1305::aead::{Aead, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sessionlog_schemas::{Content, EventEnvelope, Seq, SessionEvent, SessionId};
use zeroize::Zeroizing;

/// Bytes of a data key and of a KEK (256-bit keys).
pub const KEY_BYTES: usize = 32;
/// The data-key version sealed fields name: one key per session today; a second version would
/// let a session change keys without losing what the first sealed.
pub const KEY_VERSION: u32 = 1;

/// What every sealed field's associated data starts with.
const SEAL_CONTEXT: &[u8] = b"sessionlog-sealed-v1\0";

/// The key that seals one session's sensitive fields. Wiped from memory when dropped.
pub struct DataKey(Zeroizing<[u8; KEY_BYTES]>);

impl DataKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        Self(Zeroizing::new(
            XChaCha20Poly1305::generate_key(&mut OsRng).into(),
        ))
    }

    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        let key: [u8; KEY_BYTES] = bytes.try_into().ok()?;
        Some(Self(Zeroizing::new(key)))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_slice()
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.0.as_slice().into())
    }

    /// Seals `text` as field `field` of event `seq` of `session`.
    pub fn seal(&self, session: SessionId, seq: Seq, field: &str, text: &str) -> Content {
        let key_id = sealed_key_id(seq, field);
        // From the thread's CSPRNG (ChaCha12, reseeded from the OS): a system call per nonce
        // was a third of sealing's cost, and 192 random bits never repeat under one key.
        let mut nonce = XNonce::default();
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
        let ciphertext = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: text.as_bytes(),
                    aad: &seal_aad(session, &key_id),
                },
            )
            // Only inputs beyond the AEAD's limit (256 GiB) fail; events are far smaller.
            .unwrap_or_default();
        Content::Sealed {
            key_id,
            nonce: nonce.to_vec(),
            ciphertext,
        }
    }

    /// Opens a sealed field of `session`; `None` if it does not authenticate (another key,
    /// another session, or tampered with).
    pub fn open(
        &self,
        session: SessionId,
        key_id: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Option<String> {
        if nonce.len() != 24 {
            return None;
        }
        let plain = self
            .cipher()
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &seal_aad(session, key_id),
                },
            )
            .ok()?;
        String::from_utf8(plain).ok()
    }
}

/// The `key_id` a sealed field carries: the data-key version, and the event seq and field it
/// was sealed as. It is part of the associated data, so a ciphertext moved to another session
/// does not open, and one moved to another event or field is caught by [`sealed_as`].
pub fn sealed_key_id(seq: Seq, field: &str) -> String {
    format!("dk{KEY_VERSION}:{seq}:{field}")
}

/// Whether a sealed field's `key_id` says it was sealed as field `field` of event `seq`.
pub fn sealed_as(key_id: &str, seq: Seq, field: &str) -> bool {
    key_id == sealed_key_id(seq, field)
}

fn seal_aad(session: SessionId, key_id: &str) -> Vec<u8> {
    let mut aad = SEAL_CONTEXT.to_vec();
    aad.extend_from_slice(session.0.as_bytes());
    aad.extend_from_slice(key_id.as_bytes());
    aad
}

/// Calls `visit` with every sensitive field of `event` and its name: the fields that are
/// sealed. Everything else (kinds, seqs, tool and model names, tokens, costs, timings, who did
/// what) stays plain: traces, billing and the fold need it.
pub fn sensitive_fields(
    event: &mut SessionEvent,
    mut visit: impl FnMut(&'static str, &mut Content),
) {
    use SessionEvent as E;
    // Exhaustive on purpose: a new kind must say whether it carries anything sensitive.
    match event {
        E::SessionStarted {
            title: Some(title), ..
        } => visit("title", title),
        E::UserRequest { content }
        | E::ModelResponse { content, .. }
        | E::SteeringMessage { content, .. } => visit("content", content),
        E::ToolCallRequested { arguments, .. } => visit("arguments", arguments),
        E::ToolCallResult { output, note, .. } => {
            visit("output", output);
            if let Some(note) = note {
                visit("note", note);
            }
        }
        E::PlanUpdated { plan } => visit("plan", plan),
        E::ApprovalRequested { action, .. } => visit("action", action),
        E::ApprovalDecided {
            reason: Some(reason),
            ..
        }
        | E::SessionPaused {
            reason: Some(reason),
        }
        | E::SessionEnded {
            reason: Some(reason),
            ..
        }
        | E::ResolutionRequired { reason, .. } => visit("reason", reason),
        // The erasure's reason is its readable record, written as the key is destroyed.
        E::SessionErased { .. }
        | E::SessionStarted { title: None, .. }
        | E::ApprovalDecided { reason: None, .. }
        | E::SessionPaused { reason: None }
        | E::SessionEnded { reason: None, .. }
        | E::Checkpoint { .. }
        | E::WriterClaimed { .. }
        | E::SessionForked { .. }
        | E::SessionResumed {} => {}
    }
}

/// Seals every plain sensitive field of `envelope` with `key`. Fields already sealed are left
/// as they are (a retried envelope the writer sealed before).
pub fn seal_envelope(key: &DataKey, envelope: &mut EventEnvelope) {
    let (session, seq) = (envelope.session_id, envelope.seq);
    sensitive_fields(&mut envelope.event, |field, content| {
        if let Content::Plain(text) = content {
            *content = key.seal(session, seq, field, text);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_field_opens_only_where_it_was_sealed() {
        let key = DataKey::generate();
        let session = SessionId::new();
        let Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } = key.seal(session, 7, "content", "canary")
        else {
            panic!("not sealed");
        };
        assert!(sealed_as(&key_id, 7, "content"));
        assert!(!sealed_as(&key_id, 8, "content"));
        assert_eq!(
            key.open(session, &key_id, &nonce, &ciphertext).as_deref(),
            Some("canary")
        );
        assert_eq!(
            key.open(SessionId::new(), &key_id, &nonce, &ciphertext),
            None
        );
        assert_eq!(
            key.open(session, "dk1:8:content", &nonce, &ciphertext),
            None
        );
        assert_eq!(
            DataKey::generate().open(session, &key_id, &nonce, &ciphertext),
            None
        );
    }
}
