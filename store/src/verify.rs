//! Comparing two projection keyspaces table by table.
//!
//! Each row is read as CQL's own JSON rendering (`SELECT JSON *`), which is the same text on
//! Cassandra and ScyllaDB for the same values; a table's digest is SHA-256 over its rows'
//! hashes in sorted order, so it does not depend on the order the store returns them in.
//! Only hashes are kept in memory; the rows behind a difference are read again to show them.

use crate::{Error, ProjectionStore, Result};
use futures::TryStreamExt;
use scylla::client::session::Session;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The derived tables, in the order they are compared. `schema_migrations` is left out:
/// it records when each keyspace was migrated, which differs by design.
pub const TABLES: &[&str] = &[
    "sessions",
    "event_index",
    "writer_claims",
    "checkpoints",
    "rejected_events",
    "trace_spans_by_session",
    "trace_spans_by_tenant_day",
    "trace_tenant_day_buckets",
    "usage_rollups",
    "projection_settings",
    "context_view",
    "context_turns",
    "partition_progress",
    "session_children",
    "sessions_awaiting",
    "session_starts",
];

/// The columns of `table` that are projected state. A partition's `dead_letter_mark` is not:
/// it is where the live worker's dead letters stand in the dead-letter topic, which a replay
/// neither sends to nor records.
fn compared_columns(table: &str) -> &'static str {
    match table {
        "partition_progress" => "topic, log_partition, next_offset",
        _ => "*",
    }
}

/// How many differing rows a report shows per side and table.
const EXAMPLES: usize = 5;

/// A table's fingerprint in one keyspace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableDigest {
    /// The table.
    pub table: String,
    /// Its rows.
    pub rows: u64,
    /// SHA-256 over the sorted row hashes, hex.
    pub digest: String,
}

/// One table compared across two keyspaces.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableComparison {
    /// Left side's fingerprint.
    pub left: TableDigest,
    /// Right side's fingerprint.
    pub right: TableDigest,
    /// Rows only on the left (as JSON), up to a few.
    pub only_left: Vec<String>,
    /// Rows only on the right (as JSON), up to a few.
    pub only_right: Vec<String>,
    /// How many rows differ in all, left and right together.
    pub differing_rows: u64,
}

impl TableComparison {
    /// Whether both sides hold the same rows.
    pub fn equal(&self) -> bool {
        self.left.digest == self.right.digest && self.left.rows == self.right.rows
    }
}

/// Two keyspaces compared.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Comparison {
    /// The left keyspace.
    pub left: String,
    /// The right keyspace.
    pub right: String,
    /// Each table.
    pub tables: Vec<TableComparison>,
}

impl Comparison {
    /// Whether every table holds the same rows on both sides.
    pub fn equal(&self) -> bool {
        self.tables.iter().all(TableComparison::equal)
    }
}

type RowHash = [u8; 32];

fn hash_row(json: &str) -> RowHash {
    Sha256::digest(json.as_bytes()).into()
}

/// Every row of `keyspace.table` as JSON, passed to `visit`.
async fn scan(
    session: &Session,
    keyspace: &str,
    table: &str,
    mut visit: impl FnMut(String),
) -> Result<()> {
    let columns = compared_columns(table);
    let mut rows = session
        .query_iter(format!("SELECT JSON {columns} FROM {keyspace}.{table}"), ())
        .await
        .map_err(Error::cql("scan table"))?
        .rows_stream::<(String,)>()
        .map_err(Error::cql("scan table"))?;
    while let Some((json,)) = rows.try_next().await.map_err(Error::cql("scan table"))? {
        visit(json);
    }
    Ok(())
}

async fn row_hashes(session: &Session, keyspace: &str, table: &str) -> Result<Vec<RowHash>> {
    let mut hashes = Vec::new();
    scan(session, keyspace, table, |json| {
        hashes.push(hash_row(&json))
    })
    .await?;
    hashes.sort_unstable();
    Ok(hashes)
}

fn fingerprint(table: &str, hashes: &[RowHash]) -> TableDigest {
    let mut digest = Sha256::new();
    for h in hashes {
        digest.update(h);
    }
    TableDigest {
        table: table.to_string(),
        rows: hashes.len() as u64,
        digest: hex::encode(digest.finalize()),
    }
}

/// The fingerprint of every derived table of `keyspace`, which must exist and be migrated.
pub async fn digest_keyspace(store: &ProjectionStore, keyspace: &str) -> Result<Vec<TableDigest>> {
    store.check_keyspace(keyspace).await?;
    let session = store.cql();
    let mut digests = Vec::new();
    for table in TABLES {
        digests.push(fingerprint(
            table,
            &row_hashes(session, keyspace, table).await?,
        ));
    }
    Ok(digests)
}

/// Compares every derived table of `left` with the same table of `right`; both must exist and
/// be migrated (a missing one is an error that names it, never created).
pub async fn compare(store: &ProjectionStore, left: &str, right: &str) -> Result<Comparison> {
    store.check_keyspace(left).await?;
    store.check_keyspace(right).await?;
    let session = store.cql();
    let mut tables = Vec::new();
    for table in TABLES {
        let l = row_hashes(session, left, table).await?;
        let r = row_hashes(session, right, table).await?;
        let mut counts: BTreeMap<RowHash, i64> = BTreeMap::new();
        for h in &l {
            *counts.entry(*h).or_default() += 1;
        }
        for h in &r {
            *counts.entry(*h).or_default() -= 1;
        }
        counts.retain(|_, n| *n != 0);
        let differing_rows = counts.values().map(|n| n.unsigned_abs()).sum();
        let (mut only_left, mut only_right) = (Vec::new(), Vec::new());
        if !counts.is_empty() {
            let counts = &counts;
            let pick = |side: i64, out: &mut Vec<String>, json: String| {
                let n = counts.get(&hash_row(&json)).copied().unwrap_or_default();
                if n.signum() == side && out.len() < EXAMPLES {
                    out.push(json);
                }
            };
            scan(session, left, table, |json| pick(1, &mut only_left, json)).await?;
            scan(session, right, table, |json| {
                pick(-1, &mut only_right, json)
            })
            .await?;
        }
        tables.push(TableComparison {
            left: fingerprint(table, &l),
            right: fingerprint(table, &r),
            only_left,
            only_right,
            differing_rows,
        });
    }
    Ok(Comparison {
        left: left.to_string(),
        right: right.to_string(),
        tables,
    })
}
