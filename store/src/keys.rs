//! The key store: data keys (wrapped) and erasure receipts, in a keyspace of their own.
//!
//! Not a projection: nothing derives it from the log, so replays and `verify` never touch it,
//! and a replay's dropped keyspace cannot take the keys with it. The one place in the project
//! that uses lightweight transactions (supported by ScyllaDB and Cassandra alike): two
//! processes must never each store a different key for one session, and a rotation must never
//! write back a key an erasure destroyed meanwhile. Every write to `data_keys` is conditional,
//! so none mixes with a plain write on the same row.
//!
//! `data_keys` has a short `gc_grace_seconds` (three hours, Cassandra's default hint window):
//! once compaction runs after that, a destroyed key is gone from the SSTables too. A replica
//! down for longer than that must be repaired (or replaced) before it rejoins, or it could
//! bring a destroyed key back; rotating the KEK after erasures makes any such copy useless.

use crate::connect::session_for;
use crate::migrations::{create_keyspace_cql, valid_keyspace_name};
use crate::{Error, Result};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryFutureExt, TryStreamExt};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use sessionlog_keys::{DataKeyStore, ErasureReceipt, StoredKey, WrappedKey};
use sessionlog_log::Settings;
use sessionlog_schemas::{SessionId, now_micros};
use std::sync::Arc;
use uuid::Uuid;

/// Seconds a destroyed key's tombstone is kept before compaction may drop it for good.
pub const KEY_GC_GRACE_SECONDS: u32 = 10_800;

/// How often a conditional write that lost to another is tried again.
const LWT_ATTEMPTS: usize = 5;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {ks}.data_keys (
        session_id uuid PRIMARY KEY,
        key_version int,
        kek_id text,
        wrapped blob,
        created_at_us bigint,
        destroyed_at_us bigint)
        WITH gc_grace_seconds = {gc}",
    "CREATE TABLE IF NOT EXISTS {ks}.erasures (
        session_id uuid PRIMARY KEY,
        requested_by text,
        reason text,
        erased_at_us bigint,
        erased_seq bigint,
        log_partition int,
        log_offset bigint,
        destroyed_kek_id text)",
];

/// The data keys and erasure receipts of the `[privacy] keyspace`.
pub struct KeyTable {
    session: Arc<Session>,
    keyspace: String,
    create: PreparedStatement,
    insert_fresh: PreparedStatement,
    get: PreparedStatement,
    destroy_existing: PreparedStatement,
    destroy_absent: PreparedStatement,
    receipt_insert: PreparedStatement,
    receipt_get: PreparedStatement,
    live: PreparedStatement,
    rewrap: PreparedStatement,
}

type KeyRow = (
    Option<i32>,
    Option<String>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
);

impl KeyTable {
    /// Connects to the `[cql]` nodes and creates the keyspace and tables if they are missing:
    /// `sessionlog init`'s way in.
    pub async fn create(settings: &Settings) -> Result<Self> {
        Self::connect(settings, true).await
    }

    /// Connects to the key store `sessionlog init` created, changing no schema (a service's
    /// CQL role need not be allowed to): [`Error::NoKeyspace`] says to run init if it is missing.
    pub async fn open(settings: &Settings) -> Result<Self> {
        Self::connect(settings, false).await
    }

    async fn connect(settings: &Settings, create: bool) -> Result<Self> {
        let keyspace = settings.privacy.keyspace.clone();
        valid_keyspace_name(&keyspace)?;
        let session = session_for(&settings.cql, &[&keyspace]).await?;
        if create {
            let replicas = crate::connect::replication_factor(&settings.cql, &session);
            create_schema(&session, &keyspace, replicas).await?;
        } else if !crate::migrations::keyspace_exists(&session, &keyspace).await? {
            return Err(Error::NoKeyspace { keyspace });
        }
        Self::prepare_statements(session, keyspace, &settings.cql.consistency).await
    }

