//! For unit tests (feature `test-util`, never in a service build): the topics in memory
//! ([`MemoryLog`]) under an [`EventLog`] that [`crate::SessionWriter`] and the services accept
//! as they accept a Kafka one, with failures a test injects at a chosen operation; and the
//! contract both backends keep ([`contract`]).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use sessionlog_producer::testing::{Fault, MemoryLog, Operation};
//! use sessionlog_producer::{EventLog, SessionWriter};
//! use std::sync::Arc;
//!
//! let topic = MemoryLog::new(3);
//! let log = Arc::new(EventLog::in_memory(&topic, Default::default()));
//! let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await.unwrap();
//! topic.fail(Operation::Send, Fault::Transient);
//! assert!(writer.user_request("hello").await.is_err());
//! assert!(writer.user_request("hello").await.is_ok());
//! # });
//! ```

pub mod contract;
mod memory;

pub use memory::{Fault, MemoryLog, Operation};

use crate::backend::Backend;
use crate::{EventLog, ProducerOptions};
use sessionlog_schemas::{CURRENT_SCHEMA_VERSION, EventDecoder, EventEncoder};
use std::sync::Arc;
use std::time::Duration;

/// The topic name an in-memory log reports (the default of `[kafka] topic`).
pub const TOPIC: &str = "session-events";

impl EventLog {
    /// A log over `topics`, in memory: encoded and decoded with the schemas this build keeps
    /// (no registry), tuned by `options`, with leases off, no projection and no encryption
    /// until the `with_` methods below add them.
    pub fn in_memory(topics: &MemoryLog, options: ProducerOptions) -> Self {
        let codec = (
            EventEncoder::with_schema_id(CURRENT_SCHEMA_VERSION),
            EventDecoder::kept(),
        );
        let partitions = topics.partitions();
        Self::over(
            Backend::Memory(topics.clone()),
            codec,
            TOPIC,
            partitions,
            options,
        )
    }

    /// Seals events with `keyring`'s data keys (as `[privacy] encrypt = true` does).
    pub fn with_keyring(mut self, keyring: Arc<sessionlog_keys::Keyring>) -> Self {
        self.keyring = Some(keyring);
        self
    }

    /// Writes `payload` keyed `key` to `partition` as it is, through this log's backend (a
    /// raw producer's record): what a test of a reader writes that no writer would.
    pub async fn send_raw(&self, partition: i32, key: &str, payload: &[u8]) -> crate::Result<()> {
        use crate::backend::LogBackend;
        let failed = |source| crate::Error::NotAcknowledged {
            session: key.to_string(),
            seq: 0,
            source,
        };
        let delivery = self.backend.enqueue(partition, key, payload).await;
        delivery.map_err(failed)?.await.map(drop).map_err(failed)
    }

    /// Writers hold leases that last `ttl` (as `[lease] ttl_ms` does).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }
}
