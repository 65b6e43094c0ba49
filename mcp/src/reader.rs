//! What the MCP tools and resources answer, over [`Recovery`]'s reads: ranges by the event
//! index ([`Recovery::events`]), the context view ([`Recovery::context_view`]) and lineage
//! ([`Recovery::lineage_in`]). Nothing here reads CQL or the log itself, and nothing checks
//! credentials: the server decides which session (and [`Scope`]) a caller gets, and
//! [`Readable`] keeps every read inside that session and the inherited prefixes of its
//! ancestors.

use crate::reach::{Readable, Span, search_cursor};
use crate::{Error, Result};
use serde::Serialize;
use sessionlog_recovery::context::ResumeContext;
use sessionlog_recovery::history::MAX_LIMIT;
use sessionlog_recovery::{EventPage, EventRange, HistoryEvent, Lineage, Recovery, Scope};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::reach::Reach;

/// The default time a search (or a lookup that scans) may take.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(1);
/// The longest budget a caller may ask for.
pub const MAX_BUDGET: Duration = Duration::from_secs(10);
/// Hits a search page holds by default, and at most.
pub const DEFAULT_HITS: u64 = 20;
/// The most hits of one search page.
pub const MAX_HITS: u64 = 100;
/// The longest search text, in characters.
pub const MAX_QUERY_CHARS: usize = 200;
/// Characters of context on each side of a match in a snippet.
const SNIPPET_SIDE: usize = 80;
/// Seqs one scan step covers: one index page, so one step is one bounded read.
const WINDOW: u64 = MAX_LIMIT;
/// The most ancestors followed (a fork is a new session, so a cycle cannot be written; this
/// only bounds a corrupt projection).
const MAX_ANCESTORS: usize = 64;

/// The kinds a search does not read by default: bookkeeping with no text a model said or saw
/// (claims, checkpoints, forks, erasures, retractions), and a framework's saved state, which is
/// its own serialisation, not conversation (ask for it by kind). Every other kind of
/// [`SessionEvent::KINDS`] is searched, so a new kind with text is found unless listed here.
pub const NOT_SEARCHED_KINDS: [&str; 7] = [
    "Checkpoint",
    "WriterClaimed",
    "SessionForked",
    "SessionResumed",
    "SessionErased",
    "EventRetracted",
    "FrameworkStateSaved",
];

/// The kinds a search reads by default: [`SessionEvent::KINDS`] but [`NOT_SEARCHED_KINDS`].
pub fn searched_kinds() -> impl Iterator<Item = &'static str> {
    SessionEvent::KINDS
        .into_iter()
        .filter(|kind| !NOT_SEARCHED_KINDS.contains(kind))
}

/// Which session a caller reads, and how much of its family it may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The session served.
    pub session: SessionId,
    /// [`Scope::Session`] for a credential narrowed to it: its relatives appear as ids only
    /// (their inherited prefix still reads through the fork).
    pub scope: Scope,
}

