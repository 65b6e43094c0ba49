//! Envelope encryption of session content.
//!
//! Every session gets a random 256-bit *data key* when its first sealed event is written. Each
//! sensitive field is sealed (AES-256-GCM) under its own key, derived from the data key by a
//! tree so that one field's key can be destroyed (a redaction), before it reaches Kafka, with
//! associated data naming the session, the event seq and the field, so a ciphertext cannot be
//! moved; the key itself is stored only wrapped by a *key-encryption key* (KEK) in a keyspace
//! of its own. Destroying a session's data key erases its content everywhere it was copied
//! (topic, dead letters, projections, checkpoints) without rewriting any of them; rotating the
//! KEK rewraps the live keys so that a retired KEK, and any copy of a key it wrapped, is useless.
//!
//! Sealed fields stay sealed in the log, the fold and the projections; readers that show
//! content open them at the edge with an [`Opener`].

mod data_key;
mod error;
mod kek;
mod keyring;
mod record_tree;
mod secret_scan;
mod store;

pub use data_key::{
    DataKey, KEY_BYTES, KEY_VERSION, KEY_VERSION_REDACTED, RecordRedaction, seal_envelope,
    sealed_as, sealed_key_id, sealed_per_record, sealed_place, sensitive_fields,
};
pub use error::{Error, Result};
pub use kek::{Kek, Keks};
pub use keyring::{
    HeldKey, KeyState, Keyring, Opener, RecordKeyDestroyed, Rotation, Text, refuse_sealed,
};
pub use secret_scan::{
    SECRET_SCAN_IDENTITY, SecretAction, SecretFound, SecretScanner, built_in_rule_ids,
    secret_reason, withhold,
};
pub use store::{DataKeyStore, ErasureReceipt, StoredKey, WrappedKey};
