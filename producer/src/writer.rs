//! Appending one session's events: creating, claiming and forking sessions, fencing.

use crate::catch_up::{CaughtUp, catch_up, catch_up_from};
use crate::event_log::WhenFull;
use crate::{Error, EventLog, Position, Result};
use sessionlog_log::Lease;
use sessionlog_schemas::now_micros;
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Content, DEFAULT_TENANT, Epoch, EventEnvelope, ForkPoint,
    InheritedApproval, Seq, SessionEvent, SessionId, TerminalOutcome, action_digest,
};
use sessionlog_session::{DUPLICATE_WINDOW, Rejection, SessionState, Verdict};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The secret of one epoch's writer: its start or claim records the token's SHA-256, and the
/// services append at that epoch only for a caller presenting the token
/// ([`SessionState::admits_writer`]). 32 bytes from the thread-local CSPRNG, as hex after
/// `slw_`. Its `Debug` hides it, so it never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct WriterToken(String);

impl WriterToken {
    /// A fresh, unguessable token.
    pub fn generate() -> Self {
        use rand::RngCore;
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(format!("slw_{}", hex::encode(bytes)))
    }

    /// The token's text, to hand to the harness that holds it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Hex SHA-256 of the token: what the log records.
    pub fn sha256(&self) -> String {
        sessionlog_session::writer_token_sha256(&self.0)
    }
}

impl std::fmt::Debug for WriterToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterToken(..)")
    }
}

/// An appended event the fold accepted, learnt by reading the partition back to it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Confirmed {
    /// The event, at its first position in the log: where this append wrote it, or, for a
    /// retry of an event already accepted, where the first write sits.
    pub appended: Appended,
    /// True when the event had been accepted before (a retry).
    pub duplicate: bool,
}

/// An event in the log: acknowledged by an append, or found by a read-back.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Appended {
    /// The event as written.
    pub envelope: EventEnvelope,
    /// Where it sits.
    pub position: Position,
    /// The secrets the scan found in its texts as it was sealed (`[privacy] secret_scan`):
    /// each field, the rule, and whether it was withheld and redacted or only warned about.
    /// Empty for an event read back from the log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<sessionlog_keys::SecretFound>,
}

/// Appends the events of one session, in order, as its current writer.
///
/// The writer keeps its own fold of what it appended, so it refuses an event the log would
/// reject (a result for a call that is not pending, anything after the end) before sending,
/// and can declare a checkpoint's state digest.
///
/// Fencing (docs/design.md, "One writer per session"): the log decides, and a writer learns it lost
/// in three ways, all ending in [`Error::Fenced`] (or [`Error::LostClaim`] for a claimant):
/// - at [`Self::claim`], by reading its own claim back;
/// - at every append, from the [`EventLog`]'s per-session epoch map, which every claim made
///   through the same `EventLog` updates: immediate, no round trip, but blind to other processes;
/// - at every *confirmed* append, by reading the session's partition back from the last offset
///   it confirmed up to its own events and folding it: authoritative, for any process. The
///   records come from the process's tail of the log when it holds them (an append then costs
///   a produce and a wait, not a fetch), else from the partition.
///
/// Confirmed appends: [`Self::append_confirmed`], every [`Self::checkpoint`] and
/// [`Self::close`], and every batch holding an intent a harness acts on once it is told the
/// event is appended (a `ToolCallRequested`: the harness runs the tool). They answer only once
/// the fold accepted the events, at the cost of one read of the partition's tail. Other
/// appends answer at Kafka's ack: between a takeover by another process and the writer's next
/// confirmed append, its events are acknowledged but rejected by the fold as zombie writes, and
/// nothing was done on the strength of them that the session fails to record.
pub struct SessionWriter {
    log: Arc<EventLog>,
    /// The epoch this writer writes with. The state's epoch is the session's, which a claim
    /// elsewhere raises: a read-back never makes a fenced writer the new epoch's.
    epoch: Epoch,
    /// The fold of what the log holds and this writer appended since (acknowledged, perhaps
    /// not confirmed).
    state: SessionState,
    /// The fold of the partition up to `confirmed`: what a read-back starts from.
    verified: SessionState,
    partition: i32,
    /// The first offset of the session's partition not yet read back.
    confirmed: i64,
    first: Option<Position>,
    last: Option<Position>,
    /// Where the session's latest accepted events sit (at most the fold's duplicate window):
    /// a retry of one is answered with its first position.
    positions: VecDeque<(Seq, Uuid, Position)>,
    /// The session's sealing key between appends (with encryption on).
    key: sessionlog_keys::HeldKey,
    /// The token of this writer's epoch, when this writer started, forked or claimed the
    /// session; `None` for a writer a service built for whoever holds the epoch
    /// ([`Self::current`]), which writes only after [`Self::write_as`] checked the caller's.
    token: Option<WriterToken>,
    /// The renewal of this writer's lease, while it holds one ([`Self::hold_lease`]).
    lease: Option<LeaseRenewal>,
    /// The lease [`Self::put_lease_once`] wrote, until a holder takes it over.
    written_lease: Option<Lease>,
    /// Keeps the session's entry in its log's early fence while this writer lives.
    _seen: crate::epochs::WriterSeen,
}

