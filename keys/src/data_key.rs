//! A session's data key and the sealed fields it protects.

use crate::record_tree::{self, Node, RecordTree};
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use chacha20poly1305::aead::{Aead, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sessionlog_schemas::{Content, EventEnvelope, Seq, SessionEvent, SessionId};
use zeroize::Zeroizing;

/// Bytes of a data key and of a KEK (256-bit keys).
pub const KEY_BYTES: usize = 32;
/// The version of a stored key whose row holds the 32 bytes of the session's data key, every
/// field's key derivable from it (what every key is until its session has a redaction).
pub const KEY_VERSION: u32 = 1;
/// The version of a stored key after a redaction: the record-key tree's frontier with the
/// destroyed leaves left out, the key of fields sealed per session (`dk1g`), and the
/// redactions made (see [`DataKey::to_bytes`]).
pub const KEY_VERSION_REDACTED: u32 = 2;

/// What the root of the record-key tree is derived with from a session's data key.
const TREE_ROOT_INFO: &[u8] = b"sessionlog data key v1: record-key tree";

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
    /// XChaCha20-Poly1305 in Rust there (see docs/performance.md). Written until schema v8.
    Gcm,
    /// `dk2g`: AES-256-GCM with the field's own key, a leaf of the session's record-key tree
    /// (see [`crate::record_tree`]): destroying that one key redacts the field.
    Record,
}

impl Scheme {
    /// What new fields are sealed with.
    const CURRENT: Scheme = Scheme::Record;

    fn prefix(self) -> &'static str {
        match self {
            Scheme::XChaCha => "dk1",
            Scheme::Gcm => "dk1g",
            Scheme::Record => "dk2g",
        }
    }

    /// The scheme a `key_id` names, and the `{seq}:{field}` after it.
    fn parse(key_id: &str) -> Option<(Scheme, &str)> {
        let (prefix, place) = key_id.split_once(':')?;
        [Scheme::XChaCha, Scheme::Gcm, Scheme::Record]
            .into_iter()
            .find(|scheme| scheme.prefix() == prefix)
            .map(|scheme| (scheme, place))
    }
}

/// The event seq and field a sealed field's `key_id` says it was sealed as.
pub fn sealed_place(key_id: &str) -> Option<(Seq, &str)> {
    let (_, place) = Scheme::parse(key_id)?;
    let (seq, field) = place.split_once(':')?;
    // Digits only, as written: "+7" or "07" name no place.
    if seq.is_empty()
        || !seq.bytes().all(|b| b.is_ascii_digit())
        || seq.starts_with('0') && seq.len() > 1
    {
        return None;
    }
    Some((seq.parse().ok()?, field))
}

/// Whether `key_id` names a field sealed under its own key (a leaf of the record-key tree).
pub fn sealed_per_record(key_id: &str) -> bool {
    matches!(Scheme::parse(key_id), Some((Scheme::Record, _)))
}

/// One field redacted: its place and why, as the session's key remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRedaction {
    /// The event's seq.
    pub seq: Seq,
    /// The field's slot under its event.
    slot: u8,
    /// Why (kept readable, like an erasure's: it must not hold personal data).
    pub reason: String,
}

impl RecordRedaction {
    /// The field's name.
    pub fn field(&self) -> &'static str {
        record_tree::field_name(self.slot).unwrap_or("unknown")
    }
}

/// The keys of one session's sensitive fields: each field's own key (a leaf of the session's
/// record-key tree), and the session-wide key of fields sealed before per-record keys. Wiped
/// from memory when dropped (AWS-LC wipes its prepared AES key when it is freed).
pub struct DataKey {
    /// The session's data key as made: the XChaCha key of the first releases, and what the
    /// other keys derive from. Dropped at the first redaction, so the tree's root goes with it.
    raw: Option<Zeroizing<[u8; KEY_BYTES]>>,
    /// The AES key of fields sealed per session (`dk1g`), kept through redactions so they
    /// still open.
    gcm_raw: Zeroizing<[u8; KEY_BYTES]>,
    /// Prepared once: AES key expansion per field would cost as much as sealing a short one.
    /// "Less safe" only in that we supply the nonces: AWS-LC's own randomized-nonce key asks
    /// its generator per call, which cost twice the sealing of a 1 KiB field.
    gcm: LessSafeKey,
    /// Every field's own key, those destroyed left out.
    tree: RecordTree,
    /// The fields redacted, and why.
    redactions: Vec<RecordRedaction>,
}

