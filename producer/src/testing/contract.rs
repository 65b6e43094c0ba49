//! The log contract: what the writers rely on from whatever holds the topic, as tests that
//! take an [`EventLog`] and pass against each backend. This crate's unit tests run them over
//! [`super::MemoryLog`]; `tests/tests/integration/log_contract.rs` runs them against Kafka.
//! [`crate::log_contract_tests!`] makes one `#[tokio::test]` of each.
//!
//! Every test writes sessions of its own (fresh ids), so they share a topic with anything.

use crate::{EventLog, Position};
use sessionlog_log::partitioner;
use sessionlog_schemas::{Content, EventEnvelope, SessionEvent, SessionId, testing};

/// Makes one `#[tokio::test]` per contract test, each over the [`EventLog`] that `$log` (an
/// async expression giving an `EventLog`, or anything that derefs to one) gives. Multi-threaded,
/// as a Kafka log's tail and reads expect of their runtime.
#[macro_export]
macro_rules! log_contract_tests {
    ($log:expr) => {
        $crate::log_contract_tests!(@each $log;
            appends_land_in_order_on_the_sessions_partition,
            a_read_returns_the_range_asked_and_the_offset_after_it,
            a_read_of_one_session_leaves_out_the_others_on_its_partition,
            watermarks_cover_every_acknowledged_record,
            read_at_returns_the_events_at_those_offsets_only,
            an_undecodable_record_is_skipped_by_reads,
            an_event_over_the_size_limit_is_refused_before_anything_is_sent,
        );
    };
    (@each $log:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let log = $log.await;
                $crate::testing::contract::$name(&log).await;
            }
        )*
    };
}

/// `count` envelopes of a fresh session: its start, then user requests, at epoch 1.
pub fn session(count: usize) -> Vec<EventEnvelope> {
    session_of(SessionId::new(), count)
}

/// `count` envelopes of `session` from seq 1 on (see [`session`]).
pub fn session_of(session: SessionId, count: usize) -> Vec<EventEnvelope> {
    let mut script = testing::Script::of(session, 1, 1);
    (1..=count)
        .map(|seq| match seq {
            1 => script.next(testing::started("contract")),
            _ => script.next(testing::user_request(format!("request {seq}"))),
        })
        .collect()
}

/// Two fresh sessions whose events share a partition of `log`'s topic.
pub fn neighbours(log: &EventLog) -> (SessionId, SessionId) {
    let first = SessionId::new();
    let partition = log.partition_of(first);
    let second = std::iter::repeat_with(SessionId::new)
        .find(|s| log.partition_of(*s) == partition)
        .unwrap_or(first);
    (first, second)
}

/// Appended events get consecutive offsets on their session's partition, in the order sent,
/// and read back as they were written.
pub async fn appends_land_in_order_on_the_sessions_partition(log: &EventLog) {
    let events = session(5);
    let partition = log.partition_of(events[0].session_id);
    let positions = log.append_batch(&events).await.expect("appended");
    assert!(positions.iter().all(|p| p.partition == partition));
    let offsets: Vec<i64> = positions.iter().map(|p| p.offset).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    let (read, _) = log
        .read_events(partition, offsets[0], None, Some(events[0].session_id))
        .await
        .expect("read");
    let read_positions: Vec<Position> = read.iter().map(|a| a.position).collect();
    assert_eq!(read_positions, positions);
    let read: Vec<EventEnvelope> = read.into_iter().map(|a| a.envelope).collect();
    assert_eq!(read, events);
}

/// A read of `[from, until)` holds the records from `from` and below `until`, and answers
/// the offset after them; an empty range answers its start.
pub async fn a_read_returns_the_range_asked_and_the_offset_after_it(log: &EventLog) {
    let events = session(4);
    let session = events[0].session_id;
    let positions = log.append_batch(&events).await.expect("appended");
    let (partition, second, third) = (
        positions[1].partition,
        positions[1].offset,
        positions[2].offset,
    );
    let (read, next) = log
        .read_events(partition, second, Some(third + 1), Some(session))
        .await
        .expect("read");
    let seqs: Vec<u64> = read.iter().map(|a| a.envelope.seq).collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(next, third + 1);
    let (read, next) = log
        .read_events(partition, third, Some(third), Some(session))
        .await
        .expect("read");
    assert!(read.is_empty());
    assert_eq!(next, third);
}