/// A writer's lease renewal task: stopped when dropped (with its writer), without a release,
/// so a writer dropped without [`SessionWriter::close`] leaves a lease that lapses after its TTL.
struct LeaseRenewal {
    task: tokio::task::JoinHandle<()>,
    /// The name the lease is held in (its release names it too).
    holder: String,
}

impl Drop for LeaseRenewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SessionWriter {
    /// Starts a new session (seq 1, epoch 1) with a fresh UUIDv7 id; returns the writer and
    /// the acknowledged start event.
    pub async fn create(
        log: Arc<EventLog>,
        agent: &str,
        title: Option<&str>,
    ) -> Result<(Self, Appended)> {
        Self::create_new_in(log, agent, title, DEFAULT_TENANT).await
    }

    /// Starts a new session with a fresh UUIDv7 id in `tenant`. A fresh id cannot be taken, so
    /// nothing is read before the start is written.
    pub async fn create_new_in(
        log: Arc<EventLog>,
        agent: &str,
        title: Option<&str>,
        tenant: &str,
    ) -> Result<(Self, Appended)> {
        let token = WriterToken::generate();
        let first = started(agent, title, tenant, &token, None);
        Self::start(log, SessionId::new(), first, token, true).await
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
    ///
    /// The id is the caller's, so it may be taken: the session is caught up first (cheaply
    /// with a projection, see [`EventLog::with_projection`]) and an existing one refused with
    /// [`Rejection::AlreadyStarted`]; the start is then read back, so of two creates of one id
    /// racing on different processes exactly one succeeds.
    pub async fn create_in(
        log: Arc<EventLog>,
        session: SessionId,
        agent: &str,
        title: Option<&str>,
        tenant: &str,
    ) -> Result<(Self, Appended)> {
        let token = WriterToken::generate();
        let first = started(agent, title, tenant, &token, None);
        Self::start(log, session, first, token, false).await
    }

    /// Starts a session named in its tenant: its start records the name's digest
    /// ([`sessionlog_schemas::session_name_sha256`]), which the caller took for `session` in
    /// the names table first. The id is refused, as [`Self::create_in`] refuses it, when it was
    /// ever started, and the start is read back: once the name points at the id, another
    /// create of the name may start it too, and only one of them may be told it did.
    pub async fn create_named(
        log: Arc<EventLog>,
        session: SessionId,
        agent: &str,
        title: Option<&str>,
        tenant: &str,
        name_sha256: &str,
    ) -> Result<(Self, Appended)> {
        let token = WriterToken::generate();
        let first = started(agent, title, tenant, &token, Some(name_sha256));
        Self::start(log, session, first, token, false).await
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
        Self::fork_into(log, None, fork_point, agent, tenant, forked_by, Vec::new()).await
    }

    /// [`Self::fork`] into the child `child` names (a framework that chooses its copies' ids,
    /// such as LangGraph's `copy_thread`), or a fresh UUIDv7 when `None`. A given id may be
    /// taken: as with [`Self::create_in`], it is caught up first and an existing session
    /// refused with [`Rejection::AlreadyStarted`] before anything is written, and the start is
    /// read back, so of two forks racing into one id exactly one succeeds. The child carries
    /// over the parent's granted approvals in `inherited_approvals` and no other (a fork
    /// carrying any over must be signed: fork through the recovery service).
    pub async fn fork_into(
        log: Arc<EventLog>,
        child: Option<SessionId>,
        fork_point: ForkPoint,
        agent: &str,
        tenant: &str,
        forked_by: Option<&str>,
        inherited_approvals: Vec<InheritedApproval>,
    ) -> Result<(Self, Appended)> {
        let token = WriterToken::generate();
        let forked = SessionEvent::SessionForked {
            fork_point,
            agent: agent.to_string(),
            tenant: tenant.to_string(),
            forked_by: forked_by.map(String::from),
            writer_token_sha256: Some(token.sha256()),
            inherited_approvals,
        };
        match child {
            Some(child) => Self::start(log, child, forked, token, false).await,
            None => Self::start(log, SessionId::new(), forked, token, true).await,
        }
    }

    /// Writes the first event of `session`. A `fresh` id (a new UUIDv7) cannot be taken, so
    /// nothing before the start concerns the session; any other id is caught up and the start
    /// confirmed.
    async fn start(
        log: Arc<EventLog>,
        session: SessionId,
        first_event: SessionEvent,
        token: WriterToken,
        fresh: bool,
    ) -> Result<(Self, Appended)> {
        // Before the first event, so that every confirmation of the session finds its records
        // in the tail rather than reading the partition.
        log.start_tail().await;
        if fresh {
            log.key_fresh_session(session).await?;
            let partition = log.partition_of(session);
            let mut writer = Self::at(log, SessionState::empty(session), partition, 0);
            // The first event carries epoch 1: the creator is the first writer.
            writer.state.epoch = 1;
            writer.epoch = 1;
            writer.token = Some(token);
            let envelope = writer.signed_start(first_event)?;
            let start = writer.append_envelope(envelope).await?;
            writer.verified = writer.state.clone();
            writer.confirmed = start.position.offset + 1;
            return Ok((writer, start));
        }
        let caught = catch_up(&log, session).await?;
        // Started before, even if retention or an expired projection left nothing else of
        // it: a session id is never started twice.
        if caught.state.is_started() || caught.started_once {
            return Err(Error::Refused(Rejection::AlreadyStarted));
        }
        // Keyed before its start is readable (a fork's first event has no text to key it).
        log.key_session(session).await?;
        let mut writer = Self::caught_up(log, caught);
        writer.state.epoch = 1;
        writer.epoch = 1;
        writer.token = Some(token);
        let envelope = writer.signed_start(first_event)?;
        let mut confirmed = writer.append_confirmed(vec![envelope]).await?;
        let start = confirmed.pop().ok_or(Error::Unconfirmed {
            partition: writer.partition,
            offset: -1,
        })?;
        Ok((writer, start.appended))
    }

    /// The envelope of a session's first event; a fork made through a log with an attester
    /// (the recovery service's) is signed.
    fn signed_start(&self, first_event: SessionEvent) -> Result<EventEnvelope> {
        let mut envelope = self.envelope(1, first_event, None, None);
        if let (SessionEvent::SessionForked { .. }, Some(attester)) =
            (&envelope.event, self.log.attester())
        {
            attester
                .attest(&mut envelope)
                .map_err(|reason| Error::Attestation {
                    what: "fork",
                    reason,
                })?;
        }
        Ok(envelope)
    }

    /// A writer whose state and verified state are `state`, as of `confirmed` in `partition`.
    fn at(log: Arc<EventLog>, state: SessionState, partition: i32, confirmed: i64) -> Self {
        Self {
            _seen: log.writer_made(state.session_id, state.epoch),
            log,
            epoch: state.epoch,
            verified: state.clone(),
            state,
            partition,
            confirmed,
            first: None,
            last: None,
            positions: VecDeque::new(),
            key: Default::default(),
            token: None,
            lease: None,
            written_lease: None,
        }
    }

    fn caught_up(log: Arc<EventLog>, caught: CaughtUp) -> Self {
        let mut writer = Self::at(
            log,
            caught.state.clone(),
            caught.partition,
            caught.next_offset,
        );
        for position in caught.positions() {
            writer.remember(position);
        }
        writer
    }

    /// A writer for `session` as it stands in the log now, at its current epoch: what a
    /// stateless service builds to append for whichever harness holds that epoch. Reads the
    /// projection's row and the log after it (see [`EventLog::with_projection`]).
    pub async fn current(log: Arc<EventLog>, session: SessionId) -> Result<Self> {
        let caught = catch_up(&log, session).await?;
        if !caught.state.is_started() {
            return Err(caught.not_started(&log).await);
        }
        Ok(Self::caught_up(log, caught))
    }

    /// Folds whatever reached the session's partition since the last read-back (another
    /// process's appends or claims): the writer's state becomes the log's.
    pub async fn refresh(&mut self) -> Result<()> {
        let caught = match catch_up_from(
            &self.log,
            self.verified.clone(),
            self.partition,
            self.confirmed,
        )
        .await
        {
            // Long idle here while the projector moved on: start from its row instead.
            Err(Error::ProjectionBehind { .. }) => catch_up(&self.log, self.session_id()).await?,
            other => other?,
        };
        for position in caught.positions() {
            self.remember(position);
        }
        self.log.note_epoch(self.session_id(), caught.state.epoch);
        self.verified = caught.state.clone();
        self.state = caught.state;
        self.confirmed = caught.next_offset;
        self.drop_lease_if_fenced();
        Ok(())
    }

    /// [`Self::refresh`] from what the process's tail of the log has read, from memory: no
    /// round trip to the partition's leader and no read of the partition. The state becomes
    /// the log's as of the tail's position, which trails the log by the tail's lag (a record
    /// acknowledged a moment ago may not be in it yet), so it suits a judgement that may be
    /// that late (a lease renewal: liveness, not permission to write), never a confirmation.
    /// `false` (and nothing changed) when the tail does not hold the records after this
    /// writer's last read (no tail, not positioned yet, or it dropped them): call
    /// [`Self::refresh`].
    pub async fn refresh_from_tail(&mut self) -> Result<bool> {
        let (Some(start), Some(end)) = (
            self.log.tail_start(self.partition),
            self.log.tail_end(self.partition),
        ) else {
            return Ok(false);
        };
        if start > self.confirmed {
            return Ok(false);
        }
        if end <= self.confirmed {
            return Ok(true);
        }
        let session = self.session_id();
        let (events, next) = self
            .log
            .read_events_after_own(self.partition, self.confirmed, Some(end), session)
            .await?;
        let mut state = self.verified.clone();
        for event in events {
            if state.apply(&event.envelope).is_accepted() {
                let e = &event.envelope;
                self.remember((e.seq, e.event_id, event.position));
            }
        }
        self.log.note_epoch(session, state.epoch);
        self.verified = state.clone();
        self.state = state;
        self.confirmed = next;
        self.drop_lease_if_fenced();
        Ok(true)
    }

    /// The epoch this writer writes with.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The token of this writer's epoch, when this writer started, forked or claimed the
    /// session: hand it to the harness that writes through a service, which presents it.
    pub fn token(&self) -> Option<&WriterToken> {
        self.token.as_ref()
    }

    /// Writes one lease on the session in `holder`'s name at this writer's epoch, without
    /// renewing it: what a service that takes a session for a worker (the recovery service's
    /// `take`) writes right after the claim, so that a worker dying before it holds the lease
    /// itself leaves a lease that lapses, as any dead harness's does. `None` when leases are off.
    pub async fn put_lease_once(&mut self, holder: &str) -> Result<Option<Lease>> {
        let Some(ttl) = self.log.lease_ttl() else {
            return Ok(None);
        };
        let lease = renewed_lease(self.session_id(), holder, self.epoch, ttl)?;
        self.log.put_lease(&lease).await?;
        self.written_lease = Some(lease.clone());
        Ok(Some(lease))
    }

    /// Holds a lease on the session in `holder`'s name at this writer's epoch (docs/design.md,
    /// "Writer leases"): writes it now, then renews it every third of `[lease] ttl_ms` while
    /// the writer lives. [`Self::close`] and [`Self::release_lease`] release it; a writer
    /// dropped without either stops renewing, and its lease lapses after the TTL, as a killed
    /// process's does; a writer that learns it was fenced stops renewing and releases nothing
    /// (the lease topic is the new writer's). Returns the lease written, or `None` when leases
    /// are off (`[lease] ttl_ms = 0`). Liveness only: the lease lets no one write.
    pub async fn hold_lease(&mut self, holder: &str) -> Result<Option<Lease>> {
        let Some(ttl) = self.log.lease_ttl() else {
            return Ok(None);
        };
        self.check_not_fenced()?;
        // A lease held already (another holder's name) stops renewing first: a renewal of it
        // due between this write and its replacement would land after this lease and hide it.
        // One it already sent is ordered before this one (one producer, one partition).
        drop(self.lease.take());
        let (session, epoch) = (self.session_id(), self.epoch);
        // A third of the TTL: two renewals may be lost before the lease lapses.
        let every = ttl / 3;
        // The lease this writer's claim wrote a moment ago, in this holder's name, is not
        // written again (a worker's take paid for two lease writes in a row): the first renewal
        // comes well before it lapses.
        let every_micros = i64::try_from(every.as_micros()).unwrap_or(i64::MAX);
        let lease = match self.written_lease.take() {
            Some(written)
                if written.writer == holder
                    && written.epoch == epoch
                    && now_micros().saturating_sub(written.renewed_at) < every_micros =>
            {
                written
            }
            _ => {
                let lease = renewed_lease(session, holder, epoch, ttl)?;
                self.log.put_lease(&lease).await?;
                lease
            }
        };
        let log = Arc::clone(&self.log);
        let name = holder.to_string();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Fenced through this process: the lease is the new writer's to hold.
                if log.highest_epoch_seen(session).is_some_and(|e| e > epoch) {
                    return;
                }
                let renewal = renewed_lease(session, &name, epoch, ttl);
                let written = match renewal {
                    Ok(lease) => log.put_lease(&lease).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = written {
                    // The next tick tries again; two misses in a row leave the lease live.
                    tracing::warn!(%session, epoch, error = %e, "lease renewal failed");
                }
            }
        });
        self.lease = Some(LeaseRenewal {
            task,
            holder: holder.to_string(),
        });
        Ok(Some(lease))
    }

    /// Whether this writer's lease renewal runs ([`Self::hold_lease`]).
    pub fn holds_lease(&self) -> bool {
        self.lease.is_some()
    }

    /// Stops renewing this writer's lease and releases it (a release of its epoch in the lease
    /// topic), unless the log shows a later epoch (the lease is then the new writer's, and is
    /// left alone). For a harness that stops running a session without ending it. A release
    /// that lands after a later epoch's lease all the same (a claim between the check and the
    /// write) releases only this writer's epoch: readers keep the later one.
    pub async fn release_lease(&mut self) -> Result<()> {
        let Some(mut renewal) = self.lease.take() else {
            return Ok(());
        };
        // Stopped first: a renewal after the release would hold the lease again.
        let holder = std::mem::take(&mut renewal.holder);
        drop(renewal);
        self.refresh().await?;
        if self.state.epoch > self.epoch {
            return Ok(());
        }
        self.log
            .release_lease(self.session_id(), self.epoch, &holder)
            .await
    }

    /// Stops the lease renewal, without a release, once this writer's state shows a later
    /// epoch than its own: it was fenced.
    fn drop_lease_if_fenced(&mut self) {
        if self.state.epoch > self.epoch {
            self.lease = None;
        }
    }

    /// Writes from now on with `epoch` for a caller presenting `token`: for a stateless
    /// service writing on behalf of whichever harness holds the current epoch. The epoch must
    /// be the session's current one (after a [`Self::refresh`]) and the token the one its
    /// writer's claim recorded ([`SessionState::admits_writer`]): [`Error::Fenced`] for an
    /// older epoch, [`Error::Refused`] otherwise.
    pub fn write_as(&mut self, epoch: Epoch, token: Option<&str>) -> Result<()> {
        match self.state.admits_writer(epoch, token) {
            Ok(()) => {
                self.epoch = epoch;
                Ok(())
            }
            Err(Rejection::Zombie { epoch, current }) => Err(Error::Fenced { epoch, current }),
            Err(rejection) => Err(Error::Refused(rejection)),
        }
    }

    /// Where the accepted event `(seq, event_id)` sits, if this writer saw it accepted.
    pub fn position_of(&self, seq: Seq, event_id: Uuid) -> Option<Position> {
        self.positions
            .iter()
            .rev()
            .find(|(s, id, _)| *s == seq && *id == event_id)
            .map(|(_, _, p)| *p)
    }

    fn remember(&mut self, position: (Seq, Uuid, Position)) {
        self.positions.push_back(position);
        if self.positions.len() > DUPLICATE_WINDOW {
            self.positions.pop_front();
        }
    }

    /// The first half of [`Self::claim`]: catches `session` up (see [`Self::current`]) and
    /// decides the epoch, writing nothing, so the caller can look at the session (its tenant,
    /// its gates) before [`PendingClaim::commit`] appends the claim.
    pub async fn prepare_takeover(
        log: Arc<EventLog>,
        session: SessionId,
        writer: &str,
    ) -> Result<PendingClaim> {
        let caught = catch_up(&log, session).await?;
        PendingClaim::after(log, caught, writer).await
    }

    /// Takes over `session`: catches it up (from the projection's row when the log has one,
    /// else from its partition's first offset), appends `WriterClaimed{epoch = current + 1}`,
    /// reads the log back up to its own claim, and returns [`Error::LostClaim`] if another
    /// claim won.
    pub async fn claim(
        log: Arc<EventLog>,
        session: SessionId,
        writer: &str,
    ) -> Result<(Self, Appended)> {
        Self::prepare_takeover(log, session, writer)
            .await?
            .commit()
            .await
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

    /// The first half of a takeover from a state the caller folded: catch up with the log and
    /// decide the epoch to claim, without writing anything yet. [`PendingClaim::commit`]
    /// writes the claim.
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
        let caught = catch_up_from(&log, state, partition, next_offset).await?;
        PendingClaim::after(log, caught, writer).await
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
        let mut appended = if is_intent(&envelope.event) {
            let confirmed = self.send_confirmed(vec![envelope], WhenFull::Fail).await?;
            confirmed.into_iter().map(|c| c.appended).collect()
        } else {
            self.send(vec![envelope], WhenFull::Fail, Redactions::WhenAcknowledged)
                .await?
        };
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
    /// same envelopes. A batch holding an intent is confirmed (see the type's documentation).
    pub async fn append_envelopes(
        &mut self,
        envelopes: Vec<EventEnvelope>,
    ) -> Result<Vec<Appended>> {
        if envelopes.iter().any(|e| is_intent(&e.event)) {
            let confirmed = self.append_confirmed(envelopes).await?;
            return Ok(confirmed.into_iter().map(|c| c.appended).collect());
        }
        self.send(envelopes, WhenFull::Wait, Redactions::WhenAcknowledged)
            .await
    }

    /// Sends prepared envelopes like [`Self::append_envelopes`], then reads the session's
    /// partition back up to the last of them and folds it from the last confirmed point:
    /// answers only once the fold accepted every one, with each event's first position.
    ///
    /// [`Error::Fenced`] when a later epoch's claim, from any process, reached the log first;
    /// [`Error::Rejected`] when the fold rejected an event for another reason (another
    /// writer of the same epoch took its seq). Either way the writer's state is the log's
    /// afterwards, and events of the batch before the rejected one stay accepted: a retry of
    /// the batch is answered for them as duplicates.
    pub async fn append_confirmed(
        &mut self,
        envelopes: Vec<EventEnvelope>,
    ) -> Result<Vec<Confirmed>> {
        self.send_confirmed(envelopes, WhenFull::Wait).await
    }

    async fn send_confirmed(
        &mut self,
        envelopes: Vec<EventEnvelope>,
        when_full: WhenFull,
    ) -> Result<Vec<Confirmed>> {
        let appended = self
            .send(envelopes, when_full, Redactions::WhenConfirmed)
            .await?;
        let Some(upto) = appended.iter().map(|a| a.position.offset).max() else {
            return Ok(Vec::new());
        };
        let verdicts = self.read_back(upto).await?;
        // A field withheld for a secret is redacted once its event is in the session (this
        // write or an earlier one of the same event): never for an event the log refused,
        // whose seq another event holds.
        let in_session: Vec<_> = appended
            .iter()
            .filter(|a| {
                matches!(
                    verdicts.get(&a.position.offset),
                    Some(Verdict::Accepted | Verdict::Duplicate)
                )
            })
            .flat_map(|a| a.secrets.iter().cloned())
            .collect();
        self.log.record_redactions(&in_session).await;
        appended
            .into_iter()
            .map(|appended| {
                let (envelope, position) = (&appended.envelope, appended.position);
                match verdicts.get(&position.offset) {
                    Some(Verdict::Accepted) => Ok(Confirmed {
                        appended,
                        duplicate: false,
                    }),
                    Some(Verdict::Duplicate) => {
                        let first = self
                            .position_of(envelope.seq, envelope.event_id)
                            .unwrap_or(position);
                        Ok(Confirmed {
                            appended: Appended {
                                position: first,
                                ..appended
                            },
                            duplicate: true,
                        })
                    }
                    Some(Verdict::Rejected(Rejection::Zombie { epoch, current })) => {
                        Err(Error::Fenced {
                            epoch: *epoch,
                            current: *current,
                        })
                    }
                    Some(Verdict::Rejected(rejection)) => Err(Error::Rejected {
                        seq: envelope.seq,
                        offset: position.offset,
                        rejection: rejection.clone(),
                    }),
                    None => Err(Error::Unconfirmed {
                        partition: position.partition,
                        offset: position.offset,
                    }),
                }
            })
            .collect()
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
        redactions: Redactions,
    ) -> Result<Vec<Appended>> {
        self.check_not_fenced()?;
        if envelopes.len() > DUPLICATE_WINDOW {
            return Err(Error::BatchTooLong {
                events: envelopes.len(),
                limit: DUPLICATE_WINDOW,
            });
        }
        let mut envelopes = envelopes;
        name_approved_actions(&mut envelopes);
        // Judged before sealing, as sealing an erased session's event fails for the key's
        // sake while the fold's reason (after the end) is the one to report (and a call acting
        // on an approval is compared with what was approved while its arguments are readable).
        self.judge_all(&envelopes)?;
        let found = self
            .log
            .seal_scanned(Some(&mut self.key), &mut envelopes)
            .await?;
        let outcomes = self.log.send_all(&envelopes, when_full).await?;
        let mut appended = Vec::with_capacity(envelopes.len());
        let mut accepted_secrets = Vec::new();
        for (envelope, outcome) in envelopes.into_iter().zip(outcomes) {
            let position = match outcome {
                Ok(position) => position,
                Err(e) => {
                    // Those acknowledged before are in the log: their withheld fields too.
                    self.log.record_redactions(&accepted_secrets).await;
                    return Err(e);
                }
            };
            let secrets: Vec<_> = found
                .iter()
                .filter(|f| f.seq == envelope.seq)
                .cloned()
                .collect();
            if self.state.apply(&envelope).is_accepted() {
                self.remember((envelope.seq, envelope.event_id, position));
                if redactions == Redactions::WhenAcknowledged {
                    accepted_secrets.extend(secrets.iter().cloned());
                }
            }
            self.first.get_or_insert(position);
            self.last = Some(position);
            appended.push(Appended {
                envelope,
                position,
                secrets,
            });
        }
        self.log.record_redactions(&accepted_secrets).await;
        if let Some(last) = self.last {
            tracing::Span::current().record("last_offset", last.offset);
        }
        Ok(appended)
    }

    /// Reads the session's partition from the last confirmed offset through `upto` and folds
    /// it from the verified state, in log order: other writers' events and claims, and this
    /// writer's. The writer's state becomes the log's; returns the verdict on every record
    /// read, by offset.
    async fn read_back(&mut self, upto: i64) -> Result<HashMap<i64, Verdict>> {
        let session = self.session_id();
        let (events, next) = self
            .log
            .read_events_after_own(self.partition, self.confirmed, Some(upto + 1), session)
            .await?;
        let mut replay = self.verified.clone();
        let mut verdicts = HashMap::with_capacity(events.len());
        for event in events {
            let verdict = replay.apply(&event.envelope);
            if verdict.is_accepted() {
                let e = &event.envelope;
                self.remember((e.seq, e.event_id, event.position));
            }
            verdicts.insert(event.position.offset, verdict);
        }
        self.log.note_epoch(session, replay.epoch);
        self.verified = replay.clone();
        self.state = replay;
        self.confirmed = next;
        self.drop_lease_if_fenced();
        Ok(verdicts)
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
            Some(current) if current > self.epoch => Err(Error::Fenced {
                epoch: self.epoch,
                current,
            }),
            _ => Ok(()),
        }
    }

    /// Appends a checkpoint declaring the digest of everything before it, confirmed (read
    /// back): [`Error::Fenced`] if another writer's claim of a later epoch is in the log,
    /// whichever process made it.
    pub async fn checkpoint(&mut self, workspace_revision: Option<String>) -> Result<Appended> {
        let state_digest = self.state.digest();
        let event = SessionEvent::Checkpoint {
            state_digest,
            workspace_revision,
        };
        self.append_one_confirmed(event).await
    }

    /// Appends the terminal outcome, confirmed: a harness that stops on the strength of it
    /// knows the session recorded the end.
    pub async fn close(
        &mut self,
        outcome: TerminalOutcome,
        reason: Option<String>,
    ) -> Result<Appended> {
        let ended = self
            .append_one_confirmed(SessionEvent::SessionEnded {
                outcome,
                reason: reason.map(Content::Plain),
            })
            .await;
        if let Err(Error::Fenced { .. }) = &ended {
            self.lease = None;
        }
        let ended = ended?;
        // The end is the session's: its lease records go with it.
        if self.lease.take().is_some() {
            self.log.end_leases(self.session_id(), self.epoch).await?;
        }
        Ok(ended)
    }

    async fn append_one_confirmed(&mut self, event: SessionEvent) -> Result<Appended> {
        self.append_with_confirmed(event, None, None).await
    }

    /// [`Self::append_with`], confirmed: answers once the fold accepted the event (see
    /// [`Self::append_confirmed`]).
    pub async fn append_with_confirmed(
        &mut self,
        event: SessionEvent,
        causation_id: Option<Uuid>,
        idempotency_key: Option<String>,
    ) -> Result<Appended> {
        let envelope = self.envelope(self.next_seq(), event, causation_id, idempotency_key);
        self.append_envelope_confirmed(envelope).await
    }

    /// One prepared envelope (see [`Self::envelopes`]; signed, say), confirmed as
    /// [`Self::append_confirmed`] confirms a batch.
    pub async fn append_envelope_confirmed(&mut self, envelope: EventEnvelope) -> Result<Appended> {
        let mut confirmed = self.append_confirmed(vec![envelope]).await?;
        confirmed
            .pop()
            .map(|c| c.appended)
            .ok_or(Error::Unconfirmed {
                partition: self.partition,
                offset: -1,
            })
    }

    /// Appends a user request (a convenience for the commonest event).
    pub async fn user_request(&mut self, text: &str) -> Result<Appended> {
        self.append(SessionEvent::UserRequest {
            content: Content::plain(text),
        })
        .await
    }

    /// Appends a summary of seqs `first_seq..=last_seq` of this session, written by
    /// `summarized_by` (a model or author): the context view shows it in place of the turns it
    /// covers, which stay readable by range. The fold refuses a range beyond the last seq.
    pub async fn summarize(
        &mut self,
        first_seq: Seq,
        last_seq: Seq,
        summarized_by: &str,
        summary: &str,
    ) -> Result<Appended> {
        self.append(SessionEvent::ContextSummarized {
            first_seq,
            last_seq,
            summarized_by: summarized_by.into(),
            summary: Content::plain(summary),
        })
        .await
    }

    /// Appends a retraction of this session's event at `retracted_seq`, by `retracted_by` (a
    /// harness, or an adapter such as `openai-agents:pop_item`): the context view stops showing
    /// it; the log and range reads keep both. The fold refuses a seq that is not an earlier
    /// event, one already retracted, or a retraction.
    pub async fn retract(&mut self, retracted_seq: Seq, retracted_by: &str) -> Result<Appended> {
        self.append(SessionEvent::EventRetracted {
            retracted_seq,
            retracted_by: retracted_by.into(),
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
            writer_epoch: self.epoch,
            occurred_at: now_micros(),
            causation_id,
            idempotency_key,
            schema_version: CURRENT_SCHEMA_VERSION,
            event,
            attestation: None,
        }
    }
}

