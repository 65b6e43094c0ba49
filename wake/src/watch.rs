//! What the wake component knows of the sessions of its partitions, and when each is due: a
//! pure fold of lease records and events plus a clock, with no I/O, so every rule is a unit
//! test.
//!
//! A session is watched while it matters: it holds a lease, a timed pause waits for its time, a
//! cause waits for its outcome, or it just became one of these. Its events are folded with the
//! fold every component uses ([`SessionState::apply`]) into a state loaded from the projection
//! when it first matters ([`Watches::loads`], [`Watches::loaded`]), and only events the fold
//! accepted change anything: a fenced writer's end, a zombie unpause, a lost claim are nothing
//! here, as they are nothing in the session's history. Other sessions' events are read and
//! dropped, so memory is bounded by the watched sessions, a state each.
//!
//! A cause found here is a candidate: the service checks the session's projected state (ended,
//! paused, waiting for a person, claimed since) before it writes a wake.

use sessionlog_log::lease::later;
use sessionlog_log::{Lease, WakeReason};
use sessionlog_schemas::{Epoch, EventEnvelope, Micros, ResultSource, SessionEvent, SessionId};
use sessionlog_session::SessionState;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Events of one session kept while its state is loaded. Past this the projection is far
/// behind: the events are dropped and the load starts again from after them (the first cause
/// among them is remembered), so a stalled projector costs bounded memory.
pub const MAX_BUFFERED: usize = 1_024;

/// Why an ended session needs no harness: it is forgotten, and its lease record removed once
/// the lease lapsed.
pub const ENDED: &str = "the session ended";

/// A session that may need a harness, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The session.
    pub session: SessionId,
    /// Its partition.
    pub partition: i32,
    /// Why.
    pub reason: WakeReason,
    /// The session's epoch at the cause (a lease's, or the session's after the causing event).
    pub epoch: Epoch,
    /// The causing event's offset, when an event caused it.
    pub cause_offset: Option<i64>,
    /// When the cause happened.
    pub caused_at: Micros,
    /// Whether this is a repeat of a wake no harness answered.
    pub repeat: bool,
    /// The end of the session's events partition when the projection was first found without
    /// the session: once the projector passed it, the session's rows are gone for good (see
    /// [`Watches::unprojected`]).
    pub unprojected_end: Option<i64>,
}

impl Cause {
    /// The same cause, whatever was learnt of it since.
    fn same(&self, other: &Cause) -> bool {
        Cause {
            repeat: other.repeat,
            unprojected_end: other.unprojected_end,
            ..self.clone()
        } == *other
    }
}

/// A lease record to remove: an ended session's, which its writer left behind. Its records
/// are keyed by epoch: those of `epoch` and the epochs before it go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleanup {
    /// The session.
    pub session: SessionId,
    /// Its partition.
    pub partition: i32,
    /// The highest epoch it had a lease or a claim at.
    pub epoch: Epoch,
}

/// A session whose state is wanted from the projection, which must hold every record of its
/// partition below `before` (the projector's progress reached it); this instance folds the
/// records from `before` on itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// The session.
    pub session: SessionId,
    /// Its partition.
    pub partition: i32,
    /// The first offset of the partition the state must not include... unless the projection
    /// already went past it, which is allowed: records up to its applied offset are skipped.
    pub before: i64,
}

/// Why `state` needs no harness at `now`, if it needs none: it ended, waits for a person, or is
/// paused until a time to come or until someone unpauses it. A pause whose `until` passed does
/// not count: whoever takes the session lifts it. A session not started (as far as the state
/// knows) is not judged here: the projection decides (see the service's check).
pub fn needs_no_harness(state: &SessionState, now: Micros) -> Option<&'static str> {
    if state.terminal.is_some() || state.erased {
        return Some(ENDED);
    }
    if !state.pending_approvals.is_empty() {
        return Some("the session waits for an approval");
    }
    if state
        .pending_calls
        .values()
        .any(|c| c.resolution_required.is_some())
    {
        return Some("the session waits for an operator");
    }
    if state.paused && !pause_lapsed(state, now) {
        return Some("the session is paused");
    }
    None
}

/// Whether `state` is paused with an `until` that passed at `now`.
pub fn pause_lapsed(state: &SessionState, now: Micros) -> bool {
    state.paused && state.paused_until.is_some_and(|until| until <= now)
}

/// Whether the current epoch of `state` was claimed by an operator (a pause, an unpause,
/// steering, a decision, a result): an operator's act fences the harness but runs nothing.
pub fn claimed_by_operator(state: &SessionState) -> bool {
    state
        .writer
        .as_deref()
        .is_some_and(|w| w.starts_with("operator:"))
}

/// The cause an accepted event is, by kind (before the state and leases are looked at).
fn cause_kind(event: &SessionEvent) -> Option<WakeReason> {
    match event {
        SessionEvent::ApprovalDecided { .. } => Some(WakeReason::ApprovalDecided),
        SessionEvent::ToolCallResult {
            source: ResultSource::Operator,
            ..
        } => Some(WakeReason::OperatorResult),
        SessionEvent::SteeringMessage { .. } => Some(WakeReason::Steering),
        SessionEvent::SessionResumed {} => Some(WakeReason::Unpaused),
        _ => None,
    }
}

/// Whether an event makes a session nobody watches matter: a cause, or a timed pause.
fn matters(event: &SessionEvent) -> bool {
    cause_kind(event).is_some()
        || matches!(event, SessionEvent::SessionPaused { until: Some(_), .. })
}

/// What is due when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// A lease's expiry (compared with the lease held when it comes).
    LeaseExpiry,
    /// A pause's `until`.
    PauseEnd,
    /// The time to wake again a session woken that no harness took.
    Rewake,
}

#[derive(Clone, Debug)]
struct Pause {
    until: Micros,
    /// Where reading again finds the pause: the committed progress stays at or before it.
    offset: i64,
}

#[derive(Clone, Debug)]
struct Woken {
    cause: Cause,
    at: Micros,
    /// Not written yet (being checked, or the projection was behind), rather than written and
    /// unanswered.
    retry: bool,
}

/// A cause among events dropped while the state was loaded ([`MAX_BUFFERED`]).
#[derive(Clone, Debug)]
struct Missed {
    reason: WakeReason,
    offset: i64,
    caused_at: Micros,
}

/// A session's state being loaded, and its events read meanwhile.
#[derive(Clone, Debug, Default)]
struct Loading {
    /// The first offset folded here rather than taken from the projection; `None` until this
    /// instance read a record of the partition (it reads the partition from there).
    before: Option<i64>,
    /// The lowest `before` this load had: committed progress stays there until it is done, so
    /// a restart reads the events again.
    floor: Option<i64>,
    events: Vec<(i64, EventEnvelope)>,
    missed: Option<Missed>,
    /// A load is in flight.
    requested: bool,
}

