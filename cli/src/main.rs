//! `sessionlog`: one command for operators and the demo.

use clap::Parser;
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: the services allocate on many threads and free on
/// others (librdkafka's, tokio's workers), where glibc's arenas cost more per appended event
/// than sealing it (docs/performance.md, "Privacy: what sealing costs").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit statuses: 0 ok, 1 a difference or a failed check, 2 usage, 3 a server unavailable
/// (`sessionlog_cli::exit`).
#[tokio::main]
async fn main() -> ExitCode {
    let cli = match sessionlog_cli::Cli::try_parse() {
        Ok(cli) => cli,
        // The arguments were refused, so `--json` is looked for among them as given.
        Err(e) => return sessionlog_cli::exit::usage(e, std::env::args().any(|a| a == "--json")),
    };
    sessionlog_cli::init_logging(cli.log_format);
    let json = cli.json();
    match sessionlog_cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => sessionlog_cli::exit::report(&e, json),
    }
}
