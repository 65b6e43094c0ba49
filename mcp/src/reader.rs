//! What the MCP tools and resources answer, over [`Recovery`]'s reads: ranges by the event
//! index ([`Recovery::events`]), the context view ([`Recovery::context_view`]) and lineage
//! ([`Recovery::lineage_in`]). Nothing here reads CQL or the log itself, and nothing checks
//! credentials: the server decides which session (and [`Scope`]) a caller gets, and
//! [`Readable`] keeps every read inside that session and the inherited prefixes of its
//! ancestors.

use crate::matcher::Matcher;
use crate::reach::{Readable, Span, search_cursor};
use crate::{Error, Result};
use serde::Serialize;
use sessionlog_recovery::context::ResumeContext;
use sessionlog_recovery::history::MAX_LIMIT;
use sessionlog_recovery::{EventPage, EventRange, HistoryEvent, Lineage, Recovery, Scope};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::task::AbortOnDropHandle;

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
/// The most seqs one scan step covers: one index page, so one step is one bounded read.
const WINDOW: u64 = MAX_LIMIT;
/// The text a scan step aims to read: a window covers as many seqs as hold this much if each
/// event is as large as the largest of the window before. A count alone let one step of a
/// search read 1,000 events of 1 MB (and the next step, read ahead, as much again).
pub const WINDOW_BYTES: usize = 4 << 20;
/// What an event weighs beside its texts, for sizing windows: ids, seqs, kinds, times.
const EVENT_OVERHEAD_BYTES: usize = 256;
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
    /// Seqs of a scan's first window: as many as hold [`WINDOW_BYTES`] of events as large as a
    /// writer may append (`[producer] max_event_bytes`).
    first_window: u64,
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
        let first_window = window_seqs(recovery.settings().producer.max_event_bytes);
        Self {
            recovery,
            first_window,
        }
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
                let requests =
                    self.windows(whole, vec!["ToolCallRequested".into()], Direction::Down);
                let walked = walk(requests, &mut deadline, |events| {
                    events
                        .into_iter()
                        .rev()
                        .find(|e| e.idempotency_key.as_deref() == Some(key))
                })
                .await?;
                match (walked.found, walked.stopped_at) {
                    (Some(event), _) => event,
                    (None, None) => return Ok(None),
                    (None, Some(at)) => {
                        return Err(Error::OverBudget(format!(
                            "no request with that idempotency key in seqs {}..={}; the \
                             budget ran out before seq {at} (name the request's seq instead)",
                            at.saturating_add(1),
                            whole.last(),
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
        let after = whole.starting_at(request_seq.saturating_add(1));
        let results = self.windows(after, vec!["ToolCallResult".into()], Direction::Up);
        let walked = walk(results, &mut deadline, |events| {
            events.into_iter().find(|e| {
                matches!(&e.event, Some(SessionEvent::ToolCallResult { call_seq, .. })
                    if *call_seq == request_seq)
            })
        })
        .await?;
        let result_search = match (&walked.found, walked.stopped_at) {
            (Some(_), _) => "found",
            (None, None) => "none",
            (None, Some(_)) => "not_searched_to_end",
        };
        let searched = walked.through.unwrap_or(request_seq);
        Ok(Some(CallAnswer {
            session_id: session,
            request_seq,
            request,
            result_seq: walked.found.as_ref().map(|r| r.seq),
            searched_through_seq: walked.found.as_ref().map_or(searched, |r| r.seq),
            result: walked.found,
            result_search,
        }))
    }

    /// Text search over the session's opened texts (and its inherited history), newest first,
    /// within a page of hits and a time budget. The reads wait on the store and the log; the
    /// matching runs on a blocking thread, a window at a time, so a long text holds no thread
    /// that serves requests.
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
        let mut matcher = Matcher::new(&query);
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
        'spans: for span in spans {
            if self.erased(span.session()).await? {
                answer.erased_sessions.push(span.session());
                continue;
            }
            let mut windows = self.windows(span, kinds.clone(), Direction::Down);
            while let Some(edge) = windows.edge {
                let stop = |answer: &mut SearchAnswer| {
                    answer.stopped = Some("budget");
                    answer.next_cursor = Some(search_cursor(span.session(), edge));
                };
                let Some(left) = deadline.left() else {
                    stop(&mut answer);
                    break 'spans;
                };
                let events = match windows.next(left).await? {
                    Window::Arrived(_, events) => events,
                    Window::Late => {
                        stop(&mut answer);
                        break 'spans;
                    }
                };
                let arrived = Instant::now();
                let (held, cut_off) = (answer.hits.len(), deadline.cut_off());
                let (back, found) = tokio::task::spawn_blocking(move || {
                    let found = search_window(&mut matcher, events, held, page, cut_off);
                    (matcher, found)
                })
                .await
                .map_err(|e| Error::Task(e.to_string()))?;
                matcher = back;
                deadline.worked_since(arrived);
                answer.events_scanned += found.scanned;
                answer.hits.extend(found.hits);
                if let Some((why, seq)) = found.stopped {
                    answer.stopped = Some(why);
                    answer.next_cursor = Some(search_cursor(span.session(), seq));
                    break 'spans;
                }
            }
        }
        answer.complete = answer.next_cursor.is_none();
        answer.elapsed_ms = deadline.elapsed_ms();
        Ok(answer)
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

    /// `span`'s events of `kinds` (checked) a window at a time, in `direction`.
    fn windows(&self, span: Span, kinds: Vec<String>, direction: Direction) -> Windows {
        Windows {
            recovery: Arc::clone(&self.recovery),
            kinds,
            direction,
            edge: (!span.is_empty()).then_some(match direction {
                Direction::Down => span.last(),
                Direction::Up => span.first(),
            }),
            span,
            seqs: self.first_window,
            ahead: None,
        }
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

/// Which way a scan goes through its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Newest first.
    Down,
    /// Oldest first.
    Up,
}

/// A span's events read a window at a time, the next window's read started while one is worked
/// through (a read waits mostly on the store and the log, so two in flight keep both busy).
/// A window covers as many seqs as hold about [`WINDOW_BYTES`] if each event weighs what the
/// largest of the window before did (the first: what the largest event a writer may append
/// does). Reads in flight are aborted when they do not arrive in time or when this is dropped:
/// a read the budget cut off stops there, instead of finishing in the background with its
/// reader and its events.
struct Windows {
    recovery: Arc<Recovery>,
    span: Span,
    kinds: Vec<String>,
    direction: Direction,
    /// The next seq not yet delivered (`None`: the span is done).
    edge: Option<u64>,
    /// Seqs of the next window.
    seqs: u64,
    /// The next window's read, started early.
    ahead: Option<WindowRead>,
}

/// A window's read in flight, aborted when dropped.
struct WindowRead {
    span: Span,
    task: AbortOnDropHandle<sessionlog_recovery::Result<EventPage>>,
}

/// What [`Windows::next`] brings.
enum Window {
    /// The next window and its events, in seq order.
    Arrived(Span, Vec<HistoryEvent>),
    /// They did not arrive in the time given (the read is aborted; the edge stays).
    Late,
}

impl Windows {
    /// The window of the next `self.seqs` seqs from `edge` on, in the scan's direction.
    fn window_at(&self, edge: u64) -> Option<Span> {
        match self.direction {
            Direction::Down => self.span.window_below(edge, self.seqs),
            Direction::Up => self.span.window_above(edge, self.seqs),
        }
    }

    /// Where a scan continues after `window`.
    fn beyond(&self, window: Span) -> Option<u64> {
        match self.direction {
            Direction::Down => window
                .first()
                .checked_sub(1)
                .filter(|&e| e >= self.span.first()),
            Direction::Up => window
                .last()
                .checked_add(1)
                .filter(|&e| e <= self.span.last()),
        }
    }

    fn starts_at(&self, window: Span) -> u64 {
        match self.direction {
            Direction::Down => window.last(),
            Direction::Up => window.first(),
        }
    }

    fn start(&self, window: Span) -> WindowRead {
        let recovery = Arc::clone(&self.recovery);
        let range = EventRange {
            from_seq: Some(window.first()),
            to_seq: Some(window.last()),
            kinds: self.kinds.clone(),
            limit: Some(WINDOW),
            ..EventRange::default()
        };
        let session = window.session();
        WindowRead {
            span: window,
            task: AbortOnDropHandle::new(tokio::spawn(async move {
                recovery.events(session, range).await
            })),
        }
    }

    /// The next window's events, waiting at most `left` for them. Only called while
    /// [`Self::edge`] is `Some`.
    async fn next(&mut self, left: Duration) -> Result<Window> {
        let Some(window) = self.edge.and_then(|edge| self.window_at(edge)) else {
            self.edge = None;
            return Ok(Window::Arrived(self.span, Vec::new()));
        };
        let mut read = match self.ahead.take() {
            Some(ahead) if Some(self.starts_at(ahead.span)) == self.edge => ahead,
            _ => self.start(window),
        };
        let beyond = self.beyond(read.span);
        if let Some(next) = beyond.and_then(|edge| self.window_at(edge)) {
            self.ahead = Some(self.start(next));
        }
        match tokio::time::timeout(left, &mut read.task).await {
            Err(_) => Ok(Window::Late),
            Ok(Err(joined)) => Err(Error::Task(joined.to_string())),
            Ok(Ok(page)) => {
                let mut events = page?.events;
                let largest = events.iter_mut().map(event_bytes).max().unwrap_or(0);
                self.seqs = window_seqs(largest);
                self.edge = beyond;
                Ok(Window::Arrived(read.span, events))
            }
        }
    }
}

/// What [`walk`] found, and where it stopped.
struct Walked<T> {
    found: Option<T>,
    /// The next seq not read when the budget ran out (`None`: the span was read, or `found`).
    stopped_at: Option<u64>,
    /// The last seq of the last window read.
    through: Option<u64>,
}

/// Reads `windows` until `find` finds something in one, the span is done, or `deadline` passes.
async fn walk<T>(
    mut windows: Windows,
    deadline: &mut Deadline,
    mut find: impl FnMut(Vec<HistoryEvent>) -> Option<T>,
) -> Result<Walked<T>> {
    let mut walked = Walked {
        found: None,
        stopped_at: None,
        through: None,
    };
    while let Some(edge) = windows.edge {
        let Some(left) = deadline.left() else {
            walked.stopped_at = Some(edge);
            break;
        };
        let Window::Arrived(window, events) = windows.next(left).await? else {
            walked.stopped_at = Some(edge);
            break;
        };
        let arrived = Instant::now();
        walked.through = Some(window.last());
        walked.found = find(events);
        deadline.worked_since(arrived);
        if walked.found.is_some() {
            break;
        }
    }
    Ok(walked)
}

/// Seqs of a window whose events may each weigh `largest_event` bytes: as many as fit in
/// [`WINDOW_BYTES`], at least one and at most [`WINDOW`].
fn window_seqs(largest_event: usize) -> u64 {
    let fit = WINDOW_BYTES / largest_event.max(EVENT_OVERHEAD_BYTES);
    u64::try_from(fit).unwrap_or(WINDOW).clamp(1, WINDOW)
}

/// What `event` weighs, for sizing windows: its texts (opened or sealed) and the rest of it.
fn event_bytes(event: &mut HistoryEvent) -> usize {
    let mut bytes =
        EVENT_OVERHEAD_BYTES.saturating_add(event.idempotency_key.as_ref().map_or(0, String::len));
    if let Some(body) = event.event.as_mut() {
        sessionlog_keys::sensitive_fields(body, |_, content| {
            bytes = bytes.saturating_add(match content {
                Content::Plain(text) => text.len(),
                Content::Sealed { ciphertext, .. } => ciphertext.len(),
            });
        });
    }
    bytes
}

/// What searching one window found.
struct WindowHits {
    hits: Vec<Hit>,
    /// Events searched.
    scanned: u64,
    /// Why and at which seq the search stopped before the window's oldest event (that seq is
    /// not searched yet): `page_full` or `budget`.
    stopped: Option<(&'static str, u64)>,
}

/// Searches one window's `events` (in seq order) newest first for `matcher`'s query, for a page
/// already holding `held` of at most `page` hits. A page ends before an event whose hits do not
/// all fit (the next page starts with that event, so no hit is skipped); the search ends before
/// the first event it reaches at `cut_off`.
fn search_window(
    matcher: &mut Matcher,
    events: Vec<HistoryEvent>,
    held: usize,
    page: usize,
    cut_off: Instant,
) -> WindowHits {
    let mut found = WindowHits {
        hits: Vec::new(),
        scanned: 0,
        stopped: None,
    };
    for event in events.into_iter().rev() {
        if Instant::now() >= cut_off {
            found.stopped = Some(("budget", event.seq));
            break;
        }
        let seq = event.seq;
        let hits = matches(event, matcher);
        let had = held.saturating_add(found.hits.len());
        let over = had.saturating_add(hits.len()) > page;
        if had >= page || (over && had > 0) {
            found.stopped = Some(("page_full", seq));
            break;
        }
        found.scanned += 1;
        found.hits.extend(hits);
        found.hits.truncate(page.saturating_sub(held));
    }
    found
}

/// The hits of one event: each opened text field that holds the matcher's query.
fn matches(event: HistoryEvent, matcher: &mut Matcher) -> Vec<Hit> {
    let Some(mut body) = event.event else {
        return Vec::new();
    };
    let mut hits = Vec::new();
    sessionlog_keys::sensitive_fields(&mut body, |field, content| {
        if let Content::Plain(text) = content
            && let Some(snippet) = matcher.snippet(text)
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

    /// When work on a window stops: the budget's end less the twentieth kept for the answer.
    fn cut_off(&self) -> Instant {
        self.started + self.budget.saturating_sub(self.budget / 20)
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
    fn a_deadline_keeps_back_the_work_on_a_window() {
        let mut deadline = Deadline::new(Duration::from_secs(10));
        let fresh = deadline.left().expect("time is left");
        // A twentieth is kept back from the start.
        assert!(fresh <= Duration::from_millis(9_500), "{fresh:?}");
        assert!(fresh > Duration::from_millis(9_000), "{fresh:?}");
        assert_eq!(
            deadline.cut_off(),
            deadline.started + Duration::from_millis(9_500)
        );
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

    fn event(seq: u64, text: &str) -> HistoryEvent {
        HistoryEvent {
            session_id: SessionId(uuid::Uuid::nil()),
            seq,
            kind: "UserRequest".into(),
            occurred_at: 0,
            writer_epoch: 1,
            event_id: uuid::Uuid::nil(),
            log_partition: 0,
            log_offset: 0,
            causation_id: None,
            idempotency_key: None,
            event: Some(SessionEvent::UserRequest {
                content: Content::plain(text),
            }),
            unopened: Default::default(),
            missing: None,
        }
    }

    #[test]
    fn a_window_holds_about_its_bytes_whatever_the_events_weigh() {
        // The first window of a scan, before any event is seen: events of 1 MB.
        assert_eq!(window_seqs(1_000_000), 4);
        assert_eq!(window_seqs(WINDOW_BYTES), 1);
        assert_eq!(window_seqs(usize::MAX), 1);
        // Small events: a whole index page.
        assert_eq!(window_seqs(0), WINDOW);
        assert_eq!(window_seqs(100), WINDOW);
        for largest in [1, 300, 9_000, 70_000, 1_000_000, 5_000_000] {
            let seqs = usize::try_from(window_seqs(largest)).unwrap_or(usize::MAX);
            assert!(
                seqs == 1 || seqs * largest.max(EVENT_OVERHEAD_BYTES) <= WINDOW_BYTES,
                "{largest}: {seqs}"
            );
        }
        // An event weighs its texts and a little more.
        let big = "x".repeat(1_000_000);
        assert_eq!(
            event_bytes(&mut event(1, &big)),
            1_000_000 + EVENT_OVERHEAD_BYTES
        );
        let mut gone = event(1, "");
        gone.event = None;
        assert_eq!(event_bytes(&mut gone), EVENT_OVERHEAD_BYTES);
    }

    fn seqs_of(hits: &[Hit]) -> Vec<u64> {
        hits.iter().map(|h| h.seq).collect()
    }

    #[test]
    fn a_window_is_searched_newest_first_and_a_page_ends_before_an_event_that_does_not_fit() {
        let far = Instant::now() + Duration::from_secs(3600);
        let window = || {
            (1..=6)
                .map(|seq| event(seq, &format!("turn {seq} about the Harbour")))
                .collect::<Vec<_>>()
        };
        let mut matcher = Matcher::new("harbour");
        let all = search_window(&mut matcher, window(), 0, 100, far);
        assert_eq!(seqs_of(&all.hits), [6, 5, 4, 3, 2, 1]);
        assert_eq!((all.scanned, all.stopped), (6, None));
        assert!(all.hits[0].snippet.contains("turn 6 about the Harbour"));
        // A page with room for two more: it stops at the third, which the next page starts at.
        let two = search_window(&mut matcher, window(), 3, 5, far);
        assert_eq!(seqs_of(&two.hits), [6, 5]);
        assert_eq!((two.scanned, two.stopped), (2, Some(("page_full", 4))));
        // A full page searches nothing.
        let none = search_window(&mut matcher, window(), 5, 5, far);
        assert_eq!((none.scanned, none.stopped), (0, Some(("page_full", 6))));
        // Events without a match are searched and pass.
        let mut other = Matcher::new("bergen");
        let missed = search_window(&mut other, window(), 0, 1, far);
        assert!(missed.hits.is_empty());
        assert_eq!((missed.scanned, missed.stopped), (6, None));
        // At the cut-off it stops before the next event, which is not searched.
        let late = search_window(&mut matcher, window(), 0, 100, Instant::now());
        assert!(late.hits.is_empty());
        assert_eq!((late.scanned, late.stopped), (0, Some(("budget", 6))));
    }
}
