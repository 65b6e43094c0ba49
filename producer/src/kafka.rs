//! The Kafka side of [`crate::EventLog`]: one producer, a pool of partition readers, the
//! process's tail of the topic, and the lease and wake topics' writers.

use crate::Position;
use crate::backend::{LogBackend, LogResult};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use sessionlog_log::retry::{self, Retryable};
use sessionlog_log::{
    KafkaSettings, LogTail, PartitionReader, ProducerSettings, RawRecord, Start, TailOptions, Wake,
    WakeWriter, topic,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The session-events topic and its companions on a Kafka cluster.
pub struct KafkaBackend {
    producer: FutureProducer,
    kafka: KafkaSettings,
    partitions: i32,
    options: ProducerSettings,
    /// Idle partition readers, kept between read-backs: a consumer costs a client, its
    /// threads and a connection to every broker, too much to make for every confirmed append.
    readers: Mutex<Vec<PartitionReader>>,
    /// One permit per reader that may exist (`[producer] readers`): read-backs beyond it wait
    /// for a reader rather than each making one (a thousand sessions confirming at once would
    /// make a thousand; a consumer made per read-back managed about 25 a second). A reused
    /// reader never hands a read records it fetched for an earlier one:
    /// `PartitionReader::read_range` delivers exactly the offsets asked for, and reads again on
    /// any gap (tests/tests/integration/reader_reuse.rs).
    reader_permits: Arc<Semaphore>,
    /// The process's tail of the topic, started by the first keyed read (a confirmation, a
    /// catch-up): afterwards such reads wait for it instead of seeking a reader
    /// (`[producer] tail_bytes`; see [`LogTail`]).
    tail: tokio::sync::OnceCell<Option<LogTail>>,
    /// Whether the lease topic was found with the events topic's partition count (checked
    /// once, at the first lease written).
    lease_topic_checked: tokio::sync::OnceCell<()>,
    /// The wake topic's writer, made on first use.
    wake_writer: tokio::sync::OnceCell<WakeWriter>,
}

impl KafkaBackend {
    /// Creates the producer, tuned by `options`, for a topic of `partitions` (pinned).
    pub(crate) fn connect(
        kafka: &KafkaSettings,
        partitions: i32,
        options: &ProducerSettings,
    ) -> LogResult<Self> {
        let mut config = kafka.producer_config();
        config
            .set("compression.type", &options.compression)
            .set("linger.ms", options.linger_ms.to_string())
            .set("batch.size", options.batch_size.to_string())
            .set("batch.num.messages", options.batch_num_messages.to_string())
            .set(
                "message.timeout.ms",
                options.delivery_timeout_ms.to_string(),
            )
            // Our own window admits at most max_in_flight events, so librdkafka's queue never
            // has to refuse one of ours for its count.
            .set(
                "queue.buffering.max.messages",
                options.max_in_flight.clamp(1, 10_000_000).to_string(),
            );
        // Pass-through properties win over our tuning, as they do in producer_config().
        for (key, value) in &kafka.librdkafka {
            config.set(key, value);
        }
        let producer: FutureProducer = config
            .create()
            .map_err(sessionlog_log::Error::kafka("create producer"))?;
        Ok(Self {
            producer,
            kafka: kafka.clone(),
            partitions,
            reader_permits: Arc::new(Semaphore::new(options.readers.max(1))),
            options: options.clone(),
            readers: Mutex::new(Vec::new()),
            tail: tokio::sync::OnceCell::new(),
            lease_topic_checked: tokio::sync::OnceCell::new(),
            wake_writer: tokio::sync::OnceCell::new(),
        })
    }

    /// The process's tail of the topic, if it runs (not started by this call).
    fn running_tail(&self) -> Option<&LogTail> {
        self.tail.get().and_then(Option::as_ref)
    }

    /// The process's tail of the topic, started at the first call (`None` with
    /// `[producer] tail_bytes = 0`, or when its consumer cannot be made: reads then go to the
    /// partition, as without a tail).
    async fn tail(&self) -> Option<&LogTail> {
        self.tail
            .get_or_init(|| async {
                if self.options.tail_bytes == 0 {
                    return None;
                }
                LogTail::start(
                    &self.kafka,
                    &self.kafka.topic,
                    self.partitions,
                    &TailOptions::from(&self.options),
                    self.options.tail_wait(),
                )
                .await
                .inspect_err(
                    |e| tracing::warn!(error = %e, "no log tail: confirmations read the partition"),
                )
                .ok()
            })
            .await
            .as_ref()
    }

    /// A reader of the topic lent from the pool, within its permits (see
    /// [`crate::EventLog::lend_reader`]).
    pub(crate) async fn lend_reader(&self) -> LogResult<LentReader<'_>> {
        let permit = Arc::clone(&self.reader_permits)
            .acquire_owned()
            .await
            .map_err(|_| sessionlog_log::Error::Task("reader permits closed".into()))?;
        Ok(LentReader {
            pool: self,
            reader: Some(self.idle_reader()?),
            keep: false,
            _permit: permit,
        })
    }

    /// The watermarks of `partition` through the tail's consumer when the process runs one,
    /// else through `reader`.
    pub(crate) async fn watermarks_with(
        &self,
        reader: &PartitionReader,
        partition: i32,
    ) -> LogResult<(i64, i64)> {
        match self.running_tail() {
            Some(tail) => tail.watermarks(partition).await,
            None => reader.watermarks(partition).await,
        }
    }

    /// A reader of the topic: an idle one, or a new one. (Each read assigns its partition and
    /// offset anew, which makes the consumer drop whatever it had fetched for the last one.)
    fn idle_reader(&self) -> LogResult<PartitionReader> {
        let idle = self
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(reader) => Ok(reader),
            None => PartitionReader::for_short_reads(&self.kafka, &self.kafka.topic),
        }
    }

    fn keep_reader(&self, reader: PartitionReader) {
        // A push or a pop at a time: a panic cannot leave the list torn.
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(reader);
    }

    /// Checks, once, that the lease topic has the events topic's partition count.
    async fn check_lease_topic(&self, topic: &str) -> LogResult<()> {
        self.lease_topic_checked
            .get_or_try_init(|| async {
                let live = topic::partition_count(&self.kafka, topic).await?;
                match topic::unpinned(live, self.partitions) {
                    None => Ok(()),
                    Some(problem) => Err(sessionlog_log::Error::TopicMismatch {
                        topic: topic.to_string(),
                        problem: format!(
                            "{problem} (the lease topic must have the events topic's partitions; \
                             `sessionlog init` creates it so)"
                        ),
                    }),
                }
            })
            .await
            .map(drop)
    }
}

