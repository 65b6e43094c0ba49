//! What an operator asks of the CQL cluster itself (`sessionlog doctor`): whether each contact
//! point lets us in, every node the cluster has and its release, and how the keyspaces are
//! replicated.

use crate::connect::{UNREACHABLE_HINT, session_for};
use crate::{Error, Result};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::policies::load_balancing::{NodeIdentifier, SingleTargetLoadBalancingPolicy};
use scylla::statement::unprepared::Statement;
use serde::Serialize;
use sessionlog_log::CqlSettings;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How one `cql.nodes` contact point answered on its own.
#[derive(Debug)]
pub struct ContactAnswer {
    /// The contact point as `cql.nodes` lists it.
    pub address: String,
    /// `Ok` when a session could be opened through it alone.
    pub answer: Result<()>,
}

/// One node of the cluster and what it answered when asked directly.
#[derive(Debug)]
pub struct NodeAnswer {
    /// The address the driver reaches it at.
    pub address: String,
    /// Its data center, as the cluster reports it.
    pub datacenter: Option<String>,
    /// What it runs: `Cassandra <release_version>` from `system.local`, or `ScyllaDB
    /// <version>` from `system.versions` (ScyllaDB's `release_version` is a Cassandra
    /// compatibility level); or why it did not answer.
    pub release: Result<String>,
}

/// A keyspace's replication, as `system_schema.keyspaces` has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyspaceReplication {
    /// The keyspace.
    pub keyspace: String,
    /// Its replication options (`class`, `replication_factor` or one factor per data
    /// center); `None` when the keyspace does not exist.
    pub replication: Option<BTreeMap<String, String>>,
}

/// The CQL cluster as the settings reach it.
#[derive(Debug)]
pub struct CqlProbe {
    /// Each contact point, asked on its own.
    pub contact_points: Vec<ContactAnswer>,
    /// Every node the cluster has, each asked directly; an error when no contact point let
    /// us in.
    pub nodes: Result<Vec<NodeAnswer>>,
    /// The replication of each keyspace asked about (empty when no contact point let us in).
    pub keyspaces: Vec<KeyspaceReplication>,
}

/// Opens a session through each contact point of `settings` on its own (each within
/// `timeout`), then asks every node of the cluster for its release and `system_schema` for the
/// replication of `keyspaces`.
pub async fn probe_nodes(
    settings: &CqlSettings,
    keyspaces: &[&str],
    timeout: Duration,
) -> CqlProbe {
    let mut contact_points = Vec::new();
    let mut session = None;
    for address in settings.node_list() {
        let single = CqlSettings {
            nodes: address.clone(),
            ..settings.clone()
        };
        let opened = tokio::time::timeout(timeout, session_for(&single, keyspaces))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Connect {
                    nodes: address.clone(),
                    hint: UNREACHABLE_HINT,
                    source: format!("no answer within {} ms", timeout.as_millis()).into(),
                })
            });
        let answer = opened.map(|opened| {
            session.get_or_insert(opened);
        });
        contact_points.push(ContactAnswer { address, answer });
    }
    let Some(session) = session else {
        let why = contact_points
            .iter()
            .find_map(|c| c.answer.as_ref().err())
            .map(ToString::to_string)
            .unwrap_or_else(|| "cql.nodes names no node".into());
        return CqlProbe {
            contact_points,
            nodes: Err(Error::Connect {
                nodes: settings.nodes.clone(),
                hint: UNREACHABLE_HINT,
                source: why.into(),
            }),
            keyspaces: Vec::new(),
        };
    };
    let mut nodes = Vec::new();
    for node in session.get_cluster_state().get_nodes_info() {
        nodes.push(NodeAnswer {
            address: node.address.to_string(),
            datacenter: node.datacenter.clone(),
            release: tokio::time::timeout(timeout, release(&session, Arc::clone(node)))
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Cql {
                        action: "read the node's release",
                        source: format!("no answer within {} ms", timeout.as_millis()).into(),
                    })
                }),
        });
    }
    let mut replications = Vec::new();
    for keyspace in keyspaces {
        replications.push(KeyspaceReplication {
            keyspace: keyspace.to_string(),
            replication: replication(&session, keyspace).await.unwrap_or(None),
        });
    }
    CqlProbe {
        contact_points,
        nodes: Ok(nodes),
        keyspaces: replications,
    }
}

/// What `node` runs, asked of that node alone: ScyllaDB's `system.versions`, else
/// `system.local`'s `release_version` (Cassandra, which has no `system.versions`).
async fn release(session: &Session, node: Arc<scylla::cluster::Node>) -> Result<String> {
    let profile = ExecutionProfile::builder()
        .load_balancing_policy(SingleTargetLoadBalancingPolicy::new(
            NodeIdentifier::Node(node),
            None,
        ))
        .build()
        .into_handle();
    let ask = |cql: &str| {
        let mut statement = Statement::new(cql);
        statement.set_execution_profile_handle(Some(profile.clone()));
        async move {
            session
                .query_unpaged(statement, ())
                .await
                .map_err(Error::cql("read the node's release"))?
                .into_rows_result()
                .map_err(Error::cql("read the node's release"))?
                .maybe_first_row::<(Option<String>,)>()
                .map_err(Error::cql("read the node's release"))
                .map(|row| row.and_then(|(v,)| v))
        }
    };
    let cassandra = ask("SELECT release_version FROM system.local").await?;
    // Only ScyllaDB has the table: on Cassandra the query is refused, which says as much.
    if let Ok(Some(scylla)) = ask("SELECT version FROM system.versions WHERE key = 'local'").await {
        return Ok(format!("ScyllaDB {scylla}"));
    }
    Ok(format!("Cassandra {}", cassandra.unwrap_or_default()))
}

