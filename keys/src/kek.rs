//! Key-encryption keys: the few long-lived secrets that wrap every session's data key.

use crate::data_key::{DataKey, KEY_BYTES};
use crate::{Error, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sessionlog_log::PrivacySettings;
use sessionlog_schemas::SessionId;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// What a wrapped data key's associated data starts with: a wrapped key cannot be passed off
/// as sealed text, nor moved to another session.
const WRAP_CONTEXT: &[u8] = b"sessionlog-data-key-v1\0";
const NONCE_BYTES: usize = 24;

/// One key-encryption key. Its id is derived from the key (a hash prefix), so a KEK file and
/// the rows it wrapped cannot disagree about which key they mean.
pub struct Kek {
    id: String,
    key: Zeroizing<[u8; KEY_BYTES]>,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kek")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Kek {
    /// A fresh random KEK.
    pub fn generate() -> Self {
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        Self::from_bytes(key.into())
    }

    fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        let id = format!("kek-{}", &hex::encode(Sha256::digest(bytes))[..16]);
        Self {
            id,
            key: Zeroizing::new(bytes),
        }
    }

    /// Reads a KEK written as base64 (surrounding whitespace ignored); `origin` names it in errors.
    pub fn from_base64(text: &str, origin: &str) -> Result<Self> {
        let format = || Error::KekFormat {
            origin: origin.to_string(),
        };
        let bytes = Zeroizing::new(STANDARD.decode(text.trim()).map_err(|_| format())?);
        let key: [u8; KEY_BYTES] = bytes.as_slice().try_into().map_err(|_| format())?;
        Ok(Self::from_bytes(key))
    }

    /// Reads a KEK file.
    pub fn from_file(path: &str) -> Result<Self> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| Error::KekFile {
                    path: path.to_string(),
                    source,
                })?,
            );
        Self::from_base64(&text, path)
    }

    /// The key as base64, for the file `sessionlog keys init` writes.
    pub fn to_base64(&self) -> Zeroizing<String> {
        Zeroizing::new(STANDARD.encode(self.key.as_slice()))
    }

    /// Names this KEK in the key store's rows.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.key.as_slice().into())
    }

    /// Encrypts `key` for `session`: nonce, then ciphertext and tag.
    pub fn wrap(&self, session: SessionId, key: &DataKey) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = wrap_aad(session);
        let sealed = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: key.to_bytes().as_slice(),
                    aad: &aad,
                },
            )
            // Encryption fails only for inputs over the AEAD's length limit; a key is far below.
            .unwrap_or_default();
        let mut wrapped = nonce.to_vec();
        wrapped.extend_from_slice(&sealed);
        wrapped
    }

    /// Decrypts a key [`Self::wrap`] wrapped for `session`.
    pub fn unwrap(&self, session: SessionId, wrapped: &[u8]) -> Result<DataKey> {
        let fail = || Error::Unwrap {
            session,
            kek_id: self.id.clone(),
        };
        if wrapped.len() < NONCE_BYTES {
            return Err(fail());
        }
        let (nonce, sealed) = wrapped.split_at(NONCE_BYTES);
        let aad = wrap_aad(session);
        let bytes = Zeroizing::new(
            self.cipher()
                .decrypt(
                    XNonce::from_slice(nonce),
                    Payload {
                        msg: sealed,
                        aad: &aad,
                    },
                )
                .map_err(|_| fail())?,
        );
        DataKey::from_slice(&bytes).ok_or_else(fail)
    }
}

fn wrap_aad(session: SessionId) -> Vec<u8> {
    let mut aad = WRAP_CONTEXT.to_vec();
    aad.extend_from_slice(session.0.as_bytes());
    aad
}

/// The current KEK, which wraps new data keys, and the retired ones that may still wrap some.
#[derive(Debug)]
pub struct Keks {
    current: Kek,
    previous: Vec<Kek>,
}

impl Keks {
    /// The given KEKs.
    pub fn new(current: Kek, previous: Vec<Kek>) -> Self {
        Self { current, previous }
    }

    /// The KEKs the settings name: `None` when encryption is off; [`Error::NoKek`] when it is
    /// on and no KEK is set.
    pub fn from_settings(settings: &PrivacySettings) -> Result<Option<Self>> {
        if !settings.encrypt {
            return Ok(None);
        }
        let current = if !settings.kek.is_empty() {
            Kek::from_base64(settings.kek.expose(), "[privacy] kek")?
        } else if let Some(path) = &settings.kek_file {
            Kek::from_file(path)?
        } else {
            return Err(Error::NoKek);
        };
        let previous = settings
            .previous_kek_files
            .iter()
            .map(|path| Kek::from_file(path))
            .collect::<Result<_>>()?;
        Ok(Some(Self::new(current, previous)))
    }

    /// The KEK new data keys are wrapped with.
    pub fn current(&self) -> &Kek {
        &self.current
    }

    /// The KEK with this id, current or retired.
    pub fn find(&self, id: &str) -> Option<&Kek> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_key_unwraps_only_for_its_session_and_kek() {
        let kek = Kek::generate();
        let session = SessionId::new();
        let key = DataKey::generate();
        let wrapped = kek.wrap(session, &key);
        assert_eq!(
            kek.unwrap(session, &wrapped).unwrap().to_bytes(),
            key.to_bytes()
        );
        assert!(matches!(
            kek.unwrap(SessionId::new(), &wrapped),
            Err(Error::Unwrap { .. })
        ));
        assert!(Kek::generate().unwrap(session, &wrapped).is_err());
        let mut flipped = wrapped;
        flipped[30] ^= 1;
        assert!(kek.unwrap(session, &flipped).is_err());
    }

    #[test]
    fn a_kek_reads_back_from_base64_with_the_same_id() {
        let kek = Kek::generate();
        let again = Kek::from_base64(&format!("{}\n", kek.to_base64().as_str()), "test").unwrap();
        assert_eq!(again.id(), kek.id());
        assert!(matches!(
            Kek::from_base64("c2hvcnQ=", "test"),
            Err(Error::KekFormat { .. })
        ));
    }
}
