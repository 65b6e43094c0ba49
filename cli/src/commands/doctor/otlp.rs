//! `doctor`'s OTLP check: the receiver `--otlp-endpoint` names takes an empty export.

use super::found::Found;
use super::report::Status;
use crate::args::parse_headers;
use std::time::Duration;

/// Sends the receiver an empty export, when one is named.
pub async fn checks(endpoint: Option<&str>, headers: &[String], timeout: Duration) -> Found {
    let mut found = Found::default();
    let Some(endpoint) = endpoint else {
        found
            .notes
            .push("otlp: no receiver named (--otlp-endpoint, SESSIONLOG_OTLP_ENDPOINT)".into());
        return found;
    };
    let line = found.server("otlp", "receiver", endpoint);
    let headers = match parse_headers(headers) {
        Ok(headers) => headers,
        Err(e) => {
            line.status = Status::Failed;
            found.problem(
                "otlp",
                format!("{e}"),
                "correct --otlp-header (or SESSIONLOG_OTLP_HEADERS): name=value".into(),
                Status::Failed,
            );
            return found;
        }
    };
    match sessionlog_export::probe_receiver(endpoint, &headers, timeout).await {
        Ok(probe) => {
            line.version =
                Some(probe.version.clone().unwrap_or_else(|| {
                    "unknown (an OTLP receiver need not say what it runs)".into()
                }));
            let (status, fix) = match probe.status {
                200..=299 => (Status::Ok, String::new()),
                401 | 403 => (
                    Status::Failed,
                    "the receiver refused the credentials: correct --otlp-header \
                     (SESSIONLOG_OTLP_HEADERS)"
                        .to_string(),
                ),
                500..=599 => (
                    Status::Unreachable,
                    "the receiver is failing: look at its logs".to_string(),
                ),
                _ => (
                    Status::Failed,
                    "--otlp-endpoint (SESSIONLOG_OTLP_ENDPOINT) must be the receiver's OTLP/HTTP \
                     traces URL, /v1/traces included"
                        .to_string(),
                ),
            };
            line.status = status;
            if status != Status::Ok {
                found.problem(
                    "otlp",
                    format!(
                        "the OTLP receiver at {endpoint} answered an empty export with HTTP {}",
                        probe.status
                    ),
                    fix,
                    status,
                );
            }
        }
        Err(e) => {
            let e = anyhow::Error::new(e);
            found.server_failed(
                "otlp",
                &e,
                format!("{e}"),
                "start the receiver, or correct --otlp-endpoint (SESSIONLOG_OTLP_ENDPOINT)".into(),
            );
        }
    }
    found
}
