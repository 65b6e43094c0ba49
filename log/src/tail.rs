//! A process's live tail of the session-events topic: one consumer reading every partition
//! from where the tail started, keeping each partition's most recent records in memory.
//!
//! A confirmed append used to seek a pooled reader to the session's last confirmed offset and
//! read up to its own records: a round trip and a fetch per append, queued behind the pool. With
//! a tail, the records arrive by themselves; an append waits until the tail has read past its
//! own and takes the session's records from memory (an index by key makes that independent of
//! how many other sessions share the partition). What is asked of it is exactly what a reader
//! would deliver: every record of the key in `[from, until)`, in order, or nothing at all
//! ([`LogTail::read`] answers `None` when the range starts before what the tail holds, and the
//! caller reads the partition itself).
//!
//! Memory is bounded by bytes: each partition keeps at most its share of `bytes`, dropping its
//! oldest records first. A tail that falls behind the partition (the consumer cannot keep up,
//! or the brokers are away) answers [`Error::TailBehind`] after the wait it was given, never a
//! partial read.

use crate::reader::{RawRecord, is_transient, watermarks_retried};
use crate::retry;
use crate::round_trip::SharedRoundTrips;
use crate::{Error, KafkaSettings, Result};
use backon::BackoffBuilder;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;

/// Whether a tail read asks the log where the partition starts before answering from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Ask: the range may reach below what retention or a deletion has left.
    AskTheLog,
    /// Do not: the range begins where the caller's own last write or read ended.
    Held,
}

/// One consumer over every partition of the topic, and what it has read of each.
pub struct LogTail {
    shared: Arc<Shared>,
    consumer: Arc<StreamConsumer>,
    task: tokio::task::JoinHandle<()>,
    watermark_trips: Arc<SharedRoundTrips<std::result::Result<(i64, i64), Failed>>>,
}

/// A shared watermark round trip's failure, cloned to each caller it answers.
#[derive(Clone)]
enum Failed {
    Kafka(rdkafka::error::KafkaError),
    Task(String),
}

struct Shared {
    topic: String,
    partitions: Vec<Mutex<Ring>>,
    /// Bytes of key and payload one partition's ring may hold.
    budget: usize,
}

/// What the tail holds of one partition: every record in `[start, end)`.
struct Ring {
    /// The first offset held (everything from here to `end` is here). `i64::MAX` until the
    /// consumer is positioned: nothing is held yet.
    start: i64,
    /// The offset after the last record read.
    end: i64,
    records: VecDeque<RawRecord>,
    bytes: usize,
    /// The offsets of each key's records among `records`, ascending.
    by_key: HashMap<Vec<u8>, VecDeque<i64>>,
    /// Wakes each reader once `end` reaches the offset it is filed under.
    waiters: BTreeMap<i64, Vec<oneshot::Sender<()>>>,
}

impl Ring {
    fn new() -> Self {
        Self {
            start: i64::MAX,
            end: i64::MAX,
            records: VecDeque::new(),
            bytes: 0,
            by_key: HashMap::new(),
            waiters: BTreeMap::new(),
        }
    }

    fn position(&mut self, offset: i64) {
        self.start = offset;
        self.end = offset;
        self.records.clear();
        self.by_key.clear();
        self.bytes = 0;
        self.wake();
    }

    fn push(&mut self, record: RawRecord, budget: usize) {
        if record.offset < self.end {
            let held = self
                .records
                .binary_search_by_key(&record.offset, |r| r.offset)
                .ok()
                .and_then(|at| self.records.get(at));
            if held.is_some_and(|r| r.key == record.key && r.payload == record.payload) {
                // Fetched twice (a consumer reconnecting): already held.
                return;
            }
            // The partition went back (the topic was deleted and created again): nothing held
            // describes it any more.
            tracing::warn!(
                partition = record.partition,
                offset = record.offset,
                end = self.end,
                "the log tail's partition went back; dropping what it held"
            );
            self.position(record.offset);
        }
        // Offsets past `end` with nothing between were never delivered by the broker to a
        // consumer reading the partition in order: there is no record there to hold.
        self.end = record.offset + 1;
        self.bytes += size(&record);
        if let Some(key) = &record.key {
            match self.by_key.get_mut(key.as_slice()) {
                Some(offsets) => offsets.push_back(record.offset),
                None => {
                    self.by_key
                        .insert(key.clone(), VecDeque::from([record.offset]));
                }
            }
        }
        self.records.push_back(record);
        while self.bytes > budget && self.drop_oldest() {}
        self.wake();
    }

