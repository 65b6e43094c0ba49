//! The records read from the two topics: lease records, and events decoded (waiting out the
//! registry while it fails) and handed to the watches.

use crate::WakeService;
use sessionlog_log::retry::{self, BackoffBuilder};
use sessionlog_schemas::{EventEnvelope, SessionId, now_micros};

impl WakeService {
    pub(super) fn on_lease(&mut self, partition: i32, key: Option<&[u8]>, value: Option<&[u8]>) {
        // Keyed by session and epoch (an older build's by session alone).
        let session: Option<SessionId> = key.and_then(sessionlog_log::lease::session_of_key);
        match session {
            Some(session) => self
                .watches
                .on_lease(partition, session, value, now_micros()),
            None => tracing::warn!(partition, "a lease record without a session key; skipped"),
        }
    }

    pub(super) async fn on_event(&mut self, partition: i32, offset: i64, payload: Option<&[u8]>) {
        let Some(payload) = payload else {
            self.mark(partition, offset + 1);
            return;
        };
        let Some(envelope) = self.decode(partition, offset, payload).await else {
            self.mark(partition, offset + 1);
            return;
        };
        let causes = self
            .watches
            .on_event(partition, offset, &envelope, now_micros());
        // Marked read only once folded: a commit meanwhile stays before it.
        self.mark(partition, offset + 1);
        self.check(causes);
    }

    /// The event `payload` holds, tried again while the registry cannot be reached (an event
    /// cannot be skipped: it may be a cause, or end a session); `None` for a record that does
    /// not decode, which is the projector's to dead-letter and wakes nobody.
    pub(super) async fn decode(
        &mut self,
        partition: i32,
        offset: i64,
        payload: &[u8],
    ) -> Option<EventEnvelope> {
        loop {
            match self.decoder.decode(payload).await {
                Ok(envelope) => {
                    self.backoff = None;
                    return Some(envelope);
                }
                Err(e) if e.is_retriable() => {
                    let wait = self
                        .backoff
                        .get_or_insert_with(|| retry::forever().build())
                        .next()
                        .unwrap_or(retry::MAX_DELAY);
                    tracing::warn!(partition, offset, error = %e, ?wait, "decoding an event failed (is the registry up?); trying again");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    tracing::debug!(partition, offset, error = %e, "undecodable record skipped");
                    return None;
                }
            }
        }
    }

    /// A consumer error: a broker restarting, a leader moving. The consumer goes on by itself
    /// once the cluster answers, as the log's tail does, so the loop only pauses briefly (the
    /// house's first retry wait) rather than stop, or back off past due leases and pauses.
    pub(super) async fn read_failed(&mut self, error: &rdkafka::error::KafkaError) {
        self.read_errors += 1;
        // The first of a run, and every 50th after: librdkafka repeats its own lines anyway.
        if self.read_errors % 50 == 1 {
            tracing::warn!(%error, errors = self.read_errors, "reading the topics failed; reading on");
        } else {
            tracing::debug!(%error, "reading the topics failed; reading on");
        }
        tokio::time::sleep(retry::FIRST_DELAY).await;
    }
}