impl Loading {
    fn from(before: Option<i64>) -> Self {
        Self {
            before,
            floor: before,
            ..Self::default()
        }
    }

    fn buffer(&mut self, offset: i64, e: &EventEnvelope) {
        if self.events.last().is_some_and(|(last, _)| *last >= offset) {
            // Read again (a rebalance started the partition over from committed progress).
            return;
        }
        if self.events.len() >= MAX_BUFFERED {
            for (offset, e) in self.events.drain(..) {
                if let Some(reason) = cause_kind(&e.event) {
                    self.missed = Some(Missed {
                        reason,
                        offset,
                        caused_at: e.occurred_at,
                    });
                }
            }
            self.before = Some(offset);
        }
        self.events.push((offset, e.clone()));
    }
}

#[derive(Clone, Debug)]
enum Fold {
    Loading(Loading),
    Folded {
        state: Box<SessionState>,
        /// The last offset folded into `state` (by the projection or here).
        through: i64,
    },
}

#[derive(Clone, Debug)]
struct Watch {
    partition: i32,
    lease: Option<Lease>,
    fold: Fold,
    pause: Option<Pause>,
    /// The `until` of the pause whose end was handed out: a pause ends once.
    pause_ended: Option<Micros>,
    woken: Option<Woken>,
    /// Its end was accepted (or its rows are gone): kept only until its lease lapses or is
    /// released, then its lease record is removed if still there.
    ended: bool,
}

impl Watch {
    fn new(partition: i32, fold: Fold) -> Self {
        Self {
            partition,
            lease: None,
            fold,
            pause: None,
            pause_ended: None,
            woken: None,
            ended: false,
        }
    }

    /// Nothing left to watch: no lease, no pause, no pending cause, no events waiting for a
    /// load.
    fn idle(&self) -> bool {
        self.lease.is_none()
            && self.pause.is_none()
            && self.woken.is_none()
            && match &self.fold {
                Fold::Loading(loading) => loading.events.is_empty() && loading.missed.is_none(),
                Fold::Folded { .. } => true,
            }
    }

    /// The removal of `session`'s lease records, up to the highest epoch known of it.
    fn cleanup(&self, session: SessionId) -> Cleanup {
        let leased = self.lease.as_ref().map_or(0, |l| l.epoch);
        Cleanup {
            session,
            partition: self.partition,
            epoch: self.state().map_or(leased, |s| s.epoch.max(leased)),
        }
    }

    fn state(&self) -> Option<&SessionState> {
        match &self.fold {
            Fold::Folded { state, .. } => Some(state),
            Fold::Loading(_) => None,
        }
    }
}

/// The sessions of the partitions this instance owns.
#[derive(Debug, Default)]
pub struct Watches {
    sessions: HashMap<SessionId, Watch>,
    /// `(when, session, what)`: entries made stale by a renewal or a resume are skipped when
    /// they come due rather than searched for and removed.
    due: BTreeSet<(Micros, SessionId, Due)>,
    /// `(when, session)`: states to load from the projection.
    loads: BTreeSet<(Micros, SessionId)>,
    /// Lease partitions read from their start and not yet to where they stood.
    catching: HashSet<i32>,
    /// By events partition, the next offset this instance reads.
    positions: HashMap<i32, i64>,
    /// Lease records of ended sessions to remove.
    cleanups: Vec<Cleanup>,
}

impl Watches {
    /// A lease record of `session` (`None`: a tombstone, the lease released), read at `now`.
    pub fn on_lease(
        &mut self,
        partition: i32,
        session: SessionId,
        value: Option<&[u8]>,
        now: Micros,
    ) {
        let held = self.sessions.get(&session).and_then(|w| w.lease.clone());
        let lease = match value {
            Some(_) => later(held.clone(), value),
            None => None,
        };
        let Some(lease) = lease else {
            // Released (or nothing this build reads): nothing is due for it.
            if let Some(watch) = self.sessions.get_mut(&session) {
                watch.lease = None;
            }
            self.forget_if_idle(session);
            return;
        };
        if !self.sessions.contains_key(&session) {
            let before = self.positions.get(&partition).copied();
            self.watch(
                partition,
                session,
                Fold::Loading(Loading::from(before)),
                now,
            );
        }
        let Some(watch) = self.sessions.get_mut(&session) else {
            return;
        };
        if held.as_ref() == Some(&lease) {
            return;
        }
        // A harness at a later epoch than the cause's took the session: the wake is answered.
        // (A writer fenced by the cause's claim may renew its old epoch's lease until it learns
        // it was fenced; that answers nothing.)
        if watch
            .woken
            .as_ref()
            .is_some_and(|w| lease.epoch > w.cause.epoch)
        {
            watch.woken = None;
        }
        self.due
            .insert((lease.expires_at, session, Due::LeaseExpiry));
        watch.lease = Some(lease);
    }

    /// Starts watching `session`, its state loaded from the projection as soon as it is known
    /// where this instance reads its partition from.
    fn watch(&mut self, partition: i32, session: SessionId, fold: Fold, now: Micros) {
        if matches!(&fold, Fold::Loading(l) if l.before.is_some()) {
            self.loads.insert((now, session));
        }
        self.sessions.insert(session, Watch::new(partition, fold));
    }

    /// An event read from the session's partition at `offset`; `now` is the wall clock. Answers
    /// the cause the event is, if the fold accepted it and it is one; a cause is pending (it
    /// holds the committed progress before its event, [`Self::pending_floor`]) until
    /// [`Self::woke`], [`Self::settled`] or a later epoch's lease answers it. Events of sessions
    /// that do not matter are dropped; one that makes its session matter (a cause, a timed
    /// pause) starts watching it, and is folded once its state is loaded.
    pub fn on_event(
        &mut self,
        partition: i32,
        offset: i64,
        e: &EventEnvelope,
        now: Micros,
    ) -> Vec<Cause> {
        self.read_at(partition, offset, now);
        let session = e.session_id;
        let Some(watch) = self.sessions.get_mut(&session).filter(|w| !w.ended) else {
            if !self.sessions.contains_key(&session) && matters(&e.event) {
                let mut loading = Loading::from(Some(offset));
                loading.buffer(offset, e);
                self.watch(partition, session, Fold::Loading(loading), now);
            }
            return Vec::new();
        };
        let found = match &mut watch.fold {
            Fold::Loading(loading) => {
                let before = loading.before;
                loading.buffer(offset, e);
                if loading.before != before {
                    // Overflowed: loaded again from after the dropped events.
                    loading.requested = false;
                    self.loads.insert((now, session));
                }
                return Vec::new();
            }
            Fold::Folded { .. } => fold(watch, session, offset, e, now, &mut self.due),
        };
        self.settle_fold(session, found.into_iter().collect(), now)
    }

