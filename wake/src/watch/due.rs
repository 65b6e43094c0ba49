//! What comes due by the clock (a lease's expiry, a pause's end, a wake to repeat), and the
//! outcomes of the checks that decide whether a cause is written as a wake.

use super::causes::{needs_no_harness, pend};
use super::{Cause, Watches};
use sessionlog_log::WakeReason;
use sessionlog_schemas::Micros;

/// What is due when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    /// A lease's expiry (compared with the lease held when it comes).
    LeaseExpiry,
    /// A pause's `until`.
    PauseEnd,
    /// The time to wake again a session woken that no harness took.
    Rewake,
}

/// A session's pending cause, and when it is due again.
#[derive(Clone, Debug)]
pub(super) struct Woken {
    pub(super) cause: Cause,
    pub(super) at: Micros,
    /// Not written yet (being checked, or the projection was behind), rather than written and
    /// unanswered.
    pub(super) retry: bool,
}

impl Watches {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
}
