//! The early fence: the highest epoch this process saw of each session its writers write.

use sessionlog_schemas::{Epoch, SessionId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The highest epoch this process saw of each session one of its writers writes: the early
/// fence a writer checks before every append (see [`crate::EventLog`]). An entry lives as long as a
/// writer of its session in this process does, so the map holds no more sessions than the
/// process has writers (an ingest instance's bounded cache of them, a harness's running
/// sessions), not every session it ever touched. Forgetting a session no writer here writes
/// loses nothing: the fence only spares a writer of this process a send that the fold would
/// reject, and a writer made later starts from the log's epoch, which the read-back (at a
/// claim, a confirmed append, a refresh) keeps authoritative.
#[derive(Default)]
pub(crate) struct EpochsSeen {
    seen: Mutex<HashMap<SessionId, Seen>>,
}

/// What the fence holds of one session.
struct Seen {
    /// The highest epoch seen.
    epoch: Epoch,
    /// The writers of the session in this process.
    writers: usize,
}

/// A writer of a session, registered with the [`EpochsSeen`] of its log while it lives: the
/// last one dropped takes the session's entry with it.
pub(crate) struct WriterSeen {
    seen: Arc<EpochsSeen>,
    session: SessionId,
}

impl Drop for WriterSeen {
    fn drop(&mut self) {
        let mut seen = self.seen.lock();
        if let Some(entry) = seen.get_mut(&self.session) {
            entry.writers = entry.writers.saturating_sub(1);
            if entry.writers == 0 {
                seen.remove(&self.session);
            }
        }
    }
}

impl EpochsSeen {
    pub(crate) fn highest(&self, session: SessionId) -> Option<Epoch> {
        self.lock().get(&session).map(|s| s.epoch)
    }

    /// Raises `session`'s epoch when a writer of it lives here (no entry otherwise: nobody to
    /// fence).
    pub(crate) fn note(&self, session: SessionId, epoch: Epoch) {
        if let Some(entry) = self.lock().get_mut(&session) {
            entry.epoch = entry.epoch.max(epoch);
        }
    }

    pub(crate) fn writer_made(seen: &Arc<Self>, session: SessionId, epoch: Epoch) -> WriterSeen {
        let mut map = seen.lock();
        let entry = map.entry(session).or_insert(Seen { epoch, writers: 0 });
        entry.epoch = entry.epoch.max(epoch);
        entry.writers = entry.writers.saturating_add(1);
        drop(map);
        WriterSeen {
            seen: Arc::clone(seen),
            session,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Seen>> {
        // Each change leaves an entry whole: a panic elsewhere cannot leave the map torn.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_epoch_is_forgotten_with_its_last_writer_in_the_process() {
        let seen = Arc::new(EpochsSeen::default());
        let session = SessionId::new();
        let first = EpochsSeen::writer_made(&seen, session, 1);
        // A claim through this process raises it: the first writer is fenced before it sends.
        seen.note(session, 2);
        let second = EpochsSeen::writer_made(&seen, session, 2);
        drop(second);
        assert_eq!(
            seen.highest(session),
            Some(2),
            "the first writer still lives"
        );
        drop(first);
        assert_eq!(seen.highest(session), None);
        assert_eq!(seen.len(), 0);
        // A claim lost here, or a read of a session no writer of this process writes, leaves
        // nothing behind: there is no writer to fence.
        seen.note(SessionId::new(), 3);
        assert_eq!(seen.len(), 0);
    }
}