/// A page of events, with the seqs they came from.
#[derive(Debug, Serialize)]
pub struct EventsAnswer {
    /// The session served.
    pub session_id: SessionId,
    /// The session read (an ancestor's for an inherited read by `session_id`).
    pub read_session_id: SessionId,
    /// The seqs of `events`, in order.
    pub seqs: Vec<u64>,
    /// The events, texts opened (`unopened` names fields that read as `erased`).
    pub events: Vec<HistoryEvent>,
    /// Pass back as `cursor` for the next page; absent when the range is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One search hit.
#[derive(Debug, Serialize)]
pub struct Hit {
    /// The session the event belongs to (an ancestor's for inherited history).
    pub session_id: SessionId,
    /// Its seq.
    pub seq: u64,
    /// Its kind.
    pub kind: String,
    /// The field the text matched in (`content`, `arguments`, `output`, ...).
    pub field: &'static str,
    /// When it happened (µs since the Unix epoch).
    pub occurred_at: i64,
    /// The match with some text around it.
    pub snippet: String,
}

/// A page of search hits, newest first.
#[derive(Debug, Serialize)]
pub struct SearchAnswer {
    /// The session served.
    pub session_id: SessionId,
    /// The text searched for (case-insensitive).
    pub query: String,
    /// The hits, newest first.
    pub hits: Vec<Hit>,
    /// Events whose texts were read.
    pub events_scanned: u64,
    /// What the search took.
    pub elapsed_ms: u64,
    /// Its budget.
    pub budget_ms: u64,
    /// True when everything in reach was searched; false when the page filled or the budget ran
    /// out first (then `next_cursor` continues with older events).
    pub complete: bool,
    /// Why it stopped early: `page_full` or `budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<&'static str>,
    /// Pass back as `cursor` (with the same query) to search older events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Sessions in reach whose texts are erased: nothing in them can match.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub erased_sessions: Vec<SessionId>,
}

/// What a `ContextSummarized` event stands for.
#[derive(Debug, Serialize)]
pub struct ExpandAnswer {
    /// The session the summary belongs to.
    pub session_id: SessionId,
    /// The summary's seq.
    pub summary_seq: u64,
    /// The first seq it covers.
    pub first_seq: u64,
    /// The last seq it covers.
    pub last_seq: u64,
    /// The summary's text (`None` when it does not open: see `summary_unopened`).
    pub summary: Option<String>,
    /// Why the summary's text did not open (`erased`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_unopened: Option<String>,
    /// The covered events (a page of them), with their seqs.
    pub covered: EventsAnswer,
}

/// A tool call's request and result.
#[derive(Debug, Serialize)]
pub struct CallAnswer {
    /// The session the call belongs to.
    pub session_id: SessionId,
    /// The request's seq.
    pub request_seq: u64,
    /// The request (`ToolCallRequested`).
    pub request: HistoryEvent,
    /// The result's seq, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_seq: Option<u64>,
    /// The result (`ToolCallResult`), when the log has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<HistoryEvent>,
    /// `found`, `none` (every later event was searched and none is its result), or
    /// `not_searched_to_end` (the time budget ran out first; `searched_through_seq` says how far).
    pub result_search: &'static str,
    /// The last seq searched for the result.
    pub searched_through_seq: u64,
}

/// A session's lineage as the caller may see it.
#[derive(Debug, Serialize)]
pub struct LineageAnswer {
    /// Parent, fork point and children (relatives as ids only for a narrowed credential).
    #[serde(flatten)]
    pub lineage: Lineage,
    /// What reads through this session reach: itself, then each ancestor up to its fork point.
    pub readable: Vec<Reach>,
}

/// The context view, as a resource.
#[derive(Debug, Serialize)]
pub struct ContextAnswer {
    /// The session.
    pub session_id: SessionId,
    /// The view: recent turns, summaries, `older` references and `left_out` counts; every turn
    /// it leaves out reads back as `sessionlog://sessions/{id}/events/{first}-{last}`.
    pub context: ResumeContext,
}

/// Reads for the MCP server.
#[derive(Clone)]
pub struct Reader {
    recovery: Arc<Recovery>,
}

/// A range of seqs asked for, before it is checked.
#[derive(Clone, Debug, Default)]
pub struct ReadRequest {
    /// The session to read: the served one (default) or one of its ancestors.
    pub session_id: Option<SessionId>,
    /// The first seq (default 1).
    pub from_seq: Option<u64>,
    /// The last seq (default: the last readable).
    pub to_seq: Option<u64>,
    /// Only these kinds.
    pub kinds: Vec<String>,
    /// Events per page (1 to 1000, default 100).
    pub limit: Option<u64>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A search asked for, before it is checked.
#[derive(Clone, Debug, Default)]
pub struct SearchRequest {
    /// The text to find (case-insensitive), 1 to 200 characters.
    pub query: String,
    /// Hits per page (1 to 100, default 20).
    pub limit: Option<u64>,
    /// Kinds to search (default [`searched_kinds`]).
    pub kinds: Vec<String>,
    /// The time budget in milliseconds (1 to 10,000, default 1,000).
    pub budget_ms: Option<u64>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Search the inherited history of a fork too (default true).
    pub inherited: Option<bool>,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::Invalid(reason.into())
}

impl Reader {
    /// Reads through `recovery`.
    pub fn new(recovery: Arc<Recovery>) -> Self {
        Self { recovery }
    }

    /// The recovery this reader reads through.
    pub fn recovery(&self) -> &Arc<Recovery> {
        &self.recovery
    }

