//! What the projector tells operators: Prometheus metrics (through the `metrics` facade; the
//! binary installs the exporter) and a health handle for `/health`.

use crate::apply::BatchStats;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Records read from the topic.
pub const CONSUMED: &str = "sessionlog_projector_consumed_total";
/// Events the fold accepted and the projector applied.
pub const APPLIED: &str = "sessionlog_projector_applied_total";
/// Events the fold rejected, by `reason` label.
pub const REJECTED: &str = "sessionlog_projector_rejected_total";
/// Harmless repeats of accepted events.
pub const DUPLICATES: &str = "sessionlog_projector_duplicates_total";
/// Records already applied before (re-read after a crash or rebalance).
pub const SKIPPED: &str = "sessionlog_projector_skipped_total";
/// Records sent to the dead-letter topic.
pub const DEAD_LETTERED: &str = "sessionlog_projector_dead_lettered_total";
/// Records behind the partition's end, by `partition` label.
pub const LAG: &str = "sessionlog_projector_lag_records";
/// Seconds from a batch closing (its fold starting) to its writes being durable.
pub const APPLY_SECONDS: &str = "sessionlog_projector_apply_seconds";
/// Seconds from an event's append (its log timestamp) to its row being durable.
pub const VISIBLE_SECONDS: &str = "sessionlog_projector_append_to_visible_seconds";
/// Dead letters found already sent (before a crash) and not sent again.
pub const DEAD_LETTERS_RESENT_SKIPPED: &str =
    "sessionlog_projector_dead_letters_already_sent_total";
/// Reads of a session's stored row that could not be parsed (each retry counts).
pub const CORRUPT_ROWS: &str = "sessionlog_projector_corrupt_rows_total";
/// CQL rows the projector wrote, by `table` and `op` (recorded by the store, where the rows
/// are written: see [`sessionlog_store::written`]).
pub const CQL_ROWS: &str = sessionlog_store::written::ROWS;
/// Cells of those rows, by `table` and `op`.
pub const CQL_CELLS: &str = sessionlog_store::written::CELLS;
/// Bytes of bound values of those rows, by `table` and `op`.
pub const CQL_BYTES: &str = sessionlog_store::written::BYTES;
/// Registers a help text for every metric above with the installed recorder (call it once,
/// after installing the recorder; without one it does nothing).
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    sessionlog_store::written::describe_metrics();
    describe_counter!(
        CONSUMED,
        Unit::Count,
        "Records read from the session topic."
    );
    describe_counter!(
        APPLIED,
        Unit::Count,
        "Events the fold accepted and the projector applied."
    );
    describe_counter!(
        REJECTED,
        Unit::Count,
        "Events the fold rejected (recorded in rejected_events), by reason."
    );
    describe_counter!(
        DUPLICATES,
        Unit::Count,
        "Harmless repeats of accepted events."
    );
    describe_counter!(
        SKIPPED,
        Unit::Count,
        "Records already applied before, read again after a crash or a rebalance."
    );
    describe_counter!(
        DEAD_LETTERED,
        Unit::Count,
        "Records that cannot be projected, sent to the dead-letter topic."
    );
    describe_counter!(
        DEAD_LETTERS_RESENT_SKIPPED,
        Unit::Count,
        "Dead letters a restarted projector found already in the dead-letter topic (sent before a crash) and did not send again."
    );
    describe_counter!(
        CORRUPT_ROWS,
        Unit::Count,
        "Reads of a stored session row that could not be parsed: the session's partition stalls until the row is repaired (each retry counts)."
    );
    describe_gauge!(
        LAG,
        Unit::Count,
        "Records between the projector's position and the partition's end, by partition."
    );
    describe_histogram!(
        APPLY_SECONDS,
        Unit::Seconds,
        "Seconds from a batch closing (its fold starting) to its writes being durable."
    );
    describe_histogram!(
        VISIBLE_SECONDS,
        Unit::Seconds,
        "Seconds from an event's append (its log timestamp) to its row being durable."
    );
}

/// Every metric name this crate records, for tests and dashboards.
pub const METRICS: &[&str] = &[
    CONSUMED,
    APPLIED,
    REJECTED,
    DUPLICATES,
    SKIPPED,
    DEAD_LETTERED,
    DEAD_LETTERS_RESENT_SKIPPED,
    CORRUPT_ROWS,
    LAG,
    APPLY_SECONDS,
    VISIBLE_SECONDS,
    CQL_ROWS,
    CQL_CELLS,
    CQL_BYTES,
];

