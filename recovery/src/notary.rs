//! The recovery service's signature on the privileged events it appends, and the check that
//! every decision and operator record a session relies on carries one (see
//! `sessionlog_session::attest` for why the fold keeps them and this service checks them).

use crate::{Error, Result};
use sessionlog_http::auth::{PublicKey, SigningKey};
use sessionlog_log::RecoverySettings;
use sessionlog_schemas::{Attestation, EventEnvelope};
use sessionlog_session::SessionState;
use sessionlog_session::attest;

/// The P-256 key in the PEM file at `path`, or the error naming `setting` and the file.
pub(crate) fn signing_key_file(path: &str, setting: &str) -> Result<SigningKey> {
    let problem = |reason: String| Error::Attestation {
        reason: format!("{setting} {path}: {reason}"),
    };
    let pem = std::fs::read_to_string(path).map_err(|e| problem(format!("cannot read: {e}")))?;
    SigningKey::from_pem(&pem).map_err(|e| problem(e.to_string()))
}

/// Signs privileged events and verifies the attestations in a session's state.
pub struct Notary {
    key: Option<SigningKey>,
    trusted: Vec<PublicKey>,
}

impl Notary {
    /// The key `[recovery] signing_key_file` names, and the retired keys of
    /// `previous_keys_file`. Without a key, nothing can be signed and nothing verifies: an
    /// action that must sign fails naming the setting ([`Notary::signing_key`]), and the
    /// recovery service warns when it starts without one ([`Notary::UNSIGNED_WARNING`]). A
    /// command that never signs (a rebuild, an erasure's status) says nothing about it.
    pub fn from_settings(settings: &RecoverySettings) -> Result<Self> {
        let read = |path: &str, setting: &str| {
            std::fs::read_to_string(path).map_err(|e| Error::Attestation {
                reason: format!("cannot read {setting} {path}: {e}"),
            })
        };
        let key = settings
            .signing_key_file
            .as_deref()
            .map(|path| signing_key_file(path, "recovery.signing_key_file"))
            .transpose()?;
        let mut trusted: Vec<PublicKey> = key.iter().map(SigningKey::public_key).collect();
        if let Some(path) = &settings.previous_keys_file {
            trusted.extend(
                PublicKey::from_jwks(&read(path, "recovery.previous_keys_file")?, path).map_err(
                    |e| Error::Attestation {
                        reason: e.to_string(),
                    },
                )?,
            );
        }
        Ok(Self { key, trusted })
    }

    /// What the recovery service logs (once, as it starts) when it holds no signing key.
    pub const UNSIGNED_WARNING: &str = "recovery.signing_key_file is not set: approvals and operator results cannot be recorded, and sessions that waited for one cannot resume (`sessionlog token init` writes a key)";

    /// No key and no trusted keys: for a reader, which signs nothing. It verifies nothing
    /// either, so a session waiting on a signed decision does not resume through it.
    pub fn unsigned() -> Self {
        Self {
            key: None,
            trusted: Vec::new(),
        }
    }

    /// The signing key, or the error naming the setting: asked before a privileged action
    /// appends anything (its claim fences the harness), not only when it signs.
    pub fn signing_key(&self) -> Result<&SigningKey> {
        self.key.as_ref().ok_or_else(|| Error::Attestation {
            reason:
                "no signing key: set recovery.signing_key_file (`sessionlog token init` writes one)"
                    .into(),
        })
    }

    /// Whether this notary holds a signing key (a reader's holds none).
    pub fn can_sign(&self) -> bool {
        self.key.is_some()
    }

    /// Signs `envelope`'s statement into its attestation.
    pub fn attest(&self, envelope: &mut EventEnvelope) -> Result<()> {
        let key = self.signing_key()?;
        let statement = attest::statement(envelope).ok_or_else(|| Error::Attestation {
            reason: format!("a {} carries no attestation", envelope.event.kind()),
        })?;
        let signature = key
            .sign(statement.as_bytes())
            .map_err(|e| Error::Attestation {
                reason: e.to_string(),
            })?;
        envelope.attestation = Some(Attestation {
            key_id: key.kid().to_string(),
            signature,
        });
        Ok(())
    }

    /// Whether `attestation` is a trusted key's signature of `statement`.
    pub fn verifies(&self, statement: &str, attestation: Option<&Attestation>) -> bool {
        let Some(attestation) = attestation else {
            return false;
        };
        !statement.is_empty()
            && self.trusted.iter().any(|key| {
                key.kid == attestation.key_id
                    && key.verifies(statement.as_bytes(), &attestation.signature)
            })
    }

    /// Refuses a state that relies on a decision or an operator record this service did not
    /// sign (a harness wrote it itself): the gate stays shut until it is recorded again.
    pub fn check(&self, state: &SessionState) -> Result<()> {
        let approvals: Vec<String> = state
            .decided_approvals
            .values()
            .filter(|d| !self.verifies(&d.statement, d.attestation.as_ref()))
            .map(|d| d.approval_id.clone())
            .collect();
        let calls: Vec<u64> = state
            .operator_results
            .values()
            .filter(|r| !self.verifies(&r.statement, r.attestation.as_ref()))
            .map(|r| r.call_seq)
            .collect();
        if approvals.is_empty() && calls.is_empty() {
            return Ok(());
        }
        Err(Error::Unverified {
            session: state.session_id.to_string(),
            approvals,
            calls,
        })
    }
}

/// The notary signs the claims and forks recovery makes (see `sessionlog_producer::Attester`):
/// a signed claim passes a session's gates, because recovery judged them first.
impl sessionlog_producer::Attester for Notary {
    fn attest(&self, envelope: &mut EventEnvelope) -> std::result::Result<(), String> {
        Notary::attest(self, envelope).map_err(|e| e.to_string())
    }
}
