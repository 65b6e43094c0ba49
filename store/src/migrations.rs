//! Versioned, idempotent schema migrations of the projection keyspace.
//!
//! CQL that runs unchanged on ScyllaDB and Cassandra: no LWT, no materialized views,
//! no SASI, and column names that are keywords in neither (`log_offset`, not `offset`).
//! A migration is applied once; its version is recorded in `schema_migrations`. Every
//! statement is `IF NOT EXISTS` (a drop `IF EXISTS`), and a column is added only if `system_schema.columns` lacks
//! it (`ADD IF NOT EXISTS` is not portable), so a migration interrupted half-way can simply run
//! again.
//!
//! [`migrate`] creates the keyspace and applies what is missing: only the writers' way in
//! (`sessionlog init`, `sessionlog project`, a replay's target). [`check`] is the readers' way:
//! it changes nothing and says which command fixes a missing or outdated keyspace.

use crate::{Error, Result};
use scylla::client::session::Session;
use sessionlog_log::retry::{self, Retryable};
use std::time::Duration;

/// One migration: a version and the statements that bring the keyspace to it.
pub struct Migration {
    /// Monotonic version number.
    pub version: i32,
    /// What it does.
    pub description: &'static str,
    /// The statements; `{ks}` stands for the keyspace.
    pub statements: &'static [&'static str],
    /// Columns added to existing tables, after the statements.
    pub columns: &'static [AddedColumn],
}

