//! An ingest service of the test's own, in process, on an ephemeral port: one "instance" of a
//! fleet. Several share a stack the way instances behind a load balancer share a cluster.

use crate::TestStack;
use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::Value;
use sessionlog_ingest::Ingest;
use sessionlog_producer::EventLog;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use tokio::sync::oneshot;

/// The writer token last handed out for each session (by create, claim or resume), as a
/// harness keeps it: [`IngestInstance::post`] presents it, whichever instance it talks to.
static WRITER_TOKENS: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Default::default);

/// Keeps the writer token an answer hands out (create, claim, resume) for its session.
pub fn remember_writer_token(answer: &Value) {
    let session = answer["session_id"]
        .as_str()
        .or_else(|| answer["state"]["session_id"].as_str());
    if let (Some(session), Some(token)) = (session, answer["writer_token"].as_str()) {
        WRITER_TOKENS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session.to_string(), token.to_string());
    }
}

/// The writer token last handed out for `session`, if any.
pub fn writer_token(session: &str) -> Option<String> {
    WRITER_TOKENS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(session)
        .cloned()
}

/// The session a `/v1/sessions/{id}/...` (or `/sessions/{id}/...`) path names.
fn session_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    rest.strip_prefix("/sessions/")?.split('/').next()
}

/// `request` presenting the writer token last handed out for the session `path` names, if
/// any: what a harness sends with every append, checkpoint and close.
pub fn presenting_writer_token(
    request: reqwest::RequestBuilder,
    path: &str,
) -> reqwest::RequestBuilder {
    match session_of(path).and_then(writer_token) {
        Some(token) => request.header("sessionlog-writer-token", token),
        None => request,
    }
}

/// A running ingest service, stopped when dropped.
pub struct IngestInstance {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// The instance's own handle on the log (its own producer).
    pub log: Arc<EventLog>,
    http: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl IngestInstance {
    /// Starts an instance with `stack`'s settings.
    pub async fn start(stack: &TestStack) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let access = Arc::new(sessionlog_http::Access::from_settings(&stack.settings.auth).await?);
        let ingest = Ingest::connect(&stack.settings, access).await?;
        let log = Arc::clone(ingest.log());
        tokio::spawn(async move {
            let _ = ingest
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            base,
            log,
            http: crate::auth::client()?,
            _stop: stop,
        })
    }

    /// POSTs `body` as JSON, presenting the writer token last handed out for the session the
    /// path names (as a harness does); the status and the JSON answer. A token an answer hands
    /// out is kept.
    pub async fn post(&self, path: &str, body: Value) -> Result<(StatusCode, Value)> {
        let token = session_of(path).and_then(writer_token);
        self.post_with_token(path, body, token.as_deref()).await
    }

    /// POSTs `body` as JSON presenting `token` as the writer token (none: no header).
    pub async fn post_with_token(
        &self,
        path: &str,
        body: Value,
        token: Option<&str>,
    ) -> Result<(StatusCode, Value)> {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(token) = token {
            request = request.header("sessionlog-writer-token", token);
        }
        let response = request.send().await?;
        let status = response.status();
        let answer: Value = response.json().await.context("a JSON body")?;
        remember_writer_token(&answer);
        Ok((status, answer))
    }

    /// POSTs `body` as it is, labelled JSON (presenting the session's writer token, as
    /// [`Self::post`] does).
    pub async fn post_raw(&self, path: &str, body: String) -> Result<(StatusCode, Value)> {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        let response = presenting_writer_token(request, path).send().await?;
        let status = response.status();
        Ok((status, response.json().await.context("a JSON body")?))
    }

    /// GETs `path`; the status and the body as text.
    pub async fn get(&self, path: &str) -> Result<(StatusCode, String)> {
        let response = self.http.get(format!("{}{path}", self.base)).send().await?;
        Ok((response.status(), response.text().await?))
    }
}

/// A `UserRequest` event of an append request.
pub fn user_request(seq: u64, id: &uuid::Uuid, text: &str) -> Value {
    serde_json::json!({ "seq": seq, "event_id": id, "kind": "UserRequest", "data": { "content": { "Plain": text } } })
}
