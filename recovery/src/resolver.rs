//! Resolvers: asking a tool's service what became of a request, by its idempotency key.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sessionlog_schemas::{CallOutcome, Content};
use sessionlog_session::PendingCall;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// What a tool's service says about a request it may or may not have received.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// It ran: here is its result. Recovery records it instead of running the call again.
    Executed {
        /// How it ended.
        outcome: CallOutcome,
        /// What it returned.
        output: Content,
    },
    /// It never arrived: an idempotent call may be issued again with the same key.
    NotExecuted,
    /// The service cannot tell (or could not be asked): an operator must decide.
    Unknown(String),
}

/// The future a resolver returns.
pub type Lookup<'a> = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'a>>;

/// Asks one tool's service for the outcome of a request by its idempotency key.
pub trait ToolResolver: Send + Sync {
    /// The outcome of `call`, which was requested but has no recorded result.
    fn lookup<'a>(&'a self, call: &'a PendingCall) -> Lookup<'a>;
}

/// A resolver for services that answer `GET {base_url}/{idempotency_key}` (the key
/// percent-encoded as one path segment) with
/// `200 {"outcome": "succeeded"|"failed", "output": "…"}` when the request ran and `404`
/// when it never arrived.
pub struct HttpResolver {
    base_url: String,
    http: reqwest::Client,
}

impl HttpResolver {
    /// A resolver asking the service at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }

    async fn ask(&self, call: &PendingCall) -> ToolOutcome {
        let Some(key) = call.idempotency_key.as_deref() else {
            return ToolOutcome::Unknown("the call has no idempotency key".into());
        };
        let Some(segment) = path_segment(key) else {
            return ToolOutcome::Unknown(format!(
                "the idempotency key {key:?} cannot be sent as one URL path segment"
            ));
        };
        let url = format!("{}/{segment}", self.base_url);
        let response = match self.http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => return ToolOutcome::Unknown(format!("GET {url}: {e}")),
        };
        match response.status().as_u16() {
            404 => ToolOutcome::NotExecuted,
            200 => match response.json::<serde_json::Value>().await {
                Ok(body) => {
                    let outcome = match body["outcome"].as_str() {
                        Some("succeeded") => CallOutcome::Succeeded,
                        Some("failed") => CallOutcome::Failed,
                        other => {
                            return ToolOutcome::Unknown(format!(
                                "GET {url}: unexpected outcome {other:?}"
                            ));
                        }
                    };
                    let output = body["output"].as_str().unwrap_or_default();
                    ToolOutcome::Executed {
                        outcome,
                        output: Content::plain(output),
                    }
                }
                Err(e) => ToolOutcome::Unknown(format!("GET {url}: unreadable body: {e}")),
            },
            status => ToolOutcome::Unknown(format!("GET {url}: status {status}")),
        }
    }
}

/// What may stand unescaped in a path segment: RFC 3986's unreserved characters.
const SEGMENT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `key` percent-encoded as one path segment, so that `#`, `?` or `/` in a key cannot re-target
/// the request to another call's outcome. Empty, `.` and `..` keys have no such encoding (URL
/// parsers treat `%2E%2E` as `..` too), so they are not sent: an operator decides.
fn path_segment(key: &str) -> Option<String> {
    if matches!(key, "" | "." | "..") {
        return None;
    }
    Some(utf8_percent_encode(key, SEGMENT_UNRESERVED).to_string())
}

impl ToolResolver for HttpResolver {
    fn lookup<'a>(&'a self, call: &'a PendingCall) -> Lookup<'a> {
        Box::pin(self.ask(call))
    }
}

/// The resolvers recovery may ask, by tool name.
#[derive(Clone, Default)]
pub struct Resolvers {
    by_tool: HashMap<String, Arc<dyn ToolResolver>>,
}

impl Resolvers {
    /// Resolvers configured as `tool -> base URL` of an HTTP resolver.
    pub fn http(urls: &std::collections::BTreeMap<String, String>) -> Self {
        let mut resolvers = Self::default();
        for (tool, url) in urls {
            resolvers.insert(tool, Arc::new(HttpResolver::new(url.clone())));
        }
        resolvers
    }

    /// Adds (or replaces) the resolver of `tool`.
    pub fn insert(&mut self, tool: &str, resolver: Arc<dyn ToolResolver>) {
        self.by_tool.insert(tool.to_string(), resolver);
    }

    /// The resolver of `tool`, if one is configured.
    pub fn get(&self, tool: &str) -> Option<&Arc<dyn ToolResolver>> {
        self.by_tool.get(tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;
    use sessionlog_schemas::EffectClass;
    use std::sync::Mutex;

    /// A tool service that records the raw path of every request and knows no call (404).
    async fn recording_service() -> (String, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let app = axum::Router::new().fallback(move |uri: Uri| {
            record.lock().unwrap().push(uri.path().to_string());
            async { axum::http::StatusCode::NOT_FOUND }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/charge/calls", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, seen)
    }

    fn call_with_key(key: &str) -> PendingCall {
        PendingCall {
            seq: 3,
            event_id: uuid::Uuid::nil(),
            tool: "charge".into(),
            effect: EffectClass::Idempotent,
            idempotency_key: Some(key.into()),
            requested_at: 0,
            resolution_required: None,
            epoch: None,
        }
    }

    #[tokio::test]
    async fn the_key_is_sent_as_one_path_segment_whatever_it_holds() {
        let (url, seen) = recording_service().await;
        let resolver = HttpResolver::new(url);
        for (key, path) in [
            ("plain-key_1.2~", "/charge/calls/plain-key_1.2~"),
            ("k#1", "/charge/calls/k%231"),
            ("k?other=1", "/charge/calls/k%3Fother%3D1"),
            ("a/../../admin", "/charge/calls/a%2F..%2F..%2Fadmin"),
            (
                "spaces and ünïcode",
                "/charge/calls/spaces%20and%20%C3%BCn%C3%AFcode",
            ),
        ] {
            seen.lock().unwrap().clear();
            assert_eq!(
                resolver.lookup(&call_with_key(key)).await,
                ToolOutcome::NotExecuted
            );
            assert_eq!(*seen.lock().unwrap(), [path], "key {key:?}");
        }
    }

    #[tokio::test]
    async fn a_key_that_is_a_dot_segment_is_not_sent_and_needs_an_operator() {
        let (url, seen) = recording_service().await;
        let resolver = HttpResolver::new(url);
        for key in [".", "..", ""] {
            let outcome = resolver.lookup(&call_with_key(key)).await;
            assert!(
                matches!(outcome, ToolOutcome::Unknown(_)),
                "key {key:?}: {outcome:?}"
            );
        }
        assert!(
            seen.lock().unwrap().is_empty(),
            "{:?}",
            seen.lock().unwrap()
        );
    }
}
