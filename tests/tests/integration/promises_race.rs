//! Kill-and-race of the promises (issue 35): two harnesses (one over HTTP through two ingest
//! instances, one through the Rust library), two recovery instances and an operator race on
//! one session at a time, through every path, for a few hundred rounds: create, claim (HTTP and
//! library), resume (either recovery instance, settling in-doubt calls as it says), tool calls
//! of every effect class counted by a tool service, approvals requested, decided by two racing
//! approvers and acted on by two racing harnesses, in-doubt calls recorded by two racing
//! operators, harnesses killed between a call's effect and its result, and fenced writers that
//! go on writing (over HTTP with their old epoch or token, and straight to Kafka with their
//! stale epoch). Each session is then folded from the log, and:
//!
//! - nothing answered 2xx/Ok is lost: every acknowledged event is accepted, and a decision or
//!   an operator's record answered Ok is the one in force (the service supersedes only records
//!   it cannot verify; all of these carry its signature);
//! - no side effect happens twice: per idempotency key the tool service saw at most one effect
//!   (pure calls may run again), only for a key of an accepted intent, an intent is accepted
//!   once per key, and an operator's record says a call ran exactly when it did;
//! - no event is accepted from a fenced writer: no accepted write was sent after a claim of a
//!   later epoch was acknowledged, no write of a writer that had heard `fenced` is accepted or
//!   answered 2xx, and the accepted events' epochs only go up, with seqs gap-free.
//!
//! `PROMISES_RACE_SEED` replays a run's choices (the timing is the machine's own);
//! `PROMISES_RACE_ROUNDS` sets the number of rounds (25 per session).

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{HttpResolver, Recovery, Resolution, Resolvers};
use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, CallOutcome, Content, EffectClass, Epoch, EventEnvelope, ResultSource,
    SessionEvent, SessionId, call_digest, now_micros,
};
use sessionlog_session::PendingCall;
use sessionlog_testkit::TestStack;
use sessionlog_testkit::ingest::IngestInstance;
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::recovery::{Rng, ToolService, accepted_events};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Rounds of the whole run, unless `PROMISES_RACE_ROUNDS` says otherwise.
const ROUNDS: usize = 250;
/// Rounds on one session before the next one starts.
const ROUNDS_PER_SESSION: usize = 25;
/// How long one round may take: every actor's requests are answered well within it.
const ROUND_DEADLINE: Duration = Duration::from_secs(120);
/// Tokens of context a resumed harness asks for.
const CONTEXT_BUDGET: Option<usize> = Some(4_000);
/// A non-idempotent tool: every request is a new effect, and it has no resolver.
const CHARGE: &str = "charge";
/// An idempotent tool: the service absorbs a repeated key, and a resolver asks it.
const REFUND: &str = "refund";
/// A pure tool: it may run again.
const SEARCH: &str = "search";

/// One write some actor sent: accepted or not, it was sent no earlier than `sent`.
struct Write {
    id: Uuid,
    epoch: Epoch,
    sent: Instant,
}

/// A write by a writer that had heard it was fenced.
struct ZombieWrite {
    id: Uuid,
    what: String,
    answered_2xx: bool,
}

/// A decision or an operator's record the recovery service answered Ok.
struct Recorded {
    /// The approval id, or the call seq.
    what: String,
    by: String,
    /// Approved, or the outcome recorded.
    value: String,
    seq: u64,
}

/// Records answered Ok, as a failure lists them.
fn listed(records: &[&Recorded]) -> String {
    let each: Vec<String> = records
        .iter()
        .map(|r| format!("{} by {} at seq {}", r.value, r.by, r.seq))
        .collect();
    each.join(", ")
}

/// A call an approval request names.
struct Plan {
    key: String,
    arguments: String,
}

/// Counts over the whole run.
#[derive(Default)]
struct Totals {
    rounds: usize,
    acked: u64,
    effects: u64,
    effects_again: u64,
    kills: u64,
    fenced: u64,
    zombie_writes: u64,
    decisions: u64,
    resolutions: u64,
    resumes: u64,
    http_claims: u64,
    library_claims: u64,
    acted_on_approvals: u64,
    refusals: BTreeMap<String, u64>,
}

/// What the actors were told, for the audit; the session's part is emptied when it ends.
#[derive(Default)]
struct Book {
    /// Every event answered 2xx/Ok (confirmed), with what it was.
    acked: Vec<(Uuid, String)>,
    writes: Vec<Write>,
    /// Claims acknowledged (by every path), as `(epoch, when the answer arrived)`.
    claims: Vec<(Epoch, Instant)>,
    zombies: Vec<ZombieWrite>,
    decisions: Vec<Recorded>,
    resolutions: Vec<Recorded>,
    plans: BTreeMap<String, Plan>,
    /// The last Ok decision on each approval.
    decided: BTreeMap<String, bool>,
    /// Approvals a call acting on them was answered Ok for.
    acted: BTreeSet<String>,
    /// Every idempotency key a harness used, with its tool.
    keys: BTreeMap<String, &'static str>,
    totals: Totals,
}

impl Book {
    fn refused(&mut self, kind: String) {
        *self.totals.refusals.entry(kind).or_default() += 1;
    }
}

