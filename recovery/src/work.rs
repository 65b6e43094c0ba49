//! Work for workers: `GET /v1/work?agent=NAME&wait=30s` hands a live harness one session
//! that needs one, taken for it (a claim at the next epoch, as a resume makes).
//!
//! A [`WorkDesk`] reads the wake topic once for the whole process: one consumer, assigned every
//! partition ([`WakeStream`]), started by the first request, from the wakes of the last two
//! re-wake intervals (`[wake] rewake_after_ms`) on. It hands each wake to the *mailbox* of its
//! agent and tenant (and to the agent's mailbox for credentials of every tenant), made by the
//! first request for them and shared by the concurrent ones; a mailbox made later starts with
//! the matching wakes of those intervals, so a worker that asks after a wake was written finds
//! it (a wake no harness answers is written again within one). A mailbox holds at most
//! [`MAILBOX_WAKES`] wakes no request took yet, the oldest pushed out first; one no request
//! used for five minutes is dropped when room is needed. Each tenant has at most
//! `[recovery] work_agents_per_tenant` mailboxes (the credentials of every tenant count as one
//! tenant), the process at most [`MAX_AGENTS`]: a tenant over its share is answered 503
//! `too_many_agents`, and the others still get their work.
//!
//! Why one consumer, and not one per agent in the agent's worker group as the Rust `Worker`
//! has: a consumer costs a client, its threads and a connection per broker, so a process
//! serving a thousand agents ran a thousand of them. A consumer group cannot be shared by
//! agents: a group hands each partition to one member, so a group of several agents (or of a
//! tenant's agents) gives an instance the wakes of agents whose workers ask another instance,
//! where they wait for nobody. Every instance reading every wake does not: whichever instance
//! a worker of the agent asks, it has the wake. When workers of one agent wait at several
//! instances, each may take the same wake; the claim decides, as it does for any two workers
//! woken for one session: one takes the session, the others are told "already taken" (a
//! rebuild, and at most a refused claim) and wait on.
//!
//! A request waits up to its `wait` for the next wake of its mailbox and
//! [`Recovery::take`]s the session as the caller. A wake is a hint: the session may have been
//! taken since (a duplicate or replayed wake), have ended, be paused, or wait for a person;
//! those wakes are skipped (counted in [`WORK_SKIPPED`] by reason) and the request goes on
//! waiting. A request whose wait runs out is answered "no work" (204).
//!
//! [`Recovery::take`] leases the session in the worker's name right after the claim, so a
//! worker that dies before renewing it leaves a lease that lapses, and the wake component
//! wakes the session again. A request that fails after taking a wake from its mailbox but
//! before the claim (the registry or the store unavailable) leaves the wake unanswered: it is
//! written again after the component's re-wake interval.
//!
//! A worker that names its take (`take_id`, a UUID it chooses per take) can ask again when the
//! answer did not reach it (its timeout, a dropped connection): [`WorkDesk::next_once`] runs the
//! take on a task of its own, which a caller hanging up does not stop, and answers a repeat of
//! the id by the same caller and writer with the same assignment, for [`TAKE_KEPT`]. Without
//! it, a repeated request takes another session, and the first waits for its lease to lapse.

