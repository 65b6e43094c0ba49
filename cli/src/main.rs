//! `sessionlog`: one command for operators and the demo.

use clap::Parser;
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: the services allocate on many threads and free on
/// others (librdkafka's, tokio's workers), where glibc's arenas cost more per appended event
/// than sealing it (docs/performance.md, "Privacy: what sealing costs").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = sessionlog_cli::Cli::parse();
    sessionlog_cli::init_logging(cli.log_format);
    match sessionlog_cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