/// Everything the actors share.
struct World {
    ingest: [IngestInstance; 2],
    recovery: [Recovery; 2],
    /// The library harness's log.
    log: Arc<EventLog>,
    /// Writes straight to Kafka, judged by nobody before the fold.
    raw: Arc<EventLog>,
    tools: ToolService,
    book: Mutex<Book>,
}

impl World {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sent(&self, id: Uuid, epoch: Epoch, sent: Instant) {
        self.book().writes.push(Write { id, epoch, sent });
    }

    fn acked(&self, id: Uuid, what: impl Into<String>) {
        let mut book = self.book();
        book.acked.push((id, what.into()));
        book.totals.acked += 1;
    }

    fn claimed(&self, epoch: Epoch) {
        self.book().claims.push((epoch, Instant::now()));
    }

    fn refused(&self, kind: String) {
        self.book().refused(kind);
    }
}

/// How a harness reaches the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Http,
    Library,
}

/// What a harness holds of the session.
enum Hold {
    Free,
    Http {
        epoch: Epoch,
        token: String,
        next_seq: u64,
    },
    Library(Box<SessionWriter>),
}

/// The answer to one append.
enum Answer {
    Kept { seq: u64, id: Uuid },
    Fenced { current: Option<Epoch> },
    Refused,
}

struct Harness {
    name: &'static str,
    via: Via,
    hold: Hold,
    rng: Rng,
    calls: u64,
}

/// An event as an append request carries it.
fn incoming(
    seq: u64,
    id: Uuid,
    event: &SessionEvent,
    causation: Option<Uuid>,
    key: Option<&str>,
) -> Result<Value> {
    let tagged = serde_json::to_value(event)?;
    let (kind, data) = tagged
        .as_object()
        .and_then(|o| o.iter().next())
        .context("an externally tagged event")?;
    Ok(
        json!({ "seq": seq, "event_id": id, "kind": kind, "data": data,
        "causation_id": causation, "idempotency_key": key }),
    )
}

fn producer_kind(e: &sessionlog_producer::Error) -> String {
    use sessionlog_producer::Error as P;
    match e {
        P::Fenced { .. } => "fenced".into(),
        P::LostClaim { .. } => "lost_claim".into(),
        P::Refused(r) => format!("refused {}", r.label()),
        P::Rejected { rejection, .. } => format!("rejected {}", rejection.label()),
        other => format!("error {other}"),
    }
}

fn recovery_kind(e: &sessionlog_recovery::Error) -> String {
    use sessionlog_recovery::Error as R;
    match e {
        R::NeedsResolution { .. } => "needs_resolution".into(),
        R::AwaitingApproval { .. } => "awaiting_approval".into(),
        R::NoSuchApproval { .. } => "no_such_approval".into(),
        R::NotInDoubt { .. } => "not_in_doubt".into(),
        R::Unverified { .. } => "unverified".into(),
        R::Producer(p) => producer_kind(p),
        other => format!("error {other}"),
    }
}

async fn jitter(rng: &mut Rng, up_to_ms: u64) {
    // Random delays to provoke races, not waits for anything.
    tokio::time::sleep(Duration::from_millis(rng.below(up_to_ms))).await;
}

fn tool_of(name: &str) -> &'static str {
    match name {
        CHARGE => CHARGE,
        REFUND => REFUND,
        _ => SEARCH,
    }
}

impl Harness {
    fn new(name: &'static str, via: Via, seed: u64) -> Self {
        Self {
            name,
            via,
            hold: Hold::Free,
            rng: Rng::new(seed),
            calls: 0,
        }
    }

    fn path(session: SessionId) -> String {
        format!("/v1/sessions/{session}/events")
    }

    /// Appends one event as the holder, confirmed: HTTP answers 2xx only once the fold
    /// accepted it, and the library's confirmed append likewise.
    async fn append(
        &mut self,
        w: &World,
        session: SessionId,
        event: SessionEvent,
        causation: Option<Uuid>,
        key: Option<String>,
        what: &str,
    ) -> Result<Answer> {
        let instance = &w.ingest[self.rng.below(2) as usize];
        match &mut self.hold {
            Hold::Free => Ok(Answer::Refused),
            Hold::Http {
                epoch,
                token,
                next_seq,
            } => {
                let (id, seq) = (Uuid::now_v7(), *next_seq);
                let body = json!({ "epoch": *epoch,
                    "events": [incoming(seq, id, &event, causation, key.as_deref())?] });
                w.sent(id, *epoch, Instant::now());
                let (status, answer) = instance
                    .post_with_token(&Self::path(session), body, Some(token))
                    .await?;
                if status.is_success() {
                    ensure!(
                        answer["events"][0]["event_id"] == json!(id),
                        "a 2xx for another event than {id}: {answer}"
                    );
                    *next_seq = answer["next_seq"].as_u64().context("next_seq")?;
                    w.acked(id, format!("{what} (HTTP, {})", self.name));
                    return Ok(Answer::Kept { seq, id });
                }
                let code = answer["code"].as_str().unwrap_or("?");
                if code == "fenced" {
                    return Ok(Answer::Fenced {
                        current: answer["current_epoch"].as_u64(),
                    });
                }
                if let Some(expected) = answer["expected_seq"].as_u64() {
                    *next_seq = expected;
                }
                w.refused(format!("http {what}: {status} {code}"));
                Ok(Answer::Refused)
            }
            Hold::Library(writer) => {
                let mut envelope = writer.envelopes(vec![event]).pop().context("an envelope")?;
                envelope.causation_id = causation;
                envelope.idempotency_key = key;
                let (id, seq) = (envelope.event_id, envelope.seq);
                w.sent(id, envelope.writer_epoch, Instant::now());
                match writer.append_confirmed(vec![envelope]).await {
                    Ok(_) => {
                        w.acked(id, format!("{what} (library, {})", self.name));
                        Ok(Answer::Kept { seq, id })
                    }
                    Err(sessionlog_producer::Error::Fenced { current, .. }) => Ok(Answer::Fenced {
                        current: Some(current),
                    }),
                    Err(e) => {
                        w.refused(format!("library {what}: {}", producer_kind(&e)));
                        Ok(Answer::Refused)
                    }
                }
            }
        }
    }