    /// Drops the oldest record held; false when none is.
    fn drop_oldest(&mut self) -> bool {
        let Some(oldest) = self.records.pop_front() else {
            return false;
        };
        self.bytes -= size(&oldest);
        self.start = oldest.offset + 1;
        if let Some(key) = &oldest.key
            && let Some(offsets) = self.by_key.get_mut(key.as_slice())
        {
            offsets.pop_front();
            if offsets.is_empty() {
                self.by_key.remove(key.as_slice());
            }
        }
        true
    }

    /// Stops holding what the log no longer has: every record below `log_start` (retention
    /// or a deletion moved the partition's start there).
    fn forget_before(&mut self, log_start: i64) {
        if self.start == i64::MAX || log_start <= self.start {
            return;
        }
        while self.records.front().is_some_and(|r| r.offset < log_start) && self.drop_oldest() {}
        // Nothing at all is held below `end`, even when the log's start is past it.
        self.start = log_start.min(self.end);
    }

    /// Wakes the readers whose offset the tail has reached.
    fn wake(&mut self) {
        if self.end == i64::MAX {
            return;
        }
        let later = self.waiters.split_off(&(self.end.saturating_add(1)));
        for (_, senders) in std::mem::replace(&mut self.waiters, later) {
            for sender in senders {
                let _ = sender.send(());
            }
        }
    }

    /// The records of `key` in `[from, until)`, if the ring holds that whole range.
    fn take(&self, key: &[u8], from: i64, until: i64) -> Option<Vec<RawRecord>> {
        if from < self.start || until > self.end {
            return None;
        }
        let Some(offsets) = self.by_key.get(key) else {
            return Some(Vec::new());
        };
        let first = offsets.partition_point(|o| *o < from);
        Some(
            offsets
                .range(first..)
                .take_while(|o| **o < until)
                .filter_map(|o| {
                    let at = self.records.binary_search_by_key(o, |r| r.offset).ok()?;
                    self.records.get(at).cloned()
                })
                .collect(),
        )
    }
}

fn size(record: &RawRecord) -> usize {
    record.key.as_ref().map_or(0, Vec::len) + record.payload.as_ref().map_or(0, Vec::len) + 64
}

impl LogTail {
    /// Starts tailing every one of `partitions` of `topic` from its end as of now, holding at
    /// most `bytes` of records over all of them. Returns once the tail is positioned (or, if
    /// the brokers do not answer within `ready_within`, at once, the tail positioning itself in
    /// the background): every record acknowledged after it returns is one the tail will hold.
    /// Needs a Tokio runtime: the consumer's loop is a task of it, stopped when the tail is
    /// dropped.
    pub async fn start(
        settings: &KafkaSettings,
        topic: &str,
        partitions: i32,
        options: &TailOptions,
        ready_within: Duration,
    ) -> Result<Self> {
        let count = usize::try_from(partitions.max(1)).unwrap_or(1);
        let bytes = options.bytes;
        let consumer: StreamConsumer = consumer_config(settings, options)
            .create()
            .map_err(Error::kafka("create tail consumer"))?;
        let consumer = Arc::new(consumer);
        let shared = Arc::new(Shared {
            topic: topic.to_string(),
            partitions: (0..count).map(|_| Mutex::new(Ring::new())).collect(),
            budget: (bytes / count).max(64 * 1024),
        });
        let (positioned, ready) = oneshot::channel();
        let task = tokio::spawn(run(Arc::clone(&shared), Arc::clone(&consumer), positioned));
        if tokio::time::timeout(ready_within, ready).await.is_err() {
            tracing::warn!(
                "the log tail is not positioned yet; confirmations read the partitions until it is"
            );
        }
        Ok(Self {
            shared,
            consumer,
            task,
            watermark_trips: SharedRoundTrips::new(),
        })
    }