    async fn prepare_statements(
        session: Session,
        keyspace: String,
        consistency: &sessionlog_log::CqlConsistency,
    ) -> Result<Self> {
        let prepare = |cql: String, conditional: bool| {
            crate::connect::prepare_conditional_table(&session, cql, conditional, consistency)
        };
        let ks = &keyspace;
        let columns = "key_version, kek_id, wrapped, created_at_us, destroyed_at_us";
        Ok(Self {
            create: prepare(
                format!(
                    "INSERT INTO {ks}.data_keys (session_id, key_version, kek_id, wrapped, \
                     created_at_us) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
                ),
                true,
            )
            .await?,
            insert_fresh: prepare(
                format!(
                    "INSERT INTO {ks}.data_keys (session_id, key_version, kek_id, wrapped, \
                     created_at_us) VALUES (?, ?, ?, ?, ?)"
                ),
                false,
            )
            .await?,
            get: prepare(
                format!("SELECT {columns} FROM {ks}.data_keys WHERE session_id = ?"),
                false,
            )
            .await?,
            destroy_existing: prepare(
                format!(
                    "UPDATE {ks}.data_keys SET wrapped = null, kek_id = null, \
                     destroyed_at_us = ? WHERE session_id = ? IF EXISTS"
                ),
                true,
            )
            .await?,
            destroy_absent: prepare(
                format!(
                    "INSERT INTO {ks}.data_keys (session_id, destroyed_at_us) VALUES (?, ?) \
                     IF NOT EXISTS"
                ),
                true,
            )
            .await?,
            receipt_insert: prepare(
                format!(
                    "INSERT INTO {ks}.erasures (session_id, requested_by, reason, erased_at_us, \
                     erased_seq, log_partition, log_offset, destroyed_kek_id) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                false,
            )
            .await?,
            receipt_get: prepare(
                format!(
                    "SELECT requested_by, reason, erased_at_us, erased_seq, log_partition, \
                     log_offset, destroyed_kek_id FROM {ks}.erasures WHERE session_id = ?"
                ),
                false,
            )
            .await?,
            live: prepare(
                format!("SELECT session_id, {columns} FROM {ks}.data_keys"),
                false,
            )
            .await?,
            rewrap: prepare(
                format!(
                    "UPDATE {ks}.data_keys SET key_version = ?, kek_id = ?, wrapped = ? \
                     WHERE session_id = ? IF kek_id = ? AND wrapped = ?"
                ),
                true,
            )
            .await?,
            session: Arc::new(session),
            keyspace,
        })
    }

    /// The KEK that wraps the session's live key, if it has one.
    pub async fn wrapping_kek_id(&self, session: SessionId) -> Result<Option<String>> {
        Ok(match self.stored(session).await? {
            Some(StoredKey::Live(key)) => Some(key.kek_id),
            _ => None,
        })
    }

    /// The keyspace.
    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// The driver session, for tests that read every table.
    pub fn cql(&self) -> &Session {
        &self.session
    }

    async fn applied(
        &self,
        statement: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
        action: &'static str,
    ) -> Result<bool> {
        crate::connect::applied(&self.session, statement, values, action).await
    }

    async fn stored(&self, session: SessionId) -> Result<Option<StoredKey>> {
        let row = self
            .session
            .execute_unpaged(&self.get, (session.0,))
            .await
            .map_err(Error::cql("read data key"))?
            .into_rows_result()
            .map_err(Error::cql("read data key"))?
            .maybe_first_row::<KeyRow>()
            .map_err(Error::cql("read data key"))?;
        Ok(row.map(|row| to_stored(session, row)))
    }
}

/// Creates the key keyspace and its tables if they are missing.
async fn create_schema(session: &Session, keyspace: &str, replication_factor: u32) -> Result<()> {
    session
        .query_unpaged(create_keyspace_cql(keyspace, replication_factor), ())
        .await
        .map_err(Error::cql("create key keyspace"))?;
    for statement in SCHEMA {
        let cql = statement
            .replace("{ks}", keyspace)
            .replace("{gc}", &KEY_GC_GRACE_SECONDS.to_string());
        session
            .query_unpaged(cql, ())
            .await
            .map_err(Error::cql("create key tables"))?;
    }
    Ok(())
}

fn to_stored(
    session: SessionId,
    (version, kek_id, wrapped, created_at, destroyed_at): KeyRow,
) -> StoredKey {
    match (destroyed_at, kek_id, wrapped) {
        (None, Some(kek_id), Some(wrapped)) => StoredKey::Live(WrappedKey {
            version: u32::try_from(version.unwrap_or(1)).unwrap_or(1),
            kek_id,
            wrapped,
            created_at: created_at.unwrap_or_default(),
        }),
        (at, _, _) => {
            // A row without a key is a destroyed one; say so if its time is missing.
            if at.is_none() {
                tracing::warn!(%session, "data key row without a key or a destruction time");
            }
            StoredKey::Destroyed {
                at: at.unwrap_or_default(),
            }
        }
    }
}

/// The bound values of a data key's insert.
fn key_values(session: SessionId, key: &WrappedKey) -> (uuid::Uuid, i32, &str, &[u8], i64) {
    let version = i32::try_from(key.version).unwrap_or(i32::MAX);
    (
        session.0,
        version,
        key.kek_id.as_str(),
        key.wrapped.as_slice(),
        key.created_at,
    )
}

fn keys_error(error: Error) -> sessionlog_keys::Error {
    sessionlog_keys::Error::Store(Box::new(error))
}

impl DataKeyStore for KeyTable {
    fn create(
        &self,
        session: SessionId,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<StoredKey>> {
        async move {
            let values = key_values(session, &key);
            if self.applied(&self.create, values, "store data key").await? {
                return Ok(StoredKey::Live(key));
            }
            // Someone else's row is there: a key made first by another process, or the mark
            // of a destroyed one. Everyone uses what the store holds.
            self.stored(session)
                .await?
                .ok_or_else(|| Error::CorruptRow {
                    session: session.to_string(),
                    message: "a conditional insert found a row that a read does not".into(),
                })
        }
        .map(|r| r.map_err(keys_error))
        .boxed()
    }

    fn insert_fresh(
        &self,
        session: SessionId,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<()>> {
        async move {
            let values = key_values(session, &key);
            self.session
                .execute_unpaged(&self.insert_fresh, values)
                .await
                .map_err(Error::cql("store a new session's data key"))?;
            Ok(())
        }
        .map(|r| r.map_err(keys_error))
        .boxed()
    }

    fn get(&self, session: SessionId) -> BoxFuture<'_, sessionlog_keys::Result<Option<StoredKey>>> {
        self.stored(session).map(|r| r.map_err(keys_error)).boxed()
    }

    fn destroy(&self, receipt: ErasureReceipt) -> BoxFuture<'_, sessionlog_keys::Result<()>> {
        async move {
            let session = receipt.session_id.0;
            let at = now_micros();
            let mut destroyed = false;
            for _ in 0..LWT_ATTEMPTS {
                if self
                    .applied(&self.destroy_existing, (at, session), "destroy data key")
                    .await?
                    || self
                        .applied(&self.destroy_absent, (session, at), "destroy data key")
                        .await?
                {
                    destroyed = true;
                    break;
                }
            }
            if !destroyed {
                return Err(Error::CorruptRow {
                    session: session.to_string(),
                    message: "the data key row neither updates nor inserts; retry the erase".into(),
                });
            }
            self.session
                .execute_unpaged(
                    &self.receipt_insert,
                    (
                        session,
                        receipt.requested_by.as_str(),
                        receipt.reason.as_str(),
                        receipt.erased_at,
                        i64::try_from(receipt.erased_seq).unwrap_or(i64::MAX),
                        receipt.log_partition,
                        receipt.log_offset,
                        receipt.destroyed_kek_id.as_deref(),
                    ),
                )
                .await
                .map_err(Error::cql("record erasure"))?;
            Ok(())
        }
        .map(|r| r.map_err(keys_error))
        .boxed()
    }

