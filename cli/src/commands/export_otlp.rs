//! `sessionlog export-otlp`: the log as OpenTelemetry GenAI spans, to an OTLP/HTTP receiver.

use crate::args::{Globals, parse_headers, start_at};
use crate::output::Output;
use crate::signal::shutdown_signal;
use anyhow::{Context, Result};
use sessionlog_export::{ExportOptions, export};
use sessionlog_http::{CHECK_TIMEOUT, Readiness};
use std::collections::HashMap;
use std::time::Duration;

/// Where this command's log lines go (see `commands`).
const LOG_TARGET: &str = "sessionlog_cli::export";

/// The `export-otlp` command's arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The receiver's OTLP/HTTP traces endpoint, path included, e.g.
    /// http://127.0.0.1:6006/v1/traces (Phoenix) or http://127.0.0.1:4318/v1/traces.
    #[arg(long, env = "SESSIONLOG_OTLP_ENDPOINT")]
    endpoint: String,
    /// A header for every request, `name=value` (a receiver's API key); repeatable. From the
    /// environment, comma-separated, to keep a key out of the process list.
    #[arg(
        long = "header",
        env = "SESSIONLOG_OTLP_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    headers: Vec<String>,
    /// The consumer group; instances with one group share the partitions.
    #[arg(long, default_value = "sessionlog-otlp-export")]
    group: String,
    /// Re-export from these offsets, `partition:offset` comma-separated (others from the
    /// beginning). Moves the group first: stop its other instances.
    #[arg(long, conflicts_with_all = ["from_time", "from_beginning"])]
    from_offsets: Option<String>,
    /// Re-export from the first record at or after this time: milliseconds since the epoch,
    /// RFC 3339 in UTC, or how long ago (`2h`). Moves the group first: stop its other instances.
    #[arg(long, conflicts_with = "from_beginning")]
    from_time: Option<String>,
    /// Re-export the whole log. Moves the group first: stop its other instances.
    #[arg(long)]
    from_beginning: bool,
    /// Put message content on the spans (model output, tool arguments and results). Never
    /// for an erased session, even one erased after its texts were read: the key store is
    /// asked before each request. Off by default because spans often leave the trust
    /// boundary.
    #[arg(long)]
    with_content: bool,
    /// Stop once the log is read up to where it ended at the start (a one-off re-export).
    #[arg(long)]
    until_caught_up: bool,
    /// The spans' `service.name`, also their Phoenix project.
    #[arg(long, default_value = "sessionlog")]
    service_name: String,
    /// Serve `/metrics` (Prometheus) and `/health` on this address, e.g. 0.0.0.0:9101: ready
    /// while Kafka and the receiver answer. Not served without it.
    #[arg(long)]
    listen: Option<String>,
}

/// Runs the export until interrupted or caught up, and prints what it did.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let start = match start_at(args.from_offsets.as_deref(), args.from_time.as_deref())? {
        Some(start) => Some(start),
        None if args.from_beginning => Some(sessionlog_log::StartAt::Beginning),
        None => None,
    };
    let headers = parse_headers(&args.headers)?;
    if let Some(listen) = &args.listen {
        let readiness = Readiness::new().kafka(&settings.kafka).with("receiver", {
            let (endpoint, headers) = (args.endpoint.clone(), headers.clone());
            move || {
                let (endpoint, headers) = (endpoint.clone(), headers.clone());
                async move { receiver_ready(&endpoint, &headers).await }
            }
        });
        crate::serve::serve(
            listen,
            &[sessionlog_export::describe_metrics],
            readiness,
            None,
        )
        .await?;
    }
    let options = ExportOptions {
        endpoint: args.endpoint.clone(),
        headers,
        group_id: args.group,
        start,
        with_content: args.with_content,
        until_caught_up: args.until_caught_up,
        service_name: args.service_name,
        batch_wait: Duration::from_millis(50),
        ..ExportOptions::default()
    };
    tracing::info!(target: LOG_TARGET, endpoint = %args.endpoint, group = %options.group_id, "exporting the log as OTLP spans");
    let summary = export(settings, options, shutdown_signal())
        .await
        .with_context(|| format!("exporting to {}", args.endpoint))?;
    let lag = match (summary.lag_p50_ms, summary.lag_p99_ms) {
        (Some(p50), Some(p99)) => format!("; lag p50 {p50:.0} ms, p99 {p99:.0} ms"),
        _ => String::new(),
    };
    let rejected = match summary.rejected_spans {
        0 => String::new(),
        n => format!(", {n} rejected by the receiver (its log says why)"),
    };
    let withheld = match summary.content_withheld {
        0 => String::new(),
        n => format!(", {n} without the texts of sessions erased meanwhile"),
    };
    let text = format!(
        "exported {} spans{rejected}{withheld} from {} records in {:.1}s ({} sessions rebuilt first, {} records undecodable){lag}",
        summary.spans,
        summary.records,
        summary.seconds,
        summary.rebuilt_sessions,
        summary.undecodable
    );
    Output::new(&summary, text)
}

/// Whether the receiver takes an (empty) export: what the export needs to make progress.
async fn receiver_ready(endpoint: &str, headers: &HashMap<String, String>) -> Result<(), String> {
    let probe = sessionlog_export::probe_receiver(endpoint, headers, CHECK_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    if (200..300).contains(&probe.status) {
        Ok(())
    } else {
        Err(format!(
            "{endpoint} answered an empty export with HTTP {}",
            probe.status
        ))
    }
}
