//! The two ways into the store: one that migrates (writers) and one that only opens an
//! existing, migrated keyspace (readers).

use crate::answering::AnsweringNodes;
use crate::migrations;
use crate::statements::{Reads, Writes};
use crate::{DriverError, Error, Result};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use sessionlog_log::{ConsistencyLevel, CqlConsistency, CqlSettings, SerialConsistencyLevel};
use std::sync::Arc;
use std::time::Duration;

/// Reads and writes the projection tables of one keyspace. Cheap to clone.
#[derive(Clone)]
pub struct ProjectionStore {
    pub(crate) session: Arc<Session>,
    pub(crate) keyspace: String,
    pub(crate) reads: Arc<Reads>,
    /// Absent when opened read-only.
    pub(crate) writes: Option<Arc<Writes>>,
    /// The names table's statements, prepared on first use ([`Self::names`]).
    pub(crate) names: Arc<tokio::sync::OnceCell<crate::SessionNames>>,
    /// `[cql.consistency]`, for the statements prepared on first use.
    pub(crate) consistency: CqlConsistency,
}

/// The hint of a connect error that is no answer rather than a refusal (`sessionlog`'s exit
/// status reads it as a server unavailable).
pub(crate) const UNREACHABLE_HINT: &str = "is the store up? cql.nodes (SESSIONLOG_CQL__NODES) \
     names it; a node that requires TLS needs cql.tls_ca_file";

/// How long a session has to open through one contact point. The driver bounds the TCP connect
/// (`connection_timeout`) but not what follows it; contact points that accept connections
/// without answering are passed over ([`AnsweringNodes`]), and this bounds the rest (a silent
/// node that `cql.nodes` does not list).
const CONTACT_DEADLINE: Duration = Duration::from_secs(20);

/// A session that keeps schema metadata for `keyspaces` only. The driver refreshes that metadata
/// after each schema change it makes and every minute; unfiltered, it reads the schema of every
/// keyspace in the cluster each time, so a cluster shared with other applications (or a test
/// run's hundreds of keyspaces) made every migration statement slower than the last.
///
/// The contact points are tried one at a time, each within [`CONTACT_DEADLINE`]: the first that
/// answers introduces the rest of the cluster, and one that does not answer is passed over.
pub(crate) async fn session_for(settings: &CqlSettings, keyspaces: &[&str]) -> Result<Session> {
    let contacts = settings.node_list();
    let answering = AnsweringNodes::probe(&contacts).await;
    let mut failure: Option<DriverError> = None;
    for contact in &contacts {
        let mut builder = SessionBuilder::new()
            .known_node(contact)
            .host_filter(answering.clone())
            .keyspaces_to_fetch(keyspaces.iter().map(|k| k.to_lowercase()))
            .connection_timeout(Duration::from_secs(10));
        if !settings.username.is_empty() {
            builder = builder.user(&settings.username, settings.password.expose());
        }
        if !settings.tls_ca_file.is_empty() {
            builder = builder.tls_context(Some(tls_config(&settings.tls_ca_file)?));
        }
        match tokio::time::timeout(CONTACT_DEADLINE, builder.build()).await {
            Ok(Ok(session)) => return Ok(session),
            Ok(Err(e)) => {
                // A refusal of our credentials or certificates is the same at every node.
                let refused = connect_hint(&e.to_string()) != UNREACHABLE_HINT;
                failure = Some(e.into());
                if refused {
                    break;
                }
            }
            Err(_) => {
                let waited = CONTACT_DEADLINE.as_secs();
                tracing::warn!(%contact, "no CQL session through it within {waited}s; trying the next");
                failure = Some(
                    format!(
                        "no session opened through {contact} within {waited}s: a node of the \
                         cluster accepts connections but does not answer (stopped, or cut off?); \
                         list every node in cql.nodes so that a silent one is passed over"
                    )
                    .into(),
                );
            }
        }
    }
    let source = failure.unwrap_or_else(|| "cql.nodes lists no contact point".into());
    Err(Error::Connect {
        nodes: settings.nodes.clone(),
        hint: connect_hint(&source.to_string()),
        source,
    })
}

/// The settings most likely to fix a connection error, judged from its text.
fn connect_hint(error: &str) -> &'static str {
    let text = error.to_ascii_lowercase();
    if text.contains("authenticat") || text.contains("credentials") {
        "check cql.username and cql.password (SESSIONLOG_CQL__USERNAME, SESSIONLOG_CQL__PASSWORD)"
    } else if text.contains("certificate") || text.contains("tls") || text.contains("ssl") {
        "check cql.tls_ca_file (SESSIONLOG_CQL__TLS_CA_FILE): the CA that signed the nodes' \
         certificates, or none for a node without TLS"
    } else {
        UNREACHABLE_HINT
    }
}