    fn receipt(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, sessionlog_keys::Result<Option<ErasureReceipt>>> {
        async move {
            type ReceiptRow = (
                Option<String>,
                Option<String>,
                Option<i64>,
                Option<i64>,
                Option<i32>,
                Option<i64>,
                Option<String>,
            );
            let row = self
                .session
                .execute_unpaged(&self.receipt_get, (session.0,))
                .await
                .map_err(Error::cql("read erasure"))?
                .into_rows_result()
                .map_err(Error::cql("read erasure"))?
                .maybe_first_row::<ReceiptRow>()
                .map_err(Error::cql("read erasure"))?;
            Ok(row.map(
                |(requested_by, reason, erased_at, seq, partition, offset, kek)| ErasureReceipt {
                    session_id: session,
                    requested_by: requested_by.unwrap_or_default(),
                    reason: reason.unwrap_or_default(),
                    erased_at: erased_at.unwrap_or_default(),
                    erased_seq: seq.and_then(|s| u64::try_from(s).ok()).unwrap_or_default(),
                    log_partition: partition.unwrap_or_default(),
                    log_offset: offset.unwrap_or_default(),
                    destroyed_kek_id: kek,
                },
            ))
        }
        .map(|r| r.map_err(keys_error))
        .boxed()
    }

    fn live_keys(&self) -> BoxStream<'_, sessionlog_keys::Result<(SessionId, WrappedKey)>> {
        type LiveRow = (
            Uuid,
            Option<i32>,
            Option<String>,
            Option<Vec<u8>>,
            Option<i64>,
            Option<i64>,
        );
        let query = async move {
            let rows = self
                .session
                .execute_iter(self.live.clone(), ())
                .await
                .map_err(Error::cql("list data keys"))?
                .rows_stream::<LiveRow>()
                .map_err(Error::cql("list data keys"))?;
            Ok::<_, Error>(rows.map_err(Error::cql("list data keys")))
        };
        query
            .try_flatten_stream()
            .try_filter_map(
                |(session, version, kek, wrapped, created, destroyed)| async move {
                    let session = SessionId(session);
                    Ok(
                        match to_stored(session, (version, kek, wrapped, created, destroyed)) {
                            StoredKey::Live(key) => Some((session, key)),
                            StoredKey::Destroyed { .. } => None,
                        },
                    )
                },
            )
            .map_err(keys_error)
            .boxed()
    }

