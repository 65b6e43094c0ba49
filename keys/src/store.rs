//! Where data keys live: a trait, so that the keyring is tested without a database and the
//! CQL stays in the store crate (`sessionlog_store::KeyTable`).

use crate::Result;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Micros, Seq, SessionId};

/// A data key as stored: encrypted under a KEK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrappedKey {
    /// The data-key version ([`crate::KEY_VERSION`]).
    pub version: u32,
    /// Which KEK wrapped it.
    pub kek_id: String,
    /// Nonce, ciphertext and tag.
    pub wrapped: Vec<u8>,
    /// When it was made.
    pub created_at: Micros,
}

/// What the key store holds for a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredKey {
    /// The key, wrapped.
    Live(WrappedKey),
    /// The key was destroyed (the session was erased) at this time.
    Destroyed {
        /// When.
        at: Micros,
    },
}

/// The record an erasure leaves: what was destroyed, when, by whom, and where its event sits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErasureReceipt {
    /// The erased session.
    pub session_id: SessionId,
    /// The verified caller who asked.
    pub requested_by: String,
    /// Why (kept readable: it must not hold personal data).
    pub reason: String,
    /// When the key was destroyed (microseconds since the epoch).
    pub erased_at: Micros,
    /// The seq of the `SessionErased` event.
    pub erased_seq: Seq,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset.
    pub log_offset: i64,
    /// The KEK that wrapped the destroyed key, if there was a key (none for a session written
    /// without encryption: its text stays in the topic until retention removes it).
    pub destroyed_kek_id: Option<String>,
}

/// The key store.
pub trait DataKeyStore: Send + Sync {
    /// Stores `key` for `session` unless the session has a row already (a key, or the mark of
    /// a destroyed one); returns what the store holds afterwards, so that two processes
    /// creating the same session's key agree on one.
    fn create(&self, session: SessionId, key: WrappedKey) -> BoxFuture<'_, Result<StoredKey>>;

    /// Stores the key of a session nobody else can know of yet (a fresh UUIDv7 whose start
    /// is not written): an unconditional write, without the round trips of [`Self::create`]'s
    /// condition, which only a session two processes may key at once needs.
    fn insert_fresh(&self, session: SessionId, key: WrappedKey) -> BoxFuture<'_, Result<()>>;

    /// The session's key, if it has a row.
    fn get(&self, session: SessionId) -> BoxFuture<'_, Result<Option<StoredKey>>>;

    /// Destroys the session's key (leaving the mark that it was) and records the receipt.
    fn destroy(&self, receipt: ErasureReceipt) -> BoxFuture<'_, Result<()>>;

    /// The receipt of the session's erasure, if it was erased.
    fn receipt(&self, session: SessionId) -> BoxFuture<'_, Result<Option<ErasureReceipt>>>;

    /// Every live key, for rotation.
    fn live_keys(&self) -> BoxStream<'_, Result<(SessionId, WrappedKey)>>;

    /// Replaces the session's wrapped key by `key`, only if the store still holds `old` (a key
    /// destroyed meanwhile must stay destroyed, and of a rotation and a redaction racing on
    /// one key, neither may undo the other); whether it was replaced.
    fn rewrap(
        &self,
        session: SessionId,
        old: WrappedKey,
        key: WrappedKey,
    ) -> BoxFuture<'_, Result<bool>>;
}