    /// One round of this harness: perhaps (re)take the session, then one step.
    async fn turn(&mut self, w: &World, session: SessionId) -> Result<()> {
        jitter(&mut self.rng, 40).await;
        if matches!(self.hold, Hold::Free) || self.rng.below(4) == 0 {
            self.acquire(w, session).await?;
            jitter(&mut self.rng, 15).await;
        }
        self.step(w, session).await
    }

    /// Takes the session over by a claim (HTTP or library) or a resume through either recovery
    /// instance; a hold it had is fenced by its own claim, and may go on writing as a zombie.
    async fn acquire(&mut self, w: &World, session: SessionId) -> Result<()> {
        let previous = std::mem::replace(&mut self.hold, Hold::Free);
        let path = self.rng.below(4);
        let taken = match path {
            0 | 1 => self.resume(w, session, path as usize).await?,
            _ if self.via == Via::Http => {
                let instance = &w.ingest[self.rng.below(2) as usize];
                let (status, answer) = instance
                    .post_with_token(
                        &format!("/v1/sessions/{session}/claim"),
                        json!({ "writer": self.name }),
                        None,
                    )
                    .await?;
                if status.is_success() {
                    let epoch = answer["epoch"].as_u64().context("epoch")?;
                    w.claimed(epoch);
                    let id: Uuid = serde_json::from_value(answer["event"]["event_id"].clone())?;
                    w.acked(id, format!("an HTTP claim ({})", self.name));
                    w.book().totals.http_claims += 1;
                    Some(Hold::Http {
                        epoch,
                        token: answer["writer_token"]
                            .as_str()
                            .context("writer token")?
                            .to_string(),
                        next_seq: answer["next_seq"].as_u64().context("next_seq")?,
                    })
                } else {
                    let code = answer["code"].as_str().unwrap_or("?");
                    w.refused(format!("http claim: {status} {code}"));
                    None
                }
            }
            _ => match SessionWriter::claim(Arc::clone(&w.log), session, self.name).await {
                Ok((writer, claim)) => {
                    w.claimed(writer.epoch());
                    w.acked(
                        claim.envelope.event_id,
                        format!("a library claim ({})", self.name),
                    );
                    w.book().totals.library_claims += 1;
                    Some(Hold::Library(Box::new(writer)))
                }
                Err(e) => {
                    w.refused(format!("library claim: {}", producer_kind(&e)));
                    None
                }
            },
        };
        match taken {
            Some(hold) => {
                let current = match &hold {
                    Hold::Http { epoch, .. } => Some(*epoch),
                    Hold::Library(writer) => Some(writer.epoch()),
                    Hold::Free => None,
                };
                self.hold = hold;
                if !matches!(previous, Hold::Free) && self.rng.below(2) == 0 {
                    self.haunt(w, session, previous, current).await?;
                }
            }
            None => self.hold = previous,
        }
        Ok(())
    }

    /// Resumes through recovery instance `i`, and settles the calls it hands over as it says:
    /// a pure one runs again, an idempotent one the service never received is issued again
    /// with its key; either way the result is recorded.
    async fn resume(&mut self, w: &World, session: SessionId, i: usize) -> Result<Option<Hold>> {
        let mut bundle = match w.recovery[i]
            .resume(session, self.name, CONTEXT_BUDGET)
            .await
        {
            Ok(bundle) => bundle,
            Err(e) => {
                w.refused(format!("resume: {}", recovery_kind(&e)));
                return Ok(None);
            }
        };
        w.claimed(bundle.epoch);
        w.book().totals.resumes += 1;
        for resolved in &bundle.resolved {
            w.acked(resolved.envelope.event_id, "a resolver's result (resume)");
        }
        self.hold = match self.via {
            Via::Library => Hold::Library(Box::new(
                bundle.writer.take().context("the bundle's writer")?,
            )),
            Via::Http => Hold::Http {
                epoch: bundle.epoch,
                token: bundle.writer_token.clone().context("the bundle's token")?,
                next_seq: bundle.next_seq,
            },
        };
        for doubt in &bundle.in_doubt {
            let call = &doubt.call;
            let key = call.idempotency_key.clone().context("a call's key")?;
            let output = w.tools.call(&call.tool, &key).await?;
            w.book().totals.effects_again += 1;
            let result = SessionEvent::ToolCallResult {
                call_seq: call.seq,
                outcome: CallOutcome::Succeeded,
                output: Content::plain(output),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            };
            let what = "an in-doubt call's result";
            match self
                .append(w, session, result, Some(call.event_id), Some(key), what)
                .await?
            {
                Answer::Kept { .. } => {}
                Answer::Fenced { current } => {
                    self.fenced(w, session, current).await?;
                    break;
                }
                Answer::Refused => {}
            }
        }
        Ok(Some(std::mem::replace(&mut self.hold, Hold::Free)))
    }

