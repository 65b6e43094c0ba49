//! A session's data key and the sealed fields it protects.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
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

/// What the AES-256-GCM key is derived with (HKDF-SHA256 from the data key), so that the one
/// stored key never serves two ciphers directly.
const GCM_KEY_INFO: &[u8] = b"sessionlog data key v1: aes-256-gcm";

/// How a sealed field was sealed: the first part of its `key_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// `dk1`: XChaCha20-Poly1305 with the data key, a 24-byte random nonce. Written by the first
    /// releases; still opened, no longer written.
    XChaCha,
    /// `dk1g`: AES-256-GCM with a key derived from the data key, a 12-byte random nonce. Sealing
    /// runs on every append, and AES-GCM on AES-NI (through AWS-LC) costs a fraction of
    /// XChaCha20-Poly1305 in Rust there (see docs/performance.md).
    Gcm,
}

impl Scheme {
    /// What new fields are sealed with.
    const CURRENT: Scheme = Scheme::Gcm;

    fn prefix(self) -> &'static str {
        match self {
            Scheme::XChaCha => "dk1",
            Scheme::Gcm => "dk1g",
        }
    }

    /// The scheme a `key_id` names, and the `{seq}:{field}` after it.
    fn parse(key_id: &str) -> Option<(Scheme, &str)> {
        let (prefix, place) = key_id.split_once(':')?;
        [Scheme::XChaCha, Scheme::Gcm]
            .into_iter()
            .find(|scheme| scheme.prefix() == prefix)
            .map(|scheme| (scheme, place))
    }
}

/// The key that seals one session's sensitive fields. Wiped from memory when dropped (AWS-LC
/// wipes its prepared AES key when it is freed).
pub struct DataKey {
    raw: Zeroizing<[u8; KEY_BYTES]>,
    /// Prepared once: AES key expansion per field would cost as much as sealing a short one.
    /// "Less safe" only in that we supply the nonces: AWS-LC's own randomized-nonce key asks
    /// its generator per call, which cost twice the sealing of a 1 KiB field.
    gcm: LessSafeKey,
}

impl DataKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        Self::from_array(XChaCha20Poly1305::generate_key(&mut OsRng).into())
    }

    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        Some(Self::from_array(bytes.try_into().ok()?))
    }

    fn from_array(raw: [u8; KEY_BYTES]) -> Self {
        let raw = Zeroizing::new(raw);
        let mut derived = Zeroizing::new([0u8; KEY_BYTES]);
        // Expanding 32 bytes of HKDF-SHA256 into a 32-byte buffer cannot fail, nor can making
        // an AES-256 key of 32 bytes: the lengths are fixed here.
        Salt::new(HKDF_SHA256, &[])
            .extract(raw.as_slice())
            .expand(&[GCM_KEY_INFO], &AES_256_GCM)
            .and_then(|okm| okm.fill(derived.as_mut_slice()))
            .expect("HKDF-SHA256 expands to 32 bytes");
        let gcm = UnboundKey::new(&AES_256_GCM, derived.as_slice())
            .map(LessSafeKey::new)
            .expect("AES-256-GCM takes a 32-byte key");
        Self { raw, gcm }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.raw.as_slice()
    }

    fn xchacha(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.raw.as_slice().into())
    }

    /// Seals `text` as field `field` of event `seq` of `session`.
    pub fn seal(&self, session: SessionId, seq: Seq, field: &str, text: &str) -> Content {
        let key_id = sealed_key_id(seq, field);
        let mut ciphertext = Vec::with_capacity(text.len() + AES_256_GCM.tag_len());
        ciphertext.extend_from_slice(text.as_bytes());
        // 96 random bits from the thread's CSPRNG (ChaCha12, reseeded from the OS; a system
        // call per nonce cost more than the sealing): NIST allows 2^32 random nonces under one
        // key, far more fields than a session holds.
        let mut nonce = [0u8; NONCE_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
        let sealed = self.gcm.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(seal_aad(session, &key_id)),
            &mut ciphertext,
        );
        if sealed.is_err() {
            // Only inputs beyond the AEAD's limit (64 GiB) fail, far above any event's size;
            // what the buffer holds then must never leave as if it were ciphertext.
            ciphertext.clear();
        }
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
        let aad = seal_aad(session, key_id);
        let plain = match Scheme::parse(key_id)?.0 {
            Scheme::XChaCha => {
                if nonce.len() != 24 {
                    return None;
                }
                self.xchacha()
                    .decrypt(
                        XNonce::from_slice(nonce),
                        Payload {
                            msg: ciphertext,
                            aad: &aad,
                        },
                    )
                    .ok()?
            }
            Scheme::Gcm => {
                let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
                let mut in_out = ciphertext.to_vec();
                let len = self
                    .gcm
                    .open_in_place(nonce, Aad::from(aad), &mut in_out)
                    .ok()?
                    .len();
                in_out.truncate(len);
                in_out
            }
        };
        String::from_utf8(plain).ok()
    }
}