use crate::{Error, Recovery, ResumeBundle};
use axum::http::StatusCode;
use serde::Serialize;
use sessionlog_http::Problem;
use sessionlog_log::retry::{self, BackoffBuilder};
use sessionlog_log::{KafkaSettings, RecoverySettings, Settings, Wake, WakeStream};
use sessionlog_schemas::SessionId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Wakes skipped by `GET /v1/work`, by `reason` (`already_taken`, `session_ended`,
/// `session_paused`, `awaiting_approval`, `needs_resolution`, `unknown_session`,
/// `other_tenant`): normal, not failures.
pub const WORK_SKIPPED: &str = "sessionlog_work_skipped_total";

/// The longest a request waits for a wake: a longer `wait` is cut to it.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How long a request without `wait` waits.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The agents of all tenants together a desk keeps a mailbox for.
pub const MAX_AGENTS: usize = RecoverySettings::MAX_WORK_AGENTS;

/// Wakes a mailbox holds that no request took yet; a newer one pushes out the oldest (the
/// wake component writes one no harness answered again).
pub const MAILBOX_WAKES: usize = 16;

/// Wakes of the last two re-wake intervals a desk keeps at most, to start a new mailbox with.
const RECENT_WAKES: usize = 10_000;

/// The longest agent name a request may give, in bytes.
pub const MAX_AGENT_BYTES: usize = 200;

/// How long the answer of a take named by its `take_id` is kept for a repeat: past the longest
/// wait and a client's retries after it (the clients retry for 30 s by default).
pub const TAKE_KEPT: Duration = Duration::from_secs(180);

/// A mailbox no request used for this long is dropped when room is needed for another.
const IDLE_MAILBOX: Duration = Duration::from_secs(300);

/// Registers the help text of [`WORK_SKIPPED`] with the installed recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        WORK_SKIPPED,
        metrics::Unit::Count,
        "Wakes GET /v1/work skipped, by reason (already taken, ended, paused, awaiting a person): normal, not failures."
    );
}

/// `wait` of a request: `30s`, `500ms`, `2m`, or plain seconds (`30`); at most [`MAX_WAIT`]
/// (a longer one is cut to it). The error says what is wrong, for a 422.
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "wait must be a whole number of seconds, or one with a unit (`500ms`, `30s`, `2m`), \
             not {:?}",
            crate::history::clip(text)
        )
    };
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    // Digits alone: only overflow fails, and a number that large is over the cap anyway.
    let n: u64 = digits.parse().unwrap_or(u64::MAX);
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        _ => return Err(bad()),
    };
    Ok(millis.map_or(MAX_WAIT, |ms| Duration::from_millis(ms).min(MAX_WAIT)))
}

/// What a worker asks for: the agent it runs, how long to wait, what to call the writer.
#[derive(Clone, Debug)]
pub struct WorkRequest {
    /// The agent whose sessions the worker runs.
    pub agent: String,
    /// How long to wait for a wake.
    pub wait: Duration,
    /// The writer's label (recorded with the caller's subject, as a resume's is).
    pub writer: String,
    /// The token budget of the bundle's context view.
    pub context_tokens: Option<usize>,
}

impl WorkRequest {
    /// The request from the query's text: `agent` is required (1 to [`MAX_AGENT_BYTES`] bytes
    /// without control characters), `wait` is [`parse_wait`]'s, `writer` defaults to the agent,
    /// `context_tokens` is a whole number. A bad one is a 422 `invalid_request`.
    pub fn parse(
        agent: Option<String>,
        wait: Option<String>,
        writer: Option<String>,
        context_tokens: Option<String>,
    ) -> Result<Self, Problem> {
        let invalid = |detail: String| {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", detail)
        };
        let agent = agent.unwrap_or_default();
        if agent.is_empty() || agent.len() > MAX_AGENT_BYTES || agent.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "agent (the agent whose sessions to run) is required: 1 to {MAX_AGENT_BYTES} \
                 bytes without control characters"
            )));
        }
        let wait = match wait.filter(|w| !w.is_empty()) {
            Some(text) => parse_wait(&text).map_err(invalid)?,
            None => DEFAULT_WAIT,
        };
        let writer = writer
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| agent.clone());
        if writer.chars().any(char::is_control) {
            return Err(invalid("writer may not hold control characters".into()));
        }
        let context_tokens = context_tokens
            .filter(|t| !t.is_empty())
            .map(|text| {
                text.parse::<usize>().map_err(|_| {
                    invalid(format!(
                        "context_tokens must be a whole number, not {:?}",
                        crate::history::clip(&text)
                    ))
                })
            })
            .transpose()?;
        Ok(Self {
            agent,
            wait,
            writer,
            context_tokens,
        })
    }
}

