//! The one retry policy of sessionlog: exponential backoff with jitter (backon), from 100 ms
//! doubling to at most 5 s. Jitter keeps a fleet of processes that lost the same server from
//! coming back to it in lockstep. Each caller says only how long it may keep trying and which
//! errors are worth another try.

use backon::ExponentialBuilder;
use std::time::Duration;

pub use backon::{BackoffBuilder, Retryable};

/// The first wait.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

fn base() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(FIRST_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
}

/// Retries until the waits add up to `limit`, then gives up with the last error.
pub fn within(limit: Duration) -> ExponentialBuilder {
    base().without_max_times().with_total_delay(Some(limit))
}

/// At most `tries` tries in all (the first one included).
pub fn tries(tries: usize) -> ExponentialBuilder {
    base().with_max_times(tries.saturating_sub(1))
}

/// Never gives up: for a loop whose only way forward is the server coming back (a projector
/// cannot skip a write), which reports the outage on its health meanwhile.
pub fn forever() -> ExponentialBuilder {
    base().without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn waits_grow_and_stay_under_the_cap() {
        let waits: Vec<Duration> = forever().build().take(12).collect();
        assert_eq!(waits.len(), 12);
        // With jitter a wait is between the step's delay and twice it, capped.
        assert!(waits[0] >= FIRST_DELAY && waits[0] <= 2 * FIRST_DELAY);
        assert!(waits.iter().all(|w| *w <= 2 * MAX_DELAY), "{waits:?}");
        assert!(waits[11] >= MAX_DELAY, "{waits:?}");
    }

    #[test]
    fn a_limited_policy_stops() {
        assert_eq!(tries(4).build().count(), 3);
        let total: Duration = within(Duration::from_secs(2)).build().sum();
        assert!(total <= Duration::from_secs(2), "{total:?}");
    }
}