    /// The records of `partition` with `key` and `from <= offset < until` (`until`: the
    /// partition's end as of now when `None`), in log order, and the offset the read reached,
    /// as [`crate::PartitionReader::read_range`] would deliver them. Waits up to `wait` for the
    /// tail to read that far; [`Error::TailBehind`] if it does not. `None` when the tail does
    /// not hold the range's beginning (it started, or dropped its oldest records, after
    /// `from`): read the partition directly.
    ///
    /// With [`Start::AskTheLog`] the partition's start is asked of its leader first (one round
    /// trip, shared with finding its end when `until` is `None`): records that retention or a
    /// deletion removed are not answered from memory, so a reader learns the log's start as a
    /// direct read would. [`Start::Held`] skips it, for a range the caller has just written or
    /// read (a writer confirming its own appends).
    pub async fn read(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        key: &[u8],
        wait: Duration,
        start: Start,
    ) -> Result<Option<(Vec<RawRecord>, i64)>> {
        let Some(ring) = usize::try_from(partition)
            .ok()
            .and_then(|p| self.shared.partitions.get(p))
        else {
            return Ok(None);
        };
        if lock(ring).start > from {
            return Ok(None);
        }
        let until = match (until, start) {
            (Some(until), Start::Held) => until,
            (until, _) => {
                let (log_start, end) = self.watermarks(partition).await?;
                lock(ring).forget_before(log_start);
                if log_start > from {
                    return Ok(None);
                }
                until.unwrap_or(end)
            }
        };
        if from >= until {
            return Ok(Some((Vec::new(), from)));
        }
        let woken = {
            let mut ring = lock(ring);
            if ring.start > from {
                return Ok(None);
            }
            if ring.end >= until {
                None
            } else {
                let (sender, receiver) = oneshot::channel();
                ring.waiters.entry(until).or_default().push(sender);
                Some(receiver)
            }
        };
        if let Some(woken) = woken
            && tokio::time::timeout(wait, woken).await.is_err()
        {
            let end = lock(ring).end;
            return Err(Error::TailBehind {
                partition,
                behind: until.saturating_sub(end),
                waited_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(lock(ring)
            .take(key, from, until)
            .map(|records| (records, until)))
    }

    /// The first offset of `partition` the tail holds (`None` before it is positioned).
    pub fn first_held(&self, partition: i32) -> Option<i64> {
        let ring = usize::try_from(partition)
            .ok()
            .and_then(|p| self.shared.partitions.get(p))?;
        Some(lock(ring).start).filter(|start| *start != i64::MAX)
    }

    /// The offset after the last record of `partition` the tail has read (`None` before it is
    /// positioned): how far it can answer from memory now, without waiting or a round trip.
    pub fn held_end(&self, partition: i32) -> Option<i64> {
        let ring = usize::try_from(partition)
            .ok()
            .and_then(|p| self.shared.partitions.get(p))?;
        let ring = lock(ring);
        (ring.start != i64::MAX).then_some(ring.end)
    }

    /// The first offset `partition` still has and the offset its next record will get, asked
    /// of its leader. Callers at once share a round trip begun after they asked (a burst of
    /// claims asks for each partition's end hundreds of times a second).
    pub async fn watermarks(&self, partition: i32) -> Result<(i64, i64)> {
        let consumer = Arc::clone(&self.consumer);
        let topic = self.shared.topic.clone();
        let ask = move || {
            let (consumer, topic) = (Arc::clone(&consumer), topic.clone());
            async move {
                // A round trip to the leader: what was acknowledged before it began is below
                // its answer.
                match tokio::task::spawn_blocking(move || {
                    consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))
                })
                .await
                {
                    Ok(Ok(marks)) => Ok(marks),
                    Ok(Err(e)) => Err(Failed::Kafka(e)),
                    Err(e) => Err(Failed::Task(e.to_string())),
                }
            }
        };
        let shared = || async {
            match self.watermark_trips.ask(partition, ask.clone()).await {
                Some(Ok(marks)) => Ok(marks),
                Some(Err(Failed::Kafka(e))) => Err(Error::kafka("fetch watermarks")(e)),
                Some(Err(Failed::Task(e))) => Err(Error::Task(e)),
                None => Err(Error::Task(
                    "the watermark round trip ended unanswered".into(),
                )),
            }
        };
        // As a reader's: a broker that is restarting is waited for.
        watermarks_retried(partition, shared).await
    }
}

/// How a process's tail reads: what it keeps and how its fetches are answered (the
/// `[producer] tail_*` settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailOptions {
    /// Bytes of records kept over all partitions (`tail_bytes`).
    pub bytes: usize,
    /// `fetch.min.bytes` of the tail's consumer (`tail_fetch_min_bytes`).
    pub fetch_min_bytes: u32,
    /// `fetch.wait.max.ms` of the tail's consumer (`tail_fetch_wait_ms`).
    pub fetch_wait_ms: u32,
}

