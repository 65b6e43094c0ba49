//! A session's history as its partition holds it, and the records the unit tests of the
//! watches read.

pub(super) use super::{Cause, Watches};
pub(super) use sessionlog_log::{Lease, WakeReason};
use sessionlog_schemas::{Attestation, TerminalOutcome};
pub(super) use sessionlog_schemas::{Epoch, EventEnvelope, Micros, SessionEvent, SessionId};
pub(super) use sessionlog_session::SessionState;
use std::time::Duration;

pub(super) const SECOND: Micros = 1_000_000;

pub(super) fn lease(session: SessionId, epoch: Epoch, renewed_at: Micros) -> Vec<u8> {
    Lease::renewed(session, "h", epoch, renewed_at, Duration::from_secs(15))
        .expect("fits")
        .encode()
        .expect("a lease encodes")
}

/// A session's records as its partition holds them, one per offset from 0: started by
/// agent `h` at epoch 1. Every event is signed (the fold holds no keys; it only refuses
/// an operator's kind without a signature).
pub(super) struct History {
    pub(super) session: SessionId,
    pub(super) epoch: Epoch,
    pub(super) seq: u64,
    pub(super) records: Vec<EventEnvelope>,
}

impl History {
    pub(super) fn new(session: SessionId) -> Self {
        let mut history = Self {
            session,
            epoch: 1,
            seq: 0,
            records: Vec::new(),
        };
        history.add(SessionEvent::SessionStarted {
            agent: "h".into(),
            title: None,
            tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
            writer_token_sha256: None,
            name_sha256: None,
        });
        history
    }

    pub(super) fn envelope(&self, epoch: Epoch, seq: u64, event: SessionEvent) -> EventEnvelope {
        EventEnvelope {
            event_id: uuid::Uuid::now_v7(),
            session_id: self.session,
            seq,
            writer_epoch: epoch,
            occurred_at: 7,
            causation_id: None,
            idempotency_key: None,
            schema_version: sessionlog_schemas::CURRENT_SCHEMA_VERSION,
            event,
            attestation: Some(Attestation {
                key_id: "k".into(),
                signature: vec![1],
            }),
        }
    }

    /// Appends `event` at the current epoch; answers its offset.
    pub(super) fn add(&mut self, event: SessionEvent) -> i64 {
        self.seq += 1;
        let e = self.envelope(self.epoch, self.seq, event);
        self.push(e)
    }

    /// Appends a record the fold rejects or accepts as it will: `event` at `epoch` with
    /// the next seq, not counted as accepted.
    pub(super) fn add_at(&mut self, epoch: Epoch, event: SessionEvent) -> i64 {
        let e = self.envelope(epoch, self.seq + 1, event);
        self.push(e)
    }

    /// `writer` claims the next epoch (a claim carries the seq its writer writes next).
    pub(super) fn claim(&mut self, writer: &str) -> i64 {
        self.epoch += 1;
        let e = self.envelope(
            self.epoch,
            self.seq + 1,
            SessionEvent::WriterClaimed {
                writer: writer.into(),
                writer_token_sha256: None,
            },
        );
        self.push(e)
    }

    pub(super) fn push(&mut self, e: EventEnvelope) -> i64 {
        self.records.push(e);
        self.records.len() as i64 - 1
    }

    /// The state the projection holds through `offset` (`None`: no row).
    pub(super) fn projected(&self, through: i64) -> Option<(SessionState, i64)> {
        let mut state = SessionState::empty(self.session);
        let mut any = false;
        let mut accepted = Vec::new();
        for e in self
            .records
            .iter()
            .take(usize::try_from(through + 1).unwrap_or(0))
        {
            any = true;
            if state.apply(e).is_accepted() {
                accepted.push((e.seq, e.event_id));
            }
        }
        state.remember_recent(accepted);
        any.then_some((state, through))
    }

    /// Reads records `from..` into `w` at `now`; answers the causes.
    pub(super) fn feed(&self, w: &mut Watches, from: i64, now: Micros) -> Vec<Cause> {
        let mut causes = Vec::new();
        for offset in from..self.records.len() as i64 {
            causes.extend(w.on_event(0, offset, &self.records[offset as usize], now));
        }
        causes
    }

    /// Reads every record into `w` at `now` and answers the loads they asked for.
    pub(super) fn read(&self, w: &mut Watches, now: Micros) -> Vec<Cause> {
        let mut causes = self.feed(w, 0, now);
        causes.extend(self.answer_loads(w, now));
        causes
    }

    /// Answers every load asked for at `now` with the state the projection holds below
    /// its start.
    pub(super) fn answer_loads(&self, w: &mut Watches, now: Micros) -> Vec<Cause> {
        let mut causes = Vec::new();
        for load in w.loads(now) {
            causes.extend(w.loaded(&load, self.projected(load.before - 1), now));
        }
        causes
    }
}

/// A session an operator paused until `until`, read by a fresh `Watches` at `now`, and the
/// pause's offset.
pub(super) fn paused_until(until: Micros, now: Micros) -> (Watches, History, i64) {
    let (mut w, mut h) = (Watches::default(), History::new(SessionId::new()));
    h.claim("operator:alice");
    let paused = h.add(pause(Some(until)));
    h.read(&mut w, now);
    (w, h, paused)
}

pub(super) fn decision() -> SessionEvent {
    SessionEvent::ApprovalDecided {
        approval_id: "a".into(),
        approved: true,
        decided_by: "operator:alice".into(),
        reason: None,
        request_seq: Some(2),
        action_digest: None,
    }
}

pub(super) fn request() -> SessionEvent {
    SessionEvent::ApprovalRequested {
        approval_id: "a".into(),
        action: "deploy".into(),
        action_digest: None,
    }
}

pub(super) fn steering(author: &str) -> SessionEvent {
    SessionEvent::SteeringMessage {
        author: author.into(),
        content: "go".into(),
    }
}

pub(super) fn pause(until: Option<Micros>) -> SessionEvent {
    SessionEvent::SessionPaused {
        reason: None,
        until,
    }
}

pub(super) fn end() -> SessionEvent {
    SessionEvent::SessionEnded {
        outcome: TerminalOutcome::Completed,
        reason: None,
    }
}
