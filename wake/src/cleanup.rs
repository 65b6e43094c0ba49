//! Removing the lease records ended sessions' writers left behind.

use crate::{WakeService, observe};
use rdkafka::producer::FutureRecord;
use std::sync::Arc;

impl WakeService {
    /// Writes tombstones for the lease records an ended session's writer left behind (the keys
    /// a session's end removes, [`sessionlog_log::lease::end_keys`]), so the lease topic (and
    /// every reader of it) keeps only sessions that may run again. A failed write leaves the
    /// records, found again at the partition's next assignment.
    pub(super) fn clean_leases(&mut self) {
        for cleanup in self.watches.take_cleanups() {
            let checker = Arc::clone(&self.checker);
            tokio::spawn(async move {
                let keys = sessionlog_log::lease::end_keys(cleanup.session, cleanup.epoch);
                let sent = keys.iter().map(|key| {
                    let record = FutureRecord::<str, [u8]>::to(&checker.lease_topic)
                        .partition(cleanup.partition)
                        .key(key);
                    checker
                        .lease_producer
                        .send(record, checker.delivery_timeout)
                });
                match futures::future::try_join_all(sent).await {
                    Ok(_) => observe::lease_cleaned(),
                    Err((e, _)) => tracing::warn!(
                        session = %cleanup.session,
                        error = %e,
                        "removing an ended session's lease records failed"
                    ),
                }
            });
        }
    }
}
