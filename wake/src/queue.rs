//! The causes waiting to be checked: one per session, the latest, in the order their sessions
//! came. A session being checked holds the cause that came for it meanwhile until its check
//! ends, so a session's outcomes follow its causes' order, and nothing is scanned again: a
//! burst of causes of one session (a flood of steering, a cause every rewake) costs one entry,
//! and starting checks costs what it starts.

use crate::watch::Cause;
use sessionlog_schemas::SessionId;
use std::collections::{HashMap, VecDeque};

/// Causes waiting for a check, merged per session.
#[derive(Debug, Default)]
pub struct CheckQueue {
    /// Sessions being checked, with the latest cause that came for each meanwhile.
    busy: HashMap<SessionId, Option<Cause>>,
    /// The cause waiting for each session not being checked (the latest).
    waiting: HashMap<SessionId, Cause>,
    /// The sessions of `waiting`, in the order they came.
    order: VecDeque<SessionId>,
}

impl CheckQueue {
    /// Queues `cause`: it takes the place of a cause of its session still waiting (the
    /// watches hold one pending cause per session, the latest, and ignore the outcome of
    /// any other).
    pub fn push(&mut self, cause: Cause) {
        let session = cause.session;
        if let Some(next) = self.busy.get_mut(&session) {
            *next = Some(cause);
        } else if self.waiting.insert(session, cause).is_none() {
            self.order.push_back(session);
        }
    }

    /// Up to `room` causes to check now, their sessions marked as being checked.
    pub fn start(&mut self, room: usize) -> Vec<Cause> {
        let mut started = Vec::new();
        while started.len() < room
            && let Some(session) = self.order.pop_front()
        {
            if let Some(cause) = self.waiting.remove(&session) {
                self.busy.insert(session, None);
                started.push(cause);
            }
        }
        started
    }

    /// The check of `session` ended: a cause that came for it meanwhile waits for its turn.
    pub fn finished(&mut self, session: SessionId) {
        if let Some(Some(next)) = self.busy.remove(&session) {
            self.push(next);
        }
    }

    /// Causes waiting (not being checked).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_log::WakeReason;

    fn cause(session: SessionId, offset: i64) -> Cause {
        Cause {
            session,
            partition: 0,
            reason: WakeReason::Steering,
            epoch: 1,
            cause_offset: Some(offset),
            caused_at: 0,
            repeat: false,
            unprojected_end: None,
        }
    }

    #[test]
    fn a_sessions_causes_merge_into_its_latest_and_wait_for_its_check() {
        let mut q = CheckQueue::default();
        let (a, b) = (SessionId::new(), SessionId::new());
        for offset in 0..10_000 {
            q.push(cause(a, offset));
        }
        q.push(cause(b, 0));
        assert_eq!(q.waiting(), 2, "one entry per session");
        let started = q.start(64);
        assert_eq!(
            started,
            vec![cause(a, 9_999), cause(b, 0)],
            "the latest, in order"
        );
        // Causes of a session being checked wait, merged, for its check to end.
        for offset in 10_000..20_000 {
            q.push(cause(a, offset));
        }
        assert!(q.start(64).is_empty(), "a is being checked");
        q.finished(a);
        assert_eq!(q.start(64), vec![cause(a, 19_999)]);
        q.finished(b);
        assert!(q.start(64).is_empty(), "nothing came for b");
    }

    #[test]
    fn starting_takes_only_the_room_there_is_and_keeps_the_order() {
        let mut q = CheckQueue::default();
        let sessions: Vec<SessionId> = (0..5).map(|_| SessionId::new()).collect();
        for s in &sessions {
            q.push(cause(*s, 1));
        }
        let first = q.start(2);
        assert_eq!(first.len(), 2);
        assert_eq!(
            (first[0].session, first[1].session),
            (sessions[0], sessions[1])
        );
        let rest = q.start(10);
        assert_eq!(
            rest.iter().map(|c| c.session).collect::<Vec<_>>(),
            sessions[2..].to_vec()
        );
    }
}
