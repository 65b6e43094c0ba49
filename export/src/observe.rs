//! What a running export tells operators: Prometheus metrics through the `metrics` facade
//! (`sessionlog export-otlp --listen` installs the recorder and serves `/metrics`).

/// Records read from the session topic and exported (their spans taken by the receiver).
pub const RECORDS: &str = "sessionlog_export_records_total";
/// Spans the receiver took.
pub const SPANS: &str = "sessionlog_export_spans_total";
/// Spans the receiver rejected (OTLP partial success, or a span it answers 4xx alone).
pub const REJECTED_SPANS: &str = "sessionlog_export_rejected_spans_total";
/// Requests the receiver did not take: retried, sent again in halves, or the export stops.
pub const SEND_FAILURES: &str = "sessionlog_export_send_failures_total";
/// Spans sent without their texts: their session was erased after the texts were opened.
pub const CONTENT_WITHHELD: &str = "sessionlog_export_content_withheld_total";
/// Seconds from a record's log timestamp to the receiver having taken its batch's spans.
pub const LAG_SECONDS: &str = "sessionlog_export_lag_seconds";

/// Registers a help text for every metric above with the installed recorder.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(
        RECORDS,
        Unit::Count,
        "Records read from the session topic whose spans the receiver took."
    );
    describe_counter!(SPANS, Unit::Count, "Spans the receiver took.");
    describe_counter!(
        REJECTED_SPANS,
        Unit::Count,
        "Spans the receiver rejected (OTLP partial success, or a span it answers 4xx alone); not sent again."
    );
    describe_counter!(
        SEND_FAILURES,
        Unit::Count,
        "Export requests the receiver did not take: retried, sent again in halves (413 or a span it refuses), or the export stops (credentials, endpoint, format)."
    );
    describe_counter!(
        CONTENT_WITHHELD,
        Unit::Count,
        "Spans sent without their texts because their session was erased after the texts were opened (--with-content)."
    );
    describe_histogram!(
        LAG_SECONDS,
        Unit::Seconds,
        "From a record's log timestamp to the receiver having taken its spans."
    );
}