pub(crate) fn count_batch(stats: &BatchStats) {
    metrics::counter!(CONSUMED).increment(stats.consumed as u64);
    metrics::counter!(APPLIED).increment(stats.accepted as u64);
    metrics::counter!(DUPLICATES).increment(stats.duplicates as u64);
    metrics::counter!(SKIPPED).increment(stats.skipped as u64);
    metrics::counter!(DEAD_LETTERED).increment(stats.dead_lettered as u64);
}

pub(crate) fn count_rejection(reason: &'static str) {
    metrics::counter!(REJECTED, "reason" => reason).increment(1);
}

pub(crate) fn record_lag(partition: i32, lag: i64) {
    metrics::gauge!(LAG, "partition" => partition.to_string()).set(lag as f64);
}

pub(crate) fn record_apply(took: Duration) {
    metrics::histogram!(APPLY_SECONDS).record(took.as_secs_f64());
}

pub(crate) fn record_visible(append_ms: Option<i64>) {
    if let Some(ms) = append_ms {
        let age = (now_ms() - ms).max(0) as f64 / 1_000.0;
        metrics::histogram!(VISIBLE_SECONDS).record(age);
    }
}

/// Whether a projector is doing its job, for `/health`.
#[derive(Debug, Default)]
pub struct Health {
    store_failing: AtomicBool,
    batches: AtomicU64,
    last_batch_ms: AtomicI64,
    /// Records behind each owned partition's end, from the consumer's statistics.
    lag: std::sync::Mutex<std::collections::BTreeMap<i32, i64>>,
    /// The stored row the projector is stuck on, if it is: which session, and why.
    corrupt_row: std::sync::Mutex<Option<String>>,
}

/// A snapshot of [`Health`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HealthReport {
    /// `ok`, or `degraded` while the store does not answer (the projector is backing off).
    pub status: &'static str,
    /// Whether the last store operation failed.
    pub store_failing: bool,
    /// Batches made durable so far.
    pub batches: u64,
    /// Milliseconds since the worker last made a batch durable or found nothing to read.
    pub since_last_batch_ms: i64,
    /// Records behind the ends of the partitions this instance owns (as of the consumer's last
    /// statistics, every 5 s).
    pub lag_records: i64,
    /// The stored session row the projector cannot read, which stalls its partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt_row: Option<String>,
}

impl Health {
    pub(crate) fn store_failed(&self) {
        self.store_failing.store(true, Ordering::Relaxed);
    }

    pub(crate) fn store_answered(&self) {
        self.store_failing.store(false, Ordering::Relaxed);
        *self.corrupt() = None;
    }

    /// The store answered with a row that cannot be parsed: not an outage, a row to repair.
    pub(crate) fn corrupt_row_found(&self, what: String) {
        metrics::counter!(CORRUPT_ROWS).increment(1);
        *self.corrupt() = Some(what);
    }

    fn corrupt(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // One assignment at a time: a panic cannot leave it torn.
        self.corrupt_row
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A poll that found nothing still shows the loop is alive.
    pub(crate) fn idle(&self) {
        self.last_batch_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn set_lags(&self, lags: std::collections::BTreeMap<i32, i64>) {
        *self.lags() = lags;
    }

    fn lags(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<i32, i64>> {
        // One insert or read at a time: a panic cannot leave the map torn.
        self.lag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Ok` while the projector does its job: the store answers, and a projector with lag made
    /// a batch durable within `stall` (one with no lag may be idle). Why not, otherwise.
    pub fn ready(&self, stall: std::time::Duration) -> Result<(), String> {
        let report = self.report();
        if let Some(row) = report.corrupt_row {
            return Err(format!(
                "stuck on a stored row it cannot read ({row}): its partition makes no progress \
                 until the row is repaired; rebuild the projection with `sessionlog replay`"
            ));
        }
        if report.store_failing {
            return Err("the store does not answer: the projector is backing off".into());
        }
        let stalled_for = u128::try_from(report.since_last_batch_ms.max(0)).unwrap_or(0);
        if report.lag_records > 0 && stalled_for > stall.as_millis() {
            return Err(format!(
                "{} records behind and no batch made durable for {} s (limit {} s: [projector] \
                 stall_secs)",
                report.lag_records,
                stalled_for / 1_000,
                stall.as_secs()
            ));
        }
        Ok(())
    }

    pub(crate) fn batch_done(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.last_batch_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The current state.
    pub fn report(&self) -> HealthReport {
        let failing = self.store_failing.load(Ordering::Relaxed);
        HealthReport {
            status: if failing { "degraded" } else { "ok" },
            store_failing: failing,
            batches: self.batches.load(Ordering::Relaxed),
            since_last_batch_ms: now_ms() - self.last_batch_ms.load(Ordering::Relaxed),
            corrupt_row: self.corrupt().clone(),
            lag_records: self
                .lags()
                .values()
                .fold(0i64, |sum, lag| sum.saturating_add(*lag)),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
