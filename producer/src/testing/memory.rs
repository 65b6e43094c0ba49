//! The topics in memory: what [`crate::EventLog::in_memory`] writes through in unit tests.

use crate::backend::{LogBackend, LogResult};
use crate::{EventLog, Position, ProducerOptions};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use sessionlog_log::lease::LeaseTable;
use sessionlog_log::{Lease, RawRecord, Start, Wake, partitioner};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, EventDecoder, EventEncoder, EventEnvelope, SessionId,
};
use std::collections::VecDeque;
use std::future::Ready;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// An operation of the in-memory log that a test can make fail or act before
/// ([`MemoryLog::fail`], [`MemoryLog::before`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// An event record handed to the events topic.
    Send,
    /// A read of the events topic (a read-back, a catch-up, a read by offsets).
    Read,
    /// A watermarks round trip.
    Watermarks,
    /// A lease record written.
    Lease,
    /// A wake record written.
    Wake,
}

/// How an operation fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// As a broker failing for a moment does: nothing is written or read, the caller gets
    /// the error a timeout gives, and the same call again succeeds.
    Transient,
    /// For [`Operation::Send`]: the record is written, but its acknowledgement is lost, so
    /// the writer cannot tell it from [`Fault::Transient`] (a retry is a duplicate).
    AckLost,
}

/// Something a test planned for an operation: a fault, or an action of its own first.
type Plan = Box<dyn FnOnce(&MemoryLog) -> Option<Fault> + Send>;

/// The session-events topic, and its lease and wake topics, in memory: a backend of
/// [`EventLog`] for unit tests (`EventLog::in_memory`), which keeps the contract the Kafka one
/// keeps ([`crate::testing::contract`]). Clones share the topics, so two [`EventLog`]s over
/// clones are two processes writing one topic.
#[derive(Clone)]
pub struct MemoryLog {
    topics: Arc<Mutex<Topics>>,
    /// Whether `start_tail` starts a tail (as `[producer] tail_bytes > 0` does).
    tail: bool,
}

struct Topics {
    events: Vec<Partition>,
    leases: Vec<Partition>,
    wakes: Vec<Wake>,
    /// By partition, where the tail started reading (`None`: not started).
    tail_from: Vec<Option<i64>>,
    plans: Vec<(Operation, usize, Plan)>,
}

/// One partition: its records from `start`, and the offset the next one gets.
#[derive(Default)]
struct Partition {
    start: i64,
    records: VecDeque<RawRecord>,
    next: i64,
}

impl Partition {
    fn push(&mut self, partition: i32, key: &str, payload: Option<&[u8]>) -> i64 {
        let offset = self.next;
        self.records.push_back(RawRecord {
            partition,
            offset,
            key: Some(key.as_bytes().to_vec()),
            payload: payload.map(<[u8]>::to_vec),
            timestamp_ms: Some(sessionlog_schemas::now_micros() / 1000),
            headers: Vec::new(),
        });
        self.next += 1;
        offset
    }
}

impl MemoryLog {
    /// An empty topic of `partitions` partitions (at least one), with a tail.
    pub fn new(partitions: i32) -> Self {
        let count = usize::try_from(partitions.max(1)).unwrap_or(1);
        let empty = || (0..count).map(|_| Partition::default()).collect();
        Self {
            topics: Arc::new(Mutex::new(Topics {
                events: empty(),
                leases: empty(),
                wakes: Vec::new(),
                tail_from: vec![None; count],
                plans: Vec::new(),
            })),
            tail: true,
        }
    }

    /// The same topics, read by a process without a tail (`[producer] tail_bytes = 0`): every
    /// read goes to the partition, and a catch-up is bounded by
    /// `[producer] max_unprojected_records`.
    pub fn without_tail(&self) -> Self {
        Self {
            topics: Arc::clone(&self.topics),
            tail: false,
        }
    }

    /// A log over these topics, with `options` (leases off, no projection, no encryption;
    /// see the `with_` methods of [`EventLog`] under this feature).
    pub fn event_log(&self, options: ProducerOptions) -> EventLog {
        EventLog::in_memory(self, options)
    }

    /// The partition count.
    pub fn partitions(&self) -> i32 {
        i32::try_from(self.topics().events.len()).unwrap_or(i32::MAX)
    }

    /// Makes the next `operation` fail with `fault`.
    pub fn fail(&self, operation: Operation, fault: Fault) {
        self.fail_after(operation, 0, fault);
    }

    /// Makes the `operation` after the next `skip` ones fail with `fault`.
    pub fn fail_after(&self, operation: Operation, skip: usize, fault: Fault) {
        self.plan(operation, skip, Box::new(move |_| Some(fault)));
    }