/// A session taken for a worker: the resume bundle, and the wake that led to it.
#[derive(Debug, Serialize)]
pub struct Assignment {
    /// What the resume endpoint answers: state, epoch, writer token, next seq, in-doubt calls,
    /// context, resolved outcomes.
    #[serde(flatten)]
    pub bundle: ResumeBundle,
    /// The wake (its `reason`, `caused_at`, the epoch it named...).
    pub wake: Wake,
}

/// Why a worker got no session.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The desk keeps mailboxes for [`MAX_AGENTS`] agents already, all in use recently.
    #[error(
        "this recovery instance serves work to {0} agents already; try again later or another instance"
    )]
    TooManyAgents(usize),
    /// The desk keeps mailboxes for the tenant's share of agents already
    /// (`[recovery] work_agents_per_tenant`), all in use recently.
    #[error(
        "this recovery instance serves work to {agents} agents of {tenant} already, its share \
         ([recovery] work_agents_per_tenant); try again later or another instance"
    )]
    TenantShareFull {
        /// The tenant, or "the credentials of every tenant".
        tenant: String,
        /// Its agents with a mailbox.
        agents: usize,
    },
    /// Reading wakes or taking the session failed.
    #[error(transparent)]
    Recovery(#[from] Error),
    /// A take named by its id stopped before it answered (its task panicked), or its answer
    /// could not be written as JSON.
    #[error("the take stopped before it answered: {0}")]
    Interrupted(String),
}

impl From<WorkError> for Problem {
    fn from(e: WorkError) -> Self {
        match e {
            WorkError::TooManyAgents(_) | WorkError::TenantShareFull { .. } => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_agents",
                e.to_string(),
            )
            .retry_after(5),
            WorkError::Recovery(e) => e.into(),
            WorkError::Interrupted(_) => {
                Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

/// The wakes of one agent (of one tenant, or of every tenant) that no request took yet.
#[derive(Default)]
struct Mailbox {
    wakes: Mutex<VecDeque<Wake>>,
    arrived: tokio::sync::Notify,
}

impl Mailbox {
    /// Keeps `wake` for the next request, pushing out the oldest when full.
    fn push(&self, wake: Wake) {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.push_back(wake);
        if wakes.len() > MAILBOX_WAKES {
            wakes.pop_front();
        }
        drop(wakes);
        self.arrived.notify_one();
    }

    /// The oldest wake kept, waiting for one until `deadline`; `None` when none came by then.
    /// Cancel-safe: a wake not handed out stays for the next request.
    async fn next_until(&self, deadline: Instant) -> Option<Wake> {
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            // Registered before looking, so a wake pushed after the look wakes this request.
            arrived.as_mut().enable();
            let (wake, more) = {
                let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
                (wakes.pop_front(), !wakes.is_empty())
            };
            if let Some(wake) = wake {
                if more {
                    // One notification may stand for several wakes: pass it on.
                    self.arrived.notify_one();
                }
                return Some(wake);
            }
            tokio::time::timeout_at(deadline, arrived).await.ok()?;
        }
    }
}

/// A mailbox, and when a request last used it.
struct Kept {
    mailbox: Arc<Mailbox>,
    used: Instant,
}

/// The mailboxes and the recent wakes, under one lock: a wake reaches a mailbox once, handed
/// to it as it is read or given to it when the mailbox is made.
#[derive(Default)]
struct Boxes {
    mailboxes: HashMap<DeskKey, Kept>,
    /// Wakes read in the last two re-wake intervals, oldest first, at most [`RECENT_WAKES`].
    recent: VecDeque<(Instant, Wake)>,
}

impl Boxes {
    /// Hands `wake`, read now, to its agent's mailboxes and keeps it among the recent ones.
    fn deliver(&mut self, wake: Wake, recent_for: Duration) {
        let now = Instant::now();
        while self.recent.len() >= RECENT_WAKES
            || self
                .recent
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > recent_for)
        {
            self.recent.pop_front();
        }
        let keys = [
            desk_key(&wake.agent, Some(&wake.tenant)),
            desk_key(&wake.agent, None),
        ];
        for key in &keys {
            if let Some(kept) = self.mailboxes.get(key) {
                kept.mailbox.push(wake.clone());
            }
        }
        self.recent.push_back((now, wake));
    }

    /// The mailboxes of `tenant` (of the credentials of every tenant: `None`).
    fn of_tenant(&self, tenant: Option<&str>) -> usize {
        self.mailboxes
            .keys()
            .filter(|(_, t)| t.as_deref() == tenant)
            .count()
    }
}

/// A take's tenant, writer (with the caller's subject) and id, apart.
type TakeKey = (Option<String>, String, uuid::Uuid);

/// A take named by its id: the session and the assignment as answered, once one was taken.
type TakeSlot = Arc<tokio::sync::Mutex<Option<(SessionId, Arc<serde_json::Value>)>>>;

/// Hands out sessions to workers: one reader of the wake topic, and a mailbox per agent and
/// tenant (see the module's documentation).
pub struct WorkDesk {
    kafka: KafkaSettings,
    max_agents: usize,
    per_tenant: usize,
    /// How far back the wake topic is read from, and how long a wake read is kept for a
    /// mailbox made later: two re-wake intervals.
    recent_for: Duration,
    boxes: Arc<Mutex<Boxes>>,
    /// The task reading the wake topic, started by the first request.
    reading: tokio::sync::OnceCell<tokio::task::JoinHandle<()>>,
    /// Takes named by their id, by tenant, writer (with the caller's subject) and id, with when
    /// each was first asked for.
    takes: Mutex<HashMap<TakeKey, (Instant, TakeSlot)>>,
}

impl Drop for WorkDesk {
    fn drop(&mut self) {
        if let Some(task) = self.reading.get() {
            task.abort();
        }
    }
}

impl WorkDesk {
    /// A desk reading the wake topic of `settings`, keeping mailboxes for
    /// `[recovery] work_agents_per_tenant` agents per tenant; nothing is read before a request.
    pub fn new(settings: &Settings) -> Self {
        let mut desk = Self::with_limits(
            settings.kafka.clone(),
            MAX_AGENTS,
            settings.recovery.work_agents_per_tenant,
        );
        desk.recent_for = Duration::from_millis(settings.wake.rewake_after_ms.saturating_mul(2));
        desk
    }