/// The `key_id` a sealed field carries: the data-key version and cipher, and the event seq and
/// field it was sealed as. It is part of the associated data, so a ciphertext moved to another
/// session does not open, and one moved to another event or field is caught by [`sealed_as`].
pub fn sealed_key_id(seq: Seq, field: &str) -> String {
    // Built by hand rather than with format!: this runs for every sealed field.
    let prefix = Scheme::CURRENT.prefix();
    let mut digits = itoa::Buffer::new();
    let seq = digits.format(seq);
    let mut key_id = String::with_capacity(prefix.len() + seq.len() + field.len() + 2);
    for part in [prefix, ":", seq, ":", field] {
        key_id.push_str(part);
    }
    key_id
}

/// Whether a sealed field's `key_id` says it was sealed as field `field` of event `seq` (by
/// any cipher this release opens).
pub fn sealed_as(key_id: &str, seq: Seq, field: &str) -> bool {
    Scheme::parse(key_id).is_some_and(|(_, place)| place == format!("{seq}:{field}"))
}

fn seal_aad(session: SessionId, key_id: &str) -> Vec<u8> {
    // Sized once: this runs for every sealed field, and each regrowth was a trip to the allocator.
    let mut aad = Vec::with_capacity(SEAL_CONTEXT.len() + 16 + key_id.len());
    aad.extend_from_slice(SEAL_CONTEXT);
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
        E::ContextSummarized { summary, .. } => visit("summary", summary),
        // A framework's saved state (a LangGraph checkpoint) holds the conversation itself.
        E::FrameworkStateSaved { state, .. } => visit("state", state),
        E::ApprovalRequested { action, .. } => visit("action", action),
        E::ApprovalDecided {
            reason: Some(reason),
            ..
        }
        | E::SessionPaused {
            reason: Some(reason),
            ..
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
        | E::SessionPaused { reason: None, .. }
        | E::SessionEnded { reason: None, .. }
        | E::Checkpoint { .. }
        | E::WriterClaimed { .. }
        | E::SessionForked { .. }
        // A retraction names a seq and who withdrew it: no text.
        | E::EventRetracted { .. }
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
    use chacha20poly1305::aead::AeadCore;

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
        // The same ciphertext relabelled as the other cipher's does not open either.
        let relabelled = key_id.replacen("dk1g:", "dk1:", 1);
        assert!(sealed_as(&relabelled, 7, "content"));
        assert_eq!(key.open(session, &relabelled, &nonce, &ciphertext), None);
    }

    #[test]
    fn fields_sealed_by_the_first_releases_still_open() {
        // What the first releases wrote: XChaCha20-Poly1305 under the data key itself.
        let key = DataKey::generate();
        let session = SessionId::new();
        let key_id = "dk1:3:output";
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let ciphertext = key
            .xchacha()
            .encrypt(
                &nonce,
                Payload {
                    msg: b"written before AES-GCM".as_slice(),
                    aad: &seal_aad(session, key_id),
                },
            )
            .expect("sealing a short text");
        assert!(sealed_as(key_id, 3, "output"));
        assert_eq!(
            key.open(session, key_id, &nonce, &ciphertext).as_deref(),
            Some("written before AES-GCM")
        );
        assert_eq!(
            key.open(SessionId::new(), key_id, &nonce, &ciphertext),
            None
        );
    }

    #[test]
    fn sealing_names_the_place_and_cipher() {
        assert_eq!(sealed_key_id(12, "arguments"), "dk1g:12:arguments");
        assert!(!sealed_as("dk9:12:arguments", 12, "arguments"));
        assert!(!sealed_as("dk1g:012:arguments", 12, "arguments"));
        assert!(!sealed_as("dk1g:12", 12, "arguments"));
    }
}
