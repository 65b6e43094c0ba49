//! Unit tests of the writer and the log over the topics in memory ([`MemoryLog`]): the rules
//! of docs/design.md ("One writer per session") that integration tests prove against Kafka,
//! here in milliseconds.

mod claims;
mod confirmed;
mod contract;
mod duplicates;
mod fencing;
mod leases;

use crate::testing::MemoryLog;
use crate::{Error, EventLog, Position, ProducerOptions, SessionWriter};
use sessionlog_schemas::{EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::{SessionState, Verdict};
use std::sync::Arc;

/// A topic of three partitions.
fn topic() -> MemoryLog {
    MemoryLog::new(3)
}

/// A process writing `topic`, with the default `[producer]` settings.
fn process(topic: &MemoryLog) -> Arc<EventLog> {
    process_with(topic, |log| log)
}

/// A process writing `topic`, its log set up by `with` (leases on, say).
fn process_with(topic: &MemoryLog, with: impl FnOnce(EventLog) -> EventLog) -> Arc<EventLog> {
    Arc::new(with(topic.event_log(ProducerOptions::default())))
}

/// A new session's writer, started through `log`.
async fn started(log: &Arc<EventLog>) -> SessionWriter {
    let (writer, _) = SessionWriter::create(Arc::clone(log), "agent", None)
        .await
        .expect("started");
    writer
}

/// The log's own account of `session`: its fold over every record in the topic, and the
/// verdict on each, in log order.
async fn folded(topic: &MemoryLog, session: SessionId) -> (SessionState, Vec<(Position, Verdict)>) {
    let mut state = SessionState::empty(session);
    let mut verdicts = Vec::new();
    for (position, envelope) in topic.events(session).await {
        verdicts.push((position, state.apply(&envelope)));
    }
    (state, verdicts)
}

/// A topic, and the writer of a session one process writing it started.
async fn one_writer() -> (MemoryLog, SessionWriter) {
    let topic = topic();
    let writer = started(&process(&topic)).await;
    (topic, writer)
}

/// `event` as `writer`'s next envelope, not sent.
fn next_envelope(writer: &SessionWriter, event: SessionEvent) -> EventEnvelope {
    let mut envelopes = writer.envelopes(vec![event]);
    envelopes.pop().expect("one envelope per event")
}

/// Where the topic holds the first record of the event `envelope`.
async fn first_written(topic: &MemoryLog, envelope: &EventEnvelope) -> Option<Position> {
    let events = topic.events(envelope.session_id).await;
    let mut of_it = events
        .into_iter()
        .filter(|(_, e)| e.event_id == envelope.event_id);
    of_it.next().map(|(position, _)| position)
}

/// Asserts `answer` is `Error::Fenced` of a writer of `epoch` by the session's `current`.
fn assert_fenced<T: std::fmt::Debug>(answer: &crate::Result<T>, epoch: u64, current: u64) {
    assert!(
        matches!(answer, Err(Error::Fenced { epoch: e, current: c }) if (*e, *c) == (epoch, current)),
        "expected fenced ({epoch} by {current}): {answer:?}"
    );
}
