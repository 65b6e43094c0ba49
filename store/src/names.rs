//! Session names: a name of the caller's (`thread:<id>`) that finds a session, unique within
//! its tenant.
//!
//! Like the key store ([`crate::keys`]), this table needs a lightweight transaction: two
//! harnesses of one tenant creating a session for the same thread at once must end up with one
//! session, so a name is taken by a conditional insert, and every write to a row is
//! conditional (none mixes with a plain write). Unlike the key store it is restored from the
//! log: a start that took a name records its digest (schema v6), and the projector takes the
//! name again when it folds the start, so a replay into a fresh keyspace finds every session
//! by the name it had. The table is keyed by the digest
//! ([`sessionlog_schemas::session_name_sha256`]): names are often a user's own identifiers and
//! the table never holds one.

use crate::connect::applied;
use crate::{Error, ProjectionStore, Result};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use sessionlog_schemas::{SessionId, now_micros};
use std::sync::Arc;
use uuid::Uuid;

/// What taking a name found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameClaim {
    /// The name was free and is the session's now.
    Taken,
    /// A session held the name already (perhaps the one asked for: a retry).
    Held(SessionId),
}

/// The `session_names` table of a projection keyspace.
#[derive(Clone)]
pub struct SessionNames {
    session: Arc<Session>,
    claim: PreparedStatement,
    find: PreparedStatement,
    release: PreparedStatement,
}

impl SessionNames {
    /// Prepares the table's statements in `store`'s keyspace (migration 13 made it).
    pub async fn prepare(store: &ProjectionStore) -> Result<Self> {
        let ks = &store.keyspace;
        let session = &store.session;
        let prepare = |cql: String, conditional: bool| {
            crate::connect::prepare_conditional_table(session, cql, conditional, &store.consistency)
        };
        Ok(Self {
            claim: prepare(
                format!(
                    "INSERT INTO {ks}.session_names (tenant, name_sha256, session_id, named_at_us) \
                     VALUES (?, ?, ?, ?) IF NOT EXISTS"
                ),
                true,
            )
            .await?,
            // Serial: after a conditional insert lost, the winner's row is what is read.
            find: {
                let mut find = prepare(
                    format!(
                        "SELECT session_id FROM {ks}.session_names \
                         WHERE tenant = ? AND name_sha256 = ?"
                    ),
                    false,
                )
                .await?;
                find.set_consistency(crate::connect::serial_read_level(store.consistency.serial));
                find
            },
            release: prepare(
                format!(
                    "DELETE FROM {ks}.session_names WHERE tenant = ? AND name_sha256 = ? \
                     IF session_id = ?"
                ),
                true,
            )
            .await?,
            session: Arc::clone(&store.session),
        })
    }

    /// Gives `session` the name whose digest is `name_sha256` in `tenant`, unless a session
    /// holds it already.
    pub async fn claim(
        &self,
        tenant: &str,
        name_sha256: &str,
        session: SessionId,
    ) -> Result<NameClaim> {
        let values = (tenant, name_sha256, session.0, now_micros());
        if applied(&self.session, &self.claim, values, "take a session name").await? {
            return Ok(NameClaim::Taken);
        }
        match self.find(tenant, name_sha256).await? {
            Some(holder) => Ok(NameClaim::Held(holder)),
            // Released between the two statements (an erasure): the caller may try again.
            None => Err(Error::Contended {
                what: "session name",
            }),
        }
    }

    /// The session holding the name, if any.
    pub async fn find(&self, tenant: &str, name_sha256: &str) -> Result<Option<SessionId>> {
        let row = self
            .session
            .execute_unpaged(&self.find, (tenant, name_sha256))
            .await
            .map_err(Error::cql("find a session by name"))?
            .into_rows_result()
            .map_err(Error::cql("find a session by name"))?
            .maybe_first_row::<(Option<Uuid>,)>()
            .map_err(Error::cql("find a session by name"))?;
        Ok(row.and_then(|(id,)| id).map(SessionId))
    }

    /// Frees the name if `session` holds it (an erasure, or a create that could not start the
    /// session it named); a name another session holds is left alone.
    pub async fn release(&self, tenant: &str, name_sha256: &str, session: SessionId) -> Result<()> {
        applied(
            &self.session,
            &self.release,
            (tenant, name_sha256, session.0),
            "free a session name",
        )
        .await?;
        Ok(())
    }
}
