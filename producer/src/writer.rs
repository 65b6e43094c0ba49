//! Appending one session's events: creating, claiming and forking sessions, fencing.

use crate::event_log::WhenFull;
use crate::{Error, EventLog, Position, Result};
use sessionlog_schemas::now_micros;
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Content, DEFAULT_TENANT, EventEnvelope, ForkPoint, Seq, SessionEvent,
    SessionId, TerminalOutcome,
};
use sessionlog_session::{DUPLICATE_WINDOW, Rejection, SessionState, Verdict};
use std::sync::Arc;
use uuid::Uuid;

/// An event in the log: acknowledged by an append, or found by a read-back.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
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
///
/// Fencing (DESIGN.md, "One writer per session"): the log decides, and a writer learns it lost
/// in three ways, all ending in [`Error::Fenced`] (or [`Error::LostClaim`] for a claimant):
/// - at [`Self::claim`], by reading its own claim back;
/// - at every append, from the [`EventLog`]'s per-session epoch map, which every claim made
///   through the same `EventLog` updates: immediate, no round trip, but blind to other processes;
/// - at every [`Self::checkpoint`], by reading the session's partition back from the last
///   offset it confirmed up to the checkpoint and folding it: authoritative, for any process.
///
/// Between a takeover by another process and the next checkpoint a fenced writer's appends
/// are acknowledged by Kafka but rejected by the fold as zombie writes; they never enter the
/// accepted history.
pub struct SessionWriter {
    log: Arc<EventLog>,
    state: SessionState,
    partition: i32,
    /// The first offset of the session's partition not yet read back.
    confirmed: i64,
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

    /// Starts a new session with a given id, in the default tenant.
    pub async fn create_with_id(
        log: Arc<EventLog>,
        session: SessionId,
        agent: &str,
        title: Option<&str>,
    ) -> Result<(Self, Appended)> {
        Self::create_in(log, session, agent, title, DEFAULT_TENANT).await
    }

    /// Starts a new session with a given id in `tenant`, which the session keeps for life.
    pub async fn create_in(
        log: Arc<EventLog>,
        session: SessionId,
        agent: &str,
        title: Option<&str>,
        tenant: &str,
    ) -> Result<(Self, Appended)> {
        let started = SessionEvent::SessionStarted {
            agent: agent.to_string(),
            title: title.map(Content::from),
            tenant: tenant.to_string(),
        };
        Self::start(log, session, started).await
    }

    /// Starts a new session forked from a parent: its first event (seq 1, epoch 1) is
    /// `SessionForked{fork_point}`. The parent's prefix is referenced, not copied; the child
    /// belongs to `tenant`, which must be the parent's; `forked_by` names the verified caller
    /// a service forked for, if any.
    pub async fn fork(
        log: Arc<EventLog>,
        fork_point: ForkPoint,
        agent: &str,
        tenant: &str,
        forked_by: Option<&str>,
    ) -> Result<(Self, Appended)> {
        let forked = SessionEvent::SessionForked {
            fork_point,
            agent: agent.to_string(),
            tenant: tenant.to_string(),
            forked_by: forked_by.map(String::from),
        };
        Self::start(log, SessionId::new(), forked).await
    }

    async fn start(
        log: Arc<EventLog>,
        session: SessionId,
        first_event: SessionEvent,
    ) -> Result<(Self, Appended)> {
        let partition = log.partition_of(session);
        let mut state = SessionState::empty(session);
        // The first event carries epoch 1: the creator is the first writer.
        state.epoch = 1;
        let mut writer = Self {
            log,
            state,
            partition,
            confirmed: 0,
            first: None,
            last: None,
        };
        let start = writer.append(first_event).await?;
        // Nothing before its own start event can concern the session.
        writer.confirmed = start.position.offset + 1;
        Ok((writer, start))
    }

    /// The first half of [`Self::claim`]: folds `session` from the log and decides the epoch,
    /// writing nothing, so the caller can look at the session (its tenant, its gates) before
    /// [`PendingClaim::commit`] appends the claim.
    pub async fn prepare_takeover(
        log: Arc<EventLog>,
        session: SessionId,
        writer: &str,
    ) -> Result<PendingClaim> {
        let partition = log.partition_of(session);
        Self::prepare_claim(log, SessionState::empty(session), partition, 0, writer).await
    }

