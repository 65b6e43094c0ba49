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

mod causes;
mod cleanup;
mod due;
mod fold;
#[cfg(test)]
mod history;
mod leases;
mod pause;

pub use causes::{claimed_by_operator, needs_no_harness, pause_lapsed};
pub use cleanup::Cleanup;

use due::{Due, Woken};
use fold::Fold;
use pause::Pause;
use sessionlog_log::{Lease, WakeReason};
use sessionlog_schemas::{Epoch, Micros, SessionId};
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
    /// Starts watching `session`, its state loaded from the projection as soon as it is known
    /// where this instance reads its partition from.
    fn watch(&mut self, partition: i32, session: SessionId, fold: Fold, now: Micros) {
        if matches!(&fold, Fold::Loading(l) if l.before.is_some()) {
            self.loads.insert((now, session));
        }
        self.sessions.insert(session, Watch::new(partition, fold));
    }

    fn forget_if_idle(&mut self, session: SessionId) {
        if self.sessions.get(&session).is_some_and(Watch::idle) {
            self.sessions.remove(&session);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
}