/// A column a migration adds to an existing table.
pub struct AddedColumn {
    /// The table.
    pub table: &'static str,
    /// The new column's name.
    pub column: &'static str,
    /// Its CQL type.
    pub cql_type: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "sessions, event index, writer claims, checkpoints, rejected events",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.sessions (
            session_id uuid PRIMARY KEY,
            status text,
            agent text,
            title text,
            epoch bigint,
            writer text,
            last_seq bigint,
            parent_session_id uuid,
            parent_seq bigint,
            started_at_us bigint,
            updated_at_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            pending_calls int,
            pending_approvals int,
            log_partition int,
            applied_offset bigint,
            state_digest text,
            state_json text)",
            "CREATE TABLE IF NOT EXISTS {ks}.event_index (
            session_id uuid,
            seq bigint,
            log_partition int,
            log_offset bigint,
            kind text,
            event_id uuid,
            epoch bigint,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), seq))",
            "CREATE TABLE IF NOT EXISTS {ks}.writer_claims (
            session_id uuid,
            epoch bigint,
            writer text,
            log_partition int,
            log_offset bigint,
            event_id uuid,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), epoch))",
            "CREATE TABLE IF NOT EXISTS {ks}.checkpoints (
            session_id uuid,
            seq bigint,
            log_partition int,
            log_offset bigint,
            declared_digest text,
            computed_digest text,
            verified boolean,
            state_json text,
            PRIMARY KEY ((session_id), seq))
            WITH CLUSTERING ORDER BY (seq DESC)",
            "CREATE TABLE IF NOT EXISTS {ks}.rejected_events (
            session_id uuid,
            log_partition int,
            log_offset bigint,
            seq bigint,
            epoch bigint,
            event_id uuid,
            kind text,
            label text,
            reason text,
            PRIMARY KEY ((session_id), log_partition, log_offset))",
        ],
        columns: &[],
    },
    Migration {
        version: 2,
        description: "trace spans by session and by day, context view, partition progress",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_session (
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            start_us bigint,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            PRIMARY KEY ((session_id), span_seq))",
            // Analytics read a day at a time; spans of a day sort by start.
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_day (
            day text,
            start_us bigint,
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            PRIMARY KEY ((day), start_us, session_id, span_seq))",
            "CREATE TABLE IF NOT EXISTS {ks}.context_view (
            session_id uuid PRIMARY KEY,
            applied_offset bigint,
            last_seq bigint,
            plan text,
            recent_turns text,
            unresolved_calls text,
            older_ranges text,
            left_out text)",
            "CREATE TABLE IF NOT EXISTS {ks}.partition_progress (
            topic text,
            log_partition int,
            next_offset bigint,
            PRIMARY KEY ((topic), log_partition))",
        ],
        columns: &[],
    },
    Migration {
        version: 3,
        description: "claim seqs (to rebuild the duplicate window); context turns as rows",
        statements: &[
            // The context view's turns, one row each, written once: rewriting the whole window
            // with every batch was most of what the projector sent. The view row names the
            // first turn of its window (`first_turn_seq`) and stops filling `recent_turns`.
            "CREATE TABLE IF NOT EXISTS {ks}.context_turns (
            session_id uuid,
            seq bigint,
            role text,
            name text,
            call_seq bigint,
            text text,
            truncated boolean,
            sealed boolean,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), seq))",
        ],
        columns: &[
            AddedColumn {
                table: "writer_claims",
                column: "claim_seq",
                cql_type: "bigint",
            },
            AddedColumn {
                table: "context_view",
                column: "first_turn_seq",
                cql_type: "bigint",
            },
        ],
    },
    Migration {
        version: 4,
        description: "lists the projector maintains: a session's children, sessions awaiting someone",
        statements: &[
            // A session's forks, written when the child's `SessionForked` is projected: listing
            // them is one partition read instead of a scan of every session.
            "CREATE TABLE IF NOT EXISTS {ks}.session_children (
            parent_session_id uuid,
            child_session_id uuid,
            parent_seq bigint,
            PRIMARY KEY ((parent_session_id), child_session_id))",
            // Sessions waiting for a person, by whom they wait for (`approval` or `operator`):
            // a row is inserted when the folded status enters the wait and deleted when it
            // leaves, both `USING TIMESTAMP` the event's offset. The set is small, but every
            // wait leaves a tombstone in its partition: a shorter grace period than the default
            // ten days keeps reads of the list from wading through them.
            "CREATE TABLE IF NOT EXISTS {ks}.sessions_awaiting (
            waiting_for text,
            session_id uuid,
            since_seq bigint,
            since_us bigint,
            PRIMARY KEY ((waiting_for), session_id))
            WITH gc_grace_seconds = 86400",
        ],
        columns: &[],
    },
    Migration {
        version: 5,
        description: "sealed content of context turns",
        statements: &[],
        // A sealed turn's ciphertext, whole, as JSON: a reader with the session's key opens it
        // and cuts it to the view's length (plain turns keep using `text`).
        columns: &[AddedColumn {
            table: "context_turns",
            column: "sealed_text",
            cql_type: "text",
        }],
    },
    Migration {
        version: 6,
        description: "where a partition's dead letters not yet covered by its progress begin",
        statements: &[],
        // The dead-letter topic's offset (in the dead-letter partition of this partition)
        // from which a restarted projector looks for dead letters it sent before it crashed,
        // so that it does not send them again.
        columns: &[AddedColumn {
            table: "partition_progress",
            column: "dead_letter_mark",
            cql_type: "bigint",
        }],
    },
    Migration {
        version: 7,
        description: "the key and timestamp of the last record each partition's progress covers",
        statements: &[],
        // Progress is keyed by topic name; these tell the topic it was made on from one
        // deleted and created again under that name (see `ProjectionStore::check_topic`).
        columns: &[
            AddedColumn {
                table: "partition_progress",
                column: "last_key",
                cql_type: "text",
            },
            AddedColumn {
                table: "partition_progress",
                column: "last_timestamp_ms",
                cql_type: "bigint",
            },
        ],
    },
    Migration {
        version: 8,
        description: "the context view's summaries and policy, and the view at each checkpoint",
        statements: &[],
        // The view at a checkpoint lets recovery build a view (a resumed session's, a fork's
        // parent's at the fork point) from the checkpoint on, not from the session's start.
        columns: &[
            AddedColumn {
                table: "checkpoints",
                column: "context_json",
                cql_type: "text",
            },
            AddedColumn {
                table: "context_view",
                column: "summaries",
                cql_type: "text",
            },
            AddedColumn {
                table: "context_view",
                column: "policy",
                cql_type: "text",
            },
        ],
    },
    Migration {
        version: 9,
        description: "spans with their log positions and parent; a day's spans spread over buckets",
        statements: &[
            // One day's spans of the whole fleet in one partition grew without bound; this
            // table spreads a day over `[projector] trace_day_buckets` partitions by session
            // id. `trace_spans_by_day` keeps what was projected before and is no longer
            // written (a replay into a fresh keyspace puts those spans here too).
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_day_bucket (
            day text,
            bucket int,
            start_us bigint,
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            agent text,
            parent_seq bigint,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            log_partition int,
            open_offset bigint,
            close_offset bigint,
            PRIMARY KEY ((day, bucket), start_us, session_id, span_seq))",
            // The buckets each day's spans went to: a reader queries those, whatever the
            // bucket count was when they were written.
            "CREATE TABLE IF NOT EXISTS {ks}.trace_day_buckets (
            day text,
            bucket int,
            PRIMARY KEY ((day), bucket))",
        ],
        columns: &[
            AddedColumn {
                table: "trace_spans_by_session",
                column: "parent_seq",
                cql_type: "bigint",
            },
            AddedColumn {
                table: "trace_spans_by_session",
                column: "log_partition",
                cql_type: "int",
            },
            AddedColumn {
                table: "trace_spans_by_session",
                column: "open_offset",
                cql_type: "bigint",
            },
            AddedColumn {
                table: "trace_spans_by_session",
                column: "close_offset",
                cql_type: "bigint",
            },
            // The parent of the next tool call's span: the projector's, not the session's
            // canonical state (whose digest checkpoints declare).
            AddedColumn {
                table: "sessions",
                column: "last_model_seq",
                cql_type: "bigint",
            },
        ],
    },
    Migration {
        version: 10,
        description: "usage rollups by day and model, agent or tool",
        statements: &[
            // One row per rollup key and log partition: each partition's worker owns its rows
            // and notes the last offset folded into each, so a batch folded twice counts once;
            // readers add the partitions' rows up. A tenant's rows cluster together, for a
            // tenant's credential to read only its own. `latency` is the sketch as JSON.
            "CREATE TABLE IF NOT EXISTS {ks}.usage_rollups (
            day text,
            dimension text,
            tenant text,
            key text,
            log_partition int,
            calls bigint,
            errors bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            latency text,
            applied_offset bigint,
            PRIMARY KEY ((day, dimension), tenant, key, log_partition))",
        ],
        columns: &[],
    },
    Migration {
        version: 11,
        description: "settings the projection's rows depend on; the tenant of spans by day",
        statements: &[
            // A setting that decides where rows go (a day's span buckets) is fixed for the
            // keyspace by the first writer: a writer with another value refuses to start, so a
            // span's opening and closing writes never land in different partitions.
            "CREATE TABLE IF NOT EXISTS {ks}.projection_settings (
            name text PRIMARY KEY,
            value text)",
        ],
        // The session's tenant on its spans by day: a tenant's credential lists its own.
        columns: &[AddedColumn {
            table: "trace_spans_by_day_bucket",
            column: "tenant",
            cql_type: "text",
        }],
    },
    Migration {
        version: 12,
        description: "every session id ever started, kept for good: an id is started once",
        statements: &[
            // A few bytes per session and never given a TTL: when an ended session's rows
            // expire (`[retention] ended_session_ttl_secs`), this row still says the id was
            // started, and where, so no second start of it is accepted and recovery reads the
            // session from the log. Sessions started before migration 12 appear after a replay.
            "CREATE TABLE IF NOT EXISTS {ks}.session_starts (
            session_id uuid PRIMARY KEY,
            log_partition int,
            start_offset bigint)",
        ],
        columns: &[],
    },
    Migration {
        version: 13,
        description: "session names, unique within a tenant",
        statements: &[
            // A framework finds its session by a name of its own (`thread:<id>`), unique
            // within the tenant: written by a conditional insert when a named session is
            // created (see crate::names), restored from the start's digest by a replay.
            // Keyed by the name's digest: the table never holds the name.
            "CREATE TABLE IF NOT EXISTS {ks}.session_names (
            tenant text,
            name_sha256 text,
            session_id uuid,
            named_at_us bigint,
            PRIMARY KEY ((tenant, name_sha256)))",
        ],
        columns: &[],
    },
    Migration {
        version: 14,
        description: "spans by tenant, day and bucket: a tenant's listing reads its own partitions",
        statements: &[
            // `trace_spans_by_day_bucket` holds every tenant's spans of a day in the same
            // partitions, so a tenant's listing read (and filtered out) the whole fleet's. Here
            // the tenant leads the partition key, and a tenant's day is still spread over
            // `[projector] trace_day_buckets` partitions by session id, so a large tenant's day
            // does not grow one partition without bound. `trace_spans_by_day_bucket` keeps what
            // was projected before and is no longer written (a replay into a fresh keyspace
            // puts those spans here too).
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_tenant_day (
            tenant text,
            day text,
            bucket int,
            start_us bigint,
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            agent text,
            parent_seq bigint,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            log_partition int,
            open_offset bigint,
            close_offset bigint,
            PRIMARY KEY ((tenant, day, bucket), start_us, session_id, span_seq))",
            // The (tenant, bucket) partitions each day's spans went to, clustered by tenant: a
            // tenant's listing reads its slice of the day, an operator's the whole day. One
            // partition per day, of tenants times buckets rows at most.
            "CREATE TABLE IF NOT EXISTS {ks}.trace_tenant_day_buckets (
            day text,
            tenant text,
            bucket int,
            PRIMARY KEY ((day), tenant, bucket))",
        ],
        columns: &[],
    },
    Migration {
        version: 15,
        description: "the span tables no longer written dropped: spans by day, by day and bucket",
        statements: &[
            // Nothing has written these since migrations 9 and 14, and nothing reads them: they
            // only held spans projected before, which `/v1/spans` never listed. A replay into a
            // fresh keyspace puts those spans in `trace_spans_by_tenant_day`.
            "DROP TABLE IF EXISTS {ks}.trace_spans_by_day",
            "DROP TABLE IF EXISTS {ks}.trace_spans_by_day_bucket",
            "DROP TABLE IF EXISTS {ks}.trace_day_buckets",
        ],
        columns: &[],
    },
];