    /// Notes that `partition` was read at `offset`. The first record read of a partition tells
    /// where this instance reads it from: the states of its sessions watched meanwhile are
    /// loaded from there.
    fn read_at(&mut self, partition: i32, offset: i64, now: Micros) {
        if self.positions.insert(partition, offset + 1).is_some() {
            return;
        }
        for (session, watch) in &mut self.sessions {
            if watch.partition != partition {
                continue;
            }
            if let Fold::Loading(loading) = &mut watch.fold
                && loading.before.is_none()
            {
                loading.before = Some(offset);
                loading.floor = Some(offset);
                self.loads.insert((now, *session));
            }
        }
    }

    /// The states to load from the projection now: each is then [`Self::loaded`], or asked
    /// again later with [`Self::load_later`].
    pub fn loads(&mut self, now: Micros) -> Vec<Load> {
        let mut wanted = Vec::new();
        while let Some(&(at, session)) = self.loads.first() {
            if at > now {
                break;
            }
            self.loads.pop_first();
            if let Some(watch) = self.sessions.get_mut(&session).filter(|w| !w.ended)
                && let Fold::Loading(loading) = &mut watch.fold
                && !loading.requested
                && let Some(before) = loading.before
            {
                loading.requested = true;
                wanted.push(Load {
                    session,
                    partition: watch.partition,
                    before,
                });
            }
        }
        wanted
    }

    /// `load` could not be answered yet (the projector has not reached `before`, or the store
    /// failed): asked again at `at`.
    pub fn load_later(&mut self, load: &Load, at: Micros) {
        if let Some(watch) = self.sessions.get_mut(&load.session)
            && let Fold::Loading(loading) = &mut watch.fold
        {
            loading.requested = false;
            self.loads.insert((at, load.session));
        }
    }

    /// `load` answered: the session's projected state and the offset of the last record folded
    /// into it, or `None` when the projection holds no row of it (nothing of it below
    /// `before`: it starts later, or its rows expired). Its events read meanwhile are folded
    /// onto it; the causes among them are answered, as [`Self::on_event`] does. An event the
    /// projection already folded is a cause only if the fold accepted it (it is among the
    /// state's recently accepted events).
    pub fn loaded(
        &mut self,
        load: &Load,
        projected: Option<(SessionState, i64)>,
        now: Micros,
    ) -> Vec<Cause> {
        let session = load.session;
        let Some(watch) = self.sessions.get_mut(&session).filter(|w| !w.ended) else {
            return Vec::new();
        };
        let Fold::Loading(loading) = &mut watch.fold else {
            return Vec::new();
        };
        if loading.before != Some(load.before) {
            // Events were dropped since it was asked for: it is asked for from later on.
            loading.requested = false;
            self.loads.insert((now, session));
            return Vec::new();
        }
        let loading = std::mem::take(loading);
        let (state, through) = match projected {
            Some((state, applied)) => (state, applied),
            None => (SessionState::empty(session), load.before - 1),
        };
        watch.fold = Fold::Folded {
            state: Box::new(state),
            through,
        };
        let mut causes = Vec::new();
        sync_pause(
            watch,
            session,
            loading.floor.unwrap_or(load.before),
            &mut self.due,
        );
        if let (Some(missed), Some(state)) = (loading.missed, watch.state()) {
            causes.push(Cause {
                session,
                partition: watch.partition,
                reason: missed.reason,
                epoch: state.epoch,
                cause_offset: Some(missed.offset),
                caused_at: missed.caused_at,
                repeat: false,
                unprojected_end: None,
            });
        }
        for (offset, e) in &loading.events {
            if *offset > through {
                causes.extend(fold(watch, session, *offset, e, now, &mut self.due));
            } else if watch
                .state()
                .is_some_and(|s| s.recent.contains(&(e.seq, e.event_id)))
            {
                causes.extend(react(watch, session, *offset, e, now));
            }
        }
        self.settle_fold(session, causes, now)
    }

    /// After a fold: an ended session is let go; the causes found become the pending one.
    fn settle_fold(&mut self, session: SessionId, causes: Vec<Cause>, now: Micros) -> Vec<Cause> {
        let Some(watch) = self.sessions.get_mut(&session) else {
            return Vec::new();
        };
        if watch
            .state()
            .is_some_and(|s| s.terminal.is_some() || s.erased)
        {
            self.ended(session, now);
            return Vec::new();
        }
        let pending: Vec<Cause> = causes
            .into_iter()
            .filter_map(|cause| pend(watch, cause))
            .collect();
        self.forget_if_idle(session);
        pending
    }

    /// Every cause due at `now`: leases that lapsed unrenewed, pauses that ran out, and
    /// sessions woken at least `rewake_after` ago that no harness took. Each is pending from
    /// now until its outcome ([`Self::woke`], [`Self::retry`], [`Self::settled`]) or a later
    /// epoch's lease: the service checks several at once while it reads on, and a pending
    /// cause holds the committed progress ([`Self::pending_floor`]) and is not handed out
    /// twice.
    pub fn due(&mut self, now: Micros) -> Vec<Cause> {
        let mut causes = Vec::new();
        while let Some(&(at, session, what)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            let Some(watch) = self.sessions.get_mut(&session) else {
                continue;
            };
            let found = match what {
                Due::LeaseExpiry => {
                    let Some(lease) = watch.lease.as_ref().filter(|l| l.expires_at == at) else {
                        continue;
                    };
                    if self.catching.contains(&watch.partition) {
                        continue;
                    }
                    if watch.ended {
                        // Its writer did not release it: its record goes now.
                        self.cleanups.push(watch.cleanup(session));
                        self.sessions.remove(&session);
                        continue;
                    }
                    if watch.woken.is_some() {
                        continue;
                    }
                    if watch
                        .state()
                        .is_some_and(|s| needs_no_harness(s, now).is_some())
                    {
                        // Lapsed while the session waits: what it waits for wakes it.
                        watch.lease = None;
                        self.forget_if_idle(session);
                        continue;
                    }
                    Cause {
                        session,
                        partition: watch.partition,
                        reason: WakeReason::LeaseExpired,
                        epoch: lease.epoch,
                        cause_offset: None,
                        caused_at: lease.expires_at,
                        repeat: false,
                        unprojected_end: None,
                    }
                }
                Due::PauseEnd => {
                    let Some(pause) = watch.pause.take_if(|p| p.until == at) else {
                        continue;
                    };
                    watch.pause_ended = Some(pause.until);
                    // Whatever came first (steering, a decision, an operator's result: later
                    // claims than the pause's), the pause ends now, once, at the session's
                    // current epoch. A session that still waits for someone is woken by what
                    // it waits for, and whoever takes it then lifts the pause.
                    let Some(state) = watch.state().filter(|s| needs_no_harness(s, now).is_none())
                    else {
                        self.forget_if_idle(session);
                        continue;
                    };
                    Cause {
                        session,
                        partition: watch.partition,
                        reason: WakeReason::PauseElapsed,
                        epoch: state.epoch,
                        cause_offset: Some(pause.offset),
                        caused_at: pause.until,
                        repeat: false,
                        unprojected_end: None,
                    }
                }
                Due::Rewake => {
                    let Some(woken) = watch.woken.as_mut().filter(|w| w.at == at) else {
                        continue;
                    };
                    let cause = Cause {
                        repeat: !woken.retry,
                        ..woken.cause.clone()
                    };
                    // Pending again, being checked.
                    woken.at = Micros::MAX;
                    woken.retry = true;
                    causes.push(cause);
                    continue;
                }
            };
            causes.extend(pend(watch, found));
        }
        causes
    }

