//! Helpers for the recovery tests: a counting tool service, the killable tool harness process,
//! and probes of the log (partition end offsets, a session's accepted events).

use crate::{ChildGuard, TestStack};
use anyhow::{Context, Result, bail};
use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use sessionlog_log::PartitionReader;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{LoggedEvent, Recovery};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, ResultSource, SessionEvent, SessionId, TerminalOutcome,
};
use sessionlog_session::SessionState;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// What the service did for one `(tool, key)`.
#[derive(Clone, Debug, Default)]
struct Call {
    /// Side effects performed (each POST that was not absorbed by idempotency).
    effects: u64,
    /// The first result, returned again to repeats of an idempotent call.
    output: String,
}

#[derive(Default)]
struct Ledger {
    idempotent: HashSet<String>,
    calls: Mutex<HashMap<(String, String), Call>>,
    lookups: Mutex<HashMap<(String, String), u64>>,
}

/// A counting stand-in for external tools, served on `127.0.0.1:0`.
///
/// `POST /{tool}/calls/{key}` performs the effect: for a tool declared idempotent a repeat of
/// a key returns the first result without a new effect; for any other tool every POST is a new
/// effect. `GET /{tool}/calls/{key}` answers as `HttpResolver` expects: `200` with the outcome
/// when the call ran, `404` when it never arrived.
pub struct ToolService {
    addr: SocketAddr,
    ledger: Arc<Ledger>,
    server: tokio::task::JoinHandle<()>,
}