/// The newest migration this build knows.
pub fn latest_version() -> i32 {
    MIGRATIONS
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or_default()
}

/// Whether `name` may be put into statements unquoted: CQL's unquoted identifiers, within
/// the 48 characters a keyspace name may have.
pub fn valid_keyspace_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48;
    if ok {
        Ok(())
    } else {
        Err(Error::BadKeyspaceName {
            keyspace: name.to_string(),
        })
    }
}

/// The statement that creates `keyspace` if it is missing, with `replication_factor` replicas
/// in every data center: `NetworkTopologyStrategy` with the `replication_factor` shorthand,
/// which Cassandra (4.0 and later) and ScyllaDB both accept. Not `SimpleStrategy`: ScyllaDB
/// refuses it for keyspaces that use tablets, the default since 2025.4. A keyspace an older
/// build created with `SimpleStrategy` is left as it is (`IF NOT EXISTS`) and keeps working.
/// Every keyspace we create (the projections', a replay's, the key store's) is made by it.
pub fn create_keyspace_cql(keyspace: &str, replication_factor: u32) -> String {
    format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
         {{'class': 'NetworkTopologyStrategy', 'replication_factor': {replication_factor}}}"
    )
}

/// Whether `keyspace` exists (both Cassandra and ScyllaDB list keyspaces in
/// `system_schema.keyspaces`, by their lower-case name).
pub async fn keyspace_exists(session: &Session, keyspace: &str) -> Result<bool> {
    let rows = session
        .query_unpaged(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (keyspace.to_lowercase(),),
        )
        .await
        .map_err(Error::cql("read schema"))?
        .into_rows_result()
        .map_err(Error::cql("read schema"))?;
    Ok(rows.rows_num() > 0)
}