/// A TLS client configuration that trusts only the CAs in `ca_file` and verifies each node's
/// certificate against the address it is reached at.
fn tls_config(ca_file: &str) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |message: String| Error::TlsCaFile {
        path: ca_file.to_string(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| bad(e.to_string()))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certificates.is_empty() {
        return Err(bad("no certificate in the file".into()));
    }
    for certificate in certificates {
        roots.add(certificate).map_err(|e| bad(e.to_string()))?;
    }
    // The provider is named: with more than one compiled in, rustls cannot pick a default.
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

impl ProjectionStore {
    /// Connects, creates the keyspace if needed, applies pending migrations and prepares every
    /// statement. For the writers: `sessionlog init`, `sessionlog project`, a replay's target.
    #[tracing::instrument(skip_all, fields(keyspace = %settings.keyspace))]
    pub async fn migrate(settings: &CqlSettings) -> Result<Self> {
        migrations::valid_keyspace_name(&settings.keyspace)?;
        let session = session_for(settings, &[&settings.keyspace]).await?;
        let keyspace = settings.keyspace.clone();
        migrations::migrate(&session, &keyspace, replication_factor(settings, &session)).await?;
        let (reads, writes) = futures::try_join!(
            Reads::prepare(&session, &keyspace, level(settings.consistency.reads)),
            Writes::prepare(
                &session,
                &keyspace,
                None,
                level(settings.consistency.writes)
            )
        )?;
        Ok(Self {
            session: Arc::new(session),
            keyspace,
            reads: Arc::new(reads),
            writes: Some(Arc::new(writes)),
            names: Default::default(),
            consistency: settings.consistency.clone(),
        })
    }

    /// Connects to an existing keyspace that has every migration of this build, changing
    /// nothing; fails with [`Error::NoKeyspace`] or [`Error::SchemaBehind`] (which say the
    /// command that fixes them) otherwise. Prepares only reads, so a read-only CQL role can
    /// use it. For `inspect`, `verify`, recovery and the other commands that only read.
    #[tracing::instrument(skip_all, fields(keyspace = %settings.keyspace))]
    pub async fn open(settings: &CqlSettings) -> Result<Self> {
        migrations::valid_keyspace_name(&settings.keyspace)?;
        let session = session_for(settings, &[&settings.keyspace]).await?;
        let keyspace = settings.keyspace.clone();
        migrations::check(&session, &keyspace).await?;
        let reads = Reads::prepare(&session, &keyspace, level(settings.consistency.reads)).await?;
        Ok(Self {
            session: Arc::new(session),
            keyspace,
            reads: Arc::new(reads),
            writes: None,
            names: Default::default(),
            consistency: settings.consistency.clone(),
        })
    }

    /// This store, writing the rows of ended sessions `USING TTL ttl` seconds (`[retention]
    /// ended_session_ttl_secs`; `None`: they never expire). Prepares the writes again.
    pub async fn with_ended_session_ttl(mut self, ttl: Option<u32>) -> Result<Self> {
        let current = self.writes()?;
        if current.ttl != ttl {
            let writes =
                Writes::prepare(&self.session, &self.keyspace, ttl, current.consistency).await?;
            self.writes = Some(Arc::new(writes));
        }
        Ok(self)
    }

    /// Whether rows of ended sessions are written with a TTL (see
    /// [`ProjectionStore::with_ended_session_ttl`]).
    pub fn expires_ended_sessions(&self) -> bool {
        self.writes.as_ref().is_some_and(|w| w.ttl.is_some())
    }

    /// The keyspace read and written.
    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// The driver session, for tests and benchmarks that need statements the store does not
    /// offer. Production code reads and writes through the store's typed methods.
    pub fn cql(&self) -> &Session {
        &self.session
    }

    /// Whether `keyspace` exists on the cluster (it may still lack migrations).
    pub async fn keyspace_exists(&self, keyspace: &str) -> Result<bool> {
        migrations::keyspace_exists(&self.session, keyspace).await
    }

    /// Asks a CQL node a trivial question: whether the store answers, for a readiness check.
    pub async fn ping(&self) -> Result<()> {
        self.session
            .query_unpaged("SELECT release_version FROM system.local", ())
            .await
            .map_err(Error::cql("ping"))?;
        Ok(())
    }

    /// Checks, changing nothing, that `keyspace` exists and has every migration of this build.
    pub async fn check_keyspace(&self, keyspace: &str) -> Result<()> {
        migrations::check(&self.session, keyspace).await
    }

    /// Drops `keyspace` and everything in it, if it exists: for tests and benchmarks that
    /// clean up after themselves.
    pub async fn drop_keyspace(&self, keyspace: &str) -> Result<()> {
        migrations::valid_keyspace_name(keyspace)?;
        self.session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await
            .map_err(Error::cql("drop keyspace"))?;
        Ok(())
    }

    pub(crate) fn writes(&self) -> Result<&Writes> {
        self.writes.as_deref().ok_or_else(|| Error::ReadOnly {
            keyspace: self.keyspace.clone(),
        })
    }
}

impl ProjectionStore {
    /// The session names of this keyspace (see [`crate::names`]); its statements are prepared
    /// on the first call. Written by ingest and the projector, which need no writer's store:
    /// ingest opens the store for reading.
    pub async fn names(&self) -> Result<&crate::SessionNames> {
        self.names
            .get_or_try_init(|| crate::SessionNames::prepare(self))
            .await
    }
}

/// The replication factor a keyspace is created with: `cql.replication_factor` when set, else
/// as many replicas as the smallest data center of the cluster has nodes, at most three.
pub(crate) fn replication_factor(settings: &CqlSettings, session: &Session) -> u32 {
    settings.replication_factor.unwrap_or_else(|| {
        let state = session.get_cluster_state();
        let mut per_datacenter = std::collections::BTreeMap::<Option<&str>, usize>::new();
        for node in state.get_nodes_info() {
            *per_datacenter
                .entry(node.datacenter.as_deref())
                .or_default() += 1;
        }
        let smallest = per_datacenter.values().copied().min().unwrap_or(1);
        u32::try_from(smallest.clamp(1, 3)).unwrap_or(1)
    })
}

/// The driver's consistency for a level of the settings.
pub(crate) fn level(level: ConsistencyLevel) -> scylla::statement::Consistency {
    use scylla::statement::Consistency;
    match level {
        ConsistencyLevel::One => Consistency::One,
        ConsistencyLevel::LocalOne => Consistency::LocalOne,
        ConsistencyLevel::Quorum => Consistency::Quorum,
        ConsistencyLevel::LocalQuorum => Consistency::LocalQuorum,
        ConsistencyLevel::EachQuorum => Consistency::EachQuorum,
        ConsistencyLevel::All => Consistency::All,
    }
}

/// The driver's serial consistency for a level of the settings.
pub(crate) fn serial_level(level: SerialConsistencyLevel) -> scylla::statement::SerialConsistency {
    use scylla::statement::SerialConsistency;
    match level {
        SerialConsistencyLevel::Serial => SerialConsistency::Serial,
        SerialConsistencyLevel::LocalSerial => SerialConsistency::LocalSerial,
    }
}

/// The same level as a read's consistency: a read at it sees every conditional write that
/// completed, and completes one in progress.
pub(crate) fn serial_read_level(level: SerialConsistencyLevel) -> scylla::statement::Consistency {
    use scylla::statement::Consistency;
    match level {
        SerialConsistencyLevel::Serial => Consistency::Serial,
        SerialConsistencyLevel::LocalSerial => Consistency::LocalSerial,
    }
}

/// Prepares a statement of a table whose rows are written only conditionally (the key store,
/// the names): at `[cql.consistency] keys`, with `serial` for the conditional writes; the
/// plain reads may be retried by the driver, the conditional writes may not.
pub(crate) async fn prepare_conditional_table(
    session: &Session,
    cql: String,
    conditional: bool,
    consistency: &CqlConsistency,
) -> Result<scylla::statement::prepared::PreparedStatement> {
    let mut statement = session.prepare(cql).await.map_err(Error::cql("prepare"))?;
    statement.set_consistency(level(consistency.keys));
    if conditional {
        statement.set_serial_consistency(Some(serial_level(consistency.serial)));
    } else {
        statement.set_is_idempotent(true);
    }
    Ok(statement)
}

/// Runs a conditional write and says whether it applied.
pub(crate) async fn applied(
    session: &Session,
    statement: &scylla::statement::prepared::PreparedStatement,
    values: impl scylla::serialize::row::SerializeRow,
    action: &'static str,
) -> Result<bool> {
    use scylla::value::{CqlValue, Row};
    let result = session
        .execute_unpaged(statement, values)
        .await
        .map_err(Error::cql(action))?
        .into_rows_result()
        .map_err(Error::cql(action))?;
    // The first column of a conditional write's answer is `[applied]`; the others (the row
    // that made it fail) differ between Cassandra and ScyllaDB, so they are not read.
    let row = result.first_row::<Row>().map_err(Error::cql(action))?;
    Ok(matches!(
        row.columns.first(),
        Some(Some(CqlValue::Boolean(true)))
    ))
}