    /// What reads through the served session reach: itself, and each ancestor through the
    /// seq the next session down forked at. An unknown (or not yet projected) session is
    /// [`Error::UnknownSession`].
    pub async fn readable(&self, target: Target) -> Result<Readable> {
        let store = self.recovery.store();
        let session = target.session;
        // The states alone, without the duplicate window a fold would need (two queries each).
        let state = store
            .session_state(session)
            .await
            .map_err(sessionlog_recovery::Error::from)?
            .ok_or(Error::UnknownSession(session))?;
        let mut ancestors = Vec::new();
        let mut parent = state.parent;
        while let Some(point) = parent {
            if ancestors.len() >= MAX_ANCESTORS {
                break;
            }
            ancestors.push((point.parent_session_id, point.parent_seq));
            parent = store
                .session_state(point.parent_session_id)
                .await
                .map_err(sessionlog_recovery::Error::from)?
                .and_then(|state| state.parent);
        }
        Ok(Readable::new(session, state.last_seq, ancestors))
    }

    /// A page of a range of the served session's (or an ancestor's inherited) history.
    pub async fn read(&self, target: Target, request: ReadRequest) -> Result<EventsAnswer> {
        let readable = self.readable(target).await?;
        let span = readable.range(
            request.session_id,
            request.from_seq,
            request.to_seq,
            request.cursor.as_deref(),
        )?;
        self.page(target, span, request.kinds, request.limit).await
    }

    /// A page of `span` (events of `kinds`, at most `limit`).
    async fn page(
        &self,
        target: Target,
        span: Span,
        kinds: Vec<String>,
        limit: Option<u64>,
    ) -> Result<EventsAnswer> {
        let range = EventRange {
            from_seq: Some(span.first()),
            to_seq: Some(span.last()),
            kinds,
            limit,
            cursor: None,
            inherited: false,
        };
        // Checked even when there is nothing to read: bad input is refused either way.
        range.validate()?;
        let page = if span.is_empty() {
            EventPage {
                session_id: span.session(),
                events: Vec::new(),
                next_cursor: None,
            }
        } else {
            self.recovery.events(span.session(), range).await?
        };
        Ok(EventsAnswer {
            session_id: target.session,
            read_session_id: span.session(),
            seqs: page.events.iter().map(|e| e.seq).collect(),
            events: page.events,
            next_cursor: page.next_cursor,
        })
    }

    /// The event of a one-seq `span`, or `None` when the index has no event there.
    async fn event_at(&self, span: Span) -> Result<Option<HistoryEvent>> {
        let range = EventRange {
            from_seq: Some(span.first()),
            to_seq: Some(span.first()),
            limit: Some(1),
            ..EventRange::default()
        };
        let page = self.recovery.events(span.session(), range).await?;
        Ok(page.events.into_iter().next())
    }

    /// The events a `ContextSummarized` event at `seq` stands for, a page at a time.
    pub async fn expand(
        &self,
        target: Target,
        session: Option<SessionId>,
        seq: u64,
        limit: Option<u64>,
        cursor: Option<String>,
    ) -> Result<ExpandAnswer> {
        let readable = self.readable(target).await?;
        let at = readable.seq(session, seq)?;
        let event = self
            .event_at(at)
            .await?
            .ok_or_else(|| invalid(format!("no event at seq {seq}")))?;
        let Some(SessionEvent::ContextSummarized {
            first_seq,
            last_seq,
            summary,
            ..
        }) = &event.event
        else {
            return Err(invalid(format!(
                "seq {seq} is a {}, not a ContextSummarized event",
                event.kind
            )));
        };
        let (first_seq, last_seq) = (*first_seq, *last_seq);
        let covered = readable.range(
            Some(at.session()),
            Some(first_seq),
            Some(last_seq),
            cursor.as_deref(),
        )?;
        let covered = self.page(target, covered, Vec::new(), limit).await?;
        Ok(ExpandAnswer {
            session_id: at.session(),
            summary_seq: seq,
            first_seq,
            last_seq,
            summary: summary.as_plain().map(str::to_string),
            summary_unopened: event.unopened.get("summary").cloned(),
            covered,
        })
    }