/// A lease of `session` renewed now for `ttl`, or the setting to fix when the expiry does not
/// fit the clock.
fn renewed_lease(session: SessionId, holder: &str, epoch: Epoch, ttl: Duration) -> Result<Lease> {
    Lease::renewed(session, holder, epoch, now_micros(), ttl).ok_or_else(|| {
        sessionlog_log::Error::BadSetting {
            key: "lease.ttl_ms".into(),
            problem: "now plus the TTL is past what a timestamp holds".into(),
        }
        .into()
    })
}

/// The first event of a session a harness starts, recording the hash of its writer's token
/// and, for a named session, its name's digest.
fn started(
    agent: &str,
    title: Option<&str>,
    tenant: &str,
    token: &WriterToken,
    name_sha256: Option<&str>,
) -> SessionEvent {
    SessionEvent::SessionStarted {
        agent: agent.to_string(),
        title: title.map(Content::from),
        tenant: tenant.to_string(),
        writer_token_sha256: Some(token.sha256()),
        name_sha256: name_sha256.map(str::to_string),
    }
}

/// Names what each approval request in `envelopes` approves by the digest of its action's
/// text, where the writer named none: the decision is signed over the digest. Done before
/// sealing, while the text is readable, and the same on a retry of the same envelopes.
fn name_approved_actions(envelopes: &mut [EventEnvelope]) {
    for envelope in envelopes {
        if let SessionEvent::ApprovalRequested {
            action,
            action_digest: digest @ None,
            ..
        } = &mut envelope.event
            && let Some(text) = action.as_plain()
        {
            *digest = Some(action_digest(text));
        }
    }
}

