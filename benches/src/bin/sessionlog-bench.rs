//! `sessionlog-bench`: every benchmark program, one subcommand each (see docs/performance.md).
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo run --release -p sessionlog-benches --bin sessionlog-bench -- producer --help
//! ```

use clap::{Parser, Subcommand};
use sessionlog_benches::{
    claim, console, export, ingest, mcp, producer, projector, recovery, rejoin, resume,
    span_tenant, trace_read, wake,
};

/// Every benchmark runs on the allocator the `sessionlog` binary ships with (see
/// cli/src/main.rs), so what it measures of our libraries is what the services do.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sessionlog-bench",
    about = "sessionlog benchmarks: each prints a ratio against a reference measured in the same run"
)]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    Claim(claim::Args),
    Console(console::Args),
    Export(export::Args),
    Ingest(ingest::Args),
    Mcp(mcp::Args),
    Producer(producer::Args),
    Projector(projector::Args),
    Recovery(recovery::Args),
    Rejoin(rejoin::Args),
    Resume(resume::Args),
    SpanTenant(span_tenant::Args),
    TraceRead(trace_read::Args),
    Wake(wake::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let result = match Cli::parse().bench {
        Bench::Claim(args) => claim::run(args).await,
        Bench::Console(args) => console::run(args).await,
        Bench::Export(args) => export::run(args).await,
        Bench::Ingest(args) => ingest::run(args).await,
        Bench::Mcp(args) => mcp::run(args).await,
        Bench::Producer(args) => producer::run(args).await,
        Bench::Projector(args) => projector::run(args).await,
        Bench::Recovery(args) => recovery::run(args).await,
        Bench::Rejoin(args) => rejoin::run(args).await,
        Bench::Resume(args) => resume::run(args).await,
        Bench::SpanTenant(args) => span_tenant::run(args).await,
        Bench::TraceRead(args) => trace_read::run(args).await,
        Bench::Wake(args) => wake::run(args).await,
    };
    // The run's settings files and keys (sessionlog-testkit's scratch directory) end with it.
    sessionlog_testkit::served::remove_scratch_dir();
    result
}