    /// Takes over `session`: folds it from the log (its partition, from the low watermark),
    /// appends `WriterClaimed{epoch = current + 1}`, reads the log back up to its own claim,
    /// and returns [`Error::LostClaim`] if another claim won.
    pub async fn claim(
        log: Arc<EventLog>,
        session: SessionId,
        writer: &str,
    ) -> Result<(Self, Appended)> {
        let partition = log.partition_of(session);
        Self::claim_from(log, SessionState::empty(session), partition, 0, writer).await
    }

    /// The same, for a caller that already folded the session up to and including
    /// `next_offset - 1` of its partition (recovery, from a checkpoint). Events after that are
    /// read and folded before claiming, so the claim names the epoch after the latest one.
    pub async fn claim_from(
        log: Arc<EventLog>,
        state: SessionState,
        partition: i32,
        next_offset: i64,
        writer: &str,
    ) -> Result<(Self, Appended)> {
        Self::prepare_claim(log, state, partition, next_offset, writer)
            .await?
            .commit()
            .await
    }

    /// The first half of a takeover: catch up with the log and decide the epoch to claim,
    /// without writing anything yet. [`PendingClaim::commit`] writes the claim.
    #[tracing::instrument(
        name = "claim",
        level = "debug",
        skip_all,
        fields(session = %state.session_id, partition, from_offset = next_offset, writer)
    )]
    pub async fn prepare_claim(
        log: Arc<EventLog>,
        state: SessionState,
        partition: i32,
        next_offset: i64,
        writer: &str,
    ) -> Result<PendingClaim> {
        let session = state.session_id;
        let mut state = state;
        let (events, caught_up) = log
            .read_events(partition, next_offset, None, Some(session))
            .await?;
        let found = !events.is_empty();
        let mut caught = Vec::new();
        for event in events {
            if state.apply(&event.envelope).is_accepted() {
                caught.push(event.envelope);
            }
        }
        if !state.is_started() {
            // Events of the session but no start: retention deleted it. Say so, and where to
            // go, rather than calling a session with a history unknown.
            let low_watermark = log.low_watermark(partition).await?;
            if found && low_watermark > next_offset {
                return Err(Error::StartDeleted {
                    session,
                    partition,
                    low_watermark,
                });
            }
            return Err(Error::UnknownSession(session));
        }
        Ok(PendingClaim {
            log,
            state,
            partition,
            caught_up,
            writer: writer.to_string(),
            caught,
        })
    }

    /// The session written to.
    pub fn session_id(&self) -> SessionId {
        self.state.session_id
    }

    /// The writer's fold of what it appended.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The session's partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Where the session's first event this writer appended sits.
    pub fn first_position(&self) -> Option<Position> {
        self.first
    }

    /// Where the last acknowledged event sits.
    pub fn last_position(&self) -> Option<Position> {
        self.last
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> Seq {
        self.state.next_seq()
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
        let envelope = self.envelope(self.next_seq(), event, causation_id, idempotency_key);
        self.append_envelope(envelope).await
    }

    /// Like [`Self::append`], but fails with [`Error::Backpressure`] instead of waiting when
    /// the process already has its maximum of events in flight.
    pub async fn try_append(&mut self, event: SessionEvent) -> Result<Appended> {
        let envelope = self.envelope(self.next_seq(), event, None, None);
        let mut appended = self.send(vec![envelope], WhenFull::Fail).await?;
        appended.pop().ok_or(Error::Unconfirmed {
            partition: self.partition,
            offset: -1,
        })
    }

    /// Appends several events with consecutive seqs, sent together, and waits for every ack.
    /// At most [`DUPLICATE_WINDOW`] events, so a retry of the batch is always recognised.
    pub async fn append_batch(&mut self, events: Vec<SessionEvent>) -> Result<Vec<Appended>> {
        let envelopes = self.envelopes(events);
        self.append_envelopes(envelopes).await
    }

    /// Prepares envelopes for `events` with consecutive seqs from the next one, without
    /// sending them: keep them to retry with the same seq and event ids after a lost ack.
    pub fn envelopes(&self, events: Vec<SessionEvent>) -> Vec<EventEnvelope> {
        let next = self.next_seq();
        events
            .into_iter()
            .zip(next..)
            .map(|(event, seq)| self.envelope(seq, event, None, None))
            .collect()
    }

    /// Sends a prepared envelope (also the way to retry one whose ack was lost).
    pub async fn append_envelope(&mut self, envelope: EventEnvelope) -> Result<Appended> {
        let mut appended = self.append_envelopes(vec![envelope]).await?;
        appended.pop().ok_or(Error::Unconfirmed {
            partition: self.partition,
            offset: -1,
        })
    }

    /// Sends prepared envelopes in order and waits for every ack.
    ///
    /// Every envelope is judged against the writer's fold first; if one would be rejected,
    /// none is sent. A repeat of an acknowledged envelope (same seq and event id) is sent
    /// again and is a harmless duplicate in the log. If an ack fails, the events acknowledged
    /// before it are applied and the error returned: retry from [`Self::next_seq`] with the
    /// same envelopes.
    pub async fn append_envelopes(
        &mut self,
        envelopes: Vec<EventEnvelope>,
    ) -> Result<Vec<Appended>> {
        self.send(envelopes, WhenFull::Wait).await
    }

    #[tracing::instrument(
        name = "append",
        level = "debug",
        skip_all,
        fields(
            session = %self.session_id(),
            partition = self.partition,
            events = envelopes.len(),
            first_seq = envelopes.first().map(|e| e.seq),
            last_offset = tracing::field::Empty,
        )
    )]
    async fn send(
        &mut self,
        envelopes: Vec<EventEnvelope>,
        when_full: WhenFull,
    ) -> Result<Vec<Appended>> {
        self.check_not_fenced()?;
        if envelopes.len() > DUPLICATE_WINDOW {
            return Err(Error::BatchTooLong {
                events: envelopes.len(),
                limit: DUPLICATE_WINDOW,
            });
        }
        let mut envelopes = envelopes;
        // Judged before sealing, as sealing an erased session's event fails for the key's
        // sake while the fold's reason (after the end) is the one to report.
        self.judge_all(&envelopes)?;
        self.log.seal(&mut envelopes).await?;
        let outcomes = self.log.send_all(&envelopes, when_full).await?;
        let mut appended = Vec::with_capacity(envelopes.len());
        for (envelope, outcome) in envelopes.into_iter().zip(outcomes) {
            let position = outcome?;
            self.state.apply(&envelope);
            self.first.get_or_insert(position);
            self.last = Some(position);
            appended.push(Appended { envelope, position });
        }
        if let Some(last) = self.last {
            tracing::Span::current().record("last_offset", last.offset);
        }
        Ok(appended)
    }

    /// Judges a batch in order, as the fold will, without touching the writer's state.
    fn judge_all(&self, envelopes: &[EventEnvelope]) -> Result<()> {
        let refuse = |verdict: Verdict| match verdict {
            Verdict::Accepted | Verdict::Duplicate => Ok(()),
            Verdict::Rejected(Rejection::Zombie { epoch, current }) => {
                Err(Error::Fenced { epoch, current })
            }
            Verdict::Rejected(why) => Err(Error::Refused(why)),
        };
        match envelopes {
            [] => Ok(()),
            [single] => refuse(self.state.judge(single)),
            batch => {
                // Later events of a batch depend on earlier ones (a result on its call).
                let mut scratch = self.state.clone();
                batch.iter().try_for_each(|e| refuse(scratch.apply(e)))
            }
        }
    }

    /// Fails if a claim made or seen through this process's [`EventLog`] superseded this writer.
    fn check_not_fenced(&self) -> Result<()> {
        match self.log.highest_epoch_seen(self.session_id()) {
            Some(current) if current > self.state.epoch => Err(Error::Fenced {
                epoch: self.state.epoch,
                current,
            }),
            _ => Ok(()),
        }
    }

    /// Appends a checkpoint declaring the digest of everything before it, then reads the
    /// session's partition back up to it: [`Error::Fenced`] if another writer's claim of a
    /// later epoch is in the log, whichever process made it.
    pub async fn checkpoint(&mut self, workspace_revision: Option<String>) -> Result<Appended> {
        let state_digest = self.state.digest();
        let appended = self
            .append(SessionEvent::Checkpoint {
                state_digest,
                workspace_revision,
            })
            .await?;
        self.confirm(appended.position.offset).await?;
        Ok(appended)
    }

    /// Reads the session's events from the last confirmed offset up to `upto` and folds them
    /// into a copy of the writer's state. The writer's own events fold as duplicates; a claim
    /// of a later epoch, by anyone, raises the copy's epoch, which means this writer is fenced
    /// (its events after that claim are zombie writes in the accepted history).
    async fn confirm(&mut self, upto: i64) -> Result<()> {
        let session = self.session_id();
        let (events, next) = self
            .log
            .read_events(
                self.partition,
                self.confirmed,
                Some(upto + 1),
                Some(session),
            )
            .await?;
        let mut replay = self.state.clone();
        for event in &events {
            replay.apply(&event.envelope);
        }
        if replay.epoch > self.state.epoch {
            self.log.note_epoch(session, replay.epoch);
            return Err(Error::Fenced {
                epoch: self.state.epoch,
                current: replay.epoch,
            });
        }
        self.confirmed = next;
        Ok(())
    }

    /// Appends the terminal outcome.
    pub async fn close(
        &mut self,
        outcome: TerminalOutcome,
        reason: Option<String>,
    ) -> Result<Appended> {
        self.append(SessionEvent::SessionEnded {
            outcome,
            reason: reason.map(Content::Plain),
        })
        .await
    }

    /// Appends a user request (a convenience for the commonest event).
    pub async fn user_request(&mut self, text: &str) -> Result<Appended> {
        self.append(SessionEvent::UserRequest {
            content: Content::plain(text),
        })
        .await
    }

    fn envelope(
        &self,
        seq: Seq,
        event: SessionEvent,
        causation_id: Option<Uuid>,
        idempotency_key: Option<String>,
    ) -> EventEnvelope {
        EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: self.state.session_id,
            seq,
            writer_epoch: self.state.epoch,
            occurred_at: now_micros(),
            causation_id,
            idempotency_key,
            schema_version: CURRENT_SCHEMA_VERSION,
            event,
            attestation: None,
        }
    }
}

