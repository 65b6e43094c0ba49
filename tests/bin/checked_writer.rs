//! The Rust library's writer for the checked-history driver (`tests/checked`, `scripts/soak
//! --checked`): the driver is Go and speaks HTTP, so its library writers ask this process, one
//! JSON line a request on stdin, one JSON line an answer on stdout, tagged with the request's
//! `id` (requests of different sessions run at once; one session's wait for each other).
//!
//! Requests, with the stack's settings in the environment (the soak corner's):
//! - `{"id": 1, "op": "claim", "session": "…", "writer": "w2"}`: `SessionWriter::claim`;
//!   answers `epoch`, `next_seq`, `claim_seq`, `claim_id`;
//! - `{"id": 2, "op": "append", "session": "…", "seq": 7, "event_id": "…"}`: a `UserRequest`
//!   at that seq with that event id, through `SessionWriter::append_confirmed` on the writer the
//!   last claim of that session made; answers `next_seq`, `partition`, `offset`, `duplicate`.
//!
//! Every answer has `status`: `ok`, `refused` (the library's error answers 4xx over HTTP:
//! nothing it did took effect) or `unknown` (5xx, or anything else: it may have taken effect),
//! with `code` (the HTTP problem's code) when not ok. The driver classifies HTTP answers the
//! same way, so both doors are held to one model.

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::{Value, json};
use sessionlog_http::Problem;
use sessionlog_log::Settings;
use sessionlog_producer::{EventLog, ProducerOptions, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex as AsyncMutex;

/// One request of the driver.
#[derive(Deserialize)]
struct Request {
    id: u64,
    op: String,
    session: SessionId,
    #[serde(default)]
    writer: String,
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    event_id: Option<uuid::Uuid>,
}

/// Each session's writer, from its last successful claim here.
type Writers = Arc<Mutex<HashMap<SessionId, Arc<AsyncMutex<Option<SessionWriter>>>>>>;

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::load(None).context("loading settings from the environment")?;
    let log = Arc::new(EventLog::connect(&settings, ProducerOptions::default()).await?);
    let writers: Writers = Arc::default();
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let printer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(answer) = answered.recv().await {
            let mut line = answer.to_string();
            line.push('\n');
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let request: Request = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(e) => {
                let _ =
                    answers.send(json!({"status": "refused", "code": format!("bad request: {e}")}));
                continue;
            }
        };
        let slot = Arc::clone(
            writers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(request.session)
                .or_default(),
        );
        let (log, answers) = (Arc::clone(&log), answers.clone());
        tokio::spawn(async move {
            let mut answer = serve(&log, &slot, &request).await;
            answer["id"] = json!(request.id);
            let _ = answers.send(answer);
        });
    }
    drop(answers);
    let _ = printer.await;
    Ok(())
}

/// Does one request on its session's writer.
async fn serve(
    log: &Arc<EventLog>,
    slot: &AsyncMutex<Option<SessionWriter>>,
    request: &Request,
) -> Value {
    let mut held = slot.lock().await;
    match request.op.as_str() {
        "claim" => {
            match SessionWriter::claim(Arc::clone(log), request.session, &request.writer).await {
                Ok((writer, claim)) => {
                    let answer = json!({
                        "status": "ok",
                        "epoch": writer.epoch(),
                        "next_seq": writer.next_seq(),
                        "claim_seq": claim.envelope.seq,
                        "claim_id": claim.envelope.event_id,
                    });
                    *held = Some(writer);
                    answer
                }
                Err(e) => failed(e),
            }
        }
        "append" => {
            let Some(writer) = held.as_mut() else {
                return json!({"status": "refused", "code": "no_writer_here"});
            };
            let Some(event_id) = request.event_id else {
                return json!({"status": "refused", "code": "bad request: no event_id"});
            };
            let mut envelope = writer
                .envelopes(vec![SessionEvent::UserRequest {
                    content: Content::plain(format!("checked {}", request.seq)),
                }])
                .remove(0);
            envelope.seq = request.seq;
            envelope.event_id = event_id;
            match writer.append_confirmed(vec![envelope]).await {
                Ok(mut confirmed) => match confirmed.pop() {
                    Some(c) => json!({
                        "status": "ok",
                        "next_seq": writer.next_seq(),
                        "partition": c.appended.position.partition,
                        "offset": c.appended.position.offset,
                        "duplicate": c.duplicate,
                    }),
                    None => json!({"status": "unknown", "code": "no answer for the event"}),
                },
                Err(e) => failed(e),
            }
        }
        other => json!({"status": "refused", "code": format!("bad request: op {other}")}),
    }
}

/// A library error as the driver records it: what it would answer over HTTP.
fn failed(error: sessionlog_producer::Error) -> Value {
    let problem = Problem::from(error);
    let status = if problem.status.is_client_error() {
        "refused"
    } else {
        "unknown"
    };
    json!({"status": status, "code": problem.code})
}
