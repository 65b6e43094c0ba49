//! The fold of watched sessions: a session's state is loaded from the projection when it
//! first matters, the events read meanwhile are kept and folded onto it, and from then on each
//! event is folded as it is read; only events the fold accepted are causes.

use super::causes::{cause_kind, matters, pend, react};
use super::pause::sync_pause;
use super::{Cause, Due, Load, MAX_BUFFERED, Watch, Watches};
use sessionlog_log::WakeReason;
use sessionlog_schemas::{EventEnvelope, Micros, SessionId};
use sessionlog_session::SessionState;
use std::collections::BTreeSet;

/// A cause among events dropped while the state was loaded ([`MAX_BUFFERED`]).
#[derive(Clone, Debug)]
pub(super) struct Missed {
    pub(super) reason: WakeReason,
    pub(super) offset: i64,
    pub(super) caused_at: Micros,
}

/// A session's state being loaded, and its events read meanwhile.
#[derive(Clone, Debug, Default)]
pub(super) struct Loading {
    /// The first offset folded here rather than taken from the projection; `None` until this
    /// instance read a record of the partition (it reads the partition from there).
    pub(super) before: Option<i64>,
    /// The lowest `before` this load had: committed progress stays there until it is done, so
    /// a restart reads the events again.
    pub(super) floor: Option<i64>,
    pub(super) events: Vec<(i64, EventEnvelope)>,
    pub(super) missed: Option<Missed>,
    /// A load is in flight.
    pub(super) requested: bool,
}

impl Loading {
    pub(super) fn from(before: Option<i64>) -> Self {
        Self {
            before,
            floor: before,
            ..Self::default()
        }
    }

    pub(super) fn buffer(&mut self, offset: i64, e: &EventEnvelope) {
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
pub(super) enum Fold {
    Loading(Loading),
    Folded {
        state: Box<SessionState>,
        /// The last offset folded into `state` (by the projection or here).
        through: i64,
    },
}

impl Watches {
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
    pub(super) fn read_at(&mut self, partition: i32, offset: i64, now: Micros) {
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
    pub(super) fn settle_fold(
        &mut self,
        session: SessionId,
        causes: Vec<Cause>,
        now: Micros,
    ) -> Vec<Cause> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
