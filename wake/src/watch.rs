//! What the wake component knows of the sessions of its partitions, and when each is due: a
//! pure fold of lease records and events plus a clock, with no I/O, so every rule is a unit
//! test.
//!
//! A cause found here is a candidate: the service checks the session's projected state (ended,
//! paused, waiting for a person, claimed since) before it writes a wake.

use sessionlog_log::lease::later;
use sessionlog_log::{Lease, WakeReason};
use sessionlog_schemas::{Epoch, EventEnvelope, Micros, ResultSource, SessionEvent, SessionId};
use std::collections::{BTreeSet, HashMap, HashSet};

/// A session that may need a harness, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The session.
    pub session: SessionId,
    /// Its partition.
    pub partition: i32,
    /// Why.
    pub reason: WakeReason,
    /// The session's epoch at the cause (a lease's, or the causing event's).
    pub epoch: Epoch,
    /// The causing event's offset, when an event caused it.
    pub cause_offset: Option<i64>,
    /// When the cause happened.
    pub caused_at: Micros,
    /// Whether this is a repeat of a wake no harness answered.
    pub repeat: bool,
}

impl Cause {
    /// The same cause, a repeat of it or not.
    fn same(&self, other: &Cause) -> bool {
        Cause {
            repeat: other.repeat,
            ..self.clone()
        } == *other
    }
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
    epoch: Epoch,
    offset: i64,
}

#[derive(Clone, Debug)]
struct Woken {
    cause: Cause,
    at: Micros,
    /// Not written yet (the projection was behind), rather than written and unanswered.
    retry: bool,
}

#[derive(Clone, Debug, Default)]
struct Watch {
    partition: i32,
    lease: Option<Lease>,
    pause: Option<Pause>,
    woken: Option<Woken>,
    /// The current epoch was claimed by an operator (its unpause wakes the session).
    operator_claim: bool,
}

/// The sessions of the partitions this instance owns.
#[derive(Debug, Default)]
pub struct Watches {
    sessions: HashMap<SessionId, Watch>,
    /// `(when, session, what)`: entries made stale by a renewal or a resume are skipped when
    /// they come due rather than searched for and removed.
    due: BTreeSet<(Micros, SessionId, Due)>,
    /// Lease partitions read from their start and not yet to where they stood.
    catching: HashSet<i32>,
}