    /// Runs `action` on these topics just before the next `operation` (a rival's record
    /// landing between a catch-up and a claim, say).
    pub fn before(&self, operation: Operation, action: impl FnOnce(&MemoryLog) + Send + 'static) {
        self.plan(
            operation,
            0,
            Box::new(move |log| {
                action(log);
                None
            }),
        );
    }

    fn plan(&self, operation: Operation, skip: usize, plan: Plan) {
        self.topics().plans.push((operation, skip, plan));
    }

    /// Runs what was planned for this `operation`, if anything: its fault, if it has one.
    fn planned(&self, operation: Operation) -> Option<Fault> {
        let plan = {
            let mut topics = self.topics();
            let mut due = None;
            for (i, (planned, skip, _)) in topics.plans.iter_mut().enumerate() {
                if *planned != operation {
                    continue;
                }
                match skip.checked_sub(1) {
                    Some(left) => *skip = left,
                    None if due.is_none() => due = Some(i),
                    None => {}
                }
            }
            due.map(|i| topics.plans.remove(i).2)
        };
        // Run unlocked: an action may write to the topics.
        plan.and_then(|plan| plan(self))
    }

    /// Writes `payload` keyed `key` to `partition` of the events topic as any producer could
    /// (a raw producer's record, an undecodable one); returns its offset.
    pub fn append_raw(&self, partition: i32, key: &str, payload: &[u8]) -> i64 {
        let mut topics = self.topics();
        match events_of(&mut topics, partition) {
            Some(events) => events.push(partition, key, Some(payload)),
            None => -1,
        }
    }

    /// Writes `envelope` encoded with the current schema, keyed and partitioned by its
    /// session, as a producer that bypasses the writers would; returns where it landed.
    pub fn append_envelope(&self, envelope: &EventEnvelope) -> crate::Result<Position> {
        let payload = EventEncoder::with_schema_id(CURRENT_SCHEMA_VERSION).encode(envelope)?;
        let partition = partitioner::partition_for(envelope.session_id, self.partitions());
        let key = partitioner::session_key(envelope.session_id);
        let offset = self.append_raw(partition, &key, &payload);
        Ok(Position { partition, offset })
    }

