//! Commands that only read never create or migrate a keyspace: a missing one is an error that
//! says to run `sessionlog init`, an outdated one an error that says which command upgrades it,
//! and the writers' way in (`init`, `project`, a replay) upgrades an existing keyspace, whatever
//! replication strategy an earlier build created it with.

use anyhow::{Context, Result, bail};
use sessionlog_store::{Error, ProjectionStore, Wait, migrations, nodes};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::store;
use std::collections::BTreeSet;
use std::process::Output;

/// Runs `sessionlog` with `args` against `stack`, with `extra` environment.
fn sessionlog(stack: &TestStack, args: &[&str], extra: &[(&str, &str)]) -> Result<Output> {
    stack
        .command(&[])?
        .args(args)
        .envs(extra.iter().copied())
        .output()
        .context("running sessionlog")
}

fn missing_name() -> String {
    let run = uuid::Uuid::now_v7().simple().to_string();
    format!("missing_{}", &run[run.len() - 12..])
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_and_the_other_readers_never_create_a_keyspace() -> Result<()> {
    let stack = TestStack::new("ronly", 1).await?;
    let probe = store(&stack).await?;
    let existing = stack.settings.cql.keyspace.clone();
    let missing = missing_name();

    for (left, right) in [(&missing, &existing), (&existing, &missing)] {
        let out = sessionlog(&stack, &["verify", "--left", left, "--right", right], &[])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "verify succeeded: {stderr}");
        assert!(
            stderr.contains(&format!("keyspace {missing} does not exist"))
                && stderr.contains("sessionlog init"),
            "{stderr}"
        );
    }
    let session = uuid::Uuid::now_v7().to_string();
    for args in [
        vec!["inspect", session.as_str()],
        vec!["recover", session.as_str()],
        vec!["lineage", session.as_str()],
    ] {
        let out = sessionlog(&stack, &args, &[("SESSIONLOG_CQL__KEYSPACE", &missing)])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        assert!(
            stderr.contains(&format!("keyspace {missing} does not exist")),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        !probe.keyspace_exists(&missing).await?,
        "a read-only command created {missing}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outdated_keyspace_is_refused_by_readers_and_upgraded_by_writers() -> Result<()> {
    let stack = TestStack::new("rupgr", 1).await?;
    let probe = store(&stack).await?;
    // A keyspace as the previous build left it: migrations 1 to 3.
    let mut old = stack.settings.cql.clone();
    old.keyspace = format!("{}_v3", old.keyspace);
    migrations::migrate_through(
        probe.cql(),
        &old.keyspace,
        old.replication_factor.unwrap_or(1),
        3,
    )
    .await?;
    match ProjectionStore::open(&old).await {
        Err(Error::SchemaBehind { found, wanted, .. }) => {
            assert_eq!((found, wanted), (3, migrations::latest_version()));
        }
        Err(other) => bail!("SchemaBehind expected, got {other}"),
        Ok(_) => bail!("an outdated keyspace opened"),
    }
    let env = [("SESSIONLOG_CQL__KEYSPACE", old.keyspace.as_str())];
    let session = uuid::Uuid::now_v7().to_string();
    let out = sessionlog(&stack, &["inspect", &session], &env)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("older than this build") && stderr.contains("sessionlog init"),
        "{stderr}"
    );

    // `sessionlog init` (the writers' way in) upgrades it; readers open it again.
    let out = sessionlog(&stack, &["init"], &env)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let upgraded = ProjectionStore::open(&old).await?;
    let parent = sessionlog_schemas::SessionId(uuid::Uuid::now_v7());
    assert!(upgraded.children(parent).await?.is_empty());
    assert!(upgraded.awaiting(Wait::Operator).await?.is_empty());
    Ok(())
}

/// The replication class of `keyspace`, as `system_schema` names it.
async fn replication_class(store: &ProjectionStore, keyspace: &str) -> Result<String> {
    let replication = nodes::replication(store.cql(), keyspace)
        .await?
        .with_context(|| format!("keyspace {keyspace} does not exist"))?;
    replication
        .get("class")
        .cloned()
        .with_context(|| format!("{keyspace} has no replication class: {replication:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn new_keyspaces_use_network_topology_and_an_older_simple_strategy_one_still_migrates()
-> Result<()> {
    let stack = TestStack::new("rstrat", 1).await?;
    let probe = store(&stack).await?;
    // What this build creates (ScyllaDB refuses SimpleStrategy for keyspaces with tablets).
    for keyspace in [
        &stack.settings.cql.keyspace,
        &stack.settings.privacy.keyspace,
    ] {
        let class = replication_class(&probe, keyspace).await?;
        assert!(
            class.ends_with("NetworkTopologyStrategy"),
            "{keyspace}: {class}"
        );
    }

    // A keyspace as an earlier build created it, with SimpleStrategy and migrations 1 to 3:
    // the writers' way in upgrades it (twice: migrating is idempotent) and leaves its strategy.
    let mut old = stack.settings.cql.clone();
    old.keyspace = format!("{}_simple", old.keyspace);
    probe
        .cql()
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': 1}}",
                old.keyspace
            ),
            (),
        )
        .await?;
    migrations::migrate_through(
        probe.cql(),
        &old.keyspace,
        old.replication_factor.unwrap_or(1),
        3,
    )
    .await?;
    ProjectionStore::migrate(&old).await?;
    ProjectionStore::migrate(&old).await?;
    let upgraded = ProjectionStore::open(&old).await?;
    assert!(
        upgraded
            .children(sessionlog_schemas::SessionId(uuid::Uuid::now_v7()))
            .await?
            .is_empty()
    );
    let class = replication_class(&probe, &old.keyspace).await?;
    assert!(class.ends_with("SimpleStrategy"), "{class}");
    probe.drop_keyspace(&old.keyspace).await?;
    Ok(())
}

/// The span tables nothing has written since migrations 9 and 14 and nothing reads.
const DROPPED_BY_15: [&str; 3] = [
    "trace_spans_by_day",
    "trace_spans_by_day_bucket",
    "trace_day_buckets",
];

/// The tables of `keyspace`, as `system_schema` lists them.
async fn tables(store: &ProjectionStore, keyspace: &str) -> Result<BTreeSet<String>> {
    let rows = store
        .cql()
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await?
        .into_rows_result()?;
    let names = rows
        .rows::<(String,)>()?
        .map(|row| row.map(|(name,)| name))
        .collect::<std::result::Result<_, _>>()?;
    Ok(names)
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_15_drops_the_unread_span_tables_of_an_existing_keyspace_and_keeps_the_rest()
-> Result<()> {
    let stack = TestStack::new("rdrop", 1).await?;
    let probe = store(&stack).await?;
    // A keyspace as the previous build left it (migrations 1 to 14), with spans in the tables
    // it no longer wrote.
    let mut old = stack.settings.cql.clone();
    old.keyspace = format!("{}_v14", old.keyspace);
    let factor = old.replication_factor.unwrap_or(1);
    migrations::migrate_through(probe.cql(), &old.keyspace, factor, 14).await?;
    let ks = &old.keyspace;
    let session = uuid::Uuid::now_v7();
    probe
        .cql()
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.trace_spans_by_day_bucket (day, bucket, start_us, session_id, \
                 span_seq, tenant) VALUES ('2026-01-01', 0, 1, ?, 1, 'acme')"
            ),
            (session,),
        )
        .await?;
    probe
        .cql()
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.trace_spans_by_day (day, start_us, session_id, span_seq) \
                 VALUES ('2025-01-01', 1, ?, 1)"
            ),
            (session,),
        )
        .await?;
    let before = tables(&probe, ks).await?;
    for table in DROPPED_BY_15 {
        assert!(before.contains(table), "{table} missing at 14: {before:?}");
    }

    // The writers' way in applies 15: the three are gone, every other table is still there.
    let env = [("SESSIONLOG_CQL__KEYSPACE", ks.as_str())];
    let out = sessionlog(&stack, &["init"], &env)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = tables(&probe, ks).await?;
    let kept: BTreeSet<String> = before
        .iter()
        .filter(|table| !DROPPED_BY_15.contains(&table.as_str()))
        .cloned()
        .collect();
    assert_eq!(after, kept);

    // Migrating again changes nothing, and readers open the keyspace.
    migrations::migrate(probe.cql(), ks, factor).await?;
    assert_eq!(tables(&probe, ks).await?, kept);
    ProjectionStore::open(&old).await?;
    Ok(())
}