    /// `cause` was written as a wake at `now`: unless a harness takes the session (a new
    /// lease), it is due again at `rewake_at`.
    pub fn woke(&mut self, cause: &Cause, rewake_at: Micros) {
        self.again_at(cause, rewake_at, false);
    }

    /// `cause` could not be judged yet (the projection has not reached it): due again at
    /// `at`, as it was.
    pub fn retry(&mut self, cause: &Cause, at: Micros) {
        self.again_at(cause, at, true);
    }

    /// The projection holds no row of `cause`'s session, while the end of its events
    /// partition was `end`: looked at again at `at`, and if the projector then passed the
    /// first such end and there is still no row, the session's rows are gone (expired with an
    /// ended session's TTL, or it never started) and it is [`Self::ended`].
    pub fn unprojected(&mut self, cause: &Cause, end: i64, at: Micros) {
        let mut cause = cause.clone();
        cause.unprojected_end.get_or_insert(end);
        self.again_at(&cause, at, true);
    }

    fn again_at(&mut self, cause: &Cause, at: Micros, retry: bool) {
        if let Some(woken) = self.pending_mut(cause) {
            *woken = Woken {
                cause: cause.clone(),
                at,
                retry,
            };
            self.due.insert((at, cause.session, Due::Rewake));
        }
    }

    /// `cause` needs no harness (the session is paused or waits for a person): it is not
    /// woken again for it. A lapsed lease it was about is let go.
    pub fn settled(&mut self, cause: &Cause) {
        let Some(watch) = self.sessions.get_mut(&cause.session) else {
            return;
        };
        if !watch.woken.as_ref().is_some_and(|w| w.cause.same(cause)) {
            return;
        }
        watch.woken = None;
        if cause.reason == WakeReason::LeaseExpired
            && watch
                .lease
                .as_ref()
                .is_some_and(|l| l.expires_at <= cause.caused_at)
        {
            watch.lease = None;
        }
        self.forget_if_idle(cause.session);
    }

    /// `cause`'s pending entry, unless something answered it while it was checked (a later
    /// epoch's lease, the session's end) or a newer cause of the session took its place: an
    /// outcome applies only to the cause it is about.
    fn pending_mut(&mut self, cause: &Cause) -> Option<&mut Woken> {
        self.sessions
            .get_mut(&cause.session)?
            .woken
            .as_mut()
            .filter(|w| w.cause.same(cause))
    }

    /// `session` ended (its end was accepted, or its rows are gone): nothing about it is due
    /// again. It is forgotten once its lease, if any, lapsed or was released, and a lease
    /// record its writer left behind is removed ([`Self::take_cleanups`]).
    pub fn ended(&mut self, session: SessionId, now: Micros) {
        let Some(watch) = self.sessions.get_mut(&session) else {
            return;
        };
        watch.ended = true;
        watch.pause = None;
        watch.woken = None;
        match &watch.lease {
            // Its writer may still release it (a close does, after the end).
            Some(lease) if lease.is_live(now) => {}
            Some(_) => {
                self.cleanups.push(watch.cleanup(session));
                self.sessions.remove(&session);
            }
            None => {
                self.sessions.remove(&session);
            }
        }
    }

    /// The lease records to remove (a tombstone each): ended sessions' leases their writers
    /// left behind.
    pub fn take_cleanups(&mut self) -> Vec<Cleanup> {
        std::mem::take(&mut self.cleanups)
    }

    fn forget_if_idle(&mut self, session: SessionId) {
        if self.sessions.get(&session).is_some_and(Watch::idle) {
            self.sessions.remove(&session);
        }
    }

    /// Partition `partition` of the lease topic is being read from its start: an older
    /// renewal read before its successor must not look lapsed, so no lease of it is due until
    /// [`Self::caught_up`].
    pub fn catching_up(&mut self, partition: i32) {
        self.catching.insert(partition);
    }

    /// Partition `partition` of the lease topic was read to where it stood at assignment: its
    /// leases are due at their expiries again.
    pub fn caught_up(&mut self, partition: i32) {
        if !self.catching.remove(&partition) {
            return;
        }
        for (session, watch) in &self.sessions {
            if let Some(lease) = watch
                .lease
                .as_ref()
                .filter(|_| watch.partition == partition)
            {
                self.due
                    .insert((lease.expires_at, *session, Due::LeaseExpiry));
            }
        }
    }

    /// Whether `partition` of the lease topic is still being read from its start.
    pub fn is_catching_up(&self, partition: i32) -> bool {
        self.catching.contains(&partition)
    }

    /// How many sessions are watched.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is watched.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Forgets the sessions of partitions this instance no longer owns.
    pub fn forget(&mut self, partitions: &HashSet<i32>) {
        self.sessions
            .retain(|_, w| !partitions.contains(&w.partition));
        self.positions.retain(|p, _| !partitions.contains(p));
        let sessions = &self.sessions;
        self.due.retain(|(_, s, _)| sessions.contains_key(s));
        self.loads.retain(|(_, s)| sessions.contains_key(s));
    }

    /// The lowest offset in `partition` of a pause still waiting for its `until`, of a cause
    /// no harness answered yet, or of events kept while a state is loaded: committed progress
    /// must not pass it, so a restarted instance (or the partition's next owner) reads it
    /// again.
    pub fn pending_floor(&self, partition: i32) -> Option<i64> {
        self.sessions
            .values()
            .filter(|w| w.partition == partition && !w.ended)
            .flat_map(|w| {
                let pause = w.pause.as_ref().map(|p| p.offset);
                let cause = w.woken.as_ref().and_then(|w| w.cause.cause_offset);
                let loading = match &w.fold {
                    Fold::Loading(loading) => loading.floor,
                    Fold::Folded { .. } => None,
                };
                pause.into_iter().chain(cause).chain(loading)
            })
            .min()
    }

