//! One round trip for many callers: callers asking a broker the same question at once (a
//! partition's watermarks, during a burst of claims) share one request.
//!
//! Each caller is answered by a round trip that began after it asked, so what the answer
//! promises ("everything acknowledged before the question is below it") holds for every one of
//! them. Written here rather than taken from a single-flight crate: those hand a caller the
//! answer of a request already in flight, which may have begun before the caller asked.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// The callers waiting for one key's next round trip, and whether one is under way.
struct Slot<T> {
    waiting: Vec<oneshot::Sender<T>>,
    asking: bool,
}

/// Round trips shared among concurrent callers, one stream of them per key (a partition).
pub struct SharedRoundTrips<T> {
    slots: Mutex<HashMap<i32, Slot<T>>>,
}

impl<T: Clone + Send + 'static> SharedRoundTrips<T> {
    /// No round trips yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The answer of a round trip `ask` began after this call: the first caller of a burst
    /// starts one, and every caller that comes while it is under way shares the next. `None`
    /// when the round trip's task ended without answering (the runtime is shutting down).
    pub async fn ask<F, Fut>(self: &Arc<Self>, key: i32, ask: F) -> Option<T>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (sender, answer) = oneshot::channel();
        let start = {
            let mut slots = self.lock();
            let slot = slots.entry(key).or_insert_with(|| Slot {
                waiting: Vec::new(),
                asking: false,
            });
            slot.waiting.push(sender);
            !std::mem::replace(&mut slot.asking, true)
        };
        if start {
            // Its own task: a caller that gives up waiting must not strand the others.
            tokio::spawn(Arc::clone(self).answer_all(key, ask));
        }
        answer.await.ok()
    }

    /// Runs round trips for `key` until nobody waits: each answers the callers that were
    /// waiting when it began.
    async fn answer_all<F, Fut>(self: Arc<Self>, key: i32, ask: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            let waiting = {
                let mut slots = self.lock();
                let Some(slot) = slots.get_mut(&key) else {
                    return;
                };
                if slot.waiting.is_empty() {
                    slots.remove(&key);
                    return;
                }
                std::mem::take(&mut slot.waiting)
            };
            let answer = ask().await;
            for caller in waiting {
                // A caller that stopped waiting is no matter.
                let _ = caller.send(answer.clone());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Slot<T>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn callers_at_once_share_a_round_trip_begun_after_they_asked() {
        let trips = SharedRoundTrips::<u64>::new();
        let begun = Arc::new(AtomicU64::new(0));
        let ask = {
            let begun = Arc::clone(&begun);
            move || {
                // The answer is the number of the round trip: which one answered a caller.
                let n = begun.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    n
                }
            }
        };
        let first = tokio::spawn({
            let (trips, ask) = (Arc::clone(&trips), ask.clone());
            async move { trips.ask(0, ask).await }
        });
        // Wait until the first round trip is under way, then ask ten times at once.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while begun.load(Ordering::SeqCst) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no round trip began"
            );
            tokio::task::yield_now().await;
        }
        let later: Vec<_> = (0..10)
            .map(|_| {
                let (trips, ask) = (Arc::clone(&trips), ask.clone());
                tokio::spawn(async move { trips.ask(0, ask).await })
            })
            .collect();
        assert_eq!(first.await.unwrap(), Some(1));
        for caller in later {
            // Not the first round trip's answer (it began before they asked): the second's.
            assert_eq!(caller.await.unwrap(), Some(2));
        }
        assert_eq!(begun.load(Ordering::SeqCst), 2);
        // Another partition has its own round trips; a later question its own.
        assert_eq!(trips.ask(1, ask.clone()).await, Some(3));
        assert_eq!(trips.ask(0, ask).await, Some(4));
    }
}
