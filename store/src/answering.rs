//! Passing over CQL nodes that accept connections but do not answer.
//!
//! The driver bounds the TCP connect but not the CQL handshake after it, and a new session
//! waits until every node's connection pool has its first connection. A node that is stopped
//! (SIGSTOP, a hung JVM) or cut off after the kernel accepted the connection never finishes
//! the handshake, so one such node kept every new process (a command, a restarted service)
//! from connecting while the rest of the cluster served. Written by hand because the driver
//! offers no handshake timeout; its host filter is the hook it does offer.

use scylla::cluster::metadata::Peer;
use scylla::policies::host_filter::HostFilter;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a node has to answer a CQL `OPTIONS` request (or close the connection).
const ANSWER_WITHIN: Duration = Duration::from_secs(3);
/// How often nodes passed over are asked again; one that answers is taken back at the driver's
/// next topology refresh (every minute).
const ASK_AGAIN_EVERY: Duration = Duration::from_secs(10);
/// A CQL native protocol v4 `OPTIONS` request: a header and no body.
const OPTIONS: [u8; 9] = [0x04, 0, 0, 0, 0x05, 0, 0, 0, 0];

/// The driver's host filter: every node but the contact points found silent.
#[derive(Debug, Default)]
pub(crate) struct AnsweringNodes {
    silent: RwLock<HashSet<SocketAddr>>,
}

impl HostFilter for AnsweringNodes {
    fn accept(&self, peer: &Peer) -> bool {
        let address = SocketAddr::new(peer.address.ip(), peer.address.port());
        let silent = self.silent.read().unwrap_or_else(|e| e.into_inner());
        !silent.contains(&address)
    }
}

impl AnsweringNodes {
    /// Asks every contact point at once and passes over the silent ones; while any is, asks
    /// them again every [`ASK_AGAIN_EVERY`] for as long as the filter is in use.
    pub(crate) async fn probe(contacts: &[String]) -> Arc<Self> {
        let mut addresses = Vec::new();
        for contact in contacts {
            // A name that does not resolve is the driver's to report.
            if let Ok(resolved) = tokio::net::lookup_host(contact.as_str()).await {
                addresses.extend(resolved);
            }
        }
        let answers = futures::future::join_all(addresses.iter().map(|a| silent(*a))).await;
        let found: HashSet<SocketAddr> = addresses
            .into_iter()
            .zip(answers)
            .filter_map(|(address, silent)| silent.then_some(address))
            .collect();
        for address in &found {
            tracing::warn!(
                %address,
                "CQL node accepts connections but does not answer (stopped, or cut off?); passed over until it does"
            );
        }
        let nodes = Arc::new(Self {
            silent: RwLock::new(found),
        });
        if !nodes.silent_now().is_empty() {
            tokio::spawn(ask_again(Arc::downgrade(&nodes)));
        }
        nodes
    }

    fn silent_now(&self) -> Vec<SocketAddr> {
        let silent = self.silent.read().unwrap_or_else(|e| e.into_inner());
        silent.iter().copied().collect()
    }
}

/// Asks the silent nodes again until none is, or the session is gone.
async fn ask_again(nodes: Weak<AnsweringNodes>) {
    loop {
        tokio::time::sleep(ASK_AGAIN_EVERY).await;
        let Some(nodes) = nodes.upgrade() else { return };
        let asked = nodes.silent_now();
        if asked.is_empty() {
            return;
        }
        for address in asked {
            if !silent(address).await {
                tracing::info!(%address, "CQL node answers again; taken back at the next topology refresh");
                let mut silent = nodes.silent.write().unwrap_or_else(|e| e.into_inner());
                silent.remove(&address);
            }
        }
    }
}

/// Whether `address` accepts a connection and then neither answers an `OPTIONS` request nor
/// closes within [`ANSWER_WITHIN`]. A refused connection is not silence: the driver passes
/// over a node that refuses on its own. Any answer counts, so a TLS node's alert does too.
async fn silent(address: SocketAddr) -> bool {
    let asked = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(&OPTIONS).await.ok()?;
        let mut first = [0u8; 1];
        // Bytes, a close, or an error: the node's kernel and process both answered.
        let _ = stream.read(&mut first).await;
        Some(())
    };
    tokio::time::timeout(ANSWER_WITHIN, asked).await.is_err()
}

#[cfg(test)]
mod tests {
    use super::silent;

    #[tokio::test]
    async fn a_listener_that_never_reads_is_silent_and_one_that_closes_is_not() {
        // Accepted by the kernel, never served: what a stopped node looks like.
        let mute = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        assert!(silent(mute.local_addr().unwrap()).await);

        let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = closing.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = closing.accept().await {
                drop(stream);
            }
        });
        assert!(!silent(address).await);

        // Nothing listening: refused at once, which the driver handles itself.
        drop(mute);
        let refused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = refused.local_addr().unwrap();
        drop(refused);
        assert!(!silent(gone).await);
    }
}
