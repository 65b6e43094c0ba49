//! Work for workers: `GET /v1/work?agent=NAME&wait=30s` hands a live harness one session
//! that needs one, taken for it (a claim at the next epoch, as a resume makes).
//!
//! A [`WorkDesk`] keeps one [`WakeFeed`] per agent and tenant (a consumer in that worker group
//! on the wake topic; a credential of every tenant shares the agent's all-tenants group), made
//! on the first such request and shared by the concurrent ones, which take turns reading it. A request waits up to its `wait` for the agent's
//! next wake and [`Recovery::take`]s the session as the caller. A wake is a hint: the session
//! may have been taken since (a duplicate or replayed wake), have ended, be paused, or wait
//! for a person; those wakes are skipped (counted in [`WORK_SKIPPED`] by reason) and the
//! request goes on waiting. A request whose wait runs out is answered "no work" (204).
//!
//! A wake handed out is committed (see [`WakeFeed`]). [`Recovery::take`] leases the session in
//! the worker's name right after the claim, so a worker that dies before renewing it leaves a
//! lease that lapses, and the wake component wakes the session again. A request that fails
//! after reading a wake but before the claim (the registry or the store unavailable), or whose
//! caller hangs up then, leaves the wake unanswered: it is written again after the component's
//! re-wake interval.
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
use sessionlog_log::{KafkaSettings, Wake, WakeFeed};
use sessionlog_schemas::SessionId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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

/// The agents a desk keeps a wake feed for (each is a Kafka consumer in a group of its own).
pub const MAX_AGENTS: usize = 1_000;

/// The longest agent name a request may give, in bytes (it names a consumer group).
pub const MAX_AGENT_BYTES: usize = 200;

/// How long the answer of a take named by its `take_id` is kept for a repeat: past the longest
/// wait and a client's retries after it (the clients retry for 30 s by default).
pub const TAKE_KEPT: Duration = Duration::from_secs(180);