    /// A tool call's request and result, by the seq of either or by the request's idempotency
    /// key (the newest request with it). Scans (for the key, for the result) stop at `budget`.
    pub async fn call(
        &self,
        target: Target,
        session: Option<SessionId>,
        seq: Option<u64>,
        idempotency_key: Option<&str>,
        budget: Duration,
    ) -> Result<Option<CallAnswer>> {
        let mut deadline = Deadline::new(budget);
        let readable = self.readable(target).await?;
        let whole = readable.range(session, None, None, None)?;
        let session = whole.session();
        let last = whole.last();
        let request = match (seq, idempotency_key) {
            (Some(seq), None) => {
                let Some(event) = self.event_at(readable.seq(Some(session), seq)?).await? else {
                    return Ok(None);
                };
                match &event.event {
                    Some(SessionEvent::ToolCallRequested { .. }) => event,
                    Some(SessionEvent::ToolCallResult { call_seq, .. }) => {
                        let call_seq = *call_seq;
                        let at = readable.seq(Some(session), call_seq)?;
                        let Some(request) = self.event_at(at).await? else {
                            return Ok(None);
                        };
                        return Ok(Some(CallAnswer {
                            session_id: session,
                            request_seq: call_seq,
                            request,
                            result_seq: Some(event.seq),
                            result: Some(event),
                            result_search: "found",
                            searched_through_seq: seq,
                        }));
                    }
                    _ if event.event.is_none() => {
                        return Err(Error::Missing(event.missing.unwrap_or_default()));
                    }
                    _ => {
                        return Err(invalid(format!(
                            "seq {seq} is a {}, not a tool call or its result",
                            event.kind
                        )));
                    }
                }
            }
            (None, Some(key)) => {
                let kinds = vec!["ToolCallRequested".to_string()];
                let mut found = None;
                let outcome = self
                    .scan_down(session, last, &kinds, &mut deadline, |event| {
                        if event.idempotency_key.as_deref() == Some(key) {
                            found = Some(event.clone());
                            return true;
                        }
                        false
                    })
                    .await?;
                match found {
                    Some(event) => event,
                    None if outcome.done => return Ok(None),
                    None => {
                        return Err(Error::OverBudget(format!(
                            "no request with that idempotency key in seqs {}..={last}; the \
                             budget ran out before seq {} (name the request's seq instead)",
                            outcome.next.unwrap_or(1).saturating_add(1),
                            outcome.next.unwrap_or(1)
                        )));
                    }
                }
            }
            _ => {
                return Err(invalid(
                    "name the call by exactly one of seq and idempotency_key",
                ));
            }
        };
        let request_seq = request.seq;
        let kinds = vec!["ToolCallResult".to_string()];
        let mut result = None;
        let mut from = request_seq.saturating_add(1);
        let mut searched = request_seq;
        let mut done = from > last;
        while !done {
            let Some(left) = deadline.left() else {
                break;
            };
            let to = from.saturating_add(WINDOW - 1).min(last);
            let Some(page) = self.window(session, from, to, &kinds, left).await? else {
                break;
            };
            let arrived = Instant::now();
            searched = to;
            result = page.into_iter().find(|e| {
                matches!(&e.event, Some(SessionEvent::ToolCallResult { call_seq, .. })
                    if *call_seq == request_seq)
            });
            deadline.worked_since(arrived);
            done = result.is_some() || to >= last;
            from = to.saturating_add(1);
        }
        let result_search = match (&result, done) {
            (Some(_), _) => "found",
            (None, true) => "none",
            (None, false) => "not_searched_to_end",
        };
        Ok(Some(CallAnswer {
            session_id: session,
            request_seq,
            request,
            result_seq: result.as_ref().map(|r| r.seq),
            searched_through_seq: result.as_ref().map_or(searched, |r| r.seq),
            result,
            result_search,
        }))
    }

