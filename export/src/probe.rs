//! Whether an OTLP/HTTP receiver answers, and what it is (`sessionlog doctor`).

use crate::{Error, Result};
use std::collections::HashMap;
use std::time::Duration;

/// What a receiver answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverProbe {
    /// The HTTP status of an empty export request (an `ExportTraceServiceRequest` with no
    /// spans: a receiver that takes OTLP answers it with 200).
    pub status: u16,
    /// The receiver's software and version, when it says: Arize Phoenix does, at
    /// `/arize_phoenix_version`; an OpenTelemetry Collector does not.
    pub version: Option<String>,
}

/// Sends `endpoint` (the traces URL, `/v1/traces` included) an empty OTLP/HTTP protobuf
/// export with `headers`, then asks its server for a version. A receiver that cannot be
/// reached within `timeout` is [`Error::ReceiverUnreachable`]; any answer is returned.
pub async fn probe_receiver(
    endpoint: &str,
    headers: &HashMap<String, String>,
    timeout: Duration,
) -> Result<ReceiverProbe> {
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(Error::Client)?;
    let unreachable = |source| Error::ReceiverUnreachable {
        endpoint: endpoint.to_string(),
        source,
    };
    let mut request = http
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .body(Vec::new());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let status = request.send().await.map_err(unreachable)?.status().as_u16();
    let version = match origin(endpoint) {
        Some(origin) => phoenix_version(&http, &origin).await,
        None => None,
    };
    Ok(ReceiverProbe { status, version })
}

/// `scheme://host[:port]` of `url`.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split('/').next().filter(|h| !h.is_empty())?;
    Some(format!("{scheme}://{host}"))
}

/// Phoenix's version, from the route its UI reads it at; `None` from any other server.
async fn phoenix_version(http: &reqwest::Client, origin: &str) -> Option<String> {
    let response = http
        .get(format!("{origin}/arize_phoenix_version"))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text().await.ok()?;
    let version = text.trim();
    // A version, not some page a catch-all route served.
    let plausible = !version.is_empty()
        && version.len() <= 32
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c));
    plausible.then(|| format!("Arize Phoenix {version}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_keeps_scheme_host_and_port() {
        assert_eq!(
            origin("http://127.0.0.1:6006/v1/traces").as_deref(),
            Some("http://127.0.0.1:6006")
        );
        assert_eq!(
            origin("https://otel.example/v1/traces").as_deref(),
            Some("https://otel.example")
        );
        assert_eq!(origin("no-scheme/v1/traces"), None);
    }
}
