//! Ended sessions: forgotten, and the lease records their writers left behind removed.

use super::{Watch, Watches};
use sessionlog_schemas::{Epoch, Micros, SessionId};

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

impl Watch {
    /// The removal of `session`'s lease records, up to the highest epoch known of it.
    pub(super) fn cleanup(&self, session: SessionId) -> Cleanup {
        let leased = self.lease.as_ref().map_or(0, |l| l.epoch);
        Cleanup {
            session,
            partition: self.partition,
            epoch: self.state().map_or(leased, |s| s.epoch.max(leased)),
        }
    }
}

impl Watches {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::history::*;

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
}
