//! Helpers for the producer tests: read a whole topic back and fold it per session, keeping
//! every event's verdict, so a test can compare the accepted history with what was appended.

use anyhow::Result;
use sessionlog_producer::{Appended, EventLog, SessionWriter};
use sessionlog_schemas::{Content, EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::{SessionState, Verdict};
use std::collections::HashMap;

/// One session as the log has it: its fold and the verdict on every event, in log order.
#[derive(Debug)]
pub struct History {
    /// The fold over every event of the session.
    pub state: SessionState,
    /// Each event with the fold's verdict.
    pub verdicts: Vec<(Appended, Verdict)>,
}

impl History {
    /// The accepted events, in order.
    pub fn accepted(&self) -> Vec<&EventEnvelope> {
        self.verdicts
            .iter()
            .filter(|(_, v)| v.is_accepted())
            .map(|(a, _)| &a.envelope)
            .collect()
    }

    /// How many events got `verdict`'s kind (accepted, duplicate, or a rejection label).
    pub fn count(&self, label: &str) -> usize {
        self.verdicts
            .iter()
            .filter(|(_, v)| match v {
                Verdict::Accepted => label == "accepted",
                Verdict::Duplicate => label == "duplicate",
                Verdict::Rejected(r) => r.label() == label,
            })
            .count()
    }
}

/// Every event of every partition of the log's topic, decoded, in partition then offset order.
pub async fn read_topic(log: &EventLog) -> Result<Vec<Appended>> {
    let mut all = Vec::new();
    for partition in 0..log.partitions() {
        let (events, _) = log.read_events(partition, 0, None, None).await?;
        all.extend(events);
    }
    Ok(all)
}

/// Folds events (in log order within each partition) into one history per session.
pub fn histories(events: Vec<Appended>) -> HashMap<SessionId, History> {
    let mut out: HashMap<SessionId, History> = HashMap::new();
    for appended in events {
        let session = appended.envelope.session_id;
        let history = out.entry(session).or_insert_with(|| History {
            state: SessionState::empty(session),
            verdicts: Vec::new(),
        });
        let verdict = history.state.apply(&appended.envelope);
        history.verdicts.push((appended, verdict));
    }
    out
}

/// Reads the topic back and folds it.
pub async fn fold_topic(log: &EventLog) -> Result<HashMap<SessionId, History>> {
    Ok(histories(read_topic(log).await?))
}

/// Appends `count` turns to `writer`: a user request at each even seq, a model response (model
/// `m`, one token each way) at each odd one, each with the text `text(seq)`.
pub async fn append_turns(
    writer: &mut SessionWriter,
    count: u64,
    text: impl Fn(u64) -> String,
) -> Result<()> {
    for _ in 0..count {
        let seq = writer.state().last_seq + 1;
        let content = Content::plain(text(seq));
        let event = if seq.is_multiple_of(2) {
            SessionEvent::UserRequest { content }
        } else {
            SessionEvent::ModelResponse {
                model: "m".into(),
                tokens_in: 1,
                tokens_out: 1,
                cost_micros: 1,
                started_at: 0,
                content,
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            }
        };
        writer.append(event).await?;
    }
    Ok(())
}