    /// Sessions woken and not taken since, by reason, with the oldest cause's time.
    pub fn orphaned(&self) -> HashMap<WakeReason, (u64, Micros)> {
        let mut by_reason: HashMap<WakeReason, (u64, Micros)> = HashMap::new();
        for woken in self.sessions.values().filter_map(|w| w.woken.as_ref()) {
            let entry = by_reason
                .entry(woken.cause.reason)
                .or_insert((0, Micros::MAX));
            entry.0 += 1;
            entry.1 = entry.1.min(woken.cause.caused_at);
        }
        by_reason
    }
}

/// Folds `e`, read at `offset`, into `watch`'s state: the cause it is if the fold accepted it.
fn fold(
    watch: &mut Watch,
    session: SessionId,
    offset: i64,
    e: &EventEnvelope,
    now: Micros,
    due: &mut BTreeSet<(Micros, SessionId, Due)>,
) -> Option<Cause> {
    let Fold::Folded { state, through } = &mut watch.fold else {
        return None;
    };
    if offset <= *through {
        // Read again (a rebalance started the partition over), or already in the state loaded.
        return None;
    }
    *through = offset;
    if !state.apply(e).is_accepted() {
        return None;
    }
    sync_pause(watch, session, offset, due);
    react(watch, session, offset, e, now)
}

/// The cause `e`, an event the fold accepted, is for `watch`'s session as its state now stands.
fn react(
    watch: &Watch,
    session: SessionId,
    offset: i64,
    e: &EventEnvelope,
    now: Micros,
) -> Option<Cause> {
    let state = watch.state()?;
    let reason = match cause_kind(&e.event)? {
        // A live writer at the session's epoch reads steering itself.
        WakeReason::Steering
            if watch
                .lease
                .as_ref()
                .is_some_and(|l| l.is_live(now) && l.epoch >= state.epoch) =>
        {
            return None;
        }
        // An operator lifted the pause; nobody runs the session it fenced. (A worker lifting a
        // lapsed pause runs the session itself.)
        WakeReason::Unpaused if !claimed_by_operator(state) => return None,
        reason => reason,
    };
    Some(Cause {
        session,
        partition: watch.partition,
        reason,
        epoch: state.epoch,
        cause_offset: Some(offset),
        caused_at: e.occurred_at,
        repeat: false,
        unprojected_end: None,
    })
}

/// Keeps `watch`'s pause timer in step with its state: a timed pause is due at its `until`
/// (once), and a lifted one is not. `offset` is where reading again finds the pause.
fn sync_pause(
    watch: &mut Watch,
    session: SessionId,
    offset: i64,
    due: &mut BTreeSet<(Micros, SessionId, Due)>,
) {
    let Some(state) = watch.state() else {
        return;
    };
    match (state.paused, state.paused_until) {
        (true, Some(until)) => {
            let known = watch.pause_ended == Some(until)
                || watch.pause.as_ref().is_some_and(|p| p.until == until);
            if !known {
                watch.pause = Some(Pause { until, offset });
                due.insert((until, session, Due::PauseEnd));
            }
        }
        (paused, _) => {
            watch.pause = None;
            if !paused {
                watch.pause_ended = None;
            }
        }
    }
}

