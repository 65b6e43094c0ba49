//! `sessionlog`: one command for operators and the demo.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = sessionlog_cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SESSIONLOG_LOG")
                .unwrap_or_else(|_| "warn,sessionlog=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match sessionlog_cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