/// The migrations `keyspace` records as applied (none when it has no `schema_migrations`).
async fn applied(session: &Session, keyspace: &str) -> Result<Vec<i32>> {
    if !has_table(session, keyspace, "schema_migrations").await? {
        return Ok(Vec::new());
    }
    Ok(session
        .query_unpaged(
            format!("SELECT version FROM {keyspace}.schema_migrations"),
            (),
        )
        .await
        .map_err(Error::cql("read migrations"))?
        .into_rows_result()
        .map_err(Error::cql("read migrations"))?
        .rows::<(i32,)>()
        .map_err(Error::cql("read migrations"))?
        .filter_map(|r| r.ok().map(|(v,)| v))
        .collect())
}

/// Checks, changing nothing, that `keyspace` exists and has every migration of this build.
pub async fn check(session: &Session, keyspace: &str) -> Result<()> {
    valid_keyspace_name(keyspace)?;
    if !keyspace_exists(session, keyspace).await? {
        return Err(Error::NoKeyspace {
            keyspace: keyspace.to_string(),
        });
    }
    let applied = applied(session, keyspace).await?;
    let missing = MIGRATIONS.iter().any(|m| !applied.contains(&m.version));
    if missing {
        return Err(Error::SchemaBehind {
            keyspace: keyspace.to_string(),
            found: applied.iter().copied().max().unwrap_or_default(),
            wanted: latest_version(),
        });
    }
    Ok(())
}

/// Creates the keyspace and applies every migration not yet recorded.
pub async fn migrate(session: &Session, ks: &str, replication_factor: u32) -> Result<()> {
    migrate_through(session, ks, replication_factor, latest_version()).await
}