    fn rewrap(
        &self,
        session: SessionId,
        old: WrappedKey,
        key: WrappedKey,
    ) -> BoxFuture<'_, sessionlog_keys::Result<bool>> {
        async move {
            self.applied(
                &self.rewrap,
                (
                    i32::try_from(key.version).unwrap_or(i32::MAX),
                    key.kek_id.as_str(),
                    key.wrapped.as_slice(),
                    session.0,
                    old.kek_id.as_str(),
                    old.wrapped.as_slice(),
                ),
                "rewrap data key",
            )
            .await
        }
        .map(|r| r.map_err(keys_error))
        .boxed()
    }
}

/// The keyring the settings describe: `None` when `[privacy] encrypt = false`. Connects to the
/// key store only when encryption is on.
pub async fn keyring(
    settings: &Settings,
) -> crate::Result<Option<Arc<sessionlog_keys::Keyring>>, KeyringError> {
    // Check the KEK before connecting: a missing KEK is the likelier mistake, and says what to do.
    if sessionlog_keys::Keks::from_settings(&settings.privacy)?.is_none() {
        return Ok(None);
    }
    let table: Arc<dyn DataKeyStore> = Arc::new(KeyTable::open(settings).await?);
    Ok(sessionlog_keys::Keyring::from_settings(&settings.privacy, table)?.map(Arc::new))
}

/// Why a keyring could not be made: the KEK settings, or the key store.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// The `[privacy]` KEK settings.
    #[error(transparent)]
    Keys(#[from] sessionlog_keys::Error),
    /// The key store.
    #[error(transparent)]
    Store(#[from] Error),
}
