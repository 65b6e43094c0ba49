//! Faults of the shared stack: a broker killed and restarted, Cassandra stopped, the registry
//! stopped, the wake component through a broker's restart. A test binary of their own,
//! because cargo runs the tests of one binary in parallel and no other test may see a stopped
//! server; within it, [`one_fault_at_a_time`] keeps the faults themselves apart.
//!
//! Run one with a filter: `scripts/test -- --test faults cassandra::`.

mod brokers;
mod cassandra;
mod registry;
mod wake;
mod worker;

use tokio::sync::{Mutex, MutexGuard};

/// Held for the whole of a fault test: each stops a different shared server, and two at once
/// would make either's failure unreadable (a dead broker breaks the projector's topic too).
/// A tokio lock, because each test has its own runtime and holds it across awaits.
pub async fn one_fault_at_a_time() -> MutexGuard<'static, ()> {
    static FAULT: Mutex<()> = Mutex::const_new(());
    FAULT.lock().await
}
