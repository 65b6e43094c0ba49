//! The process-wide handle on the session-events topic.

use crate::{Error, Result};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use sessionlog_log::{Settings, partitioner::session_key};
use sessionlog_schemas::{EventEncoder, EventEnvelope, SchemaRegistry, value_subject};
use std::time::Duration;

/// Where an acknowledged event sits in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// The partition (the session's).
    pub partition: i32,
    /// The offset within it.
    pub offset: i64,
}

/// Producer tuning, with defaults for durability first.
#[derive(Clone, Debug)]
pub struct ProducerOptions {
    /// How long the producer waits to fill a batch.
    pub linger_ms: u32,
    /// `lz4` by default; `zstd`, `snappy`, `gzip` or `none`.
    pub compression: String,
    /// Events whose encoded size exceeds this are refused before sending.
    pub max_event_bytes: usize,
    /// How long an event may wait for its ack before it counts as not acknowledged.
    pub delivery_timeout: Duration,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        Self {
            linger_ms: 5,
            compression: "lz4".into(),
            // Kafka's default max.message.bytes is 1 MiB; stay under it with room for headers.
            max_event_bytes: 1_000_000,
            delivery_timeout: Duration::from_secs(120),
        }
    }
}

/// The session-events topic as a harness process sees it: one Kafka producer and one encoder,
/// shared by every session the process runs.
pub struct EventLog {
    producer: FutureProducer,
    encoder: EventEncoder,
    topic: String,
    options: ProducerOptions,
}

impl EventLog {
    /// Registers the schemas (once per process) and creates the producer.
    ///
    /// Fails with a clear error when the registry is unreachable: without a schema id
    /// no event can be written.
    pub async fn connect(settings: &Settings, options: ProducerOptions) -> Result<Self> {
        let registry = SchemaRegistry::new(settings.registry.url.clone())?;
        let encoder =
            EventEncoder::register(&registry, &value_subject(&settings.kafka.topic)).await?;
        let producer: FutureProducer = settings
            .kafka
            .producer_config()
            .set("compression.type", &options.compression)
            .set("linger.ms", options.linger_ms.to_string())
            .set(
                "message.timeout.ms",
                options.delivery_timeout.as_millis().to_string(),
            )
            .create()
            .map_err(sessionlog_log::Error::kafka("create producer"))?;
        Ok(Self {
            producer,
            encoder,
            topic: settings.kafka.topic.clone(),
            options,
        })
    }

    /// The schema id written into every record.
    pub fn schema_id(&self) -> u32 {
        self.encoder.schema_id()
    }

    /// The topic written to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Encodes, sends keyed by session id, and waits for the ack (`acks=all`).
    /// When the local queue is full the call waits: backpressure, never a silent drop.
    pub async fn append(&self, envelope: &EventEnvelope) -> Result<Position> {
        let payload = self.encoder.encode(envelope)?;
        if payload.len() > self.options.max_event_bytes {
            return Err(Error::TooLarge {
                size: payload.len(),
                limit: self.options.max_event_bytes,
            });
        }
        let key = session_key(envelope.session_id);
        let record = FutureRecord::to(&self.topic).key(&key).payload(&payload);
        match self.producer.send(record, Timeout::Never).await {
            Ok(delivery) => Ok(Position {
                partition: delivery.partition,
                offset: delivery.offset,
            }),
            Err((source, _)) => Err(Error::NotAcknowledged {
                session: key,
                seq: envelope.seq,
                source,
            }),
        }
    }

    /// Waits until everything sent so far is acknowledged or `timeout` passes.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        self.producer
            .flush(timeout)
            .map_err(|e| sessionlog_log::Error::kafka("flush producer")(e).into())
    }
}