    /// Heard it was fenced: drops its hold, and half the time goes on writing with it.
    async fn fenced(
        &mut self,
        w: &World,
        session: SessionId,
        current: Option<Epoch>,
    ) -> Result<()> {
        w.book().totals.fenced += 1;
        let old = std::mem::replace(&mut self.hold, Hold::Free);
        if self.rng.below(2) == 0 {
            self.haunt(w, session, old, current).await?;
        }
        Ok(())
    }

    /// A fenced writer writing anyway: over HTTP with its old epoch and token, with the
    /// current epoch and its old token, or with none; straight to Kafka with its stale epoch.
    async fn haunt(
        &mut self,
        w: &World,
        session: SessionId,
        old: Hold,
        current: Option<Epoch>,
    ) -> Result<()> {
        let id = Uuid::now_v7();
        let words = SessionEvent::UserRequest {
            content: Content::plain(format!("{} writes on after it was fenced", self.name)),
        };
        let written = match old {
            Hold::Free => return Ok(()),
            Hold::Http {
                epoch,
                token,
                next_seq,
            } => {
                let (epoch, token, what) = match (self.rng.below(3), current) {
                    (1, Some(current)) => {
                        (current, Some(token), "the current epoch, its old token")
                    }
                    (2, Some(current)) => (current, None, "the current epoch, no token"),
                    _ => (epoch, Some(token), "its old epoch and token"),
                };
                let body = json!({ "epoch": epoch,
                    "events": [incoming(next_seq, id, &words, None, None)?] });
                w.sent(id, epoch, Instant::now());
                let instance = &w.ingest[self.rng.below(2) as usize];
                let (status, answer) = instance
                    .post_with_token(&Self::path(session), body, token.as_deref())
                    .await?;
                let code = answer["code"].as_str().unwrap_or("?");
                w.refused(format!("zombie http: {status} {code}"));
                ZombieWrite {
                    id,
                    what: format!("{} over HTTP with {what}: {status} {answer}", self.name),
                    answered_2xx: status.is_success(),
                }
            }
            Hold::Library(writer) => {
                let envelope = EventEnvelope {
                    event_id: id,
                    session_id: session,
                    seq: writer.next_seq(),
                    writer_epoch: writer.epoch(),
                    occurred_at: now_micros(),
                    causation_id: None,
                    idempotency_key: None,
                    schema_version: CURRENT_SCHEMA_VERSION,
                    event: words,
                    attestation: None,
                };
                w.sent(id, writer.epoch(), Instant::now());
                w.raw.append(&envelope).await?;
                ZombieWrite {
                    id,
                    what: format!(
                        "{} straight to Kafka at its stale epoch {}",
                        self.name,
                        writer.epoch()
                    ),
                    answered_2xx: false,
                }
            }
        };
        let mut book = w.book();
        book.zombies.push(written);
        book.totals.zombie_writes += 1;
        Ok(())
    }

    /// One step as the holder: act on an approval, ask for one, or call a tool.
    async fn step(&mut self, w: &World, session: SessionId) -> Result<()> {
        if matches!(self.hold, Hold::Free) {
            return Ok(());
        }
        self.calls += 1;
        let (approved, denied) = {
            let book = w.book();
            let open = |want: bool| {
                book.decided
                    .iter()
                    .find(|(id, v)| **v == want && !book.acted.contains(*id))
                    .and_then(|(id, _)| {
                        let plan = book.plans.get(id)?;
                        Some((id.clone(), plan.key.clone(), plan.arguments.clone()))
                    })
            };
            (open(true), open(false))
        };
        let choice = self.rng.below(10);
        let arguments = format!("{{\"cents\":{}}}", 100 + self.rng.below(900));
        let key = format!(
            "{}-{}-{}",
            &session.to_string()[24..],
            self.name,
            self.calls
        );
        match (choice, approved, denied) {
            (0..7, Some((approval, key, arguments)), _)
            | (7, _, Some((approval, key, arguments))) => {
                let effect = EffectClass::NonIdempotent;
                let call = (CHARGE, effect, key, arguments);
                self.call(w, session, call, Some(approval)).await
            }
            (9, _, _) => {
                let approval = format!("ap-{key}");
                let digest = call_digest(CHARGE, Some(&key), &arguments);
                let request = SessionEvent::ApprovalRequested {
                    approval_id: approval.clone(),
                    action: Content::plain(format!("charge {arguments} with key {key}")),
                    action_digest: Some(digest),
                };
                {
                    let mut book = w.book();
                    book.keys.insert(key.clone(), CHARGE);
                    book.plans.insert(approval, Plan { key, arguments });
                }
                match self
                    .append(w, session, request, None, None, "an approval request")
                    .await?
                {
                    Answer::Fenced { current } => self.fenced(w, session, current).await,
                    Answer::Kept { .. } | Answer::Refused => Ok(()),
                }
            }
            _ => {
                let (tool, effect) = match self.rng.below(5) {
                    0 | 1 => (CHARGE, EffectClass::NonIdempotent),
                    2 | 3 => (REFUND, EffectClass::Idempotent),
                    _ => (SEARCH, EffectClass::Pure),
                };
                self.call(w, session, (tool, effect, key, arguments), None)
                    .await
            }
        }
    }