/// The replication options of `keyspace` (`class` and the factors), `None` when it does not
/// exist.
pub async fn replication(
    session: &Session,
    keyspace: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    let row = session
        .query_unpaged(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (keyspace.to_lowercase(),),
        )
        .await
        .map_err(Error::cql("read schema"))?
        .into_rows_result()
        .map_err(Error::cql("read schema"))?
        .maybe_first_row::<(BTreeMap<String, String>,)>()
        .map_err(Error::cql("read schema"))?;
    Ok(row.map(|(replication,)| replication))
}

/// What is wrong with `keyspace`'s `replication` on a cluster with `nodes` nodes per data
/// center, each as a sentence for an operator; empty when nothing is. A data center with fewer
/// nodes than the keyspace's replicas there cannot place them (a quorum of them may not
/// answer); one with fewer replicas than `min(3, nodes)` loses a quorum, or the only copy of a
/// row, with a single node down.
pub fn replication_problems(
    keyspace: &str,
    replication: &BTreeMap<String, String>,
    nodes: &BTreeMap<String, usize>,
) -> Vec<String> {
    let simple = replication
        .get("class")
        .is_some_and(|c| c.ends_with("SimpleStrategy"));
    // SimpleStrategy places its replicas on the ring whatever the data center: count them all.
    let factors: Vec<(String, usize, usize)> = if simple {
        let factor = replication
            .get("replication_factor")
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        vec![("the cluster".into(), factor, nodes.values().sum())]
    } else {
        replication
            .iter()
            .filter(|(key, _)| key.as_str() != "class")
            .filter_map(|(dc, factor)| {
                let factor = factor.parse().ok()?;
                Some((
                    format!("data center {dc}"),
                    factor,
                    nodes.get(dc).copied().unwrap_or(0),
                ))
            })
            .collect()
    };
    let mut problems = Vec::new();
    for (place, factor, count) in factors {
        let quorum = factor / 2 + 1;
        if factor > count {
            let consequence = if quorum > count {
                format!(
                    "a quorum ({quorum}) cannot answer, so every read and write at quorum fails"
                )
            } else {
                "replicas go unplaced and a node down leaves no quorum".into()
            };
            problems.push(format!(
                "keyspace {keyspace} keeps {factor} replicas in {place}, which has {count} \
                 node(s): {consequence}"
            ));
        } else if factor < count.min(3) {
            let consequence = if factor == 1 {
                "the rows that node holds cannot be read or written".to_string()
            } else {
                format!("a quorum ({quorum}) of {factor} may not answer")
            };
            problems.push(format!(
                "keyspace {keyspace} keeps {factor} replica(s) in {place} of {count} nodes: with \
                 one node down, {consequence}"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::replication_problems;
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn nodes(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    const NTS: &str = "org.apache.cassandra.locator.NetworkTopologyStrategy";

    #[test]
    fn three_replicas_on_three_nodes_and_one_on_one_are_fine() {
        let three = map(&[("class", NTS), ("datacenter1", "3")]);
        assert!(replication_problems("ks", &three, &nodes(&[("datacenter1", 3)])).is_empty());
        assert!(replication_problems("ks", &three, &nodes(&[("datacenter1", 5)])).is_empty());
        let one = map(&[("class", NTS), ("datacenter1", "1")]);
        assert!(replication_problems("ks", &one, &nodes(&[("datacenter1", 1)])).is_empty());
    }

    #[test]
    fn one_replica_on_a_cluster_of_three_is_named() {
        let one = map(&[("class", NTS), ("datacenter1", "1")]);
        let problems = replication_problems("ks", &one, &nodes(&[("datacenter1", 3)]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("1 replica(s) in data center datacenter1 of 3 nodes"));
    }

    #[test]
    fn more_replicas_than_nodes_say_the_quorum_fails() {
        let three = map(&[("class", NTS), ("datacenter1", "3")]);
        let problems = replication_problems("ks", &three, &nodes(&[("datacenter1", 1)]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("a quorum (2) cannot answer"),
            "{problems:?}"
        );
        // A data center the cluster does not have holds none of them.
        let elsewhere = map(&[("class", NTS), ("dc2", "3")]);
        assert_eq!(
            replication_problems("ks", &elsewhere, &nodes(&[("datacenter1", 3)])).len(),
            1
        );
    }

    #[test]
    fn simple_strategy_counts_every_node() {
        let simple = map(&[
            ("class", "org.apache.cassandra.locator.SimpleStrategy"),
            ("replication_factor", "2"),
        ]);
        let problems = replication_problems("ks", &simple, &nodes(&[("a", 2), ("b", 1)]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("a quorum (2) of 2 may not answer"),
            "{problems:?}"
        );
    }
}
