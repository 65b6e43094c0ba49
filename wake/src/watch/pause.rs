//! The pause timer: a timed pause is due once, at its `until`, and holds the committed
//! progress before it until then.

use super::{Due, Watch};
use sessionlog_schemas::{Micros, SessionId};
use std::collections::BTreeSet;

/// A timed pause waiting for its `until`.
#[derive(Clone, Debug)]
pub(super) struct Pause {
    pub(super) until: Micros,
    /// Where reading again finds the pause: the committed progress stays at or before it.
    pub(super) offset: i64,
}

/// Keeps `watch`'s pause timer in step with its state: a timed pause is due at its `until`
/// (once), and a lifted one is not. `offset` is where reading again finds the pause.
pub(super) fn sync_pause(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
}