    /// A desk keeping mailboxes for at most `max_agents` agents, `per_tenant` of each tenant.
    pub fn with_limits(kafka: KafkaSettings, max_agents: usize, per_tenant: usize) -> Self {
        describe_metrics();
        Self {
            kafka,
            max_agents,
            per_tenant,
            recent_for: Duration::from_millis(
                sessionlog_log::WakeSettings::default()
                    .rewake_after_ms
                    .saturating_mul(2),
            ),
            boxes: Arc::default(),
            reading: tokio::sync::OnceCell::new(),
            takes: Mutex::new(HashMap::new()),
        }
    }

    /// [`Self::next`] for a take the worker named `take_id`, which makes asking again safe: the
    /// take runs on a task of its own (a caller that hangs up does not stop it half way), and a
    /// request with the same id, caller (`writer` names it) and tenant waits for it and gets the
    /// same session and assignment (as JSON), for [`TAKE_KEPT`]. A take that found no work within
    /// the wait keeps nothing: a repeat of it waits for work anew.
    pub async fn next_once(
        self: &Arc<Self>,
        recovery: Arc<Recovery>,
        request: WorkRequest,
        writer: String,
        tenant: Option<String>,
        take_id: uuid::Uuid,
    ) -> Result<Option<(SessionId, Arc<serde_json::Value>)>, WorkError> {
        let slot = self.take_slot((tenant.clone(), writer.clone(), take_id));
        let desk = Arc::clone(self);
        tokio::spawn(async move {
            // A repeat waits here while the first request's take runs.
            let mut answer = slot.lock().await;
            if let Some(kept) = answer.as_ref() {
                return Ok(Some(kept.clone()));
            }
            let Some(assignment) = desk
                .next(&recovery, &request, &writer, tenant.as_deref())
                .await?
            else {
                return Ok(None);
            };
            let session = assignment.wake.session_id;
            let json = serde_json::to_value(&assignment)
                .map_err(|e| WorkError::Interrupted(e.to_string()))?;
            let kept = (session, Arc::new(json));
            *answer = Some(kept.clone());
            Ok(Some(kept))
        })
        .await
        .map_err(|e| WorkError::Interrupted(e.to_string()))?
    }