impl From<&crate::ProducerSettings> for TailOptions {
    fn from(settings: &crate::ProducerSettings) -> Self {
        Self {
            bytes: settings.tail_bytes,
            fetch_min_bytes: settings.tail_fetch_min_bytes,
            fetch_wait_ms: settings.tail_fetch_wait_ms,
        }
    }
}

/// The tail consumer's configuration: the cluster's client settings, then the tail's own.
fn consumer_config(settings: &KafkaSettings, options: &TailOptions) -> rdkafka::ClientConfig {
    let mut config = settings.client_config();
    config
        // assign() needs a group id even though nothing is ever committed.
        .set("group.id", "sessionlog-tail")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Positioned below what retention kept (a tail far behind), the consumer goes on
        // from the first record kept: those before it are gone, and nothing kept is skipped.
        .set("auto.offset.reset", "earliest")
        // A broker answers a fetch once it has gathered fetch.min.bytes or held it for
        // fetch.wait.max.ms: under load few fetches carry many batches; when quiet, an append
        // waits at most the latter beyond its ack.
        .set(
            "fetch.min.bytes",
            options.fetch_min_bytes.max(1).to_string(),
        )
        .set("fetch.wait.max.ms", options.fetch_wait_ms.to_string())
        .set("queued.max.messages.kbytes", "16384");
    config
}