/// Whether a harness acts on `event` once told it is appended, so that it must be confirmed
/// accepted first: a tool call runs the tool. (Other events only record what happened; a
/// rejected one is learnt of at the next confirmed append, before anything acts on it.)
pub fn is_intent(event: &SessionEvent) -> bool {
    matches!(event, SessionEvent::ToolCallRequested { .. })
}

/// A takeover caught up with the log but not yet written: it will claim [`Self::epoch`].
pub struct PendingClaim {
    log: Arc<EventLog>,
    writer: String,
    caught: CaughtUp,
    token: WriterToken,
}

impl PendingClaim {
    async fn after(log: Arc<EventLog>, caught: CaughtUp, writer: &str) -> Result<Self> {
        if !caught.state.is_started() {
            // Events of the session but no start: retention deleted it. Say so, and where to
            // go, rather than calling a session with a history unknown.
            return Err(caught.not_started(&log).await);
        }
        Ok(Self {
            log,
            writer: writer.to_string(),
            caught,
            token: WriterToken::generate(),
        })
    }

    /// The session as the catch-up left it, before the claim.
    pub fn state(&self) -> &SessionState {
        &self.caught.state
    }

    /// The epoch this claim will ask for: one above the latest the log showed.
    pub fn epoch(&self) -> u64 {
        self.caught.state.epoch + 1
    }

