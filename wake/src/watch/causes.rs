//! What is a cause: which events need a harness, which states need none, and how a new cause
//! merges with the one a session has pending.

use super::{Cause, ENDED, Watch, Woken};
use sessionlog_log::WakeReason;
use sessionlog_schemas::{EventEnvelope, Micros, ResultSource, SessionEvent, SessionId};
use sessionlog_session::SessionState;

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
pub(super) fn cause_kind(event: &SessionEvent) -> Option<WakeReason> {
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
pub(super) fn matters(event: &SessionEvent) -> bool {
    cause_kind(event).is_some()
        || matches!(event, SessionEvent::SessionPaused { until: Some(_), .. })
}

/// The cause `e`, an event the fold accepted, is for `watch`'s session as its state now stands.
pub(super) fn react(
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

/// Makes `cause` the session's pending one, or merges it into the one pending: steering at an
/// epoch the pending wake already names adds nothing (that wake, written or being checked,
/// stands for it: a harness writing thousands of steering messages without a lease makes one
/// wake). Any other cause, or one at a later epoch (the pending wake would be refused as
/// "already taken"), takes its place. Answers the cause to check, if any.
pub(super) fn pend(watch: &mut Watch, cause: Cause) -> Option<Cause> {
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
    use crate::watch::history::*;

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
}
