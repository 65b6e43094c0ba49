//! What recovery tells operators: metric names (recorded through the `metrics` facade; the
//! binary installs the exporter) and [`describe_metrics`] for their help texts.

/// Requests the HTTP service answered with a problem, by `code` label.
pub const ERRORS: &str = "sessionlog_recovery_errors_total";
/// Sessions resumed (a new writer epoch claimed and a bundle handed out).
pub const RESUMES: &str = "sessionlog_recovery_resumes_total";
/// Sessions rebuilt from the log, by `start` label (`checkpoint`, `first_event`,
/// `partition_start`) and `read` label (`tail`: from the process's tail of the log, in memory;
/// `log`: read from the partition).
pub const REBUILDS: &str = "sessionlog_recovery_rebuilds_total";
/// Seconds a rebuild took, from the first table read to the last record folded.
pub const REBUILD_SECONDS: &str = "sessionlog_recovery_rebuild_seconds";
/// Seconds each phase of a resume took, by `phase` label, one after another: `wait_turn`
/// (waiting for one of the `[recovery] max_concurrent_resumes` permits), `rebuild` (the stored
/// view, the checkpoint, the index and the tail read and folded), `claim` (catch-up, the claim
/// appended and read back), `bundle` (in-doubt calls settled, texts opened, the context window
/// cut); and within `rebuild`, `wait_reader` (its table reads and its wait for one of the log's
/// pooled readers). Where a fleet restart's time goes.
pub const RESUME_PHASE_SECONDS: &str = "sessionlog_recovery_resume_phase_seconds";
/// Resumes waiting for their turn now, over `[recovery] max_concurrent_resumes`.
pub const RESUMES_WAITING: &str = "sessionlog_recovery_resumes_waiting";
/// Records read by rebuilds: from the log, the session's own and others', and the session's own
/// taken from the process's tail.
pub const RECORDS_READ: &str = "sessionlog_recovery_records_read_total";
/// Records of the rebuilt sessions folded: with [`RECORDS_READ`], the read amplification.
pub const EVENTS_FOLDED: &str = "sessionlog_recovery_events_folded_total";

/// Consumers of the lease topic the process made (`GET /v1/sessions/{id}` and `sessionlog
/// status` read a session's lease): a few for the process's life, not one per read.
pub const LEASE_READERS_MADE: &str = "sessionlog_recovery_lease_readers_made_total";
/// Metadata round trips the process made to check that the lease topic exists: one for the
/// process's life (until one succeeds), not one per lease read.
pub const LEASE_TOPIC_CHECKS: &str = "sessionlog_recovery_lease_topic_checks_total";

/// Sessions erased (their `SessionErased` appended or found, and their data key destroyed).
pub const ERASURES: &str = "sessionlog_recovery_erasures_total";

/// Every metric name this crate records.
pub const METRICS: &[&str] = &[
    ERASURES,
    ERRORS,
    RESUMES,
    REBUILDS,
    REBUILD_SECONDS,
    RESUME_PHASE_SECONDS,
    RESUMES_WAITING,
    RECORDS_READ,
    EVENTS_FOLDED,
    LEASE_READERS_MADE,
    LEASE_TOPIC_CHECKS,
];

/// Registers a help text for every metric above with the installed recorder (call it once,
/// after installing the recorder; without one it does nothing).
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        ERRORS,
        Unit::Count,
        "Recovery requests answered with a problem, by code (unknown_session, needs_resolution, unavailable, ...)."
    );
    describe_counter!(
        ERASURES,
        Unit::Count,
        "Sessions erased: SessionErased in the log and the data key destroyed."
    );
    describe_counter!(
        RESUMES,
        Unit::Count,
        "Sessions resumed: a new writer epoch claimed and a resume bundle handed out."
    );
    describe_counter!(
        REBUILDS,
        Unit::Count,
        "Sessions rebuilt from the log, by where reading started and whether the process's tail held it (read=tail) or the partition was read (read=log)."
    );
    describe_histogram!(
        REBUILD_SECONDS,
        Unit::Seconds,
        "Seconds a rebuild took, from the first table read to the last record folded."
    );
    describe_histogram!(
        RESUME_PHASE_SECONDS,
        Unit::Seconds,
        "Seconds each phase of a resume took, by phase (wait_turn, rebuild, claim, bundle; wait_reader within rebuild)."
    );
    describe_gauge!(
        RESUMES_WAITING,
        Unit::Count,
        "Resumes waiting for their turn now, over [recovery] max_concurrent_resumes."
    );
    describe_counter!(
        RECORDS_READ,
        Unit::Count,
        "Records read by rebuilds: from the log, of the session and of others on its partition; from the process's tail, the session's own."
    );
    describe_counter!(
        EVENTS_FOLDED,
        Unit::Count,
        "Records of the rebuilt sessions folded (with records read: the read amplification)."
    );
    describe_counter!(
        LEASE_READERS_MADE,
        Unit::Count,
        "Consumers of the lease topic this process made to read writer leases (a few, not one per read)."
    );
    describe_counter!(
        LEASE_TOPIC_CHECKS,
        Unit::Count,
        "Metadata round trips this process made to check that the lease topic exists (one, not one per read)."
    );
}

/// Records that a phase of a resume (see [`RESUME_PHASE_SECONDS`]) begun at `since` is done.
pub(crate) fn phase_done(phase: &'static str, since: std::time::Instant) {
    metrics::histogram!(RESUME_PHASE_SECONDS, "phase" => phase)
        .record(since.elapsed().as_secs_f64());
}
