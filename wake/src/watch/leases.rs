//! Lease records: a lease is due at its expiry unless renewed, released, or read while its
//! partition of the lease topic is still read from its start.

use super::{Due, Fold, Watches, fold::Loading};
use sessionlog_log::lease::later;
use sessionlog_schemas::{Micros, SessionId};

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
}
