//! What can go wrong with keys, and what to do about it.

use sessionlog_schemas::SessionId;

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of key handling. Opening a field never fails with one: a field that cannot be
/// opened reads as [`crate::Text::Erased`] or [`crate::Text::Unreadable`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Encryption is on and no KEK is configured.
    #[error(
        "[privacy] encrypt is on but no key-encryption key is configured: run `sessionlog keys \
         init` and set SESSIONLOG_PRIVACY__KEK_FILE to the file it writes (or set [privacy] \
         encrypt = false to write session content in plain text)"
    )]
    NoKek,
    /// A KEK file could not be read.
    #[error(
        "cannot read the key-encryption key file {path} ([privacy] kek_file / previous_kek_files): {source}"
    )]
    KekFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A KEK is not 32 bytes of base64.
    #[error(
        "the key-encryption key from {origin} is not 32 bytes of base64 (`sessionlog keys init` writes one)"
    )]
    KekFormat {
        /// Where it came from (a file, or the setting).
        origin: String,
    },
    /// A data key is wrapped by a KEK this process was not given.
    #[error(
        "the data key of session {session} is wrapped by key-encryption key {kek_id}, which \
         this process does not have: add its file to [privacy] previous_kek_files (or finish \
         `sessionlog keys rotate` where it is)"
    )]
    UnknownKek {
        /// The session.
        session: SessionId,
        /// The KEK's id.
        kek_id: String,
    },
    /// A wrapped data key does not unwrap under the KEK its row names.
    #[error(
        "the data key of session {session} does not unwrap under key-encryption key {kek_id}: \
         the key store row or the KEK file is corrupt"
    )]
    Unwrap {
        /// The session.
        session: SessionId,
        /// The KEK's id.
        kek_id: String,
    },
    /// The session's data key was destroyed: nothing more may be sealed for it.
    #[error("session {0} was erased: its data key is destroyed and nothing more is written for it")]
    Erased(SessionId),
    /// Content sealed by someone other than this service was offered for sealing.
    #[error("{field} of event seq {seq} is already sealed: send plain text, the service seals it")]
    AlreadySealed {
        /// The event's seq.
        seq: u64,
        /// The field.
        field: &'static str,
    },
    /// A secret rule of the settings is not usable.
    #[error("[privacy] {setting}: {reason}")]
    SecretRules {
        /// The setting (`secret_rules`, `secret_rules_disabled`).
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A field holds a secret the scan would redact, and encryption is off: it cannot be
    /// sealed, so it is not written.
    #[error(
        "{field} of event seq {seq} holds what looks like a secret (rule {rule}); with [privacy] \
         encrypt = false it cannot be sealed and redacted, so nothing was written: remove it, \
         turn encryption on, or set [privacy] secret_scan = \"warn\" or \"off\" (or list the \
         rule in [privacy] secret_rules_disabled)"
    )]
    SecretNotSealable {
        /// The event's seq.
        seq: u64,
        /// The field.
        field: &'static str,
        /// The rule that matched.
        rule: String,
    },
    /// The key store failed.
    #[error("key store ([privacy] keyspace on the [cql] nodes): {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// Whether retrying may help (the key store was unreachable or slow).
    pub fn is_store(&self) -> bool {
        matches!(self, Self::Store(_))
    }
}