    /// Appends `WriterClaimed`, reads the log back up to it, and returns the new writer if the
    /// claim won, or [`Error::LostClaim`] if another claim reached the partition first.
    ///
    /// The claim records the hash of the new writer's token ([`SessionWriter::token`]); made
    /// through a log with an attester (the recovery service's) it is signed. The fold refuses
    /// an unsigned claim while the session waits for someone ([`Rejection::Gated`]): it is
    /// judged before anything is written and again on the read-back, in case a wait began
    /// in between; either way the answer is [`Error::Refused`].
    pub async fn commit(self) -> Result<(SessionWriter, Appended)> {
        let (writer, claim, _) = self.commit_caught_up().await?;
        Ok((writer, claim))
    }

    /// [`Self::commit`], also returning every event of the session accepted after the state
    /// the claim was prepared from and read from the log (before the claim, in log order):
    /// what a caller keeping its own view of the session (a context window) must fold, without
    /// reading it again. (A claim prepared by [`SessionWriter::prepare_takeover`] starts from
    /// the projection's row; events the projection held are not among them.)
    pub async fn commit_caught_up(self) -> Result<(SessionWriter, Appended, Vec<EventEnvelope>)> {
        let Self {
            log,
            writer,
            caught,
            token,
        } = self;
        let partition = caught.partition;
        let caught_up = caught.next_offset;
        let mut positions: Vec<_> = caught.positions().collect();
        let mut caught_events: Vec<EventEnvelope> =
            caught.accepted.into_iter().map(|a| a.envelope).collect();
        let mut state = caught.state;
        let session = state.session_id;
        let mut claim = EventEnvelope {
            event_id: Uuid::now_v7(),
            session_id: session,
            // Claims take no seq in the fold; this is the seq the claimant will write next.
            seq: state.next_seq(),
            writer_epoch: state.epoch + 1,
            occurred_at: now_micros(),
            causation_id: None,
            idempotency_key: None,
            schema_version: CURRENT_SCHEMA_VERSION,
            event: SessionEvent::WriterClaimed {
                writer,
                writer_token_sha256: Some(token.sha256()),
            },
            attestation: None,
        };
        if let Some(attester) = log.attester() {
            attester
                .attest(&mut claim)
                .map_err(|reason| Error::Attestation {
                    what: "claim",
                    reason,
                })?;
        }
        // Refused before anything is written: the claim would walk past a wait.
        if let Verdict::Rejected(gated @ Rejection::Gated(_)) = state.judge(&claim) {
            return Err(Error::Refused(gated));
        }
        let position = log.append(&claim).await?;
        // Whatever reached the partition between the catch-up and the claim (a zombie's last
        // events, a rival claim) is folded in log order: the partition decides who won.
        // The range begins where the catch-up's own read ended.
        let (events, _) = log
            .read_events_after_own(partition, caught_up, Some(position.offset + 1), session)
            .await?;
        let mut verdict = None;
        for event in events {
            let v = state.apply(&event.envelope);
            if event.envelope.event_id == claim.event_id && event.position == position {
                verdict = Some(v);
            } else if v.is_accepted() {
                let e = &event.envelope;
                positions.push((e.seq, e.event_id, event.position));
                caught_events.push(event.envelope);
            }
        }
        log.note_epoch(session, state.epoch);
        match verdict {
            Some(Verdict::Accepted) => {}
            // A wait began between the catch-up and the claim (an approval request, say).
            Some(Verdict::Rejected(gated @ Rejection::Gated(_))) => {
                return Err(Error::Refused(gated));
            }
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
        positions.push((claim.seq, claim.event_id, position));
        let mut writer_of = SessionWriter::at(log, state, partition, position.offset + 1);
        writer_of.token = Some(token);
        positions.into_iter().for_each(|p| writer_of.remember(p));
        writer_of.first = Some(position);
        writer_of.last = Some(position);
        Ok((
            writer_of,
            Appended {
                envelope: claim,
                position,
                secrets: Vec::new(),
            },
            caught_events,
        ))
    }
}

/// When a writer's append records the redactions of the fields the secret scan withheld.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Redactions {
    /// Once Kafka acknowledged the event and the writer's own fold accepted it: an append
    /// that is not confirmed learns no more.
    WhenAcknowledged,
    /// Once the read-back confirmed the fold accepted it.
    WhenConfirmed,
}