/// A feed unused this long is dropped when room is needed for another agent's: by then its
/// consumer has left its group anyway (librdkafka's `max.poll.interval.ms`, 5 minutes).
const IDLE_FEED: Duration = Duration::from_secs(300);

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
    /// The desk keeps feeds for [`MAX_AGENTS`] agents already, all in use recently.
    #[error(
        "this recovery instance serves work to {0} agents already; try again later or another instance"
    )]
    TooManyAgents(usize),
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
            WorkError::TooManyAgents(_) => Problem::new(
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

/// One agent's feed, and when a request last used it.
struct Desk {
    feed: Arc<tokio::sync::Mutex<WakeFeed>>,
    used: Instant,
}

/// A take's tenant, writer (with the caller's subject) and id, apart.
type TakeKey = (Option<String>, String, uuid::Uuid);

/// A take named by its id: the session and the assignment as answered, once one was taken.
type TakeSlot = Arc<tokio::sync::Mutex<Option<(SessionId, Arc<serde_json::Value>)>>>;

/// Hands out sessions to workers: one wake feed per agent (see the module's documentation).
pub struct WorkDesk {
    kafka: KafkaSettings,
    max_agents: usize,
    desks: Mutex<HashMap<DeskKey, Desk>>,
    /// Takes named by their id, by tenant, writer (with the caller's subject) and id, with when
    /// each was first asked for.
    takes: Mutex<HashMap<TakeKey, (Instant, TakeSlot)>>,
}

impl WorkDesk {
    /// A desk reading the wake topic of `kafka`; no feed is made before a request.
    pub fn new(kafka: KafkaSettings) -> Self {
        Self::with_limit(kafka, MAX_AGENTS)
    }

    /// [`Self::new`] keeping feeds for at most `max_agents` agents.
    pub fn with_limit(kafka: KafkaSettings, max_agents: usize) -> Self {
        describe_metrics();
        Self {
            kafka,
            max_agents,
            desks: Mutex::new(HashMap::new()),
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
        let feed = self.feed(&request.agent, tenant)?;
        let deadline = Instant::now() + request.wait;
        loop {
            // Concurrent requests of the agent take turns on its feed; a request whose wait ran
            // out while it waited its turn or for a wake gets no work. Reading is cancel-safe:
            // a wake not yet read stays for the next request.
            let read = tokio::time::timeout_at(deadline, async {
                let feed = feed.lock().await;
                feed.next().await
            })
            .await;
            self.touch(&desk_key(&request.agent, tenant));
            let wake = match read {
                Err(_elapsed) => return Ok(None),
                Ok(wake) => wake.map_err(Error::from)?,
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

    /// The agent's feed (of `tenant`'s sessions only, when given), made (joining its worker
    /// group) on its first request.
    fn feed(
        &self,
        agent: &str,
        tenant: Option<&str>,
    ) -> Result<Arc<tokio::sync::Mutex<WakeFeed>>, WorkError> {
        let key = desk_key(agent, tenant);
        let mut desks = self.desks.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some(desk) = desks.get_mut(&key) {
            desk.used = now;
            return Ok(Arc::clone(&desk.feed));
        }
        if desks.len() >= self.max_agents {
            // Room from feeds no request holds and none used for a while.
            desks.retain(|_, desk| {
                Arc::strong_count(&desk.feed) > 1 || now.duration_since(desk.used) < IDLE_FEED
            });
            if desks.len() >= self.max_agents {
                return Err(WorkError::TooManyAgents(desks.len()));
            }
        }
        let feed = Arc::new(tokio::sync::Mutex::new(
            WakeFeed::join(&self.kafka, agent, tenant).map_err(Error::from)?,
        ));
        desks.insert(
            key,
            Desk {
                feed: Arc::clone(&feed),
                used: now,
            },
        );
        Ok(feed)
    }

    /// Marks a feed used now (a request that waited long used it until now).
    fn touch(&self, key: &DeskKey) {
        let mut desks = self.desks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(desk) = desks.get_mut(key) {
            desk.used = Instant::now();
        }
    }

    /// The agents with a feed now.
    pub fn agents(&self) -> usize {
        self.desks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The key of the feed of an agent's sessions of a tenant (of every tenant: `None`): the two
/// names apart, so no spelling of one can stand for the other.
type DeskKey = (String, Option<String>);

fn desk_key(agent: &str, tenant: Option<&str>) -> DeskKey {
    (agent.to_string(), tenant.map(str::to_string))
}

/// Takes `wake`'s session for `writer`; `None` when `tenant` is given and the session is not
/// its (the feed reads only the tenant's wakes; this is the check that does not trust them).
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
        let desk = WorkDesk::with_limit(KafkaSettings::default(), 10);
        let feeds = [
            ("a@b", None),
            ("a", Some("b")),
            ("a@b", Some("c")),
            ("a", Some("b@c")),
        ];
        for (agent, tenant) in feeds {
            let _feed = desk.feed(agent, tenant).expect("room");
        }
        assert_eq!(desk.agents(), feeds.len());
    }

    #[test]
    fn a_take_id_names_one_take_of_one_writer_of_one_tenant() {
        let desk = WorkDesk::new(KafkaSettings::default());
        let id = uuid::Uuid::new_v4();
        let key =
            |tenant: Option<&str>, writer: &str, id| (tenant.map(Into::into), writer.into(), id);
        let first = desk.take_slot(key(Some("t"), "alice/w", id));
        assert!(Arc::ptr_eq(
            &first,
            &desk.take_slot(key(Some("t"), "alice/w", id))
        ));
        for other in [
            key(Some("t"), "bob/w", id),
            key(Some("u"), "alice/w", id),
            key(None, "alice/w", id),
            key(Some("t"), "alice/w", uuid::Uuid::new_v4()),
        ] {
            assert!(!Arc::ptr_eq(&first, &desk.take_slot(other)));
        }
    }

    #[test]
    fn a_full_desk_refuses_a_new_agent_with_a_clear_503() {
        let desk = WorkDesk::with_limit(KafkaSettings::default(), 0);
        let Err(e) = desk.feed("triage", None) else {
            panic!("a desk for no agents made a feed");
        };
        let problem = Problem::from(e);
        assert_eq!(problem.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(problem.code, "too_many_agents");
    }
}