    /// Text search over the session's opened texts (and its inherited history), newest first,
    /// within a page of hits and a time budget.
    pub async fn search(&self, target: Target, request: SearchRequest) -> Result<SearchAnswer> {
        let query = request.query.trim().to_string();
        let chars = query.chars().count();
        if chars == 0 || chars > MAX_QUERY_CHARS {
            return Err(invalid(format!(
                "query must be 1 to {MAX_QUERY_CHARS} characters, not {chars}"
            )));
        }
        let limit = match request.limit.unwrap_or(DEFAULT_HITS) {
            n @ 1..=MAX_HITS => n,
            n => return Err(invalid(format!("limit must be 1 to {MAX_HITS}, not {n}"))),
        };
        let budget = budget_of(request.budget_ms)?;
        let mut deadline = Deadline::new(budget);
        let kinds: Vec<String> = if request.kinds.is_empty() {
            searched_kinds().map(String::from).collect()
        } else {
            request.kinds
        };
        // Checked once, up front: a bad kind is refused even if no window is read.
        EventRange {
            kinds: kinds.clone(),
            ..EventRange::default()
        }
        .validate()?;
        let readable = self.readable(target).await?;
        let spans =
            readable.searched(request.inherited.unwrap_or(true), request.cursor.as_deref())?;
        let needle = query.to_lowercase();
        let mut answer = SearchAnswer {
            session_id: target.session,
            query,
            hits: Vec::new(),
            events_scanned: 0,
            elapsed_ms: 0,
            budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
            complete: false,
            stopped: None,
            next_cursor: None,
            erased_sessions: Vec::new(),
        };
        let page = usize::try_from(limit).unwrap_or(usize::MAX);
        'segments: for span in spans {
            let r = span.session();
            if self.erased(r).await? {
                answer.erased_sessions.push(r);
                continue;
            }
            let mut hi = span.last();
            // The next window down is read while this one is searched: a read waits mostly on
            // the store and the log, so two in flight keep both busy.
            let mut prefetched: Option<(u64, Window)> = None;
            while hi >= 1 {
                let Some(left) = deadline.left() else {
                    answer.stopped = Some("budget");
                    answer.next_cursor = Some(search_cursor(r, hi));
                    break 'segments;
                };
                let lo = hi.saturating_sub(WINDOW - 1).max(1);
                let read = match prefetched.take() {
                    Some((at, read)) if at == hi => read,
                    _ => self.spawn_window(r, lo, hi, &kinds),
                };
                if lo > 1 {
                    let below = lo - 1;
                    let below_lo = below.saturating_sub(WINDOW - 1).max(1);
                    prefetched = Some((below, self.spawn_window(r, below_lo, below, &kinds)));
                }
                let Some(events) = arrived(read, left).await? else {
                    answer.stopped = Some("budget");
                    answer.next_cursor = Some(search_cursor(r, hi));
                    break 'segments;
                };
                let arrived = Instant::now();
                for event in events.iter().rev() {
                    let found = matches(event, &needle);
                    let over = answer.hits.len().saturating_add(found.len()) > page;
                    // A page ends before an event whose hits do not all fit; the next page
                    // starts with that event, so no hit is skipped.
                    if answer.hits.len() == page || (over && !answer.hits.is_empty()) {
                        answer.stopped = Some("page_full");
                        answer.next_cursor = Some(search_cursor(r, event.seq));
                        break 'segments;
                    }
                    answer.events_scanned += 1;
                    answer.hits.extend(found);
                    answer.hits.truncate(page);
                }
                deadline.worked_since(arrived);
                hi = lo - 1;
            }
        }
        answer.complete = answer.next_cursor.is_none();
        answer.elapsed_ms = deadline.elapsed_ms();
        Ok(answer)
    }

    /// Walks `session`'s events of `kinds` from `last` down to seq 1 a window at a time until
    /// `stop` says so or `deadline` passes.
    async fn scan_down(
        &self,
        session: SessionId,
        last: u64,
        kinds: &[String],
        deadline: &mut Deadline,
        mut stop: impl FnMut(&HistoryEvent) -> bool,
    ) -> Result<ScanOutcome> {
        let mut hi = last;
        while hi >= 1 {
            let Some(left) = deadline.left() else {
                return Ok(ScanOutcome {
                    done: false,
                    next: Some(hi),
                });
            };
            let lo = hi.saturating_sub(WINDOW - 1).max(1);
            let Some(events) = self.window(session, lo, hi, kinds, left).await? else {
                return Ok(ScanOutcome {
                    done: false,
                    next: Some(hi),
                });
            };
            let arrived = Instant::now();
            let found = events.iter().rev().any(&mut stop);
            deadline.worked_since(arrived);
            if found {
                return Ok(ScanOutcome {
                    done: true,
                    next: None,
                });
            }
            hi = lo - 1;
        }
        Ok(ScanOutcome {
            done: true,
            next: None,
        })
    }

    /// The events of `kinds` in `from..=to` (at most [`WINDOW`] seqs, so one page), or `None`
    /// when they do not arrive within `left`. The read runs as its own task: one cut off by
    /// the budget finishes in the background instead of being dropped half-way through a read.
    async fn window(
        &self,
        session: SessionId,
        from: u64,
        to: u64,
        kinds: &[String],
        left: Duration,
    ) -> Result<Option<Vec<HistoryEvent>>> {
        arrived(self.spawn_window(session, from, to, kinds), left).await
    }