impl ToolService {
    /// Starts the service; `idempotent` names the tools that honour idempotency keys.
    pub async fn start(idempotent: &[&str]) -> Result<Self> {
        let ledger = Arc::new(Ledger {
            idempotent: idempotent.iter().map(|t| t.to_string()).collect(),
            ..Ledger::default()
        });
        let app = Router::new()
            .route("/{tool}/calls/{key}", post(perform).get(lookup))
            .with_state(Arc::clone(&ledger));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            ledger,
            server,
        })
    }

    /// The base URL the harness calls tools under.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL an `HttpResolver` for `tool` asks (`GET {base}/{key}`).
    pub fn resolver_url(&self, tool: &str) -> String {
        format!("{}/{tool}/calls", self.url())
    }

    /// Side effects performed for `(tool, key)`.
    pub fn effects(&self, tool: &str, key: &str) -> u64 {
        lock(&self.ledger.calls)
            .get(&(tool.to_string(), key.to_string()))
            .map_or(0, |c| c.effects)
    }

    /// How often a resolver asked about `(tool, key)`.
    pub fn lookups(&self, tool: &str, key: &str) -> u64 {
        lock(&self.ledger.lookups)
            .get(&(tool.to_string(), key.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// Issues the call as a harness would (e.g. a re-issue with the same key); returns its output.
    pub async fn call(&self, tool: &str, key: &str) -> Result<String> {
        Ok(reqwest::Client::new()
            .post(format!("{}/{tool}/calls/{key}", self.url()))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?)
    }
}

impl Drop for ToolService {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking handler must not hide the counts from the assertions.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn perform(
    State(ledger): State<Arc<Ledger>>,
    Path((tool, key)): Path<(String, String)>,
) -> String {
    let idempotent = ledger.idempotent.contains(&tool);
    let mut calls = lock(&ledger.calls);
    let call = calls.entry((tool.clone(), key)).or_default();
    if idempotent && call.effects > 0 {
        return call.output.clone();
    }
    call.effects += 1;
    call.output = format!("{tool} effect #{}", call.effects);
    call.output.clone()
}

async fn lookup(
    State(ledger): State<Arc<Ledger>>,
    Path((tool, key)): Path<(String, String)>,
) -> Response {
    let id = (tool, key);
    *lock(&ledger.lookups).entry(id.clone()).or_default() += 1;
    match lock(&ledger.calls).get(&id) {
        Some(call) if call.effects > 0 => Json(serde_json::json!({
            "outcome": "succeeded",
            "output": call.output,
        }))
        .into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A step of a tool call at which the harness process is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Before the request is recorded.
    BeforeRequest,
    /// After the request is recorded, before the call.
    BeforeCall,
    /// After the call, before its result is recorded.
    BeforeResult,
    /// After the result is recorded.
    AfterResult,
}

impl Step {
    /// Every step, in the order the harness reaches them.
    pub const ALL: [Step; 4] = [
        Step::BeforeRequest,
        Step::BeforeCall,
        Step::BeforeResult,
        Step::AfterResult,
    ];

    fn marker(self) -> &'static str {
        match self {
            Step::BeforeRequest => "a",
            Step::BeforeCall => "b",
            Step::BeforeResult => "c",
            Step::AfterResult => "d",
        }
    }
}

/// What a killed harness left behind.
#[derive(Debug)]
pub struct KilledHarness {
    /// Its session.
    pub session: SessionId,
    /// The idempotency key of its tool call.
    pub key: String,
    /// Every event it saw acknowledged, as `(seq, event id)`.
    pub acked: Vec<(u64, Uuid)>,
}

/// Runs the harness binary at `bin` (`env!("CARGO_BIN_EXE_tool_harness")`) for one call of
/// `tool` with `effect` (`pure`, `idempotent`, `non-idempotent`), waits until it reports
/// reaching `step`, and kills it with SIGKILL there.
pub async fn run_harness_until(
    bin: &str,
    stack: &TestStack,
    service: &ToolService,
    tool: &str,
    effect: &str,
    step: Step,
) -> Result<KilledHarness> {
    let mut child = ChildGuard(
        crate::served::command_with(std::path::Path::new(bin), &stack.settings)?
            .args([&service.url(), tool, effect, step.marker()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawning the tool harness")?,
    );
    let stdout = child.0.stdout.take().context("harness stdout")?;
    let marker = format!("step {}", step.marker());
    // Reading blocks; the harness either reaches the marker or exits (EOF) on an error.
    let reader = tokio::task::spawn_blocking(move || -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            let done = line == marker;
            lines.push(line);
            if done {
                return Ok(lines);
            }
        }
        bail!("the harness exited before {marker}: {lines:?}")
    });
    let lines = match tokio::time::timeout(Duration::from_secs(60), reader).await {
        Ok(joined) => joined??,
        // Dropping the guard kills the harness, which ends the blocked read.
        Err(_) => bail!("the harness did not reach step {} in 60s", step.marker()),
    };
    // kill -9 at exactly this step: the harness is parked on stdin, nothing is in flight.
    child.0.kill()?;
    child.0.wait()?;

    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(name).map(str::to_string))
            .with_context(|| format!("no `{name}` line in {lines:?}"))
    };
    let session = SessionId(field("session ")?.parse()?);
    let key = field("key ")?;
    let acked = lines
        .iter()
        .filter_map(|l| l.strip_prefix("acked "))
        .map(|rest| {
            let (seq, id) = rest.split_once(' ').context("acked line")?;
            Ok((seq.parse()?, id.parse()?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(KilledHarness {
        session,
        key,
        acked,
    })
}

/// The end offset (next offset to be written) of `session`'s partition.
pub async fn end_offset(recovery: &Recovery, session: SessionId) -> Result<i64> {
    let settings = recovery.settings();
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    Ok(reader.watermarks(recovery.partition_of(session)).await?.1)
}

/// Every event of `session` the fold accepted, read from its first event.
pub async fn accepted_events(recovery: &Recovery, session: SessionId) -> Result<Vec<LoggedEvent>> {
    let mut events = Vec::new();
    recovery
        .rebuild_with(session, Some(0), |e, _| {
            if e.accepted {
                events.push(e.clone());
            }
        })
        .await?;
    Ok(events)
}

/// Fails unless every `(seq, event id)` in `acked` is among `session`'s accepted events.
pub async fn assert_all_acked_accepted(
    recovery: &Recovery,
    session: SessionId,
    acked: &[(u64, Uuid)],
) -> Result<()> {
    let accepted: HashSet<(u64, Uuid)> = accepted_events(recovery, session)
        .await?
        .into_iter()
        .map(|e| (e.envelope.seq, e.envelope.event_id))
        .collect();
    for event in acked {
        if !accepted.contains(event) {
            bail!("acknowledged event {event:?} is not in the rebuilt history of {session}");
        }
    }
    Ok(())
}

/// A small deterministic generator (xorshift64*): tests print the seed so a failure replays.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; zero is avoided).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Appends one random session (seeded): a mix of requests, model responses, tool calls of
/// every effect class (some left without a result), plan updates, steering, approvals and
/// checkpoints, sometimes ended. Returns the writer's own fold of what it appended.
pub async fn random_session(log: Arc<EventLog>, seed: u64) -> Result<SessionState> {
    let mut rng = Rng::new(seed);
    let (mut writer, _) = SessionWriter::create(log, "random-agent", None).await?;
    let length = 3 + rng.below(40);
    let mut pending: Vec<(u64, Uuid)> = Vec::new();
    for i in 0..length {
        match rng.below(8) {
            0 => {
                writer.user_request(&format!("request {i}")).await?;
            }
            1 => {
                writer
                    .append(SessionEvent::ModelResponse {
                        model: "m".into(),
                        tokens_in: rng.below(1000),
                        tokens_out: rng.below(100),
                        cost_micros: rng.below(500),
                        started_at: crate::projector::now_micros(),
                        content: Content::plain(format!("answer {i}")),
                        cache_read_tokens: 0,
                        cache_creation_tokens: 0,
                        provider: None,
                    })
                    .await?;
            }
            // No new intent while an approval is pending: the fold refuses it (a request then).
            2 if !writer.state().pending_approvals.is_empty() => {
                writer.user_request(&format!("request {i}")).await?;
            }
            2 => {
                let effect = [
                    EffectClass::Pure,
                    EffectClass::Idempotent,
                    EffectClass::NonIdempotent,
                ][rng.below(3) as usize];
                let call = writer
                    .append_with(
                        SessionEvent::ToolCallRequested {
                            tool: format!("tool{}", rng.below(3)),
                            arguments: Content::plain("{}"),
                            effect,
                            approval_id: None,
                        },
                        None,
                        Some(format!("{seed}-{i}")),
                    )
                    .await?;
                pending.push((call.envelope.seq, call.envelope.event_id));
            }
            3 if !pending.is_empty() => {
                let (call_seq, id) = pending.remove(rng.below(pending.len() as u64) as usize);
                writer
                    .append_with(
                        SessionEvent::ToolCallResult {
                            call_seq,
                            outcome: if rng.below(4) == 0 {
                                CallOutcome::Failed
                            } else {
                                CallOutcome::Succeeded
                            },
                            output: Content::plain("out"),
                            source: ResultSource::Executed,
                            recorded_by: None,
                            note: None,
                        },
                        Some(id),
                        None,
                    )
                    .await?;
            }
            4 => {
                writer
                    .append(SessionEvent::PlanUpdated {
                        plan: Content::plain(format!("plan {i}")),
                    })
                    .await?;
            }
            5 => {
                writer
                    .append(SessionEvent::SteeringMessage {
                        // A harness's own note, in its writer's name.
                        author: writer.state().writer_name().unwrap_or_default().to_string(),
                        content: Content::plain("steer"),
                    })
                    .await?;
            }
            6 => {
                let open = writer.state().pending_approvals.values().next().cloned();
                match open {
                    // A decision names its request and is signed. The fold checks that it
                    // carries an attestation, not whose (recovery's notary does), so a stand-in
                    // signature serves a test of what the fold folds.
                    Some(request) => {
                        let mut decision = writer
                            .envelopes(vec![SessionEvent::ApprovalDecided {
                                approval_id: request.approval_id,
                                approved: rng.below(2) == 0,
                                decided_by: "alice".into(),
                                reason: None,
                                action_digest: request.action_digest,
                                request_seq: Some(request.seq),
                            }])
                            .pop()
                            .context("an envelope")?;
                        decision.attestation = Some(sessionlog_schemas::Attestation {
                            key_id: "test-stand-in".into(),
                            signature: vec![1; 64],
                        });
                        writer.append_envelope(decision).await?;
                    }
                    None => {
                        writer
                            .append(SessionEvent::ApprovalRequested {
                                approval_id: format!("a{i}"),
                                action: "act".into(),
                                action_digest: None,
                            })
                            .await?;
                    }
                }
            }
            _ => {
                writer.checkpoint(None).await?;
            }
        }
    }
    match rng.below(3) {
        0 => {
            writer.close(TerminalOutcome::Completed, None).await?;
        }
        1 => {
            writer
                .close(TerminalOutcome::Failed, Some("gave up".into()))
                .await?;
        }
        _ => {}
    }
    Ok(writer.state().clone())
}

/// An envelope of `session` at its current epoch and next seq, as a harness writing straight to
/// Kafka would make it (no writer's fold judges it first).
pub async fn raw_next(
    recovery: &Recovery,
    session: SessionId,
    event: SessionEvent,
) -> Result<sessionlog_schemas::EventEnvelope> {
    let state = recovery.rebuild(session).await?.state;
    Ok(sessionlog_schemas::EventEnvelope::new(
        session,
        state.next_seq(),
        state.epoch,
        event,
    ))
}
