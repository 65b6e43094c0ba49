//! The seam under [`crate::EventLog`]: the few operations the writers need from the topics,
//! whatever holds them. [`KafkaBackend`] is the production path; [`crate::testing::MemoryLog`]
//! (feature `test-util`) holds the topics in memory for unit tests. Both are reached through
//! [`Backend`], an enum, so the production path pays a `match`, not a virtual call.
//!
//! Everything above the seam is shared: encoding and decoding, the size limit, the in-flight
//! window, sealing, the per-session epochs, the fold. The contract both sides keep is proved
//! by one suite of tests run against each ([`crate::testing::contract`], run in memory by this
//! crate's unit tests and against Kafka by `tests/tests/integration/log_contract.rs`).

use crate::Position;
pub(crate) use crate::kafka::KafkaBackend;
use rdkafka::error::KafkaError;
use sessionlog_log::{RawRecord, Start, Wake};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// What a log backend's operations fail with, but an append's acknowledgement.
pub type LogResult<T> = std::result::Result<T, sessionlog_log::Error>;

/// What [`crate::EventLog`] needs from the topics under it.
pub trait LogBackend: Send + Sync {
    /// The acknowledgement of one record handed to the log.
    type Delivery: Future<Output = std::result::Result<Position, KafkaError>> + Send;

    /// Hands one record to `partition` of the events topic, keyed `key`. Records handed over
    /// one after another keep that order in the partition; the returned delivery says where
    /// the record landed, once the log acknowledged it.
    fn enqueue(
        &self,
        partition: i32,
        key: &str,
        payload: &[u8],
    ) -> impl Future<Output = std::result::Result<Self::Delivery, KafkaError>> + Send;

    /// The records of `partition` in `[from, until)` (`until`: its end now), only those keyed
    /// `key` when given, and the offset after the last one read. Records below the partition's
    /// start (deleted by retention) are not there. `start` says whether the range may reach
    /// below it (see [`Start`]).
    fn read(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        key: Option<&str>,
        start: Start,
    ) -> impl Future<Output = LogResult<(Vec<RawRecord>, i64)>> + Send;

    /// The first offset `partition` holds and the offset its next record will get: every
    /// record acknowledged before the call is below the second.
    fn watermarks(&self, partition: i32) -> impl Future<Output = LogResult<(i64, i64)>> + Send;

    /// Starts reading the topic ahead of the writers (the process's tail), if it does.
    fn start_tail(&self) -> impl Future<Output = ()> + Send;

    /// The offsets of `partition` the tail holds in memory, `[start, end)`, when it runs.
    fn tail_bounds(&self, partition: i32) -> Option<(i64, i64)>;

    /// The records keyed `key` in `[from, until)` of `partition`, from the tail alone (`None`
    /// when it does not hold them all).
    fn read_held(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        key: &str,
    ) -> impl Future<Output = LogResult<Option<Vec<RawRecord>>>> + Send;

    /// Writes a lease record (`None`: a tombstone) to `partition` of the lease topic and waits
    /// for the ack.
    fn send_lease(
        &self,
        partition: i32,
        key: &str,
        value: Option<&[u8]>,
    ) -> impl Future<Output = LogResult<()>> + Send;

    /// Writes `wake` to the wake topic and waits for the ack.
    fn put_wake(&self, wake: &Wake) -> impl Future<Output = LogResult<()>> + Send;

    /// Waits until everything handed over is acknowledged, or `timeout` passes.
    fn flush(&self, timeout: Duration) -> impl Future<Output = LogResult<()>> + Send;
}

/// The backend an [`crate::EventLog`] writes through.
// One per process, made once: the Kafka variant's size costs nothing worth a box's indirection.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    /// The Kafka cluster of the settings.
    Kafka(KafkaBackend),
    /// Topics in memory, for unit tests.
    #[cfg(any(test, feature = "test-util"))]
    Memory(crate::testing::MemoryLog),
}

/// An acknowledgement from whichever backend.
pub(crate) enum Delivery {
    Kafka(<KafkaBackend as LogBackend>::Delivery),
    #[cfg(any(test, feature = "test-util"))]
    Memory(<crate::testing::MemoryLog as LogBackend>::Delivery),
}

impl Future for Delivery {
    type Output = std::result::Result<Position, KafkaError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Both variants are `Unpin`.
        match self.get_mut() {
            Self::Kafka(delivery) => Pin::new(delivery).poll(cx),
            #[cfg(any(test, feature = "test-util"))]
            Self::Memory(delivery) => Pin::new(delivery).poll(cx),
        }
    }
}

/// Runs `$call` on whichever backend `$backend` is.
macro_rules! each {
    ($backend:expr, $inner:ident => $call:expr) => {
        match $backend {
            Backend::Kafka($inner) => $call,
            #[cfg(any(test, feature = "test-util"))]
            Backend::Memory($inner) => $call,
        }
    };
}

impl LogBackend for Backend {
    type Delivery = Delivery;

    async fn enqueue(
        &self,
        partition: i32,
        key: &str,
        payload: &[u8],
    ) -> std::result::Result<Delivery, KafkaError> {
        match self {
            Self::Kafka(kafka) => kafka
                .enqueue(partition, key, payload)
                .await
                .map(Delivery::Kafka),
            #[cfg(any(test, feature = "test-util"))]
            Self::Memory(memory) => memory
                .enqueue(partition, key, payload)
                .await
                .map(Delivery::Memory),
        }
    }

    async fn read(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        key: Option<&str>,
        start: Start,
    ) -> LogResult<(Vec<RawRecord>, i64)> {
        each!(self, b => b.read(partition, from, until, key, start).await)
    }

    async fn watermarks(&self, partition: i32) -> LogResult<(i64, i64)> {
        each!(self, b => b.watermarks(partition).await)
    }

    async fn start_tail(&self) {
        each!(self, b => b.start_tail().await)
    }

    fn tail_bounds(&self, partition: i32) -> Option<(i64, i64)> {
        each!(self, b => b.tail_bounds(partition))
    }

    async fn read_held(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        key: &str,
    ) -> LogResult<Option<Vec<RawRecord>>> {
        each!(self, b => b.read_held(partition, from, until, key).await)
    }

    async fn send_lease(&self, partition: i32, key: &str, value: Option<&[u8]>) -> LogResult<()> {
        each!(self, b => b.send_lease(partition, key, value).await)
    }

    async fn put_wake(&self, wake: &Wake) -> LogResult<()> {
        each!(self, b => b.put_wake(wake).await)
    }

    async fn flush(&self, timeout: Duration) -> LogResult<()> {
        each!(self, b => b.flush(timeout).await)
    }
}