    /// Starts reading the events of `kinds` in `from..=to` as a task of its own (dropping the
    /// handle leaves it to finish in the background).
    fn spawn_window(&self, session: SessionId, from: u64, to: u64, kinds: &[String]) -> Window {
        let recovery = Arc::clone(&self.recovery);
        let range = EventRange {
            from_seq: Some(from),
            to_seq: Some(to),
            kinds: kinds.to_vec(),
            limit: Some(WINDOW),
            ..EventRange::default()
        };
        tokio::spawn(async move { recovery.events(session, range).await })
    }

    /// Whether `session`'s texts read as erased (nothing in them can match).
    async fn erased(&self, session: SessionId) -> Result<bool> {
        let projected = self
            .recovery
            .store()
            .session_state(session)
            .await
            .map_err(sessionlog_recovery::Error::from)?
            .is_some_and(|state| state.erased);
        Ok(self.recovery.erased_for_reading(session, projected).await?)
    }

    /// The served session's lineage, as its scope allows, with what reads reach.
    pub async fn lineage(&self, target: Target) -> Result<LineageAnswer> {
        let lineage = self
            .recovery
            .lineage_in(target.session, target.scope)
            .await?;
        Ok(LineageAnswer {
            lineage,
            readable: self.readable(target).await?.reach().to_vec(),
        })
    }

    /// The served session's context view (its policy's budget).
    pub async fn context(&self, target: Target) -> Result<ContextAnswer> {
        Ok(ContextAnswer {
            session_id: target.session,
            context: self.recovery.context_view(target.session, None).await?,
        })
    }
}

/// A window's read in flight.
type Window = tokio::task::JoinHandle<sessionlog_recovery::Result<sessionlog_recovery::EventPage>>;

/// The events of a window's read, or `None` when they do not arrive within `left`.
async fn arrived(read: Window, left: Duration) -> Result<Option<Vec<HistoryEvent>>> {
    match tokio::time::timeout(left, read).await {
        Err(_) => Ok(None),
        Ok(Err(joined)) => Err(Error::Task(joined.to_string())),
        Ok(Ok(page)) => Ok(Some(page?.events)),
    }
}

/// A request's time budget, counted from when it began. The wait for each window is what is
/// left of it, less what working through an arrived window has taken (the longest so far) and a
/// twentieth of the budget for the timer's and the answer's own slack: a window that arrives
/// just in time is still worked through within the budget, not after it (a search of 1,000
/// events per window in a debug build on a loaded machine overshot 1 s by 116 ms without it).
struct Deadline {
    started: Instant,
    budget: Duration,
    kept_back: Duration,
}

impl Deadline {
    fn new(budget: Duration) -> Self {
        Self {
            started: Instant::now(),
            budget,
            kept_back: budget / 20,
        }
    }

    /// How long the next window may be waited for: `None` once nothing is left.
    fn left(&self) -> Option<Duration> {
        let spent = self.started.elapsed().checked_add(self.kept_back)?;
        self.budget
            .checked_sub(spent)
            .filter(|left| !left.is_zero())
    }

    /// Keeps back, from every later wait, at least as long as the work on a window that
    /// arrived at `arrived` took.
    fn worked_since(&mut self, arrived: Instant) {
        self.kept_back = self.kept_back.max(arrived.elapsed() + self.budget / 20);
    }

