//! What the wake component tells operators, through the `metrics` facade (the binary installs
//! the Prometheus exporter).

use sessionlog_log::{Wake, WakeReason};
use sessionlog_schemas::Micros;
use std::collections::HashMap;

/// Wakes written, by `reason` and whether it was a `repeat` of one no harness answered.
pub const WAKES: &str = "sessionlog_wake_records_total";
/// Seconds from a wake's cause (a lease's expiry, an event, a pause's end) to its record.
pub const CAUSE_TO_WAKE: &str = "sessionlog_wake_cause_to_wake_seconds";
/// Sessions woken that no harness took since, by `reason`.
pub const ORPHANED: &str = "sessionlog_wake_orphaned_sessions";
/// Age in seconds of the oldest cause among those sessions, by `reason`.
pub const ORPHANED_AGE: &str = "sessionlog_wake_orphaned_oldest_seconds";

/// Registers a help text for every metric above with the installed recorder.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        WAKES,
        Unit::Count,
        "Wake records written, by reason and repeat (a wake no harness answered, written again)."
    );
    describe_histogram!(
        CAUSE_TO_WAKE,
        Unit::Seconds,
        "Seconds from a wake's cause (lease expiry, event, pause end) to its record."
    );
    describe_gauge!(
        ORPHANED,
        Unit::Count,
        "Sessions woken that no harness took since (no new lease), by reason."
    );
    describe_gauge!(
        WATCHED,
        Unit::Count,
        "Sessions the wake component watches (a lease, a pause, a pending wake, a state loading)."
    );
    describe_counter!(
        LEASES_CLEANED,
        Unit::Count,
        "Lease records of ended sessions the wake component removed."
    );
    describe_gauge!(
        ORPHANED_AGE,
        Unit::Seconds,
        "Age of the oldest cause among the sessions no harness took, by reason."
    );
}

/// `wake` was written.
pub fn woken(wake: &Wake, repeat: bool) {
    let reason = wake.reason.as_str();
    metrics::counter!(WAKES, "reason" => reason, "repeat" => if repeat { "true" } else { "false" })
        .increment(1);
    if !repeat {
        let seconds = wake.woken_at.saturating_sub(wake.caused_at).max(0) as f64 / 1e6;
        metrics::histogram!(CAUSE_TO_WAKE, "reason" => reason).record(seconds);
    }
}

/// The sessions woken and not taken, by reason, with their oldest cause, at `now`.
pub fn orphaned(by_reason: &HashMap<WakeReason, (u64, Micros)>, now: Micros) {
    for reason in WakeReason::ALL {
        let (count, oldest) = by_reason.get(&reason).copied().unwrap_or((0, now));
        let age = now.saturating_sub(oldest).max(0) as f64 / 1e6;
        metrics::gauge!(ORPHANED, "reason" => reason.as_str()).set(count as f64);
        metrics::gauge!(ORPHANED_AGE, "reason" => reason.as_str()).set(age);
    }
}

/// Sessions the component watches now (a lease, a pause, a pending wake or a state being
/// loaded): its memory, bounded by live work.
pub const WATCHED: &str = "sessionlog_wake_watched_sessions";
/// Lease records of ended sessions the component removed (their writers left them).
pub const LEASES_CLEANED: &str = "sessionlog_wake_leases_cleaned_total";

/// `count` sessions are watched.
pub fn watched(count: usize) {
    metrics::gauge!(WATCHED).set(count as f64);
}

/// An ended session's lease record was removed.
pub fn lease_cleaned() {
    metrics::counter!(LEASES_CLEANED).increment(1);
}