/// 32 bytes of HKDF-SHA256 from `raw` with `info`.
fn derive(raw: &[u8], info: &[u8]) -> Zeroizing<[u8; KEY_BYTES]> {
    let mut derived = Zeroizing::new([0u8; KEY_BYTES]);
    // Expanding 32 bytes of HKDF-SHA256 into a 32-byte buffer cannot fail: the lengths are
    // fixed here.
    Salt::new(HKDF_SHA256, &[])
        .extract(raw)
        .expand(&[info], &AES_256_GCM)
        .and_then(|okm| okm.fill(derived.as_mut_slice()))
        .expect("HKDF-SHA256 expands to 32 bytes");
    derived
}

/// An AES-256-GCM key of 32 bytes (which cannot fail: the length is fixed).
fn aes_key(bytes: &[u8; KEY_BYTES]) -> LessSafeKey {
    UnboundKey::new(&AES_256_GCM, bytes)
        .map(LessSafeKey::new)
        .expect("AES-256-GCM takes a 32-byte key")
}

impl DataKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        Self::from_array(XChaCha20Poly1305::generate_key(&mut OsRng).into())
    }

    /// A key as [`Self::to_bytes`] wrote it (either version).
    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        match <[u8; KEY_BYTES]>::try_from(bytes) {
            Ok(raw) => Some(Self::from_array(raw)),
            Err(_) => Self::parse_redacted(bytes),
        }
    }

    fn from_array(raw: [u8; KEY_BYTES]) -> Self {
        let raw = Zeroizing::new(raw);
        let gcm_raw = derive(raw.as_slice(), GCM_KEY_INFO);
        let tree = RecordTree::from_root(derive(raw.as_slice(), TREE_ROOT_INFO));
        Self {
            gcm: aes_key(&gcm_raw),
            gcm_raw,
            raw: Some(raw),
            tree,
            redactions: Vec::new(),
        }
    }

    /// What the key store keeps, wrapped: the 32 bytes of the data key ([`KEY_VERSION`]) until
    /// a redaction, then ([`KEY_VERSION_REDACTED`]) a version byte, the per-session AES key,
    /// the tree's nodes (depth, path, key) and the redactions (seq, field slot, reason).
    pub(crate) fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        if let (Some(raw), true) = (&self.raw, self.redactions.is_empty()) {
            return Zeroizing::new(raw.to_vec());
        }
        let mut out = Zeroizing::new(Vec::new());
        out.push(2u8);
        out.extend_from_slice(self.gcm_raw.as_slice());
        let nodes = self.tree.nodes();
        out.extend_from_slice(&u32::try_from(nodes.len()).unwrap_or(u32::MAX).to_be_bytes());
        for node in nodes {
            out.push(node.depth);
            out.extend_from_slice(&node.path.to_be_bytes());
            out.extend_from_slice(node.key.as_slice());
        }
        out.extend_from_slice(
            &u32::try_from(self.redactions.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        for redaction in &self.redactions {
            out.extend_from_slice(&redaction.seq.to_be_bytes());
            out.push(redaction.slot);
            let reason = redaction.reason.as_bytes();
            out.extend_from_slice(&u32::try_from(reason.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(reason);
        }
        out
    }

    /// The version [`Self::to_bytes`] writes.
    pub(crate) fn version(&self) -> u32 {
        if self.raw.is_some() && self.redactions.is_empty() {
            KEY_VERSION
        } else {
            KEY_VERSION_REDACTED
        }
    }

    fn parse_redacted(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        if take(1)? != [2u8] {
            return None;
        }
        let gcm_raw = Zeroizing::new(<[u8; KEY_BYTES]>::try_from(take(KEY_BYTES)?).ok()?);
        let count = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut nodes = Vec::new();
        for _ in 0..count {
            let depth = take(1)?[0];
            let path = u128::from_be_bytes(take(16)?.try_into().ok()?);
            let key = Zeroizing::new(<[u8; KEY_BYTES]>::try_from(take(KEY_BYTES)?).ok()?);
            if depth > record_tree::DEPTH {
                return None;
            }
            nodes.push(Node { depth, path, key });
        }
        let count = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut redactions = Vec::new();
        for _ in 0..count {
            let seq = u64::from_be_bytes(take(8)?.try_into().ok()?);
            let slot = take(1)?[0];
            let len = usize::try_from(u32::from_be_bytes(take(4)?.try_into().ok()?)).ok()?;
            let reason = String::from_utf8(take(len)?.to_vec()).ok()?;
            redactions.push(RecordRedaction { seq, slot, reason });
        }
        if !rest.is_empty() {
            return None;
        }
        Some(Self {
            gcm: aes_key(&gcm_raw),
            gcm_raw,
            raw: None,
            tree: RecordTree::from_nodes(nodes),
            redactions,
        })
    }

    /// A copy of this key (read back from its stored form).
    pub(crate) fn duplicate(&self) -> Self {
        let copy = Self::from_slice(&self.to_bytes());
        // What to_bytes writes, from_slice reads: a failure here is a bug in one of them.
        copy.expect("a data key reads back what it writes")
    }

    /// Redacts field `field` of event `seq`: destroys the field's own key, if it was sealed
    /// under one (`per_record`), and records why. The session's data key itself goes too
    /// (the tree's root derives from it), leaving the per-session AES key of older fields.
    /// Whether a key was destroyed now (false when it was before, or there was none).
    /// A redaction recorded without destroying a key (the secret scan's: nothing was sealed
    /// under it) gives way to one that destroys it: the reason becomes the destroying one's.
    pub(crate) fn redact(&mut self, seq: Seq, field: &str, reason: &str, per_record: bool) -> bool {
        let Some(slot) = record_tree::field_slot(field) else {
            return false;
        };
        self.raw = None;
        let destroyed = per_record && self.tree.puncture(record_tree::leaf(seq, slot));
        match self
            .redactions
            .iter_mut()
            .find(|r| r.seq == seq && r.slot == slot)
        {
            Some(known) if destroyed => known.reason = reason.to_string(),
            Some(_) => {}
            None => self.redactions.push(RecordRedaction {
                seq,
                slot,
                reason: reason.to_string(),
            }),
        }
        destroyed
    }

    /// Whether field `field` of event `seq` still has its own key (none was destroyed).
    pub(crate) fn has_record_key(&self, seq: Seq, field: &str) -> bool {
        self.record_key(seq, field).is_some()
    }

    /// The redaction of field `field` of event `seq`, if it was redacted.
    pub fn redaction(&self, seq: Seq, field: &str) -> Option<&RecordRedaction> {
        let slot = record_tree::field_slot(field)?;
        self.redactions
            .iter()
            .find(|r| r.seq == seq && r.slot == slot)
    }

    /// Every redaction this key remembers.
    pub fn redactions(&self) -> &[RecordRedaction] {
        &self.redactions
    }

    /// The AES key of field `field` of event `seq`, unless it was destroyed.
    fn record_key(&self, seq: Seq, field: &str) -> Option<LessSafeKey> {
        let slot = record_tree::field_slot(field)?;
        let leaf = self.tree.leaf_key(record_tree::leaf(seq, slot))?;
        Some(aes_key(&leaf))
    }

    fn xchacha(&self) -> Option<XChaCha20Poly1305> {
        self.raw
            .as_ref()
            .map(|raw| XChaCha20Poly1305::new(raw.as_slice().into()))
    }

    /// Seals `text` as field `field` of event `seq` of `session`, under the field's own key.
    pub fn seal(&self, session: SessionId, seq: Seq, field: &str, text: &str) -> Content {
        self.seal_as(session, seq, field, text, true)
    }

    /// [`Self::seal`], or with `per_record` false under the session's one AES key (`dk1g`, as
    /// before schema v8: `[privacy] per_record_keys`, the benches' reference).
    pub fn seal_as(
        &self,
        session: SessionId,
        seq: Seq,
        field: &str,
        text: &str,
        per_record: bool,
    ) -> Content {
        let scheme = if per_record {
            Scheme::CURRENT
        } else {
            Scheme::Gcm
        };
        let key_id = key_id_of(scheme, seq, field);
        let mut ciphertext = Vec::with_capacity(text.len() + AES_256_GCM.tag_len());
        ciphertext.extend_from_slice(text.as_bytes());
        // 96 random bits from the thread's CSPRNG (ChaCha12, reseeded from the OS; a system
        // call per nonce cost more than the sealing): NIST allows 2^32 random nonces under one
        // key, far more fields than a session holds.
        let mut nonce = [0u8; NONCE_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
        // A field whose key was destroyed (redacted before it was written) has no key to seal
        // with: it is written without its text.
        let record;
        let key = if per_record {
            record = self.record_key(seq, field);
            record.as_ref()
        } else {
            Some(&self.gcm)
        };
        let sealed = match key {
            Some(key) => key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(seal_aad(session, &key_id)),
                &mut ciphertext,
            ),
            None => Err(aws_lc_rs::error::Unspecified),
        };
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
                self.xchacha()?
                    .decrypt(
                        XNonce::from_slice(nonce),
                        Payload {
                            msg: ciphertext,
                            aad: &aad,
                        },
                    )
                    .ok()?
            }
            scheme @ (Scheme::Gcm | Scheme::Record) => {
                let record;
                let key = if scheme == Scheme::Gcm {
                    &self.gcm
                } else {
                    let (seq, field) = sealed_place(key_id)?;
                    record = self.record_key(seq, field)?;
                    &record
                };
                let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
                let mut in_out = ciphertext.to_vec();
                let len = key
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
    key_id_of(Scheme::CURRENT, seq, field)
}

fn key_id_of(scheme: Scheme, seq: Seq, field: &str) -> String {
    // Built by hand rather than with format!: this runs for every sealed field.
    let prefix = scheme.prefix();
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
        // A redaction's reason is its readable record, like an erasure's.
        | E::PayloadRedacted { .. }
        | E::SessionResumed {} => {}
    }
}

/// Seals every plain sensitive field of `envelope` with `key`. Fields already sealed are left
/// as they are (a retried envelope the writer sealed before).
pub fn seal_envelope(key: &DataKey, envelope: &mut EventEnvelope) {
    seal_envelope_as(key, envelope, true);
}

/// [`seal_envelope`], each field under its own key or (`per_record` false) the session's one.
pub fn seal_envelope_as(key: &DataKey, envelope: &mut EventEnvelope, per_record: bool) {
    let (session, seq) = (envelope.session_id, envelope.seq);
    sensitive_fields(&mut envelope.event, |field, content| {
        if let Content::Plain(text) = content {
            *content = key.seal_as(session, seq, field, text, per_record);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::AeadCore;

    #[test]
    fn a_field_sealed_per_session_opens_under_the_sessions_key_and_keeps_opening_when_redacted() {
        let mut key = DataKey::generate();
        let session = SessionId::new();
        let Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } = key.seal_as(session, 7, "content", "canary", false)
        else {
            panic!("not sealed");
        };
        assert!(key_id.starts_with("dk1g:"), "{key_id}");
        assert!(!sealed_per_record(&key_id));
        assert_eq!(
            key.open(session, &key_id, &nonce, &ciphertext).as_deref(),
            Some("canary")
        );
        // A redaction records why, but there is no key of the field's own to destroy.
        assert!(!key.redact(7, "content", "why", false));
        assert_eq!(
            key.open(session, &key_id, &nonce, &ciphertext).as_deref(),
            Some("canary")
        );
    }

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
        // The same ciphertext relabelled as another cipher's does not open either.
        for other in ["dk1:", "dk1g:"] {
            let relabelled = key_id.replacen("dk2g:", other, 1);
            assert!(sealed_as(&relabelled, 7, "content"));
            assert_eq!(key.open(session, &relabelled, &nonce, &ciphertext), None);
        }
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
            .expect("a key as made")
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
        assert_eq!(sealed_key_id(12, "arguments"), "dk2g:12:arguments");
        assert_eq!(sealed_place("dk2g:12:arguments"), Some((12, "arguments")));
        assert_eq!(sealed_place("dk1g:012:arguments"), None);
        assert_eq!(sealed_place("dk1g:+1:arguments"), None);
        assert!(sealed_per_record("dk2g:12:arguments"));
        assert!(!sealed_per_record("dk1g:12:arguments"));
        assert!(!sealed_as("dk9:12:arguments", 12, "arguments"));
        assert!(!sealed_as("dk1g:012:arguments", 12, "arguments"));
        assert!(!sealed_as("dk1g:12", 12, "arguments"));
    }

    /// Seals `text` as the release before per-record keys did: under the session's AES key.
    fn seal_per_session(
        key: &DataKey,
        session: SessionId,
        seq: Seq,
        field: &str,
        text: &str,
    ) -> Content {
        let key_id = format!("dk1g:{seq}:{field}");
        let mut ciphertext = text.as_bytes().to_vec();
        let nonce = [3u8; NONCE_LEN];
        key.gcm
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(seal_aad(session, &key_id)),
                &mut ciphertext,
            )
            .expect("sealing a short text");
        Content::Sealed {
            key_id,
            nonce: nonce.to_vec(),
            ciphertext,
        }
    }

    fn opened(key: &DataKey, session: SessionId, content: &Content) -> Option<String> {
        let Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } = content
        else {
            panic!("not sealed");
        };
        key.open(session, key_id, nonce, ciphertext)
    }

    #[test]
    fn a_redacted_field_no_longer_opens_while_every_other_field_does_stored_and_read_back() {
        let mut key = DataKey::generate();
        let session = SessionId::new();
        let older = seal_per_session(&key, session, 1, "content", "sealed per session");
        let fields: Vec<_> = (2..=6)
            .flat_map(|seq| {
                ["arguments", "output", "note"].map(|field| {
                    (
                        seq,
                        field,
                        key.seal(session, seq, field, &format!("{seq} {field}")),
                    )
                })
            })
            .collect();
        assert_eq!(key.version(), KEY_VERSION);
        assert_eq!(
            opened(&key, session, &older).as_deref(),
            Some("sealed per session")
        );

        assert!(key.redact(4, "output", "a secret", true));
        assert!(!key.redact(4, "output", "again", true), "destroyed once");
        // What the key store keeps, read back by another process.
        assert_eq!(key.version(), KEY_VERSION_REDACTED);
        let stored = DataKey::from_slice(&key.to_bytes()).expect("reads back");
        for key in [&key, &stored] {
            for (seq, field, content) in &fields {
                let text = opened(key, session, content);
                if (*seq, *field) == (4, "output") {
                    assert_eq!(text, None);
                } else {
                    assert_eq!(text, Some(format!("{seq} {field}")));
                }
            }
            // The event's other field, and fields sealed per session before, still open.
            assert_eq!(
                opened(key, session, &older).as_deref(),
                Some("sealed per session")
            );
            let redaction = key.redaction(4, "output").expect("remembered");
            assert_eq!(
                (redaction.field(), redaction.reason.as_str()),
                ("output", "a secret")
            );
            assert!(key.redaction(4, "note").is_none());
            // The session's own data key is gone: nothing derives the destroyed field's key.
            assert!(key.raw.is_none());
        }
        // A second redaction on the stored form.
        let mut stored = stored;
        assert!(stored.redact(5, "arguments", "withdrawn", true));
        let again = DataKey::from_slice(&stored.to_bytes()).expect("reads back");
        assert_eq!(again.redactions().len(), 2);
        assert_eq!(opened(&again, session, &fields[7].2), None, "5 arguments");
        assert_eq!(
            opened(&again, session, &fields[3].2).as_deref(),
            Some("3 arguments")
        );
    }

    #[test]
    fn a_field_sealed_per_session_is_redacted_without_a_key_to_destroy() {
        let mut key = DataKey::generate();
        assert!(!key.redact(1, "content", "withdrawn", false));
        assert_eq!(
            key.redaction(1, "content").map(|r| r.reason.as_str()),
            Some("withdrawn")
        );
        assert!(
            DataKey::from_slice(&[2u8; 40]).is_none(),
            "a malformed stored key"
        );
    }
}