    /// The slot of the take `key`, made on its first request; slots older than [`TAKE_KEPT`]
    /// are forgotten.
    fn take_slot(&self, key: TakeKey) -> TakeSlot {
        let mut takes = self.takes.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        takes.retain(|_, (asked, _)| now.duration_since(*asked) < TAKE_KEPT);
        Arc::clone(
            &takes
                .entry(key)
                .or_insert_with(|| (now, TakeSlot::default()))
                .1,
        )
    }

    /// Waits up to `request.wait` for a wake of `request.agent` whose session can be taken, and
    /// takes it as `writer` (the caller's name for the writer). Only sessions of `tenant` are
    /// taken when given (a credential's tenant); others' wakes are skipped. `None`: no work
    /// within the wait.
    pub async fn next(
        &self,
        recovery: &Recovery,
        request: &WorkRequest,
        writer: &str,
        tenant: Option<&str>,
    ) -> Result<Option<Assignment>, WorkError> {
        let mailbox = self.mailbox(&request.agent, tenant)?;
        self.read_wakes().await?;
        let deadline = Instant::now() + request.wait;
        loop {
            // Concurrent requests of the agent share its mailbox; a request whose wait ran out
            // gets no work.
            let wake = mailbox.next_until(deadline).await;
            self.touch(&desk_key(&request.agent, tenant));
            let Some(wake) = wake else {
                return Ok(None);
            };
            let reason = match take(recovery, &wake, writer, tenant, request.context_tokens).await {
                Ok(Some(bundle)) => return Ok(Some(Assignment { bundle, wake })),
                Ok(None) => {
                    tracing::warn!(
                        session = %wake.session_id,
                        agent = %wake.agent,
                        "wake skipped: the session is another tenant's"
                    );
                    "other_tenant"
                }
                Err(e) => match skipped(&e) {
                    Some(reason) => {
                        tracing::debug!(
                            session = %wake.session_id,
                            agent = %wake.agent,
                            reason,
                            "wake skipped: {e}"
                        );
                        reason
                    }
                    None => return Err(e.into()),
                },
            };
            metrics::counter!(WORK_SKIPPED, "reason" => reason).increment(1);
        }
    }

    /// The mailbox of `agent` (of `tenant`'s sessions only, when given), made on its first
    /// request with the matching wakes read recently, within the tenant's share and the desk's
    /// limit (mailboxes no request holds and none used for a while make room).
    fn mailbox(&self, agent: &str, tenant: Option<&str>) -> Result<Arc<Mailbox>, WorkError> {
        let key = desk_key(agent, tenant);
        let mut boxes = self.lock();
        let now = Instant::now();
        if let Some(kept) = boxes.mailboxes.get_mut(&key) {
            kept.used = now;
            return Ok(Arc::clone(&kept.mailbox));
        }
        let full = |boxes: &Boxes| {
            boxes.of_tenant(tenant) >= self.per_tenant || boxes.mailboxes.len() >= self.max_agents
        };
        if full(&boxes) {
            boxes.mailboxes.retain(|_, kept| {
                Arc::strong_count(&kept.mailbox) > 1 || now.duration_since(kept.used) < IDLE_MAILBOX
            });
            let agents = boxes.of_tenant(tenant);
            if agents >= self.per_tenant {
                return Err(WorkError::TenantShareFull {
                    tenant: tenant.map_or_else(
                        || "the credentials of every tenant".into(),
                        |t| format!("tenant {t:?}"),
                    ),
                    agents,
                });
            }
            if boxes.mailboxes.len() >= self.max_agents {
                return Err(WorkError::TooManyAgents(boxes.mailboxes.len()));
            }
        }
        let mailbox = Arc::new(Mailbox::default());
        let ours = |wake: &&Wake| wake.agent == agent && tenant.is_none_or(|t| t == wake.tenant);
        for wake in boxes.recent.iter().map(|(_, wake)| wake).filter(ours) {
            mailbox.push(wake.clone());
        }
        boxes.mailboxes.insert(
            key,
            Kept {
                mailbox: Arc::clone(&mailbox),
                used: now,
            },
        );
        Ok(mailbox)
    }

