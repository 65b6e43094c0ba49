//! `sessionlog openapi`: a service's OpenAPI document. Needs no servers and no settings.

use crate::output::Output;
use anyhow::Result;
use clap::ValueEnum;

/// The arguments of `sessionlog openapi`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which service.
    #[arg(long, value_enum)]
    service: HttpService,
}

/// The HTTP services the binary runs.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum HttpService {
    /// `sessionlog ingest`.
    Ingest,
    /// `sessionlog serve-recovery`.
    Recovery,
}

/// The document, JSON with or without `--json`.
pub fn run(args: Args) -> Result<Output> {
    let document = match args.service {
        HttpService::Ingest => sessionlog_ingest::service().openapi(),
        HttpService::Recovery => sessionlog_recovery::http::openapi(),
    };
    Ok(Output::none().line(serde_json::to_string_pretty(&document)?))
}
