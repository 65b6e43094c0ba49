//! `doctor`'s CQL checks: each contact point and node with its release, the keyspaces'
//! replication, the projection keyspace migrated and the key store's keyspace there.

use super::found::{Found, change, status_of};
use super::report::{KeyspaceCheck, Status};
use sessionlog_log::Resolution;
use sessionlog_store::nodes::{self, KeyspaceReplication};
use std::collections::BTreeMap;
use std::time::Duration;

/// Asks each contact point and node, checks the keyspaces' replication against the nodes, and
/// whether the projection keyspace is migrated and the key store's exists.
pub async fn checks(resolution: &Resolution, timeout: Duration) -> Found {
    let settings = &resolution.settings;
    let mut found = Found::default();
    let keyspaces = [
        settings.cql.keyspace.as_str(),
        settings.privacy.keyspace.as_str(),
    ];
    let probe = nodes::probe_nodes(&settings.cql, &keyspaces, timeout).await;
    let releases: BTreeMap<String, String> = match &probe.nodes {
        Ok(nodes) => nodes
            .iter()
            .filter_map(|n| Some((n.address.clone(), n.release.as_ref().ok()?.clone())))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    for contact in probe.contact_points {
        let line = found.server("cql", "contact point", &contact.address);
        line.version = releases.get(&contact.address).cloned();
        if let Err(e) = contact.answer {
            let e = anyhow::Error::new(e);
            found.server_failed(
                "cql",
                &e,
                format!("CQL contact point {}: {e}", contact.address),
                format!(
                    "start the node there, or {}",
                    change(resolution, "cql.nodes")
                ),
            );
        }
    }
    let Ok(nodes) = probe.nodes else {
        return found;
    };
    let mut per_datacenter = BTreeMap::<String, usize>::new();
    for node in &nodes {
        let dc = node.datacenter.clone().unwrap_or_default();
        *per_datacenter.entry(dc).or_default() += 1;
    }
    for keyspace in &probe.keyspaces {
        let Some(replication) = &keyspace.replication else {
            continue;
        };
        for problem in nodes::replication_problems(&keyspace.keyspace, replication, &per_datacenter)
        {
            found.problem(
                "keyspace",
                problem,
                format!(
                    "ALTER KEYSPACE {} WITH replication = {{'class': 'NetworkTopologyStrategy', \
                     'replication_factor': 3}} (or the node count, if fewer), then `nodetool repair \
                     --full {}` on every node (docs/operations.md, \"Running a cluster\")",
                    keyspace.keyspace, keyspace.keyspace
                ),
                Status::Failed,
            );
        }
    }
    for node in nodes {
        let role = match &node.datacenter {
            Some(dc) => format!("node ({dc})"),
            None => "node".into(),
        };
        let line = found.server("cql", role, &node.address);
        match node.release {
            Ok(release) => line.version = Some(release),
            Err(e) => {
                line.status = Status::Unreachable;
                found.problem(
                    "cql",
                    format!("CQL node {} did not answer: {e}", node.address),
                    format!(
                        "start node {} or check the network to it (the cluster lists it, so \
                         its replicas are not being written)",
                        node.address
                    ),
                    Status::Unreachable,
                );
            }
        }
    }
    let replication = |name: &str| {
        probe
            .keyspaces
            .iter()
            .find(|k| k.keyspace == name)
            .and_then(|k: &KeyspaceReplication| k.replication.clone())
    };
    match crate::commands::status::store_health(settings).await {
        Ok(health) => {
            if health.state != "migrated" {
                found.problem(
                    "keyspace",
                    format!(
                        "keyspace {} is {}{}",
                        health.keyspace,
                        health.state,
                        health.detail.map(|d| format!(": {d}")).unwrap_or_default()
                    ),
                    format!(
                        "sessionlog init (or {})",
                        change(resolution, "cql.keyspace")
                    ),
                    Status::Failed,
                );
            }
            found.keyspaces.push(KeyspaceCheck {
                replication: replication(&health.keyspace),
                keyspace: health.keyspace,
                holds: "projections",
                state: health.state,
            });
        }
        Err(e) => {
            let status = status_of(&e);
            found.problem(
                "keyspace",
                format!("keyspace {} could not be read: {e}", settings.cql.keyspace),
                "check the CQL role's permissions on it (cql.username)".into(),
                status,
            );
        }
    }
    let keys = replication(&settings.privacy.keyspace);
    if keys.is_none() {
        found.problem(
            "keyspace",
            format!(
                "the key store keyspace {} does not exist",
                settings.privacy.keyspace
            ),
            format!(
                "sessionlog init (or {})",
                change(resolution, "privacy.keyspace")
            ),
            Status::Failed,
        );
    }
    found.keyspaces.push(KeyspaceCheck {
        keyspace: settings.privacy.keyspace.clone(),
        holds: "keys",
        state: if keys.is_some() { "present" } else { "missing" },
        replication: keys,
    });
    found
}