    /// Starts reading the wake topic, once: from the wakes of the last two re-wake intervals,
    /// handing each to its mailboxes. A failure to start is the request's (503), and the next
    /// request tries again; one once started is retried by the reader until the desk is gone.
    async fn read_wakes(&self) -> Result<(), WorkError> {
        self.reading
            .get_or_try_init(|| async {
                let recent_for = i64::try_from(self.recent_for.as_millis()).unwrap_or(i64::MAX);
                let since = sessionlog_schemas::now_micros() / 1_000 - recent_for;
                let stream = WakeStream::open(&self.kafka, since)
                    .await
                    .map_err(Error::from)?;
                let (boxes, recent_for) = (Arc::clone(&self.boxes), self.recent_for);
                Ok::<_, WorkError>(tokio::spawn(async move {
                    let mut waits = retry::forever().build();
                    loop {
                        match stream.next().await {
                            Ok(wake) => {
                                waits = retry::forever().build();
                                boxes
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .deliver(wake, recent_for);
                            }
                            Err(e) => {
                                let wait = waits.next().unwrap_or(retry::MAX_DELAY);
                                tracing::warn!(error = %e, ?wait, "reading wakes for GET /v1/work failed; trying again");
                                tokio::time::sleep(wait).await;
                            }
                        }
                    }
                }))
            })
            .await
            .map(drop)
    }

    /// Marks a mailbox used now (a request that waited long used it until now).
    fn touch(&self, key: &DeskKey) {
        if let Some(kept) = self.lock().mailboxes.get_mut(key) {
            kept.used = Instant::now();
        }
    }

