//! An MCP server over one session's history, so the model (not only its harness) can fetch
//! what its context view left out: `sessionlog mcp`.
//!
//! [`server::HistoryServer`] offers five read-only tools (`history_read`, `history_search`,
//! `summary_expand`, `call_lookup`, `lineage`) and the context view with its left-out
//! references as resources (`sessionlog://sessions/{id}/context`,
//! `sessionlog://sessions/{id}/events/{seq}` or `{first}-{last}`). [`reader::Reader`] answers
//! them through the recovery library's reads (event index plus log, texts opened, erasure and a
//! fork's inherited prefix as those reads already handle them). [`http`] serves Streamable HTTP
//! behind the services' bearer credentials; [`serve_stdio`] serves a local harness.

mod error;
pub mod http;
pub mod matcher;
pub mod reach;
pub mod reader;
pub mod server;

pub use error::{Error, Result};
pub use reader::{Reader, Target};
pub use server::HistoryServer;

use rmcp::ServiceExt;

/// Serves `target`'s history over stdin and stdout until the client closes them. No
/// credential is asked: whoever runs the process already holds the deployment's settings.
pub async fn serve_stdio(reader: Reader, target: Target) -> Result<()> {
    let server = HistoryServer::new(reader, Some(target));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Service(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| Error::Service(e.to_string()))?;
    Ok(())
}