/// Creates the keyspace and applies the migrations not yet recorded up to `version`: what an
/// older build left (tests of upgrades start from it).
pub async fn migrate_through(
    session: &Session,
    ks: &str,
    replication_factor: u32,
    version: i32,
) -> Result<()> {
    valid_keyspace_name(ks)?;
    let ddl = |cql: String| async move {
        session
            .query_unpaged(cql, ())
            .await
            .map_err(Error::cql("migrate"))?;
        Ok::<_, Error>(())
    };
    ddl(create_keyspace_cql(ks, replication_factor)).await?;
    ddl(format!(
        "CREATE TABLE IF NOT EXISTS {ks}.schema_migrations (
            version int PRIMARY KEY, description text, applied_at_us bigint)"
    ))
    .await?;
    session
        .await_schema_agreement()
        .await
        .map_err(Error::cql("schema agreement"))?;
    let applied = applied(session, ks).await?;
    let pending: Vec<&Migration> = MIGRATIONS
        .iter()
        .filter(|m| m.version <= version && !applied.contains(&m.version))
        .collect();
    for migration in &pending {
        for statement in migration.statements {
            ddl(statement.replace("{ks}", ks)).await?;
        }
        for added in migration.columns {
            let AddedColumn {
                table,
                column,
                cql_type,
            } = added;
            if !has_column(session, ks, table, column).await? {
                // Another process (a second projector, a replay) may add it at the same
                // moment: its error is not ours if the column is there afterwards.
                let added = ddl(format!("ALTER TABLE {ks}.{table} ADD {column} {cql_type}")).await;
                if let Err(e) = added
                    && !has_column(session, ks, table, column).await?
                {
                    return Err(e);
                }
            }
            await_column(session, ks, table, column).await?;
        }
        session
            .await_schema_agreement()
            .await
            .map_err(Error::cql("schema agreement"))?;
        session
            .query_unpaged(
                format!(
                    "INSERT INTO {ks}.schema_migrations (version, description, applied_at_us) VALUES (?, ?, ?)"
                ),
                (migration.version, migration.description, sessionlog_schemas::now_micros()),
            )
            .await
            .map_err(Error::cql("record migration"))?;
        // Each step is routine: the summary below says what changed.
        tracing::debug!(
            version = migration.version,
            description = migration.description,
            keyspace = ks,
            "applied CQL migration"
        );
    }
    let at = applied
        .iter()
        .chain(pending.iter().map(|m| &m.version))
        .copied()
        .max()
        .unwrap_or_default();
    if pending.is_empty() {
        tracing::debug!(
            keyspace = ks,
            schema_version = at,
            "CQL keyspace up to date"
        );
    } else {
        tracing::info!(
            "keyspace {ks}: {} CQL migration(s) applied, schema version {at}",
            pending.len()
        );
    }
    Ok(())
}

/// Whether `ks.table` exists.
async fn has_table(session: &Session, ks: &str, table: &str) -> Result<bool> {
    let rows = session
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
            (ks.to_lowercase(), table),
        )
        .await
        .map_err(Error::cql("read schema"))?
        .into_rows_result()
        .map_err(Error::cql("read schema"))?;
    Ok(rows.rows_num() > 0)
}

/// Whether `ks.table` has `column` (both Cassandra and ScyllaDB describe columns in
/// `system_schema.columns`).
async fn has_column(session: &Session, ks: &str, table: &str, column: &str) -> Result<bool> {
    let rows = session
        .query_unpaged(
            "SELECT column_name FROM system_schema.columns \
             WHERE keyspace_name = ? AND table_name = ? AND column_name = ?",
            (ks.to_lowercase(), table, column),
        )
        .await
        .map_err(Error::cql("read schema"))?
        .into_rows_result()
        .map_err(Error::cql("read schema"))?;
    Ok(rows.rows_num() > 0)
}

/// Waits until queries can name `column`: when another process has just added it,
/// `system_schema` can list it a moment before statements may use it.
async fn await_column(session: &Session, ks: &str, table: &str, column: &str) -> Result<()> {
    let probe = format!("SELECT {column} FROM {ks}.{table} LIMIT 1");
    (|| session.query_unpaged(probe.clone(), ()))
        .retry(retry::within(Duration::from_secs(30)))
        .await
        .map(|_| ())
        .map_err(Error::cql("migrate"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_and_unique() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(latest_version(), *versions.last().unwrap_or(&0));
    }

    #[test]
    fn keyspaces_are_created_with_network_topology_strategy_and_the_factor() {
        let cql = create_keyspace_cql("sessionlog", 3);
        assert!(
            cql.starts_with("CREATE KEYSPACE IF NOT EXISTS sessionlog "),
            "{cql}"
        );
        assert!(
            cql.contains("{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}"),
            "{cql}"
        );
        assert!(!cql.contains("SimpleStrategy"), "{cql}");
    }

    #[test]
    fn keyspace_names_are_plain_identifiers() {
        assert!(valid_keyspace_name("sessionlog").is_ok());
        assert!(valid_keyspace_name("t_run_0a1b").is_ok());
        for bad in [
            "",
            "1abc",
            "a-b",
            "a;DROP KEYSPACE x",
            "a.b",
            &"x".repeat(49),
        ] {
            assert!(valid_keyspace_name(bad).is_err(), "{bad:?}");
        }
    }
}
