//! The process's Prometheus recorder: installed once, whichever service asks first.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

/// Buckets (seconds) of every latency histogram (metric names ending in `_seconds`).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How often histograms are drained into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the process's Prometheus recorder on first call (with [`LATENCY_BUCKETS`] and an
/// upkeep thread), then calls each of `describe` (the crates' `describe_metrics`, which give
/// `/metrics` its `# HELP` lines). Later calls return the same handle and run their own
/// `describe` functions. If a recorder of another kind was installed first, the handle
/// renders nothing rather than failing the service.
pub fn install(describe: &[fn()]) -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    let handle = HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            // Only an empty bucket list is refused, and ours is not empty.
            let builder = builder
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!(
                    "another metrics recorder was installed first; /metrics stays empty"
                );
            }
            let upkeep = handle.clone();
            // A thread rather than a task: the recorder outlives any one runtime.
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no metrics upkeep thread; histograms grow unbounded");
            }
            handle
        })
        .clone();
    for describe in describe {
        describe();
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe_example() {
        metrics::describe_counter!("sessionlog_http_test_total", "Counted by a test.");
    }

    #[test]
    fn a_second_install_returns_the_same_recorder_and_describes_what_it_is_given() {
        let first = install(&[]);
        metrics::counter!("sessionlog_http_test_total").increment(1);
        let second = install(&[describe_example]);
        metrics::histogram!("sessionlog_http_test_seconds").record(0.02);
        let rendered = second.render();
        // Other tests in this process record metrics at any moment (CI saw 42 lines against
        // 39), so the two handles are compared on what this test wrote.
        let mine = |text: &str| {
            text.lines()
                .filter(|line| line.contains("sessionlog_http_test_"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(mine(&first.render()), mine(&rendered));
        assert!(
            rendered.contains("# HELP sessionlog_http_test_total Counted by a test."),
            "{rendered}"
        );
        assert!(
            rendered.contains("sessionlog_http_test_seconds_bucket{le=\"0.025\"} 1"),
            "{rendered}"
        );
    }
}
