//! `sessionlog doctor`: the settings as this process resolves them (each value with where it
//! came from, secrets redacted), every server they name asked directly (each Kafka bootstrap
//! address and broker, the registry, each CQL contact point and node, the OTLP receiver when
//! one is named) with what it runs, the topics against `[retention]` and `[kafka]`, the
//! keyspaces, and this host's clock against each broker's.
//!
//! The facts come from the libraries (`log::cluster` and `log::topic` for Kafka,
//! `SchemaRegistry::about`, `store::nodes`, `export::probe`); this module judges them and
//! prints them. It changes nothing, except that the clock probe appends a few records to a
//! topic of its own (created once, an hour's retention; `--no-clock` skips it).
//!
//! Each group of checks is a module (`kafka`, `registry`, `cql`, `otlp`) that collects what it
//! found ([`found`]); [`report`] is what is printed, [`text`] how people read it.

mod cql;
mod found;
mod kafka;
mod otlp;
mod registry;
mod report;
mod text;

use crate::args::Globals;
use crate::exit;
use crate::output::Output;
use anyhow::{Result, anyhow};
use found::Found;
use report::Report;
use sessionlog_log::{Resolution, Settings};
use std::time::Duration;

/// The `doctor` command's arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long each server may take to answer before it counts as unreachable: `10s`,
    /// `500ms` (a bare number is seconds).
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    timeout: Duration,
    /// The largest difference between this host's clock and a broker's that passes.
    #[arg(long, default_value = "1s", value_parser = crate::duration::parse)]
    max_clock_skew: Duration,
    /// The topic the clock probe appends to (created with LogAppendTime if missing; default:
    /// `<kafka.topic>-doctor`, under the events topic's name so its ACLs can cover it).
    #[arg(long)]
    clock_topic: Option<String>,
    /// Do not measure the brokers' clocks (the probe appends a few records).
    #[arg(long)]
    no_clock: bool,
    /// An OTLP/HTTP traces endpoint to check, `/v1/traces` included (what `export-otlp
    /// --endpoint` sends to).
    #[arg(long, env = "SESSIONLOG_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// A header for the OTLP endpoint, `name=value`; repeatable; from the environment
    /// comma-separated. Never printed.
    #[arg(
        long = "otlp-header",
        env = "SESSIONLOG_OTLP_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    otlp_headers: Vec<String>,
}

/// Runs `sessionlog doctor`: prints the report; exits 3 when a server did not answer, 1 when
/// anything else is wrong, 0 when nothing is.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let resolution = Settings::resolve(globals.config.as_deref())?;
    let report = gather(&resolution, &args).await;
    let output = Output::new(&report, text::human(&report))?;
    let unreachable = report.problems.iter().filter(|p| p.unreachable).count();
    if unreachable > 0 {
        return Ok(output.fail(anyhow::Error::new(exit::Unreachable(format!(
            "{unreachable} server(s) did not answer; each is listed with its fix above"
        )))));
    }
    if !report.healthy {
        return Ok(output.fail(anyhow!(
            "{} problem(s); each is listed with its fix above",
            report.problems.len()
        )));
    }
    Ok(output)
}

/// Runs every group of checks at once and puts what they found in one report, Kafka's first.
async fn gather(resolution: &Resolution, args: &Args) -> Report {
    let clock = (!args.no_clock).then(|| kafka::Clock {
        topic: args.clock_topic.clone(),
        max_skew: args.max_clock_skew,
    });
    let (kafka, registry, cql, otlp) = tokio::join!(
        kafka::checks(resolution, args.timeout, clock.as_ref()),
        registry::checks(resolution, args.timeout),
        cql::checks(resolution, args.timeout),
        otlp::checks(
            args.otlp_endpoint.as_deref(),
            &args.otlp_headers,
            args.timeout
        ),
    );
    let mut found = Found::default();
    for part in [kafka, registry, cql, otlp] {
        found.merge(part);
    }
    Report {
        settings_file: resolution.file.clone(),
        settings: resolution.values.clone(),
        servers: found.servers,
        topics: found.topics,
        keyspaces: found.keyspaces,
        clock: found.clock,
        notes: found.notes,
        healthy: found.problems.is_empty(),
        problems: found.problems,
    }
}