    /// Milliseconds since the request began.
    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

struct ScanOutcome {
    done: bool,
    next: Option<u64>,
}

/// The time budget asked for, checked.
pub fn budget_of(ms: Option<u64>) -> Result<Duration> {
    let max = u64::try_from(MAX_BUDGET.as_millis()).unwrap_or(u64::MAX);
    match ms {
        None => Ok(DEFAULT_BUDGET),
        Some(ms @ 1..) if ms <= max => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(invalid(format!(
            "budget_ms must be 1 to {max} (default 1000), not {ms}"
        ))),
    }
}

/// The hits of one event: each opened text field that contains `needle` (lowercase).
fn matches(event: &HistoryEvent, needle: &str) -> Vec<Hit> {
    let Some(mut body) = event.event.clone() else {
        return Vec::new();
    };
    let mut hits = Vec::new();
    sessionlog_keys::sensitive_fields(&mut body, |field, content| {
        if let Content::Plain(text) = content
            && let Some(snippet) = snippet(text, needle)
        {
            hits.push(Hit {
                session_id: event.session_id,
                seq: event.seq,
                kind: event.kind.clone(),
                field,
                occurred_at: event.occurred_at,
                snippet,
            });
        }
    });
    hits
}

/// The first match of `needle` (lowercase) in `text`, case-insensitively, with up to
/// [`SNIPPET_SIDE`] characters on each side. Works on characters, never byte offsets, so no
/// text can make it slice inside a character.
pub fn snippet(text: &str, needle: &str) -> Option<String> {
    let lowered: Vec<char> = text.chars().flat_map(char::to_lowercase).collect();
    let wanted: Vec<char> = needle.chars().collect();
    if wanted.is_empty() || wanted.len() > lowered.len() {
        return None;
    }
    let at = lowered.windows(wanted.len()).position(|w| w == wanted)?;
    // Lowercasing can change the number of characters (rarely); positions are then approximate,
    // and the snippet is cut from the lowered text's neighbourhood in the original.
    let original: Vec<char> = text.chars().collect();
    let start = at.saturating_sub(SNIPPET_SIDE).min(original.len());
    let end = at
        .saturating_add(wanted.len())
        .saturating_add(SNIPPET_SIDE)
        .min(original.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&original[start..end]);
    if end < original.len() {
        out.push('…');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_reads_every_kind_with_conversation_text_and_only_kinds_that_exist() {
        for kind in NOT_SEARCHED_KINDS {
            assert!(SessionEvent::KINDS.contains(&kind), "{kind} is not a kind");
        }
        let searched: Vec<&str> = searched_kinds().collect();
        for kind in [
            "SessionStarted",
            "UserRequest",
            "ModelResponse",
            "ToolCallRequested",
            "ToolCallResult",
            "SteeringMessage",
            "ContextSummarized",
        ] {
            assert!(searched.contains(&kind), "{kind} is not searched");
        }
        assert_eq!(
            searched.len() + NOT_SEARCHED_KINDS.len(),
            SessionEvent::KINDS.len()
        );
    }

    #[test]
    fn a_snippet_finds_any_case_and_keeps_characters_whole() {
        assert_eq!(
            snippet("Rain in Oslo", "oslo").as_deref(),
            Some("Rain in Oslo")
        );
        assert_eq!(snippet("Rain in Oslo", "bergen"), None);
        let long = format!("{}needle{}", "é".repeat(200), "ß".repeat(200));
        let found = snippet(&long, "needle").unwrap_or_default();
        assert!(found.starts_with('…') && found.ends_with('…'), "{found}");
        assert_eq!(found.chars().count(), 2 + 80 + 6 + 80);
        // A text whose lowercase is longer than itself does not panic.
        assert!(snippet("İİİİ x", "x").is_some());
        assert_eq!(snippet("", "x"), None);
    }

    #[test]
    fn a_deadline_keeps_back_the_work_on_a_window() {
        let mut deadline = Deadline::new(Duration::from_secs(10));
        let fresh = deadline.left().expect("time is left");
        // A twentieth is kept back from the start.
        assert!(fresh <= Duration::from_millis(9_500), "{fresh:?}");
        assert!(fresh > Duration::from_millis(9_000), "{fresh:?}");
        // Work on a window that took 3 s is kept back from every later wait.
        deadline.worked_since(Instant::now() - Duration::from_secs(3));
        let after = deadline.left().expect("time is left");
        assert!(after <= Duration::from_millis(6_500), "{after:?}");
        // A shorter piece of work does not shrink what is kept back.
        deadline.worked_since(Instant::now());
        assert!(deadline.left().expect("time is left") <= after);
        // Work as long as the budget leaves nothing to wait for.
        deadline.worked_since(Instant::now() - Duration::from_secs(10));
        assert_eq!(deadline.left(), None);
    }

    #[test]
    fn a_budget_is_checked() {
        assert_eq!(budget_of(None).ok(), Some(DEFAULT_BUDGET));
        assert_eq!(budget_of(Some(250)).ok(), Some(Duration::from_millis(250)));
        assert!(budget_of(Some(0)).is_err());
        assert!(budget_of(Some(10_001)).is_err());
        assert!(budget_of(Some(u64::MAX)).is_err());
    }
}