    /// Requests a call and, once the request is answered Ok, performs its effect and records
    /// its result; killed (its hold dropped) sometimes before the effect, sometimes between
    /// the effect and the result.
    async fn call(
        &mut self,
        w: &World,
        session: SessionId,
        (tool, effect, key, arguments): (&'static str, EffectClass, String, String),
        approval: Option<String>,
    ) -> Result<()> {
        w.book().keys.insert(key.clone(), tool);
        let request = SessionEvent::ToolCallRequested {
            tool: tool.into(),
            arguments: Content::plain(arguments),
            effect,
            approval_id: approval.clone(),
        };
        let what = if approval.is_some() {
            "a call acting on an approval"
        } else {
            "a tool call"
        };
        let (seq, id) = match self
            .append(w, session, request, None, Some(key.clone()), what)
            .await?
        {
            Answer::Kept { seq, id } => (seq, id),
            Answer::Fenced { current } => return self.fenced(w, session, current).await,
            Answer::Refused => return Ok(()),
        };
        if let Some(approval) = approval {
            let mut book = w.book();
            book.acted.insert(approval);
            book.totals.acted_on_approvals += 1;
        }
        if self.rng.below(8) == 0 {
            self.killed(w);
            return Ok(());
        }
        let output = w.tools.call(tool, &key).await?;
        w.book().totals.effects += 1;
        if self.rng.below(5) == 0 {
            self.killed(w);
            return Ok(());
        }
        let result = SessionEvent::ToolCallResult {
            call_seq: seq,
            outcome: CallOutcome::Succeeded,
            output: Content::plain(output),
            source: ResultSource::Executed,
            recorded_by: None,
            note: None,
        };
        match self
            .append(w, session, result, Some(id), Some(key), "a tool result")
            .await?
        {
            Answer::Fenced { current } => self.fenced(w, session, current).await,
            Answer::Kept { .. } | Answer::Refused => Ok(()),
        }
    }

    /// Dies where it stands: its writer and token are gone.
    fn killed(&mut self, w: &World) {
        self.hold = Hold::Free;
        w.book().totals.kills += 1;
    }
}

/// Two approvers on the two recovery instances decide the approvals pending at the round's
/// start, racing each other (and the harnesses, whom a decision fences).
async fn approvers(
    w: &World,
    session: SessionId,
    pending: Vec<String>,
    rng: &mut Rng,
) -> Result<()> {
    for approval in pending {
        let both = rng.below(2) == 0;
        let (v1, v2) = (rng.below(3) != 0, rng.below(3) != 0);
        let (mut r1, mut r2) = (Rng::new(rng.below(u64::MAX)), Rng::new(rng.below(u64::MAX)));
        let (one, two) = tokio::join!(decide(w, 0, session, &approval, v1, &mut r1), async {
            if both {
                decide(w, 1, session, &approval, v2, &mut r2).await
            } else {
                Ok(())
            }
        });
        one?;
        two?;
    }
    Ok(())
}

async fn decide(
    w: &World,
    i: usize,
    session: SessionId,
    approval: &str,
    approved: bool,
    rng: &mut Rng,
) -> Result<()> {
    jitter(rng, 60).await;
    let by = format!("approver-{}", i + 1);
    match w.recovery[i]
        .decide_approval(session, approval, approved, &by, None)
        .await
    {
        Ok(appended) => {
            w.claimed(appended.envelope.writer_epoch);
            w.acked(appended.envelope.event_id, format!("{by}'s decision"));
            let mut book = w.book();
            book.decided.insert(approval.to_string(), approved);
            book.decisions.push(Recorded {
                what: approval.to_string(),
                by,
                value: format!("approved {approved}"),
                seq: appended.envelope.seq,
            });
            book.totals.decisions += 1;
        }
        Err(e) => w.refused(format!("decide: {}", recovery_kind(&e))),
    }
    Ok(())
}

/// Two operators on the two recovery instances record what became of the calls left in doubt
/// before the round began (whose harnesses are gone, so the tool service's count is final),
/// racing each other: every call that waits for an operator, and half of the non-idempotent
/// orphans a resume would stop for one.
async fn operators(
    w: &World,
    session: SessionId,
    orphans: Vec<(PendingCall, bool)>,
    rng: &mut Rng,
) -> Result<()> {
    for (call, waits) in orphans {
        let orphan = call.effect == EffectClass::NonIdempotent;
        if !(waits || (orphan && rng.below(2) == 0)) {
            continue;
        }
        let key = call.idempotency_key.clone().unwrap_or_default();
        let ran = w.tools.effects(&call.tool, &key) > 0;
        let both = rng.below(2) == 0;
        let (mut r1, mut r2) = (Rng::new(rng.below(u64::MAX)), Rng::new(rng.below(u64::MAX)));
        let (one, two) = tokio::join!(resolve(w, 0, session, call.seq, ran, &mut r1), async {
            if both {
                resolve(w, 1, session, call.seq, ran, &mut r2).await
            } else {
                Ok(())
            }
        });
        one?;
        two?;
    }
    Ok(())
}

async fn resolve(
    w: &World,
    i: usize,
    session: SessionId,
    call_seq: u64,
    ran: bool,
    rng: &mut Rng,
) -> Result<()> {
    jitter(rng, 60).await;
    let operator = format!("operator-{}", i + 1);
    let resolution = Resolution {
        call_seq,
        outcome: if ran {
            CallOutcome::Succeeded
        } else {
            CallOutcome::Failed
        },
        output: if ran { "it ran" } else { "it never ran" }.into(),
        operator: operator.clone(),
        reason: "the tool service's ledger".into(),
    };
    match w.recovery[i].record_resolution(session, resolution).await {
        Ok(appended) => {
            w.claimed(appended.envelope.writer_epoch);
            w.acked(appended.envelope.event_id, format!("{operator}'s record"));
            let mut book = w.book();
            book.resolutions.push(Recorded {
                what: call_seq.to_string(),
                by: operator,
                value: format!("ran {ran}"),
                seq: appended.envelope.seq,
            });
            book.totals.resolutions += 1;
        }
        Err(e) => w.refused(format!("resolve: {}", recovery_kind(&e))),
    }
    Ok(())
}

/// Starts session number `n`, by the library harness or over HTTP, whose harness holds it.
async fn start_session(w: &World, n: usize, harnesses: &mut [Harness; 2]) -> Result<SessionId> {
    for harness in harnesses.iter_mut() {
        harness.hold = Hold::Free;
    }
    if n.is_multiple_of(2) {
        let (writer, start) =
            SessionWriter::create(Arc::clone(&w.log), "promises-race", None).await?;
        w.acked(start.envelope.event_id, "the start (library)");
        let session = writer.session_id();
        harnesses[1].hold = Hold::Library(Box::new(writer));
        return Ok(session);
    }
    let (status, opened) = w.ingest[0]
        .post_with_token("/v1/sessions", json!({ "agent": "promises-race" }), None)
        .await?;
    ensure!(status.is_success(), "create answered {status}: {opened}");
    let id: Uuid = serde_json::from_value(opened["event"]["event_id"].clone())?;
    w.acked(id, "the start (HTTP)");
    harnesses[0].hold = Hold::Http {
        epoch: opened["epoch"].as_u64().context("epoch")?,
        token: opened["writer_token"].as_str().context("token")?.into(),
        next_seq: opened["next_seq"].as_u64().context("next_seq")?,
    };
    Ok(serde_json::from_value(opened["session_id"].clone())?)
}

/// One round: both harnesses, the approvers and the operators at once.
async fn round(
    w: &World,
    session: SessionId,
    harnesses: &mut [Harness; 2],
    rng: &mut Rng,
) -> Result<()> {
    let state = w.recovery[rng.below(2) as usize]
        .rebuild(session)
        .await?
        .state;
    let pending: Vec<String> = state.pending_approvals.keys().cloned().collect();
    let orphans: Vec<(PendingCall, bool)> = state
        .pending_calls
        .values()
        .map(|c| (c.clone(), c.needs_operator(state.epoch)))
        .collect();
    let (mut approver_rng, mut operator_rng) =
        (Rng::new(rng.below(u64::MAX)), Rng::new(rng.below(u64::MAX)));
    let [a, b] = harnesses;
    let (a, b, approved, resolved) = tokio::join!(
        a.turn(w, session),
        b.turn(w, session),
        approvers(w, session, pending, &mut approver_rng),
        operators(w, session, orphans, &mut operator_rng),
    );
    a.context("the HTTP harness")?;
    b.context("the library harness")?;
    approved.context("the approvers")?;
    resolved.context("the operators")?;
    Ok(())
}

/// Folds `session` from the log and checks the promises against what the actors were told;
/// returns the violations found.
async fn audit(w: &World, session: SessionId) -> Result<Vec<String>> {
    let events = {
        let mut events = accepted_events(&w.recovery[0], session).await?;
        events.sort_by_key(|e| e.offset);
        events
    };
    let state = w.recovery[0].rebuild(session).await?.state;
    let book = {
        let mut book = w.book();
        let totals = std::mem::take(&mut book.totals);
        let session_book = std::mem::take(&mut *book);
        book.totals = totals;
        session_book
    };
    let mut violations = Vec::new();
    let accepted: HashSet<Uuid> = events.iter().map(|e| e.envelope.event_id).collect();

    // 1. Nothing answered 2xx/Ok is lost.
    for (id, what) in &book.acked {
        if !accepted.contains(id) {
            violations.push(format!(
                "{session}: {what}, event {id}, was answered 2xx/Ok and is not accepted"
            ));
        }
    }
    // What the log holds of each approval's decisions and each call's operator records.
    let trail = |wanted: &dyn Fn(&SessionEvent) -> bool| -> String {
        let each: Vec<String> = events
            .iter()
            .filter(|e| wanted(&e.envelope.event))
            .map(|e| {
                let writer = events
                    .iter()
                    .filter(|c| c.offset < e.offset)
                    .rev()
                    .find(|c| matches!(c.envelope.event, SessionEvent::WriterClaimed { .. }))
                    .map(|c| (c.offset, c.envelope.writer_epoch));
                format!(
                    "seq {} at offset {}, epoch {} (claimed at offset {:?})",
                    e.envelope.seq,
                    e.offset,
                    e.envelope.writer_epoch,
                    writer.map(|(offset, _)| offset)
                )
            })
            .collect();
        each.join("; ")
    };
    let mut decisions: BTreeMap<&str, Vec<&Recorded>> = BTreeMap::new();
    for d in &book.decisions {
        decisions.entry(&d.what).or_default().push(d);
    }
    for (approval, oks) in &decisions {
        let in_force = state.decided_approvals.get(*approval).map(|d| d.seq);
        if oks.len() > 1 || oks.iter().all(|d| Some(d.seq) != in_force) {
            violations.push(format!(
                "{session}: approval {approval}: {} decisions answered Ok ({}), and the one \
                 in force is at seq {in_force:?}: a decision answered Ok was superseded, though \
                 every one carries the service's signature; in the log: {}",
                oks.len(),
                listed(oks),
                trail(
                    &|e| matches!(e, SessionEvent::ApprovalDecided { approval_id, .. }
                    if approval_id == approval)
                )
            ));
        }
    }
    let mut resolutions: BTreeMap<&str, Vec<&Recorded>> = BTreeMap::new();
    for r in &book.resolutions {
        resolutions.entry(&r.what).or_default().push(r);
    }
    for (call, oks) in &resolutions {
        let in_force = call
            .parse::<u64>()
            .ok()
            .and_then(|seq| state.operator_results.get(&seq))
            .map(|r| r.seq);
        if oks.len() > 1 || oks.iter().all(|r| Some(r.seq) != in_force) {
            violations.push(format!(
                "{session}: call at seq {call}: {} operator records answered Ok ({}), and \
                 the one in force is at seq {in_force:?}: a record answered Ok was superseded; \
                 in the log: {}",
                oks.len(),
                listed(oks),
                trail(&|e| matches!(e, SessionEvent::ToolCallResult {
                    call_seq, source: ResultSource::Operator, ..
                } if call_seq.to_string() == *call))
            ));
        }
    }

    // 2. No side effect twice, none without an accepted intent.
    let mut requested: HashMap<String, (u64, String)> = HashMap::new();
    for e in &events {
        if let SessionEvent::ToolCallRequested {
            tool, approval_id, ..
        } = &e.envelope.event
        {
            if let Some(approval) = approval_id {
                let decision = state.decided_approvals.get(approval);
                if !decision.is_some_and(|d| d.approved && d.acted_on_by == Some(e.envelope.seq)) {
                    violations.push(format!(
                        "{session}: the call at seq {} acted on approval {approval}, whose \
                         decision in force is {decision:?}",
                        e.envelope.seq
                    ));
                }
            }
            let key = e.envelope.idempotency_key.clone().unwrap_or_default();
            if let Some((seq, _)) = requested.insert(key.clone(), (e.envelope.seq, tool.clone())) {
                violations.push(format!(
                    "{session}: key {key} was requested twice (seqs {seq} and {})",
                    e.envelope.seq
                ));
            }
        }
    }
    for (key, tool) in &book.keys {
        let effects = w.tools.effects(tool, key);
        if *tool != SEARCH && effects > 1 {
            violations.push(format!(
                "{session}: {tool} with key {key} took effect {effects} times"
            ));
        }
        if effects > 0 && !requested.contains_key(key) {
            violations.push(format!(
                "{session}: {tool} with key {key} took effect with no accepted intent"
            ));
        }
    }
    let by_seq: HashMap<u64, &String> = requested.iter().map(|(k, (s, _))| (*s, k)).collect();
    for e in &events {
        if let SessionEvent::ToolCallResult {
            call_seq,
            outcome,
            source: source @ (ResultSource::Operator | ResultSource::Resolver),
            ..
        } = &e.envelope.event
        {
            let Some(key) = by_seq.get(call_seq) else {
                continue;
            };
            let tool = tool_of(&requested[*key].1);
            let ran = w.tools.effects(tool, key) > 0;
            if ran != (*outcome == CallOutcome::Succeeded) {
                violations.push(format!(
                    "{session}: the {source:?} recorded {outcome:?} for the call at seq {call_seq} \
                     (key {key}), and the tool service says it ran: {ran}"
                ));
            }
        }
    }

    // 3. Nothing accepted from a fenced writer.
    for z in &book.zombies {
        if z.answered_2xx || accepted.contains(&z.id) {
            violations.push(format!(
                "{session}: a fenced writer's event {} was answered 2xx ({}) or accepted ({}): {}",
                z.id,
                z.answered_2xx,
                accepted.contains(&z.id),
                z.what
            ));
        }
    }
    for write in book.writes.iter().filter(|w| accepted.contains(&w.id)) {
        if let Some((epoch, _)) = book
            .claims
            .iter()
            .find(|(epoch, at)| *epoch > write.epoch && *at < write.sent)
        {
            violations.push(format!(
                "{session}: event {} of epoch {} was accepted, though it was sent after the claim \
                 of epoch {epoch} was acknowledged",
                write.id, write.epoch
            ));
        }
    }
    let (mut epoch, mut last_seq) = (0, 0);
    for e in &events {
        let envelope = &e.envelope;
        match &envelope.event {
            SessionEvent::SessionStarted { .. } | SessionEvent::WriterClaimed { .. }
                if envelope.writer_epoch > epoch =>
            {
                epoch = envelope.writer_epoch;
            }
            _ if envelope.writer_epoch != epoch => violations.push(format!(
                "{session}: {} at offset {} of epoch {} accepted while epoch {epoch} held the session",
                envelope.event.kind(),
                e.offset,
                envelope.writer_epoch
            )),
            _ => {}
        }
        if !matches!(envelope.event, SessionEvent::WriterClaimed { .. }) {
            if envelope.seq != last_seq + 1 {
                violations.push(format!(
                    "{session}: seq {} accepted after seq {last_seq}",
                    envelope.seq
                ));
            }
            last_seq = envelope.seq;
        }
    }
    Ok(violations)
}

fn progress(w: &World, what: &str) {
    let book = w.book();
    let t = &book.totals;
    eprintln!(
        "{what}: {} rounds; {} events acknowledged; effects {} (+{} re-run as recovery said); \
         {} killed; {} fenced, {} zombie writes; {} resumes, {} HTTP claims, {} library \
         claims; {} decisions, {} acted on; {} operator records",
        t.rounds,
        t.acked,
        t.effects,
        t.effects_again,
        t.kills,
        t.fenced,
        t.zombie_writes,
        t.resumes,
        t.http_claims,
        t.library_claims,
        t.decisions,
        t.acted_on_approvals,
        t.resolutions
    );
    let refusals: Vec<String> = t
        .refusals
        .iter()
        .map(|(kind, n)| format!("{kind} x{n}"))
        .collect();
    eprintln!("  refusals: {}", refusals.join("; "));
}

#[tokio::test(flavor = "multi_thread")]
async fn harnesses_recovery_and_operators_racing_keep_every_promise() -> Result<()> {
    let seed: u64 = match std::env::var("PROMISES_RACE_SEED") {
        Ok(seed) => seed.parse().context("PROMISES_RACE_SEED")?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let rounds: usize = match std::env::var("PROMISES_RACE_ROUNDS") {
        Ok(rounds) => rounds.parse().context("PROMISES_RACE_ROUNDS")?,
        Err(_) => ROUNDS,
    };
    eprintln!("seed {seed} (PROMISES_RACE_SEED={seed} replays these choices), {rounds} rounds");
    let started = Instant::now();
    let stack = TestStack::new("promises_race", 8).await?;
    let tools = ToolService::start(&[REFUND]).await?;
    let recovery = || async {
        let mut resolvers = Resolvers::default();
        resolvers.insert(
            REFUND,
            Arc::new(HttpResolver::new(tools.resolver_url(REFUND))),
        );
        anyhow::Ok(
            Recovery::connect(&stack.settings)
                .await?
                .with_resolvers(resolvers),
        )
    };
    let world = World {
        ingest: [
            IngestInstance::start(&stack).await?,
            IngestInstance::start(&stack).await?,
        ],
        recovery: [recovery().await?, recovery().await?],
        log: event_log(&stack).await?,
        raw: event_log(&stack).await?,
        tools,
        book: Mutex::default(),
    };
    let w = &world;
    let mut rng = Rng::new(seed);
    let mut harnesses = [
        Harness::new("http-harness", Via::Http, rng.below(u64::MAX)),
        Harness::new("library-harness", Via::Library, rng.below(u64::MAX)),
    ];
    let mut violations = Vec::new();
    let mut done = 0;
    let mut n = 0;
    while done < rounds {
        let session = start_session(w, n, &mut harnesses).await?;
        let these = ROUNDS_PER_SESSION.min(rounds - done);
        for r in 0..these {
            tokio::time::timeout(ROUND_DEADLINE, round(w, session, &mut harnesses, &mut rng))
                .await
                .with_context(|| {
                    format!("round {r} of session {session} took over {ROUND_DEADLINE:?}")
                })?
                .with_context(|| format!("round {r} of session {session}"))?;
            done += 1;
            w.book().totals.rounds = done;
            if done.is_multiple_of(50) {
                progress(w, &format!("{:.0?}", started.elapsed()));
            }
        }
        let found = audit(w, session).await?;
        eprintln!(
            "session {n} ({session}): {these} rounds, {} violation(s)",
            found.len()
        );
        violations.extend(found);
        n += 1;
    }
    progress(w, &format!("done in {:.0?}", started.elapsed()));
    for v in &violations {
        eprintln!("VIOLATION {v}");
    }
    ensure!(
        violations.is_empty(),
        "{} promise(s) broken (seed {seed}):\n{}",
        violations.len(),
        violations.join("\n")
    );
    // The race went through every path, or it proved little.
    let book = w.book();
    let t = &book.totals;
    for (what, count) in [
        ("effects", t.effects),
        ("kills", t.kills),
        ("fenced writers", t.fenced),
        ("zombie writes", t.zombie_writes),
        ("resumes", t.resumes),
        ("HTTP claims", t.http_claims),
        ("library claims", t.library_claims),
        ("decisions", t.decisions),
        ("calls acting on approvals", t.acted_on_approvals),
        ("operator records", t.resolutions),
    ] {
        ensure!(
            count > 0 || rounds < ROUNDS,
            "no {what} in {rounds} rounds (seed {seed})"
        );
    }
    Ok(())
}
