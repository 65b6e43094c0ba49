//! A session's state as people read it, for the commands that print one (`example`,
//! `inspect`, `recover`).

use crate::when::{Precision, timestamp};
use sessionlog_recovery::StartPoint;
use sessionlog_session::SessionState;

/// A short human description of a session's state.
pub fn state(state: &SessionState, digest: &str) -> String {
    let checkpoint = state
        .last_checkpoint
        .as_ref()
        .map(|c| {
            format!(
                "seq {} ({})",
                c.seq,
                if c.verified() {
                    "verified"
                } else {
                    "digest mismatch"
                }
            )
        })
        .unwrap_or_else(|| "none".into());
    let now = crate::when::now();
    let when = |micros| timestamp(micros, Precision::Seconds, Some(now));
    format!(
        "  session     {}\n  status      {}\n  agent       {}\n  started     {}\n  \
         last event  {}\n  epoch       {}\n  last seq    {}\n  \
         tokens      {} in / {} out\n  cost        ${:.6}\n  tool calls  {} ({} pending)\n  \
         checkpoint  {}\n  digest      {}",
        state.session_id,
        state.status().as_str(),
        state.agent.as_deref().unwrap_or("-"),
        when(state.started_at),
        when(state.updated_at),
        state.epoch,
        state.last_seq,
        state.tokens_in,
        state.tokens_out,
        state.cost_micros as f64 / 1e6,
        state.tool_calls,
        state.pending_calls.len(),
        checkpoint,
        digest,
    )
}

/// Where a rebuild started reading, in words.
pub fn start(start: &StartPoint) -> String {
    match start {
        StartPoint::Checkpoint { seq, offset } => {
            format!("from the verified checkpoint at seq {seq} (offset {offset})")
        }
        StartPoint::FirstEvent { offset } => format!("from its first event (offset {offset})"),
        StartPoint::PartitionStart { offset } => {
            format!("from the partition's start (offset {offset})")
        }
    }
}
