//! `sessionlog`: one command for operators and the demo.

use clap::Parser;
use std::process::ExitCode;

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
