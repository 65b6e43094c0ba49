//! Appending one session's events.

use crate::{Error, EventLog, Position, Result};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Content, EventEnvelope, Seq, SessionEvent, SessionId, TerminalOutcome,
};
use sessionlog_session::{Rejection, SessionState, Verdict};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// An event the log acknowledged.
#[derive(Clone, Debug, PartialEq)]
pub struct Appended {
    /// The event as written.
    pub envelope: EventEnvelope,
    /// Where it sits.
    pub position: Position,
}

/// Appends the events of one session, in order, as its current writer.
///
/// The writer keeps its own fold of what it appended, so it refuses an event the log would
/// reject (a result for a call that is not pending, anything after the end) before sending,
/// and can declare a checkpoint's state digest.
pub struct SessionWriter {
    log: Arc<EventLog>,
    state: SessionState,
    first: Option<Position>,
    last: Option<Position>,
}

impl SessionWriter {
    /// Starts a new session (seq 1, epoch 1) with a fresh UUIDv7 id; returns the writer and
    /// the acknowledged start event.
    pub async fn create(
        log: Arc<EventLog>,
        agent: &str,
        title: Option<&str>,
    ) -> Result<(Self, Appended)> {
        Self::create_with_id(log, SessionId::new(), agent, title).await
    }

    /// Starts a new session with a given id.
    pub async fn create_with_id(
        log: Arc<EventLog>,
        session: SessionId,
        agent: &str,
        title: Option<&str>,
    ) -> Result<(Self, Appended)> {
        let mut writer = Self {
            log,
            state: SessionState::empty(session),
            first: None,
            last: None,
        };
        let started = SessionEvent::SessionStarted {
            agent: agent.to_string(),
            title: title.map(String::from),
        };
        // The start event carries epoch 1: the creator is the first writer.
        writer.state.epoch = 1;
        let start = writer.append(started).await?;
        Ok((writer, start))
    }

    /// The session written to.
    pub fn session_id(&self) -> SessionId {
        self.state.session_id
    }

    /// The writer's fold of what it appended.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// Where the session's first event this writer appended sits.
    pub fn first_position(&self) -> Option<Position> {
        self.first
    }

    /// Where the last acknowledged event sits.
    pub fn last_position(&self) -> Option<Position> {
        self.last
    }

    /// Appends an event with no causation or idempotency key.
    pub async fn append(&mut self, event: SessionEvent) -> Result<Appended> {
        self.append_with(event, None, None).await
    }

    /// Appends an event, naming what caused it and, for side effects, its idempotency key.
    pub async fn append_with(
        &mut self,
        event: SessionEvent,
        causation_id: Option<Uuid>,
        idempotency_key: Option<String>,
    ) -> Result<Appended> {
        let envelope = EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: self.state.session_id,
            seq: self.state.next_seq(),
            writer_epoch: self.state.epoch,
            occurred_at: now_micros(),
            causation_id,
            idempotency_key,
            schema_version: CURRENT_SCHEMA_VERSION,
            event,
        };
        self.append_envelope(envelope).await
    }

    /// Sends a prepared envelope (also the way to retry one whose ack was lost).
    pub async fn append_envelope(&mut self, envelope: EventEnvelope) -> Result<Appended> {
        match self.state.judge(&envelope) {
            Verdict::Accepted | Verdict::Duplicate => {}
            Verdict::Rejected(Rejection::Zombie { epoch, current }) => {
                return Err(Error::Fenced { epoch, current });
            }
            Verdict::Rejected(why) => return Err(Error::Refused(why)),
        }
        let position = self.log.append(&envelope).await?;
        self.state.apply(&envelope);
        self.first.get_or_insert(position);
        self.last = Some(position);
        Ok(Appended { envelope, position })
    }

    /// Appends a checkpoint declaring the digest of everything before it.
    pub async fn checkpoint(&mut self, workspace_revision: Option<String>) -> Result<Appended> {
        let state_digest = self.state.digest();
        self.append(SessionEvent::Checkpoint {
            state_digest,
            workspace_revision,
        })
        .await
    }

    /// Appends the terminal outcome.
    pub async fn close(
        &mut self,
        outcome: TerminalOutcome,
        reason: Option<String>,
    ) -> Result<Appended> {
        self.append(SessionEvent::SessionEnded { outcome, reason })
            .await
    }

    /// Appends a user request (a convenience for the commonest event).
    pub async fn user_request(&mut self, text: &str) -> Result<Appended> {
        self.append(SessionEvent::UserRequest {
            content: Content::plain(text),
        })
        .await
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> Seq {
        self.state.next_seq()
    }
}

/// Microseconds since the Unix epoch.
pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}