/// The acknowledgement of a record handed to librdkafka.
pub struct KafkaDelivery(DeliveryFuture);

impl Future for KafkaDelivery {
    type Output = std::result::Result<Position, KafkaError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|delivered| match delivered {
                Ok(Ok(delivery)) => Ok(Position {
                    partition: delivery.partition,
                    offset: delivery.offset,
                }),
                Ok(Err((source, _))) => Err(source),
                // The producer was dropped with the event queued: it was never acknowledged.
                Err(_) => Err(KafkaError::Canceled),
            })
    }
}

impl LogBackend for KafkaBackend {
    type Delivery = KafkaDelivery;

    /// Hands one record to librdkafka, for `partition`: named explicitly, so that the
    /// session's partition comes from the pinned count and never from the live one (which
    /// librdkafka's partitioner would use, moving sessions if partitions were added).
    /// Enqueueing is synchronous, so events enqueued one after another keep their order;
    /// librdkafka refuses only when its own byte budget is full, and then we wait for acks to
    /// free it rather than drop the event.
    async fn enqueue(
        &self,
        partition: i32,
        key: &str,
        payload: &[u8],
    ) -> std::result::Result<KafkaDelivery, KafkaError> {
        loop {
            let record = FutureRecord::to(&self.kafka.topic)
                .partition(partition)
                .key(key)
                .payload(payload);
            match self.producer.send_result(record) {
                Ok(future) => return Ok(KafkaDelivery(future)),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // librdkafka has no "queue has room" notification; its own FutureProducer
                    // polls the same way.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// From the tail when the read is keyed and the tail holds the range; else from a pooled
    /// reader. `PartitionReader` gives up at the first consumer error, and librdkafka reports
    /// a broker it lost the connection to (one restarting, say) as such an error while it
    /// reconnects. A read is repeatable, so a Kafka error or timeout gets a few fresh attempts.
    async fn read(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        key: Option<&str>,
        start: Start,
    ) -> LogResult<(Vec<RawRecord>, i64)> {
        if let (Some(key), Some(tail)) = (key, self.tail().await)
            && let Some(read) = tail
                .read(
                    partition,
                    from,
                    until,
                    key.as_bytes(),
                    self.options.tail_wait(),
                    start,
                )
                .await?
        {
            return Ok(read);
        }
        let read = || async {
            let _permit = Arc::clone(&self.reader_permits)
                .acquire_owned()
                .await
                .map_err(|_| sessionlog_log::Error::Task("reader permits closed".into()))?;
            let reader = self.idle_reader()?;
            let mut records = Vec::new();
            let mut keep = |record: RawRecord| {
                if key.is_none_or(|k| record.key.as_deref() == Some(k.as_bytes())) {
                    records.push(record);
                }
            };
            let next = match until {
                None => reader.read_to_end(partition, from, &mut keep).await?,
                Some(until) => reader.read_range(partition, from, until, &mut keep).await?,
            };
            // Only a reader whose read went through is kept: one that failed starts afresh.
            self.keep_reader(reader);
            Ok((records, next))
        };
        read.retry(retry::tries(4))
            .when(|e: &sessionlog_log::Error| {
                matches!(
                    e,
                    sessionlog_log::Error::Kafka { .. } | sessionlog_log::Error::Timeout { .. }
                )
            })
            .notify(|e, wait| {
                tracing::warn!(partition, error = %e, ?wait, "read-back failed; reading again");
            })
            .await
    }

    /// In one round trip to the partition's leader (through the tail's consumer when the
    /// process runs one, and then shared with the process's other callers at that moment;
    /// this does not start it).
    async fn watermarks(&self, partition: i32) -> LogResult<(i64, i64)> {
        if let Some(tail) = self.running_tail() {
            return tail.watermarks(partition).await;
        }
        let reader = self.lend_reader().await?;
        let marks = reader.watermarks(partition).await?;
        reader.keep();
        Ok(marks)
    }

    async fn start_tail(&self) {
        self.tail().await;
    }

    fn tail_bounds(&self, partition: i32) -> Option<(i64, i64)> {
        let tail = self.running_tail()?;
        Some((tail.first_held(partition)?, tail.held_end(partition)?))
    }

    async fn read_held(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        key: &str,
    ) -> LogResult<Option<Vec<RawRecord>>> {
        let Some(tail) = self.running_tail() else {
            return Ok(None);
        };
        let read = tail
            .read(
                partition,
                from,
                Some(until),
                key.as_bytes(),
                self.options.tail_wait(),
                Start::Held,
            )
            .await;
        match read {
            Ok(read) => Ok(read.map(|(records, _)| records)),
            Err(sessionlog_log::Error::TailBehind { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn send_lease(&self, partition: i32, key: &str, value: Option<&[u8]>) -> LogResult<()> {
        let topic = self.kafka.lease_topic();
        self.check_lease_topic(&topic).await?;
        let mut record = FutureRecord::<str, [u8]>::to(&topic)
            .partition(partition)
            .key(key);
        if let Some(value) = value {
            record = record.payload(value);
        }
        let timeout = Duration::from_millis(self.options.delivery_timeout_ms);
        self.producer
            .send(record, timeout)
            .await
            .map(drop)
            .map_err(|(source, _)| sessionlog_log::Error::kafka("write a lease")(source))
    }

    async fn put_wake(&self, wake: &Wake) -> LogResult<()> {
        let writer = self
            .wake_writer
            .get_or_try_init(|| async {
                WakeWriter::new(
                    &self.kafka,
                    self.partitions,
                    Duration::from_millis(self.options.delivery_timeout_ms),
                )
            })
            .await?;
        writer.put(wake).await
    }

    async fn flush(&self, timeout: Duration) -> LogResult<()> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.flush(timeout))
            .await
            .map_err(|e| sessionlog_log::Error::Task(e.to_string()))?
            .map_err(sessionlog_log::Error::kafka("flush producer"))
    }
}

/// A partition reader lent by [`crate::EventLog::lend_reader`], holding one of the pool's
/// permits until it is dropped.
pub struct LentReader<'a> {
    pool: &'a KafkaBackend,
    /// Always `Some` until the drop takes it back to the pool.
    reader: Option<PartitionReader>,
    keep: bool,
    _permit: OwnedSemaphorePermit,
}

impl LentReader<'_> {
    /// Returns the reader to the pool (its reads went through): the next borrower reuses it.
    pub fn keep(mut self) {
        self.keep = true;
    }
}

impl std::ops::Deref for LentReader<'_> {
    type Target = PartitionReader;

    fn deref(&self) -> &PartitionReader {
        // Taken only by `drop`, after which nothing can deref.
        self.reader
            .as_ref()
            .unwrap_or_else(|| unreachable!("a lent reader is taken back only when dropped"))
    }
}

impl Drop for LentReader<'_> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take()
            && self.keep
        {
            self.pool.keep_reader(reader);
        }
    }
}