/// Makes `cause` the session's pending one, or merges it into the one pending: steering at an
/// epoch the pending wake already names adds nothing (that wake, written or being checked,
/// stands for it: a harness writing thousands of steering messages without a lease makes one
/// wake). Any other cause, or one at a later epoch (the pending wake would be refused as
/// "already taken"), takes its place. Answers the cause to check, if any.
fn pend(watch: &mut Watch, cause: Cause) -> Option<Cause> {
    if cause.reason == WakeReason::Steering
        && watch
            .woken
            .as_ref()
            .is_some_and(|w| w.cause.epoch >= cause.epoch)
    {
        return None;
    }
    watch.woken = Some(Woken {
        cause: cause.clone(),
        at: Micros::MAX,
        retry: true,
    });
    Some(cause)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::{Attestation, TerminalOutcome};
    use std::time::Duration;

    const SECOND: Micros = 1_000_000;

    fn lease(session: SessionId, epoch: Epoch, renewed_at: Micros) -> Vec<u8> {
        Lease::renewed(session, "h", epoch, renewed_at, Duration::from_secs(15))
            .expect("fits")
            .encode()
    }

    /// A session's records as its partition holds them, one per offset from 0: started by
    /// agent `h` at epoch 1. Every event is signed (the fold holds no keys; it only refuses
    /// an operator's kind without a signature).
    struct History {
        session: SessionId,
        epoch: Epoch,
        seq: u64,
        records: Vec<EventEnvelope>,
    }

    impl History {
        fn new(session: SessionId) -> Self {
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

        fn envelope(&self, epoch: Epoch, seq: u64, event: SessionEvent) -> EventEnvelope {
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
        fn add(&mut self, event: SessionEvent) -> i64 {
            self.seq += 1;
            let e = self.envelope(self.epoch, self.seq, event);
            self.push(e)
        }

        /// Appends a record the fold rejects or accepts as it will: `event` at `epoch` with
        /// the next seq, not counted as accepted.
        fn add_at(&mut self, epoch: Epoch, event: SessionEvent) -> i64 {
            let e = self.envelope(epoch, self.seq + 1, event);
            self.push(e)
        }

        /// `writer` claims the next epoch (a claim carries the seq its writer writes next).
        fn claim(&mut self, writer: &str) -> i64 {
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

        fn push(&mut self, e: EventEnvelope) -> i64 {
            self.records.push(e);
            self.records.len() as i64 - 1
        }

        /// The state the projection holds through `offset` (`None`: no row).
        fn projected(&self, through: i64) -> Option<(SessionState, i64)> {
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
        fn feed(&self, w: &mut Watches, from: i64, now: Micros) -> Vec<Cause> {
            let mut causes = Vec::new();
            for offset in from..self.records.len() as i64 {
                causes.extend(w.on_event(0, offset, &self.records[offset as usize], now));
            }
            causes
        }

        /// Reads every record into `w` at `now` and answers the loads they asked for.
        fn read(&self, w: &mut Watches, now: Micros) -> Vec<Cause> {
            let mut causes = self.feed(w, 0, now);
            causes.extend(self.answer_loads(w, now));
            causes
        }

        /// Answers every load asked for at `now` with the state the projection holds below
        /// its start.
        fn answer_loads(&self, w: &mut Watches, now: Micros) -> Vec<Cause> {
            let mut causes = Vec::new();
            for load in w.loads(now) {
                causes.extend(w.loaded(&load, self.projected(load.before - 1), now));
            }
            causes
        }
    }

    /// A session an operator paused until `until`, read by a fresh `Watches` at `now`, and the
    /// pause's offset.
    fn paused_until(until: Micros, now: Micros) -> (Watches, History, i64) {
        let (mut w, mut h) = (Watches::default(), History::new(SessionId::new()));
        h.claim("operator:alice");
        let paused = h.add(pause(Some(until)));
        h.read(&mut w, now);
        (w, h, paused)
    }

    fn decision() -> SessionEvent {
        SessionEvent::ApprovalDecided {
            approval_id: "a".into(),
            approved: true,
            decided_by: "operator:alice".into(),
            reason: None,
            request_seq: Some(2),
            action_digest: None,
        }
    }

    fn request() -> SessionEvent {
        SessionEvent::ApprovalRequested {
            approval_id: "a".into(),
            action: "deploy".into(),
            action_digest: None,
        }
    }

    fn steering(author: &str) -> SessionEvent {
        SessionEvent::SteeringMessage {
            author: author.into(),
            content: "go".into(),
        }
    }

    fn pause(until: Option<Micros>) -> SessionEvent {
        SessionEvent::SessionPaused {
            reason: None,
            until,
        }
    }

    fn end() -> SessionEvent {
        SessionEvent::SessionEnded {
            outcome: TerminalOutcome::Completed,
            reason: None,
        }
    }

    #[test]
    fn a_lease_not_renewed_is_due_at_its_expiry_and_a_renewed_one_is_not() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        assert!(w.due(15 * SECOND - 1).is_empty(), "not before the expiry");
        w.on_lease(0, s, Some(&lease(s, 1, 5 * SECOND)), 0);
        assert!(w.due(15 * SECOND).is_empty(), "the renewal moved it");
        let due = w.due(20 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].reason, WakeReason::LeaseExpired);
        assert_eq!((due[0].epoch, due[0].caused_at), (1, 20 * SECOND));
        assert!(w.due(60 * SECOND).is_empty(), "said once");
    }

    #[test]
    fn a_released_lease_is_never_due_and_its_session_forgotten() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        w.on_lease(0, s, None, 0);
        assert!(w.due(60 * SECOND).is_empty());
        assert!(w.is_empty());
    }

    #[test]
    fn a_wake_no_harness_answers_is_repeated_and_a_new_lease_answers_it() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        let cause = w.due(15 * SECOND).pop().expect("due");
        w.woke(&cause, 75 * SECOND);
        let again = w.due(75 * SECOND);
        assert_eq!(again.len(), 1);
        assert!(again[0].repeat);
        w.woke(&again[0], 135 * SECOND);
        // A worker took it: its lease answers the wake.
        w.on_lease(0, s, Some(&lease(s, 2, 80 * SECOND)), 80 * SECOND);
        assert!(w.due(94 * SECOND).is_empty());
        let lapsed = w.due(135 * SECOND);
        assert_eq!(lapsed.len(), 1, "only the new lease's own expiry");
        assert_eq!((lapsed[0].epoch, lapsed[0].repeat), (2, false));
    }

    #[test]
    fn a_decision_an_operators_result_and_steering_without_a_live_writer_are_causes() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(request());
        h.claim("operator:alice");
        let decided = h.add(decision());
        // The decision makes the session matter: its state is loaded, then the decision folded.
        assert!(
            h.feed(&mut w, 0, 0).is_empty(),
            "folded once the state is loaded"
        );
        let causes = h.answer_loads(&mut w, 0);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, WakeReason::ApprovalDecided);
        assert_eq!(
            (causes[0].epoch, causes[0].cause_offset),
            (2, Some(decided))
        );
        w.settled(&causes[0]);

        // The harness's own steering while it holds a live lease: it reads it itself.
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        h.read(&mut w, 0);
        let at = h.add(steering("h"));
        assert!(h.feed(&mut w, at, SECOND).is_empty(), "its writer reads it");
        let at = h.add(steering("h"));
        let causes = h.feed(&mut w, at, 16 * SECOND);
        assert_eq!(causes.len(), 1, "the lease lapsed: {causes:?}");
        assert_eq!(causes[0].reason, WakeReason::Steering);
    }

    #[test]
    fn a_pause_with_until_is_due_then_once_and_a_resume_or_end_cancels_it() {
        let (mut w, _, paused) = paused_until(100 * SECOND, 0);
        assert_eq!(
            w.pending_floor(0),
            Some(paused),
            "progress stays before the pause"
        );
        assert!(w.due(99 * SECOND).is_empty());
        let due = w.due(100 * SECOND);
        assert_eq!(due[0].reason, WakeReason::PauseElapsed);
        assert_eq!((due[0].epoch, due[0].caused_at), (2, 100 * SECOND));
        assert_eq!(
            w.pending_floor(0),
            Some(paused),
            "until its check's outcome"
        );
        w.settled(&due[0]);
        assert_eq!(w.pending_floor(0), None);
        assert!(w.is_empty(), "nothing left to watch");

        for lift in [SessionEvent::SessionResumed {}, end()] {
            let (mut w, mut h, _) = paused_until(200 * SECOND, 0);
            let at = h.add(lift.clone());
            let causes = h.feed(&mut w, at, 0);
            assert!(
                w.due(300 * SECOND)
                    .iter()
                    .all(|c| c.reason != WakeReason::PauseElapsed),
                "lifted before its time: {lift:?}"
            );
            // The operator's unpause is a cause of its own; an end leaves nothing.
            let floor = causes.first().and_then(|c| c.cause_offset);
            assert_eq!(w.pending_floor(0), floor, "{lift:?}");
            assert_eq!(floor.is_some(), lift == SessionEvent::SessionResumed {});
        }
    }

    #[test]
    fn a_timed_pause_ends_once_at_the_sessions_epoch_whatever_came_first() {
        let (mut w, mut h, _) = paused_until(100 * SECOND, 0);
        // An operator steers while it lasts: a later signed claim than the pause's.
        let from = h.claim("operator:bob");
        h.add(steering("operator:bob"));
        let steered = h.feed(&mut w, from, SECOND);
        assert_eq!(steered.len(), 1);
        w.settled(&steered[0]); // the session is paused: no harness yet
        let due = w.due(100 * SECOND);
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(due[0].reason, WakeReason::PauseElapsed);
        assert_eq!(due[0].epoch, 3, "the session's epoch now, not the pause's");
        w.woke(&due[0], 160 * SECOND);
        // Whatever comes later, the pause does not end twice.
        let from = h.claim("operator:carol");
        h.add(steering("operator:carol"));
        let steered = h.feed(&mut w, from, 101 * SECOND);
        assert_eq!(steered.len(), 1, "a later epoch's steering is checked");
        w.settled(&steered[0]);
        assert!(
            w.due(Micros::MAX - 1).is_empty(),
            "{:?}",
            w.due(Micros::MAX - 1)
        );
    }

    #[test]
    fn a_timed_pause_that_ends_while_an_approval_waits_is_woken_by_the_decision() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(request());
        h.claim("operator:alice");
        h.add(pause(Some(100 * SECOND)));
        h.read(&mut w, 0);
        assert!(
            w.due(100 * SECOND).is_empty(),
            "the session waits for a decision"
        );
        assert!(w.is_empty(), "and is not watched meanwhile");
        let from = h.claim("operator:bob");
        h.add(decision());
        h.feed(&mut w, from, 101 * SECOND);
        let causes = h.answer_loads(&mut w, 101 * SECOND);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(
            (causes[0].reason, causes[0].epoch),
            (WakeReason::ApprovalDecided, 3)
        );
    }

    #[test]
    fn a_rejected_end_unpause_or_claim_changes_nothing() {
        let (mut w, mut h, _) = paused_until(100 * SECOND, 0);
        // A fenced writer's end and unpause, at the epoch before the pause's claim, as a raw
        // Kafka producer can write them; a claim that lost its race (a stale epoch).
        let from = h.add_at(1, end());
        h.add_at(1, SessionEvent::SessionResumed {});
        let lost = h.envelope(
            2,
            h.seq + 1,
            SessionEvent::WriterClaimed {
                writer: "worker-1".into(),
                writer_token_sha256: None,
            },
        );
        h.push(lost);
        assert!(h.feed(&mut w, from, SECOND).is_empty());
        let due = w.due(100 * SECOND);
        assert_eq!(due.len(), 1, "the pause still ends: {due:?}");
        assert_eq!((due[0].reason, due[0].epoch), (WakeReason::PauseElapsed, 2));
        w.woke(&due[0], 160 * SECOND);
        // The operator's claim stands: their unpause is still a cause.
        let at = h.add(SessionEvent::SessionResumed {});
        let causes = h.feed(&mut w, at, 101 * SECOND);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, WakeReason::Unpaused);
    }

    #[test]
    fn an_ended_session_is_forgotten_and_a_lease_its_writer_left_is_cleaned_once_lapsed() {
        let (mut w, a, b) = (Watches::default(), SessionId::new(), SessionId::new());
        w.on_lease(0, a, Some(&lease(a, 1, 0)), 0);
        w.on_lease(0, b, Some(&lease(b, 1, 0)), 0);
        let mut h = History::new(b);
        h.read(&mut w, 0);
        w.on_lease(0, a, None, 0);
        assert_eq!(w.len(), 1, "a released lease is forgotten");
        let at = h.add(end());
        h.feed(&mut w, at, SECOND);
        assert!(
            w.take_cleanups().is_empty(),
            "its writer may still release it"
        );
        assert!(w.due(15 * SECOND).is_empty(), "nothing to wake");
        let cleanup = Cleanup {
            session: b,
            partition: 0,
            epoch: 1,
        };
        assert_eq!(w.take_cleanups(), vec![cleanup], "left behind: removed");
        assert!(w.is_empty());

        // Ended while its lease had lapsed: cleaned at once.
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        let cause = w.due(15 * SECOND).pop().expect("lapsed");
        w.ended(cause.session, 16 * SECOND);
        let cleanup = Cleanup {
            session: s,
            partition: 0,
            epoch: 1,
        };
        assert_eq!(w.take_cleanups(), vec![cleanup]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_lapsed_lease_of_a_session_that_waits_wakes_nobody_and_is_let_go() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(request());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        h.read(&mut w, 0);
        assert!(w.due(15 * SECOND).is_empty(), "it waits for a decision");
        assert!(w.is_empty(), "memory stays bounded by live work");
    }

    #[test]
    fn a_session_its_projection_lost_is_ended_after_the_projector_passed_the_first_end() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        let cause = w.due(15 * SECOND).pop().expect("lapsed");
        w.unprojected(&cause, 40, 75 * SECOND);
        let again = w.due(75 * SECOND).pop().expect("looked at again");
        assert_eq!(again.unprojected_end, Some(40));
        w.unprojected(&again, 90, 135 * SECOND);
        let third = w.due(135 * SECOND).pop().expect("again");
        assert_eq!(third.unprojected_end, Some(40), "the first end is kept");
    }

    #[test]
    fn a_fenced_writers_renewal_does_not_answer_a_wake_a_later_epochs_lease_does() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(request());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        h.read(&mut w, 0);
        let from = h.claim("operator:alice");
        h.add(decision());
        let cause = h.feed(&mut w, from, SECOND).pop().expect("a cause");
        w.woke(&cause, 70 * SECOND);
        // The harness fenced by the approver's claim renews at its old epoch meanwhile.
        w.on_lease(0, s, Some(&lease(s, 1, 5 * SECOND)), 5 * SECOND);
        let again = w.due(70 * SECOND);
        assert!(
            again
                .iter()
                .any(|c| c.reason == WakeReason::ApprovalDecided && c.repeat),
            "{again:?}"
        );
        w.woke(&again[0], 130 * SECOND);
        // A worker's lease at the new epoch answers it.
        w.on_lease(0, s, Some(&lease(s, 3, 80 * SECOND)), 80 * SECOND);
        assert!(
            w.due(94 * SECOND)
                .iter()
                .all(|c| c.reason != WakeReason::ApprovalDecided)
        );
        assert_eq!(w.pending_floor(0), None);
    }

    #[test]
    fn a_wake_not_yet_answered_keeps_the_committed_progress_before_its_event() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.claim("operator:alice");
        let steered = h.add(steering("operator:alice"));
        h.feed(&mut w, 0, SECOND);
        assert_eq!(w.pending_floor(0), Some(steered), "its state is loading");
        let cause = h.answer_loads(&mut w, SECOND).pop().expect("a cause");
        assert_eq!(w.pending_floor(0), Some(steered), "not judged yet");
        w.retry(&cause, 2 * SECOND);
        assert_eq!(
            w.pending_floor(0),
            Some(steered),
            "waiting for the projection"
        );
        w.woke(&cause, 60 * SECOND);
        assert_eq!(w.pending_floor(0), Some(steered), "written, not answered");
        w.on_lease(0, s, Some(&lease(s, 3, 3 * SECOND)), 3 * SECOND);
        assert_eq!(w.pending_floor(0), None, "answered");
    }

    #[test]
    fn an_operators_unpause_is_a_cause_a_workers_own_is_not() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.claim("operator:alice");
        h.add(pause(None));
        let from = h.add(SessionEvent::SessionResumed {});
        h.feed(&mut w, 0, 0);
        let causes = h.answer_loads(&mut w, 0);
        assert_eq!(causes.len(), 1, "an operator's unpause wakes: {causes:?}");
        assert_eq!(
            (causes[0].reason, causes[0].epoch),
            (WakeReason::Unpaused, 2)
        );
        assert_eq!(causes[0].cause_offset, Some(from));
        w.woke(&causes[0], 60 * SECOND);
        h.add(pause(Some(10 * SECOND)));
        let from = h.claim("worker-1");
        h.add(SessionEvent::SessionResumed {});
        assert!(
            h.feed(&mut w, from - 1, 0).is_empty(),
            "a worker lifting a lapsed pause runs the session itself"
        );
    }

    #[test]
    fn a_lease_is_not_due_while_its_partition_is_read_from_its_start() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        // An old renewal read first, its successor not read yet.
        w.on_lease(2, s, Some(&lease(s, 1, 0)), 0);
        w.catching_up(2);
        assert!(w.due(20 * SECOND).is_empty(), "held while catching up");
        w.on_lease(2, s, Some(&lease(s, 1, 18 * SECOND)), 0);
        w.caught_up(2);
        assert!(w.due(20 * SECOND).is_empty(), "the newest renewal stands");
        let due = w.due(33 * SECOND);
        assert_eq!(due.len(), 1, "{due:?}");
    }

    #[test]
    fn events_of_sessions_that_do_not_matter_make_no_entry() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(SessionEvent::PlanUpdated { plan: "p".into() });
        h.add(pause(None));
        h.feed(&mut w, 0, 0);
        assert!(w.is_empty());
        assert!(w.loads(0).is_empty());
    }

    #[test]
    fn forgetting_a_partition_drops_its_sessions_and_what_was_due() {
        let (mut w, a, b) = (Watches::default(), SessionId::new(), SessionId::new());
        w.on_lease(0, a, Some(&lease(a, 1, 0)), 0);
        w.on_lease(1, b, Some(&lease(b, 1, 0)), 0);
        w.forget(&HashSet::from([0]));
        let due = w.due(60 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].session, b);
    }

    #[test]
    fn a_cause_being_checked_holds_the_progress_and_is_handed_out_once() {
        let (mut w, _, paused) = paused_until(10 * SECOND, SECOND);
        let due = w.due(10 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(
            w.pending_floor(0),
            Some(paused),
            "a pause's end being checked is not passed by the committed progress"
        );
        assert!(w.due(Micros::MAX - 1).is_empty(), "handed out once");
        w.woke(&due[0], 70 * SECOND);
        assert_eq!(w.pending_floor(0), Some(paused), "written, not answered");
    }

    #[test]
    fn an_outcome_applies_only_to_the_cause_still_pending() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        h.read(&mut w, 0);
        let expired = w.due(15 * SECOND);
        assert_eq!(expired.len(), 1);
        // While the expiry is checked, an operator steers: a newer cause of the session.
        let from = h.claim("operator:alice");
        h.add(steering("operator:alice"));
        let steered = h.feed(&mut w, from, 16 * SECOND).pop().expect("a cause");
        // The expiry's check ends with "no harness needed": the steering stays pending.
        w.settled(&expired[0]);
        assert_eq!(w.pending_floor(0), steered.cause_offset, "not dropped");
        w.woke(&expired[0], 60 * SECOND);
        assert!(
            w.due(60 * SECOND).is_empty(),
            "the older cause's outcome made nothing due"
        );
        w.woke(&steered, 75 * SECOND);
        assert_eq!(
            w.due(75 * SECOND).len(),
            1,
            "the steering's own outcome did"
        );
    }

    #[test]
    fn a_wake_answered_while_it_was_checked_is_not_repeated() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        let expired = w.due(15 * SECOND);
        // A worker took the session before the check's outcome came back.
        w.on_lease(0, s, Some(&lease(s, 2, 15 * SECOND)), 15 * SECOND);
        w.woke(&expired[0], 60 * SECOND);
        // The worker renews; the wake's repeat time comes.
        w.on_lease(0, s, Some(&lease(s, 2, 50 * SECOND)), 50 * SECOND);
        assert!(w.due(60 * SECOND).is_empty(), "answered: nothing to repeat");
        assert!(w.orphaned().is_empty());
    }

    #[test]
    fn thousands_of_steering_messages_make_one_wake_and_a_later_epochs_cause_another() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.add(steering("h"));
        h.feed(&mut w, 0, SECOND);
        let mut checked = h.answer_loads(&mut w, SECOND);
        // The first is being checked while the rest arrive, then written and unanswered.
        let first = checked.clone();
        for i in 0..5_000 {
            let at = h.add(steering("h"));
            checked.extend(h.feed(&mut w, at, SECOND));
            if i == 100 {
                w.woke(&first[0], 60 * SECOND);
            }
        }
        assert_eq!(checked.len(), 1, "one wake stands for them all");
        // An operator's steering claims a later epoch: the written wake would be refused as
        // already taken, so it is checked.
        let from = h.claim("operator:alice");
        h.add(steering("operator:alice"));
        let later = h.feed(&mut w, from, 2 * SECOND);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].epoch, 2);
    }

    #[test]
    fn events_read_while_a_state_loads_are_folded_onto_it_and_one_it_holds_counts_if_accepted() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.claim("operator:alice");
        let decided = h.add_at(1, steering("h")); // a fenced writer's: rejected
        let steered = h.add(steering("operator:alice"));
        h.feed(&mut w, 0, SECOND);
        // The projection went past both before the load: the rejected one is no cause.
        let load = w.loads(SECOND).pop().expect("a load");
        assert_eq!(load.before, decided);
        let causes = w.loaded(&load, h.projected(steered), SECOND);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].cause_offset, Some(steered));
    }

    #[test]
    fn a_state_loads_once_this_instance_knows_where_it_reads_the_partition() {
        let (mut w, s, other) = (Watches::default(), SessionId::new(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)), 0);
        assert!(w.loads(0).is_empty(), "nothing read of the partition yet");
        let h = History::new(other);
        w.on_event(0, 41, &h.records[0], 0);
        let loads = w.loads(0);
        assert_eq!(loads.len(), 1);
        assert_eq!((loads[0].session, loads[0].before), (s, 41));
        assert_eq!(w.pending_floor(0), Some(41), "held until it is loaded");
        w.load_later(&loads[0], SECOND);
        assert!(w.loads(SECOND - 1).is_empty());
        assert_eq!(w.loads(SECOND).len(), 1, "asked again");
    }

    #[test]
    fn a_load_whose_events_overflow_starts_later_and_keeps_their_cause() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let mut h = History::new(s);
        h.claim("operator:alice");
        h.add(steering("operator:alice"));
        for _ in 0..MAX_BUFFERED {
            h.add(SessionEvent::PlanUpdated { plan: "p".into() });
        }
        h.feed(&mut w, 0, SECOND);
        let loads = w.loads(SECOND);
        assert_eq!(loads.len(), 1);
        assert!(loads[0].before > 2, "from after the dropped events");
        assert_eq!(w.pending_floor(0), Some(2), "a restart still reads them");
        let causes = h.answer_loads_for(&mut w, &loads[0], SECOND);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(
            (causes[0].reason, causes[0].cause_offset),
            (WakeReason::Steering, Some(2))
        );
    }

    impl History {
        fn answer_loads_for(&self, w: &mut Watches, load: &Load, now: Micros) -> Vec<Cause> {
            w.loaded(load, self.projected(load.before - 1), now)
        }
    }
}