impl Drop for LogTail {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(ring: &Mutex<Ring>) -> std::sync::MutexGuard<'_, Ring> {
    // Every change to a ring is made under one lock and leaves it whole: a panic elsewhere
    // cannot leave it torn.
    ring.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Positions the consumer at every partition's end, then files each record it reads.
async fn run(shared: Arc<Shared>, consumer: Arc<StreamConsumer>, positioned: oneshot::Sender<()>) {
    let mut waits = retry::forever().build();
    while let Err(e) = position(&shared, &consumer).await {
        let wait = waits.next().unwrap_or(retry::MAX_DELAY);
        tracing::warn!(error = %e, ?wait, "cannot start the log tail; confirmations read the partitions directly until it starts");
        tokio::time::sleep(wait).await;
    }
    let _ = positioned.send(());
    loop {
        match consumer.recv().await {
            Ok(message) => {
                let record = RawRecord::of(&message);
                if let Some(ring) = usize::try_from(record.partition)
                    .ok()
                    .and_then(|p| shared.partitions.get(p))
                {
                    lock(ring).push(record, shared.budget);
                }
            }
            Err(e) if is_transient(&e) => {
                tracing::debug!(error = %e, "log tail: transient error");
            }
            Err(e) => {
                tracing::warn!(error = %e, "log tail: consumer error");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Assigns every partition at its end as of now.
async fn position(shared: &Shared, consumer: &Arc<StreamConsumer>) -> Result<()> {
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::with_capacity(shared.partitions.len());
    for partition in 0..shared.partitions.len() {
        let partition = i32::try_from(partition).unwrap_or(i32::MAX);
        let consumer = Arc::clone(consumer);
        let topic = shared.topic.clone();
        let (_, high) = tokio::task::spawn_blocking(move || {
            consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?
        .map_err(Error::kafka("fetch watermarks"))?;
        assignment
            .add_partition_offset(&shared.topic, partition, Offset::Offset(high))
            .map_err(Error::kafka("build assignment"))?;
        ends.push(high);
    }
    consumer
        .assign(&assignment)
        .map_err(Error::kafka("assign partitions"))?;
    for (ring, end) in shared.partitions.iter().zip(ends) {
        lock(ring).position(end);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, key: &str, bytes: usize) -> RawRecord {
        RawRecord {
            partition: 0,
            offset,
            key: Some(key.as_bytes().to_vec()),
            payload: Some(vec![0; bytes]),
            timestamp_ms: None,
            headers: Vec::new(),
        }
    }

    fn offsets(records: Option<Vec<RawRecord>>) -> Option<Vec<i64>> {
        records.map(|r| r.iter().map(|r| r.offset).collect())
    }

    #[test]
    fn the_tail_consumer_fetches_as_its_settings_say() {
        let settings = crate::ProducerSettings {
            tail_fetch_min_bytes: 4096,
            tail_fetch_wait_ms: 25,
            ..Default::default()
        };
        let config = consumer_config(&KafkaSettings::default(), &TailOptions::from(&settings));
        assert_eq!(config.get("fetch.min.bytes"), Some("4096"));
        assert_eq!(config.get("fetch.wait.max.ms"), Some("25"));
        let none = TailOptions {
            fetch_min_bytes: 0,
            ..TailOptions::from(&settings)
        };
        let config = consumer_config(&KafkaSettings::default(), &none);
        assert_eq!(
            config.get("fetch.min.bytes"),
            Some("1"),
            "librdkafka's least"
        );
    }

    #[test]
    fn a_ring_answers_a_keys_records_in_a_range_it_holds_and_nothing_else() {
        let mut ring = Ring::new();
        assert_eq!(offsets(ring.take(b"a", 0, 1)), None, "not positioned");
        ring.position(10);
        for (offset, key) in [(10, "a"), (11, "b"), (12, "a"), (13, "c"), (14, "a")] {
            ring.push(record(offset, key, 10), usize::MAX);
        }
        assert_eq!(offsets(ring.take(b"a", 10, 15)), Some(vec![10, 12, 14]));
        assert_eq!(offsets(ring.take(b"a", 11, 14)), Some(vec![12]));
        assert_eq!(offsets(ring.take(b"z", 10, 15)), Some(vec![]));
        assert_eq!(offsets(ring.take(b"a", 9, 15)), None, "before the start");
        assert_eq!(offsets(ring.take(b"a", 10, 16)), None, "past the end");
        // A record fetched twice is held once.
        ring.push(record(12, "a", 10), usize::MAX);
        assert_eq!(offsets(ring.take(b"a", 10, 15)), Some(vec![10, 12, 14]));
        // Another record at an offset already held: the partition went back (a recreated
        // topic), and nothing held before answers for it.
        ring.push(record(3, "a", 11), usize::MAX);
        assert_eq!(offsets(ring.take(b"a", 10, 15)), None);
        assert_eq!(offsets(ring.take(b"a", 3, 4)), Some(vec![3]));
    }

    #[test]
    fn a_ring_over_its_budget_drops_its_oldest_records_and_no_longer_answers_for_them() {
        let mut ring = Ring::new();
        ring.position(0);
        let each = size(&record(0, "a", 100));
        for offset in 0..10 {
            let key = if offset % 2 == 0 { "a" } else { "b" };
            ring.push(record(offset, key, 100), each * 4);
        }
        assert_eq!(ring.start, 6);
        assert_eq!(ring.records.len(), 4);
        assert_eq!(offsets(ring.take(b"a", 5, 10)), None);
        assert_eq!(offsets(ring.take(b"a", 6, 10)), Some(vec![6, 8]));
        assert_eq!(ring.by_key.values().map(VecDeque::len).sum::<usize>(), 4);
    }

    #[test]
    fn a_ring_forgets_what_the_log_deleted_and_no_longer_answers_for_it() {
        let mut ring = Ring::new();
        ring.position(0);
        for offset in 0..6 {
            ring.push(record(offset, "a", 10), usize::MAX);
        }
        ring.forget_before(4);
        assert_eq!(ring.start, 4);
        assert_eq!(
            offsets(ring.take(b"a", 0, 6)),
            None,
            "deleted records are not answered"
        );
        assert_eq!(offsets(ring.take(b"a", 4, 6)), Some(vec![4, 5]));
        assert_eq!(ring.bytes, 2 * size(&record(0, "a", 10)));
        ring.forget_before(2);
        assert_eq!(ring.start, 4, "a start never goes back");
        ring.forget_before(100);
        assert_eq!((ring.start, ring.end), (6, 6), "past the end: nothing held");
        assert!(ring.records.is_empty() && ring.by_key.is_empty());
    }

    #[test]
    fn a_waiter_is_woken_once_the_ring_reaches_its_offset_and_not_before() {
        let mut ring = Ring::new();
        ring.position(0);
        let (early, mut early_woken) = oneshot::channel();
        let (late, mut late_woken) = oneshot::channel();
        ring.waiters.entry(2).or_default().push(early);
        ring.waiters.entry(3).or_default().push(late);
        ring.push(record(0, "a", 1), usize::MAX);
        assert!(early_woken.try_recv().is_err());
        ring.push(record(1, "a", 1), usize::MAX);
        assert!(early_woken.try_recv().is_ok(), "end 2 reaches until 2");
        assert!(late_woken.try_recv().is_err());
        ring.push(record(2, "a", 1), usize::MAX);
        assert!(late_woken.try_recv().is_ok());
        assert!(ring.waiters.is_empty());
    }
}