impl Watches {
    /// A lease record of `session` (`None`: a tombstone, the lease released).
    pub fn on_lease(&mut self, partition: i32, session: SessionId, value: Option<&[u8]>) {
        if value.is_none() {
            // Released: nothing is due for it unless a pause waits; a session with neither is
            // forgotten (memory stays bounded by the sessions that have a lease or a timer).
            let idle = self
                .sessions
                .get(&session)
                .is_none_or(|w| w.pause.is_none() && w.woken.is_none());
            if idle {
                self.sessions.remove(&session);
                return;
            }
        }
        let watch = watch_of(&mut self.sessions, partition, session);
        let before = watch.lease.clone();
        watch.lease = match value {
            Some(_) => later(watch.lease.take(), value),
            None => None,
        };
        let renewed = match (&before, &watch.lease) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(b), Some(a)) => a != b,
        };
        if renewed && let Some(lease) = &watch.lease {
            // A harness at a later epoch than the cause's took the session: the wake is
            // answered. (A writer fenced by the cause's claim may renew its old epoch's lease
            // until it learns it was fenced; that answers nothing.)
            if watch
                .woken
                .as_ref()
                .is_some_and(|w| lease.epoch > w.cause.epoch)
            {
                watch.woken = None;
            }
            self.due
                .insert((lease.expires_at, session, Due::LeaseExpiry));
        }
    }

    /// An event read from the session's partition at `offset`; `now` is the wall clock. Answers
    /// the cause the event is, if any; a cause is pending (it holds the committed progress
    /// before its event, [`Self::pending_floor`]) until [`Self::woke`], [`Self::settled`] or a
    /// later epoch's lease answers it. Sessions with nothing pending get no entry.
    pub fn on_event(
        &mut self,
        partition: i32,
        offset: i64,
        e: &EventEnvelope,
        now: Micros,
    ) -> Option<Cause> {
        use SessionEvent as E;
        let session = e.session_id;
        let cause = |reason| Cause {
            session,
            partition,
            reason,
            epoch: e.writer_epoch,
            cause_offset: Some(offset),
            caused_at: e.occurred_at,
            repeat: false,
        };
        let found = match &e.event {
            E::ApprovalDecided { .. } => Some(cause(WakeReason::ApprovalDecided)),
            E::ToolCallResult {
                source: ResultSource::Operator,
                ..
            } => Some(cause(WakeReason::OperatorResult)),
            E::SteeringMessage { .. } => {
                // A live writer at the steering's epoch reads it itself.
                let held = self
                    .sessions
                    .get(&session)
                    .and_then(|w| w.lease.as_ref())
                    .is_some_and(|l| l.is_live(now) && l.epoch >= e.writer_epoch);
                (!held).then(|| cause(WakeReason::Steering))
            }
            E::WriterClaimed { writer, .. } => {
                // An operator's claim (a pause, an unpause, steering) fences the harness; a
                // worker's or a harness's does not leave the session without one.
                let by_operator = writer.starts_with("operator:");
                if by_operator {
                    watch_of(&mut self.sessions, partition, session).operator_claim = true;
                } else if let Some(watch) = self.sessions.get_mut(&session) {
                    watch.operator_claim = false;
                }
                None
            }
            E::SessionPaused { until, .. } => {
                if let Some(until) = *until {
                    watch_of(&mut self.sessions, partition, session).pause = Some(Pause {
                        until,
                        epoch: e.writer_epoch,
                        offset,
                    });
                    self.due.insert((until, session, Due::PauseEnd));
                } else if let Some(watch) = self.sessions.get_mut(&session) {
                    watch.pause = None;
                }
                None
            }
            E::SessionResumed {} => {
                let watch = self.sessions.get_mut(&session)?;
                watch.pause = None;
                // An operator lifted the pause; nobody runs the session it fenced.
                watch.operator_claim.then(|| cause(WakeReason::Unpaused))
            }
            // An ended session needs no harness again: forget it.
            E::SessionEnded { .. } | E::SessionErased { .. } => {
                self.sessions.remove(&session);
                None
            }
            _ => None,
        };
        if let Some(cause) = &found {
            watch_of(&mut self.sessions, partition, session).woken = Some(Woken {
                cause: cause.clone(),
                at: Micros::MAX,
                retry: true,
            });
        }
        found
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
            match what {
                Due::LeaseExpiry => {
                    if let Some(lease) = &watch.lease
                        && lease.expires_at == at
                        && watch.woken.is_none()
                        && !self.catching.contains(&watch.partition)
                    {
                        causes.push(Cause {
                            session,
                            partition: watch.partition,
                            reason: WakeReason::LeaseExpired,
                            epoch: lease.epoch,
                            cause_offset: None,
                            caused_at: lease.expires_at,
                            repeat: false,
                        });
                    }
                }
                Due::PauseEnd => {
                    if let Some(pause) = &watch.pause
                        && pause.until == at
                    {
                        causes.push(Cause {
                            session,
                            partition: watch.partition,
                            reason: WakeReason::PauseElapsed,
                            epoch: pause.epoch,
                            cause_offset: Some(pause.offset),
                            caused_at: pause.until,
                            repeat: false,
                        });
                        watch.pause = None;
                    }
                }
                Due::Rewake => {
                    if let Some(woken) = &watch.woken
                        && woken.at == at
                    {
                        causes.push(Cause {
                            repeat: !woken.retry,
                            ..woken.cause.clone()
                        });
                    }
                }
            }
        }
        for cause in &causes {
            if let Some(watch) = self.sessions.get_mut(&cause.session) {
                watch.woken = Some(Woken {
                    cause: cause.clone(),
                    at: Micros::MAX,
                    retry: true,
                });
            }
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
    /// woken again for it.
    pub fn settled(&mut self, cause: &Cause) {
        if let Some(watch) = self.sessions.get_mut(&cause.session)
            && watch.woken.as_ref().is_some_and(|w| w.cause.same(cause))
        {
            watch.woken = None;
        }
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

    /// `session` ended: nothing about it is due again.
    pub fn ended(&mut self, session: SessionId) {
        self.sessions.remove(&session);
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
        let sessions = &self.sessions;
        self.due.retain(|(_, s, _)| sessions.contains_key(s));
    }

    /// The lowest offset in `partition` of a pause still waiting for its `until` or of a cause
    /// no harness answered yet: committed progress must not pass it, so a restarted instance
    /// (or the partition's next owner) reads it again.
    pub fn pending_floor(&self, partition: i32) -> Option<i64> {
        self.sessions
            .values()
            .filter(|w| w.partition == partition)
            .flat_map(|w| {
                let pause = w.pause.as_ref().map(|p| p.offset);
                let cause = w.woken.as_ref().and_then(|w| w.cause.cause_offset);
                pause.into_iter().chain(cause)
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

/// `session`'s watch, made on first sight (a free function, so the borrow is of the map only).
fn watch_of(
    sessions: &mut HashMap<SessionId, Watch>,
    partition: i32,
    session: SessionId,
) -> &mut Watch {
    sessions.entry(session).or_insert_with(|| Watch {
        partition,
        ..Watch::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECOND: Micros = 1_000_000;

    fn lease(session: SessionId, epoch: Epoch, renewed_at: Micros) -> Vec<u8> {
        Lease::renewed(session, "h", epoch, renewed_at, Duration::from_secs(15))
            .expect("fits")
            .encode()
    }

    fn event(session: SessionId, epoch: Epoch, event: SessionEvent) -> EventEnvelope {
        EventEnvelope {
            event_id: uuid::Uuid::now_v7(),
            session_id: session,
            seq: 1,
            writer_epoch: epoch,
            occurred_at: 7,
            causation_id: None,
            idempotency_key: None,
            schema_version: sessionlog_schemas::CURRENT_SCHEMA_VERSION,
            event,
            attestation: None,
        }
    }

    #[test]
    fn a_lease_not_renewed_is_due_at_its_expiry_and_a_renewed_one_is_not() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        assert!(w.due(15 * SECOND - 1).is_empty(), "not before the expiry");
        w.on_lease(0, s, Some(&lease(s, 1, 5 * SECOND)));
        assert!(w.due(15 * SECOND).is_empty(), "the renewal moved it");
        let due = w.due(20 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].reason, WakeReason::LeaseExpired);
        assert_eq!((due[0].epoch, due[0].caused_at), (1, 20 * SECOND));
        assert!(w.due(60 * SECOND).is_empty(), "said once");
    }

    #[test]
    fn a_released_lease_is_never_due() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        w.on_lease(0, s, None);
        assert!(w.due(60 * SECOND).is_empty());
    }

    #[test]
    fn a_wake_no_harness_answers_is_repeated_and_a_new_lease_answers_it() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        let cause = w.due(15 * SECOND).pop().expect("due");
        w.woke(&cause, 75 * SECOND);
        let again = w.due(75 * SECOND);
        assert_eq!(again.len(), 1);
        assert!(again[0].repeat);
        w.woke(&again[0], 135 * SECOND);
        // A worker took it: its lease answers the wake.
        w.on_lease(0, s, Some(&lease(s, 2, 80 * SECOND)));
        assert!(w.due(94 * SECOND).is_empty());
        let lapsed = w.due(135 * SECOND);
        assert_eq!(lapsed.len(), 1, "only the new lease's own expiry");
        assert_eq!((lapsed[0].epoch, lapsed[0].repeat), (2, false));
    }

    #[test]
    fn decisions_and_operator_results_are_causes_and_steering_only_without_a_live_writer() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let decided = event(
            s,
            3,
            SessionEvent::ApprovalDecided {
                approval_id: "a".into(),
                approved: true,
                decided_by: "p".into(),
                reason: None,
                request_seq: Some(1),
                action_digest: None,
            },
        );
        let cause = w.on_event(0, 9, &decided, 0).expect("a cause");
        assert_eq!(cause.reason, WakeReason::ApprovalDecided);
        assert_eq!((cause.epoch, cause.cause_offset), (3, Some(9)));
        let steer = event(
            s,
            3,
            SessionEvent::SteeringMessage {
                author: "op".into(),
                content: "go".into(),
            },
        );
        w.on_lease(0, s, Some(&lease(s, 3, 0)));
        assert_eq!(
            w.on_event(0, 10, &steer, SECOND),
            None,
            "its writer reads it"
        );
        let cause = w.on_event(0, 11, &steer, 16 * SECOND).expect("lapsed");
        assert_eq!(cause.reason, WakeReason::Steering);
    }

    #[test]
    fn a_pause_with_until_is_due_then_and_a_resume_or_end_cancels_it() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let pause = |until| {
            event(
                s,
                2,
                SessionEvent::SessionPaused {
                    reason: None,
                    until: Some(until),
                },
            )
        };
        assert_eq!(w.on_event(3, 40, &pause(100 * SECOND), 0), None);
        assert_eq!(
            w.pending_floor(3),
            Some(40),
            "progress stays before the pause"
        );
        assert!(w.due(99 * SECOND).is_empty());
        let due = w.due(100 * SECOND);
        assert_eq!(due[0].reason, WakeReason::PauseElapsed);
        assert_eq!((due[0].epoch, due[0].caused_at), (2, 100 * SECOND));
        assert_eq!(w.pending_floor(3), Some(40), "until its check's outcome");
        w.settled(&due[0]);
        assert_eq!(w.pending_floor(3), None);

        w.on_event(3, 50, &pause(200 * SECOND), 0);
        w.on_event(3, 51, &event(s, 2, SessionEvent::SessionResumed {}), 0);
        assert!(w.due(300 * SECOND).is_empty(), "resumed before its time");
        assert_eq!(w.pending_floor(3), None);
    }

    #[test]
    fn released_and_ended_sessions_are_forgotten_so_memory_stays_bounded() {
        let (mut w, a, b) = (Watches::default(), SessionId::new(), SessionId::new());
        w.on_lease(0, a, Some(&lease(a, 1, 0)));
        w.on_lease(0, b, Some(&lease(b, 1, 0)));
        assert_eq!(w.len(), 2);
        w.on_lease(0, a, None);
        let end = event(
            b,
            1,
            SessionEvent::SessionEnded {
                outcome: sessionlog_schemas::TerminalOutcome::Completed,
                reason: None,
            },
        );
        w.on_event(0, 5, &end, 0);
        assert!(w.is_empty());
        assert!(w.due(60 * SECOND).is_empty(), "nothing due for either");
    }

    #[test]
    fn a_fenced_writers_renewal_does_not_answer_a_wake_a_later_epochs_lease_does() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        let decided = event(
            s,
            2,
            SessionEvent::ApprovalDecided {
                approval_id: "a".into(),
                approved: true,
                decided_by: "p".into(),
                reason: None,
                request_seq: Some(1),
                action_digest: None,
            },
        );
        let cause = w.on_event(0, 9, &decided, SECOND).expect("a cause");
        w.woke(&cause, 70 * SECOND);
        // The harness fenced by the approver's claim renews at its old epoch meanwhile.
        w.on_lease(0, s, Some(&lease(s, 1, 5 * SECOND)));
        let again = w.due(70 * SECOND);
        assert!(
            again
                .iter()
                .any(|c| c.reason == WakeReason::ApprovalDecided && c.repeat),
            "{again:?}"
        );
        w.woke(&again[0], 130 * SECOND);
        // A worker's lease at the new epoch answers it.
        w.on_lease(0, s, Some(&lease(s, 3, 80 * SECOND)));
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
        let steer = event(
            s,
            2,
            SessionEvent::SteeringMessage {
                author: "operator:alice".into(),
                content: "go".into(),
            },
        );
        let cause = w.on_event(4, 17, &steer, SECOND).expect("a cause");
        assert_eq!(w.pending_floor(4), Some(17), "not judged yet");
        w.retry(&cause, 2 * SECOND);
        assert_eq!(w.pending_floor(4), Some(17), "waiting for the projection");
        w.woke(&cause, 60 * SECOND);
        assert_eq!(w.pending_floor(4), Some(17), "written, not answered");
        w.on_lease(4, s, Some(&lease(s, 3, 3 * SECOND)));
        assert_eq!(w.pending_floor(4), None, "answered");
    }

    #[test]
    fn an_operators_unpause_is_a_cause_a_workers_own_is_not() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let claim = |writer: &str, epoch| {
            event(
                s,
                epoch,
                SessionEvent::WriterClaimed {
                    writer: writer.into(),
                    writer_token_sha256: None,
                },
            )
        };
        w.on_event(0, 1, &claim("operator:alice", 3), 0);
        let cause = w
            .on_event(0, 2, &event(s, 3, SessionEvent::SessionResumed {}), 0)
            .expect("an operator's unpause wakes");
        assert_eq!((cause.reason, cause.epoch), (WakeReason::Unpaused, 3));
        w.on_event(0, 3, &claim("worker-1", 4), 0);
        assert_eq!(
            w.on_event(0, 4, &event(s, 4, SessionEvent::SessionResumed {}), 0),
            None,
            "a worker lifting a lapsed pause runs the session itself"
        );
    }

    #[test]
    fn a_lease_is_not_due_while_its_partition_is_read_from_its_start() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        // An old renewal read first, its successor not read yet.
        w.on_lease(2, s, Some(&lease(s, 1, 0)));
        w.catching_up(2);
        assert!(w.due(20 * SECOND).is_empty(), "held while catching up");
        w.on_lease(2, s, Some(&lease(s, 1, 18 * SECOND)));
        w.caught_up(2);
        assert!(w.due(20 * SECOND).is_empty(), "the newest renewal stands");
        let due = w.due(33 * SECOND);
        assert_eq!(due.len(), 1, "{due:?}");
    }

    #[test]
    fn events_of_sessions_with_nothing_pending_make_no_entry() {
        let mut w = Watches::default();
        let s = SessionId::new();
        w.on_event(0, 1, &event(s, 1, SessionEvent::SessionResumed {}), 0);
        let turn = event(s, 1, SessionEvent::PlanUpdated { plan: "p".into() });
        w.on_event(0, 2, &turn, 0);
        assert!(w.is_empty());
    }

    #[test]
    fn forgetting_a_partition_drops_its_sessions_and_what_was_due() {
        let (mut w, a, b) = (Watches::default(), SessionId::new(), SessionId::new());
        w.on_lease(0, a, Some(&lease(a, 1, 0)));
        w.on_lease(1, b, Some(&lease(b, 1, 0)));
        w.forget(&HashSet::from([0]));
        let due = w.due(60 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].session, b);
    }

    #[test]
    fn a_cause_being_checked_holds_the_progress_and_is_handed_out_once() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        let pause = event(
            s,
            2,
            SessionEvent::SessionPaused {
                reason: None,
                until: Some(10 * SECOND),
            },
        );
        w.on_event(3, 40, &pause, SECOND);
        let due = w.due(10 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(
            w.pending_floor(3),
            Some(40),
            "a pause's end being checked is not passed by the committed progress"
        );
        assert!(w.due(Micros::MAX - 1).is_empty(), "handed out once");
        w.woke(&due[0], 70 * SECOND);
        assert_eq!(w.pending_floor(3), Some(40), "written, not answered");
    }

    #[test]
    fn an_outcome_applies_only_to_the_cause_still_pending() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        let expired = w.due(15 * SECOND);
        assert_eq!(expired.len(), 1);
        // While the expiry is checked, an approval is decided: a newer cause of the session.
        let decided = event(
            s,
            1,
            SessionEvent::ApprovalDecided {
                approval_id: "a".into(),
                approved: true,
                decided_by: "operator:alice".into(),
                reason: None,
                request_seq: Some(1),
                action_digest: None,
            },
        );
        let approval = w.on_event(0, 9, &decided, 16 * SECOND).expect("a cause");
        // The expiry's check ends with "no harness needed": the approval stays pending.
        w.settled(&expired[0]);
        assert_eq!(w.pending_floor(0), Some(9), "the approval is not dropped");
        w.woke(&expired[0], 60 * SECOND);
        assert!(
            w.due(60 * SECOND).is_empty(),
            "the older cause's outcome made nothing due"
        );
        w.woke(&approval, 75 * SECOND);
        assert_eq!(
            w.due(75 * SECOND).len(),
            1,
            "the approval's own outcome did"
        );
    }

    #[test]
    fn a_wake_answered_while_it_was_checked_is_not_repeated() {
        let (mut w, s) = (Watches::default(), SessionId::new());
        w.on_lease(0, s, Some(&lease(s, 1, 0)));
        let expired = w.due(15 * SECOND);
        // A worker took the session before the check's outcome came back.
        w.on_lease(0, s, Some(&lease(s, 2, 15 * SECOND)));
        w.woke(&expired[0], 60 * SECOND);
        // The worker renews; the wake's repeat time comes.
        w.on_lease(0, s, Some(&lease(s, 2, 50 * SECOND)));
        assert!(w.due(60 * SECOND).is_empty(), "answered: nothing to repeat");
        assert!(w.orphaned().is_empty());
    }
}
