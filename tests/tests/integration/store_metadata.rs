//! A store's CQL session keeps schema metadata for its own keyspace only. The driver refreshes
//! that metadata after each schema change it makes and every minute; unfiltered, it read the
//! schema of every keyspace in the cluster each time, so on a cluster with many keyspaces (a
//! shared one, or a test run's hundreds) every migration statement was slower than the last.

use anyhow::{Result, ensure};
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::TestStack;

#[tokio::test(flavor = "multi_thread")]
async fn a_store_keeps_schema_metadata_of_its_own_keyspace_only() -> Result<()> {
    let ours = TestStack::new("meta", 1).await?;
    let other = TestStack::new("meta_other", 1).await?;
    let ours_name = ours.settings.cql.keyspace.to_lowercase();
    let other_name = other.settings.cql.keyspace.to_lowercase();
    let writer = ProjectionStore::migrate(&ours.settings.cql).await?;
    let reader = ProjectionStore::open(&ours.settings.cql).await?;
    ensure!(
        writer.keyspace_exists(&other_name).await?,
        "the other keyspace {other_name} is not on the cluster"
    );
    for (door, store) in [("migrate", &writer), ("open", &reader)] {
        let state = store.cql().get_cluster_state();
        let known: Vec<&str> = state.keyspaces_iter().map(|(name, _)| name).collect();
        ensure!(
            known == [ours_name.as_str()],
            "a store opened by {door} keeps the schema of {known:?}, not only {ours_name}"
        );
    }
    Ok(())
}
