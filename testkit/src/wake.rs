//! The wake component as tests run it: `sessionlog wake` in a test's corner, re-waking after a
//! second, so a test waits seconds, not the default minute, for a wake no harness answered.

use crate::{ChildGuard, TestStack};
use anyhow::{Context, Result};
use sessionlog_log::wake::WAKE_VERSION;
use sessionlog_log::{Wake, WakeReason};
use sessionlog_schemas::{Micros, SessionId};

/// Starts `sessionlog wake` in `stack`'s corner (killed when the guard is dropped).
pub fn spawn_wake(stack: &TestStack) -> Result<ChildGuard> {
    let mut quick = stack.clone();
    quick.settings.wake.rewake_after_ms = 1_000;
    Ok(ChildGuard(
        quick
            .command(&["wake"])?
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("spawning `sessionlog wake`")?,
    ))
}

/// A `lease_expired` wake of `session` (of `agent`, default tenant) at `epoch`, caused and
/// written at `at`: a wake written by hand, as the wake component would.
pub fn lease_wake(session: SessionId, agent: &str, epoch: u64, at: Micros) -> Wake {
    Wake {
        version: WAKE_VERSION,
        session_id: session,
        agent: agent.into(),
        tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
        reason: WakeReason::LeaseExpired,
        epoch,
        cause_offset: None,
        caused_at: at,
        woken_at: at,
    }
}