/// A takeover caught up with the log but not yet written: it will claim [`Self::epoch`].
pub struct PendingClaim {
    log: Arc<EventLog>,
    state: SessionState,
    partition: i32,
    caught_up: i64,
    writer: String,
    /// Events of the session the catch-up accepted, in log order.
    caught: Vec<EventEnvelope>,
}

impl PendingClaim {
    /// The session as the catch-up left it, before the claim.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The epoch this claim will ask for: one above the latest the log showed.
    pub fn epoch(&self) -> u64 {
        self.state.epoch + 1
    }

    /// Appends `WriterClaimed`, reads the log back up to it, and returns the new writer if the
    /// claim won, or [`Error::LostClaim`] if another claim reached the partition first.
    pub async fn commit(self) -> Result<(SessionWriter, Appended)> {
        let (writer, claim, _) = self.commit_caught_up().await?;
        Ok((writer, claim))
    }

    /// [`Self::commit`], also returning every event of the session accepted after the state
    /// the claim was prepared from (before the claim, in log order): what a caller keeping
    /// its own view of the session (a context window) must fold, without reading it again.
    pub async fn commit_caught_up(self) -> Result<(SessionWriter, Appended, Vec<EventEnvelope>)> {
        let Self {
            log,
            mut state,
            partition,
            caught_up,
            writer,
            mut caught,
        } = self;
        let session = state.session_id;
        let claim = EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: session,
            // Claims take no seq in the fold; this is the seq the claimant will write next.
            seq: state.next_seq(),
            writer_epoch: state.epoch + 1,
            occurred_at: now_micros(),
            causation_id: None,
            idempotency_key: None,
            schema_version: CURRENT_SCHEMA_VERSION,
            event: SessionEvent::WriterClaimed { writer },
            attestation: None,
        };
        let position = log.append(&claim).await?;
        // Whatever reached the partition between the catch-up and the claim (a zombie's last
        // events, a rival claim) is folded in log order: the partition decides who won.
        let (events, _) = log
            .read_events(
                partition,
                caught_up,
                Some(position.offset + 1),
                Some(session),
            )
            .await?;
        let mut verdict = None;
        for event in events {
            let v = state.apply(&event.envelope);
            if event.envelope.event_id == claim.event_id && event.position == position {
                verdict = Some(v);
            } else if v.is_accepted() {
                caught.push(event.envelope);
            }
        }
        log.note_epoch(session, state.epoch);
        match verdict {
            Some(Verdict::Accepted) => {}
            Some(_) => {
                return Err(Error::LostClaim {
                    epoch: claim.writer_epoch,
                    current: state.epoch,
                });
            }
            None => {
                return Err(Error::Unconfirmed {
                    partition,
                    offset: position.offset,
                });
            }
        }
        let writer = SessionWriter {
            log,
            state,
            partition,
            confirmed: position.offset + 1,
            first: Some(position),
            last: Some(position),
        };
        Ok((
            writer,
            Appended {
                envelope: claim,
                position,
            },
            caught,
        ))
    }
}
