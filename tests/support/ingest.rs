//! An ingest service of the test's own, in process, on an ephemeral port: one "instance" of a
//! fleet. Several share a stack the way instances behind a load balancer share a cluster.

use crate::TestStack;
use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::Value;
use sessionlog_ingest::Ingest;
use sessionlog_producer::EventLog;
use std::sync::Arc;
use tokio::sync::oneshot;

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

    /// POSTs `body` as JSON; the status and the JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> Result<(StatusCode, Value)> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        Ok((status, response.json().await.context("a JSON body")?))
    }

    /// POSTs `body` as it is, labelled JSON.
    pub async fn post_raw(&self, path: &str, body: String) -> Result<(StatusCode, Value)> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
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