    /// The agents with a mailbox now.
    pub fn agents(&self) -> usize {
        self.lock().mailboxes.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Boxes> {
        // Each change leaves the maps whole: a panic elsewhere cannot leave them torn.
        self.boxes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The key of the mailbox of an agent's sessions of a tenant (of every tenant: `None`): the
/// two names apart, so no spelling of one can stand for the other.
type DeskKey = (String, Option<String>);

fn desk_key(agent: &str, tenant: Option<&str>) -> DeskKey {
    (agent.to_string(), tenant.map(str::to_string))
}

/// Takes `wake`'s session for `writer`; `None` when `tenant` is given and the session is not
/// its (a mailbox holds only the tenant's wakes; this is the check that does not trust them).
async fn take(
    recovery: &Recovery,
    wake: &Wake,
    writer: &str,
    tenant: Option<&str>,
    context_tokens: Option<usize>,
) -> crate::Result<Option<ResumeBundle>> {
    let session = wake.session_id;
    if let Some(tenant) = tenant {
        // The projection's tenant where it has the session (a tenant never changes), else the
        // log's.
        let theirs = match recovery.store().load_session(session).await? {
            Some(row) => row.state.tenant,
            None => recovery.rebuild(session).await?.state.tenant,
        };
        if theirs != tenant {
            return Ok(None);
        }
    }
    recovery
        .take(session, writer, wake.epoch, context_tokens)
        .await
        .map(Some)
}

/// The reason a wake whose take failed with `e` is skipped, or `None` when `e` is a failure
/// to answer with (every worker, HTTP or the library's, judges a take by this).
pub(crate) fn skipped(e: &Error) -> Option<&'static str> {
    Some(match e {
        Error::AlreadyTaken { .. } => "already_taken",
        Error::Ended { .. } => "session_ended",
        Error::Paused { .. } => "session_paused",
        Error::AwaitingApproval { .. } => "awaiting_approval",
        Error::NeedsResolution { .. } => "needs_resolution",
        // Gone (a recreated topic): nothing to run.
        Error::UnknownSession(_) => "unknown_session",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_takes_seconds_milliseconds_or_minutes_and_is_capped() {
        let ok = |text: &str| parse_wait(text).expect(text);
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("30"), Duration::from_secs(30));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("2m"), MAX_WAIT);
        assert_eq!(ok("61s"), MAX_WAIT);
        // No overflow, no panic: a huge number is over the cap.
        assert_eq!(ok("18446744073709551615m"), MAX_WAIT);
        assert_eq!(ok("99999999999999999999999999s"), MAX_WAIT);
        for bad in ["", "s", "-1s", "1.5s", "30 s", "30h", "ms30", "3s0", "🙂"] {
            let error = parse_wait(bad).expect_err(bad);
            assert!(error.contains("wait must be"), "{error}");
        }
    }

    #[test]
    fn a_request_needs_an_agent_and_a_good_wait() {
        let parse = |agent: Option<&str>, wait: Option<&str>| {
            WorkRequest::parse(agent.map(Into::into), wait.map(Into::into), None, None)
        };
        let request = parse(Some("triage"), None).expect("defaults");
        assert_eq!(request.wait, DEFAULT_WAIT);
        assert_eq!(request.writer, "triage");
        for (agent, wait) in [
            (None, None),
            (Some(""), None),
            (Some("a\nb"), None),
            (Some("triage"), Some("soon")),
        ] {
            let problem = parse(agent, wait).expect_err("refused");
            assert_eq!(problem.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(problem.code, "invalid_request");
        }
        let long = "a".repeat(MAX_AGENT_BYTES + 1);
        assert!(parse(Some(&long), None).is_err());
    }

    #[test]
    fn taken_ended_paused_and_waiting_sessions_are_skipped_and_the_rest_answered() {
        let session = || "s".to_string();
        let taken = Error::AlreadyTaken {
            session: session(),
            woken_at: 1,
            current: 2,
        };
        assert_eq!(skipped(&taken), Some("already_taken"));
        assert_eq!(
            skipped(&Error::Paused { session: session() }),
            Some("session_paused")
        );
        assert_eq!(
            skipped(&Error::Ended {
                session: session(),
                outcome: "completed".into()
            }),
            Some("session_ended")
        );
        assert_eq!(
            skipped(&Error::NeedsResolution {
                session: session(),
                calls: vec![3]
            }),
            Some("needs_resolution")
        );
        assert_eq!(
            skipped(&Error::AwaitingApproval {
                session: session(),
                approval_id: "a".into()
            }),
            Some("awaiting_approval")
        );
        assert_eq!(
            skipped(&Error::UnknownSession(session())),
            Some("unknown_session")
        );
    }

    #[tokio::test]
    async fn an_at_sign_in_a_name_does_not_share_another_agents_or_tenants_feed() {
        let desk = WorkDesk::with_limits(KafkaSettings::default(), 10, 10);
        let feeds = [
            ("a@b", None),
            ("a", Some("b")),
            ("a@b", Some("c")),
            ("a", Some("b@c")),
        ];
        for (agent, tenant) in feeds {
            let _feed = desk.mailbox(agent, tenant).expect("room");
        }
        assert_eq!(desk.agents(), feeds.len());
    }

    #[tokio::test]
    async fn a_tenant_that_fills_its_share_leaves_room_for_another() {
        let desk = WorkDesk::with_limits(KafkaSettings::default(), 10, 2);
        let held: Vec<_> = ["a1", "a2"]
            .into_iter()
            .map(|agent| {
                desk.mailbox(agent, Some("acme"))
                    .expect("within acme's share")
            })
            .collect();
        let Err(over) = desk.mailbox("a3", Some("acme")) else {
            panic!("acme got a third agent's mailbox");
        };
        let problem = Problem::from(over);
        assert_eq!(
            (problem.status, problem.code),
            (StatusCode::SERVICE_UNAVAILABLE, "too_many_agents")
        );
        assert!(
            problem.detail.contains("work_agents_per_tenant"),
            "{}",
            problem.detail
        );
        let globex = desk.mailbox("b1", Some("globex"));
        assert!(globex.is_ok(), "globex is shut out by acme");
        // The credentials of every tenant have a share of their own.
        assert!(desk.mailbox("a3", None).is_ok());
        drop(held);
    }

    fn wake_of(agent: &str, tenant: &str) -> Wake {
        Wake {
            version: sessionlog_log::wake::WAKE_VERSION,
            session_id: SessionId::new(),
            agent: agent.into(),
            tenant: tenant.into(),
            reason: sessionlog_log::WakeReason::LeaseExpired,
            epoch: 1,
            cause_offset: None,
            caused_at: 1,
            woken_at: 2,
        }
    }

    #[tokio::test]
    async fn a_wake_reaches_its_agents_mailboxes_and_one_made_later_finds_it() {
        let desk = WorkDesk::with_limits(KafkaSettings::default(), 10, 10);
        let acme = desk.mailbox("triage", Some("acme")).expect("room");
        let other = desk.mailbox("billing", Some("acme")).expect("room");
        let (mine, globex) = (wake_of("triage", "acme"), wake_of("triage", "globex"));
        for wake in [&mine, &globex] {
            desk.lock().deliver(wake.clone(), Duration::from_secs(120));
        }
        let soon = || Instant::now() + Duration::from_millis(50);
        assert_eq!(acme.next_until(soon()).await, Some(mine.clone()));
        assert_eq!(acme.next_until(soon()).await, None, "not globex's");
        assert_eq!(other.next_until(soon()).await, None, "not another agent's");
        // A worker of every tenant asking now finds both, read before it asked.
        let every = desk.mailbox("triage", None).expect("room");
        assert_eq!(every.next_until(soon()).await, Some(mine));
        assert_eq!(every.next_until(soon()).await, Some(globex));
    }

    #[tokio::test]
    async fn a_waiting_request_gets_a_wake_as_it_arrives_and_a_full_mailbox_drops_the_oldest() {
        let desk = Arc::new(WorkDesk::with_limits(KafkaSettings::default(), 10, 10));
        let mailbox = desk.mailbox("triage", None).expect("room");
        let wake = wake_of("triage", "acme");
        let waiting = tokio::spawn({
            let mailbox = Arc::clone(&mailbox);
            async move {
                mailbox
                    .next_until(Instant::now() + Duration::from_secs(60))
                    .await
            }
        });
        desk.lock().deliver(wake.clone(), Duration::from_secs(120));
        assert_eq!(waiting.await.expect("joined"), Some(wake));
        let wakes: Vec<_> = (0..MAILBOX_WAKES + 3)
            .map(|_| wake_of("triage", "acme"))
            .collect();
        for wake in &wakes {
            mailbox.push(wake.clone());
        }
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(mailbox.next_until(soon).await.as_ref(), wakes.get(3));
    }

    #[test]
    fn a_full_desk_refuses_a_new_agent_with_a_clear_503() {
        let desk = WorkDesk::with_limits(KafkaSettings::default(), 0, 1);
        let Err(e) = desk.mailbox("triage", None) else {
            panic!("a desk for no agents made a feed");
        };
        let problem = Problem::from(e);
        assert_eq!(problem.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(problem.code, "too_many_agents");
    }
}