    /// Every record of `partition` the topic holds, in offset order.
    pub fn records(&self, partition: i32) -> Vec<RawRecord> {
        let mut topics = self.topics();
        events_of(&mut topics, partition)
            .map(|p| p.records.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every event of `session` in the topic, decoded, in log order (undecodable ones left
    /// out), with where each sits.
    pub async fn events(&self, session: SessionId) -> Vec<(Position, EventEnvelope)> {
        let partition = partitioner::partition_for(session, self.partitions());
        let key = partitioner::session_key(session);
        let decoder = EventDecoder::kept();
        let mut events = Vec::new();
        for record in self.records(partition) {
            if record.key.as_deref() != Some(key.as_bytes()) {
                continue;
            }
            let Some(payload) = record.payload.as_deref() else {
                continue;
            };
            if let Ok(envelope) = decoder.decode(payload).await {
                let position = Position {
                    partition,
                    offset: record.offset,
                };
                events.push((position, envelope));
            }
        }
        events
    }

    /// Deletes the records of `partition` below `offset`, as retention does.
    pub fn delete_before(&self, partition: i32, offset: i64) {
        let mut topics = self.topics();
        if let Some(events) = events_of(&mut topics, partition) {
            let start = offset.clamp(events.start, events.next);
            while events.records.front().is_some_and(|r| r.offset < start) {
                events.records.pop_front();
            }
            events.start = start;
        }
    }

    /// `session`'s lease as a reader of the lease topic finds it (unless released or ended).
    pub fn lease(&self, session: SessionId) -> Option<Lease> {
        let topics = self.topics();
        let mut table = LeaseTable::default();
        for partition in &topics.leases {
            for record in &partition.records {
                table.apply(record.key.as_deref(), record.payload.as_deref());
            }
        }
        table.lease(session).cloned()
    }

    /// The records of `session`'s partition of the lease topic, in order.
    pub fn lease_records(&self, session: SessionId) -> Vec<RawRecord> {
        let partition = partitioner::partition_for(session, self.partitions());
        let topics = self.topics();
        let leases = usize::try_from(partition)
            .ok()
            .and_then(|p| topics.leases.get(p));
        leases
            .map(|p| p.records.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every wake written, in order.
    pub fn wakes(&self) -> Vec<Wake> {
        self.topics().wakes.clone()
    }

    fn transient(what: &str) -> sessionlog_log::Error {
        sessionlog_log::Error::Timeout {
            what: format!("{what} (a failure the test injected)"),
            seconds: 0,
        }
    }

    fn topics(&self) -> MutexGuard<'_, Topics> {
        // Every change is one push or removal under the lock: a panic cannot leave it torn.
        self.topics.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn events_of(topics: &mut Topics, partition: i32) -> Option<&mut Partition> {
    usize::try_from(partition)
        .ok()
        .and_then(|p| topics.events.get_mut(p))
}

impl LogBackend for MemoryLog {
    type Delivery = Ready<std::result::Result<Position, KafkaError>>;

    async fn enqueue(
        &self,
        partition: i32,
        key: &str,
        payload: &[u8],
    ) -> std::result::Result<Self::Delivery, KafkaError> {
        let timed_out = || {
            Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageTimedOut,
            ))
        };
        let fault = self.planned(Operation::Send);
        if fault == Some(Fault::Transient) {
            return Ok(std::future::ready(timed_out()));
        }
        let mut topics = self.topics();
        let Some(events) = events_of(&mut topics, partition) else {
            return Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::UnknownPartition,
            ));
        };
        let offset = events.push(partition, key, Some(payload));
        Ok(std::future::ready(match fault {
            Some(Fault::AckLost) => timed_out(),
            _ => Ok(Position { partition, offset }),
        }))
    }

    async fn read(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        key: Option<&str>,
        _start: Start,
    ) -> LogResult<(Vec<RawRecord>, i64)> {
        if self.planned(Operation::Read).is_some() {
            return Err(Self::transient("a read"));
        }
        let mut topics = self.topics();
        let Some(events) = events_of(&mut topics, partition) else {
            return Err(Self::transient("a read of a partition the topic lacks"));
        };
        let until = until.unwrap_or(events.next);
        if from >= until {
            return Ok((Vec::new(), from));
        }
        if until > events.next {
            // A reader waits for records that are not there yet, and gives up.
            return Err(Self::transient("records beyond the partition's end"));
        }
        let records = events
            .records
            .iter()
            .filter(|r| r.offset >= from && r.offset < until)
            .filter(|r| key.is_none_or(|k| r.key.as_deref() == Some(k.as_bytes())))
            .cloned()
            .collect();
        Ok((records, until))
    }

    async fn watermarks(&self, partition: i32) -> LogResult<(i64, i64)> {
        if self.planned(Operation::Watermarks).is_some() {
            return Err(Self::transient("watermarks"));
        }
        let mut topics = self.topics();
        events_of(&mut topics, partition)
            .map(|events| (events.start, events.next))
            .ok_or_else(|| Self::transient("watermarks of a partition the topic lacks"))
    }

    /// A tail starts where each partition ends now, as Kafka's does.
    async fn start_tail(&self) {
        if !self.tail {
            return;
        }
        let mut topics = self.topics();
        let ends: Vec<i64> = topics.events.iter().map(|p| p.next).collect();
        for (from, end) in topics.tail_from.iter_mut().zip(ends) {
            from.get_or_insert(end);
        }
    }

    fn tail_bounds(&self, partition: i32) -> Option<(i64, i64)> {
        if !self.tail {
            return None;
        }
        let p = usize::try_from(partition).ok()?;
        let topics = self.topics();
        let from = (*topics.tail_from.get(p)?)?;
        let events = topics.events.get(p)?;
        Some((from.max(events.start), events.next))
    }

    async fn read_held(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        key: &str,
    ) -> LogResult<Option<Vec<RawRecord>>> {
        match self.tail_bounds(partition) {
            Some((start, end)) if start <= from && until <= end => {
                let read = self.read(partition, from, Some(until), Some(key), Start::Held);
                Ok(Some(read.await?.0))
            }
            _ => Ok(None),
        }
    }

    async fn send_lease(&self, partition: i32, key: &str, value: Option<&[u8]>) -> LogResult<()> {
        if self.planned(Operation::Lease).is_some() {
            return Err(Self::transient("a lease write"));
        }
        let mut topics = self.topics();
        let leases = usize::try_from(partition)
            .ok()
            .and_then(|p| topics.leases.get_mut(p))
            .ok_or_else(|| Self::transient("a lease write to a partition the topic lacks"))?;
        leases.push(partition, key, value);
        Ok(())
    }

    async fn put_wake(&self, wake: &Wake) -> LogResult<()> {
        if self.planned(Operation::Wake).is_some() {
            return Err(Self::transient("a wake write"));
        }
        self.topics().wakes.push(wake.clone());
        Ok(())
    }

    async fn flush(&self, _timeout: Duration) -> LogResult<()> {
        Ok(())
    }
}