/// A read of one session's events leaves out those of another session on its partition; a
/// read of every session's has both, in log order.
pub async fn a_read_of_one_session_leaves_out_the_others_on_its_partition(log: &EventLog) {
    let (mine, theirs) = neighbours(log);
    let (events, other) = (session_of(mine, 3), session_of(theirs, 3));
    // Interleaved: mine, theirs, mine, theirs...
    let mixed: Vec<EventEnvelope> = events
        .iter()
        .zip(&other)
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let positions = log.append_batch(&mixed).await.expect("appended");
    let (partition, from) = (positions[0].partition, positions[0].offset);
    let until = Some(positions[positions.len() - 1].offset + 1);
    let (read, _) = log
        .read_events(partition, from, until, Some(mine))
        .await
        .expect("read");
    let read: Vec<EventEnvelope> = read.into_iter().map(|a| a.envelope).collect();
    assert_eq!(read, events);
    let (all, _) = log
        .read_events(partition, from, until, None)
        .await
        .expect("read");
    let all: Vec<EventEnvelope> = all.into_iter().map(|a| a.envelope).collect();
    assert_eq!(all, mixed);
}

/// Every acknowledged record sits below the partition's high watermark and at or above its
/// low one.
pub async fn watermarks_cover_every_acknowledged_record(log: &EventLog) {
    let events = session(2);
    let positions = log.append_batch(&events).await.expect("appended");
    let partition = positions[0].partition;
    let (low, high) = log.watermarks(partition).await.expect("watermarks");
    for position in &positions {
        assert!(
            low <= position.offset && position.offset < high,
            "{position:?} outside [{low}, {high})"
        );
    }
    assert_eq!(log.high_watermark(partition).await.expect("high"), high);
}

/// `read_at` answers the events at the offsets asked for, whatever lies between them.
pub async fn read_at_returns_the_events_at_those_offsets_only(log: &EventLog) {
    let events = session(6);
    let positions = log.append_batch(&events).await.expect("appended");
    let partition = positions[0].partition;
    let wanted = [
        positions[4].offset,
        positions[1].offset,
        positions[1].offset,
    ];
    let read = log.read_at(partition, &wanted).await.expect("read");
    let seqs: Vec<(i64, u64)> = read.iter().map(|(o, e)| (*o, e.seq)).collect();
    assert_eq!(
        seqs,
        [(positions[1].offset, 2), (positions[4].offset, 5)],
        "{wanted:?}"
    );
}

/// A record that will never decode (a raw producer's garbage) is left out of a read, and the
/// events around it are not.
pub async fn an_undecodable_record_is_skipped_by_reads(log: &EventLog) {
    let events = session(2);
    let session = events[0].session_id;
    let before = log.append(&events[0]).await.expect("appended");
    // Not Confluent-framed Avro: the magic byte is wrong.
    garbage(log, session).await;
    let after = log.append(&events[1]).await.expect("appended");
    let (read, _) = log
        .read_events(before.partition, before.offset, None, Some(session))
        .await
        .expect("read");
    let read: Vec<(Position, u64)> = read.iter().map(|a| (a.position, a.envelope.seq)).collect();
    assert_eq!(read, [(before, 1), (after, 2)]);
}

/// An event encoded larger than `[producer] max_event_bytes` is refused and nothing of the
/// batch is written.
pub async fn an_event_over_the_size_limit_is_refused_before_anything_is_sent(log: &EventLog) {
    let mut events = session(2);
    let limit = log.options().max_event_bytes;
    events[1].event = SessionEvent::UserRequest {
        content: Content::plain("x".repeat(limit + 1)),
    };
    let partition = log.partition_of(events[0].session_id);
    let (_, end) = log.watermarks(partition).await.expect("watermarks");
    let refused = log.append_batch(&events).await;
    assert!(
        matches!(refused, Err(crate::Error::TooLarge { .. })),
        "{refused:?}"
    );
    let (read, _) = log
        .read_events(partition, end, None, Some(events[0].session_id))
        .await
        .expect("read");
    assert!(read.is_empty(), "{read:?}");
}

/// Writes a record keyed by `session` that no decoder reads, through `log`'s own send path.
async fn garbage(log: &EventLog, session: SessionId) {
    let partition = log.partition_of(session);
    let key = partitioner::session_key(session);
    log.send_raw(partition, &key, b"not an event")
        .await
        .expect("written");
}
