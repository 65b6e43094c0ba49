//! Folding log records into projection rows and making them durable: the part of the
//! projector that the live consumer-group worker and the ops replay share.

use crate::Result;
use crate::observe::{self, Health};
use futures::stream::{self, TryStreamExt};
use sessionlog_log::RawRecord;
use sessionlog_log::retry::{self, BackoffBuilder};
use sessionlog_schemas::{EventDecoder, EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::context::{ContextPolicies, ContextWindow, TurnChange};
use sessionlog_session::trace::{day_bucket, last_model_call_after, span_of};
use sessionlog_session::usage::{Contribution, UsageKey, UsageTotals, contributions};
use sessionlog_session::{Rejection, SessionState, Verdict};
use sessionlog_store::{
    CqlRow, LastRecord, LastWritten, ProjectedSession, ProjectionStore, ROWS_PER_BATCH, Wait,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

/// Counts of what a batch did, for logs, metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Records read.
    pub consumed: usize,
    /// Events accepted by the fold.
    pub accepted: usize,
    /// Events the fold rejected (recorded in `rejected_events`).
    pub rejected: usize,
    /// Harmless repeats.
    pub duplicates: usize,
    /// Records already folded before (a replay after a crash or rebalance).
    pub skipped: usize,
    /// Records that belong in the dead-letter topic.
    pub dead_lettered: usize,
}

impl std::ops::AddAssign for BatchStats {
    fn add_assign(&mut self, other: Self) {
        self.consumed += other.consumed;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.duplicates += other.duplicates;
        self.skipped += other.skipped;
        self.dead_lettered += other.dead_lettered;
    }
}

/// A session as the applier keeps it between records: the folded row and its context window.
struct Projection {
    row: ProjectedSession,
    context: ContextWindow,
    /// What this instance last wrote in its rewritten rows.
    written: LastWritten,
}

/// A usage rollup of one log partition as the applier keeps it between records.
#[derive(Default)]
struct Rollup {
    totals: UsageTotals,
    /// The offset of the last record folded into it (-1: none).
    applied_offset: i64,
}

/// A rollup's identity: its key and the log partition whose records it folds.
type RollupId = (UsageKey, i32);

/// A record that cannot be projected, and why: it belongs in the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its index in the folded batch.
    pub index: usize,
    /// Why it cannot be projected.
    pub reason: String,
}

/// A folded batch: the rows it owes the store and the positions it reaches. The rows are a
/// snapshot taken at the end of the fold, so the next batch can be folded while these are
/// written.
pub struct Folded {
    /// Each touched session's rows in log order, its context view and session row last.
    sessions: Vec<(SessionId, Vec<CqlRow>)>,
    /// Where each session is in `sessions`.
    positions: HashMap<SessionId, usize>,
    /// Span rows by tenant, day and bucket, their partition key (rather than the session):
    /// each entry's rows are written as single-partition batches, which no batch size limit
    /// refuses. They go to `trace_spans_by_tenant_day` (migration 14).
    days: BTreeMap<(String, String, i32), Vec<CqlRow>>,
    /// The usage rollups the batch changed, as they stand at its end.
    usage: Vec<CqlRow>,
    /// Which rollups the batch changed.
    touched_usage: BTreeSet<RollupId>,
    /// Rows of the lists keyed by something else than the session: a parent's children,
    /// sessions awaiting someone.
    lists: Vec<CqlRow>,
    /// Names taken by starts and freed by erasures, in log order (conditional writes, made
    /// one by one: see [`sessionlog_store::names`]).
    names: Vec<NameChange>,
    topic: String,
    /// The next offset to read, by partition, once the batch is durable.
    pub next_offsets: BTreeMap<i32, i64>,
    /// The record before each next offset, noted with the progress (see
    /// `ProjectionStore::check_topic`).
    last_records: BTreeMap<i32, LastRecord>,
    /// Sessions that ended in this batch, with their applied offset at its end: with an
    /// ended-session TTL their earlier rows are written again with it (see [`persist`]).
    ended: Vec<(SessionId, i64)>,
    /// Sessions whose status changed to ended while folding this batch.
    ending: std::collections::HashSet<SessionId>,
    /// Records for the dead-letter topic.
    pub dead_letters: Vec<DeadLetter>,
    /// By partition, the dead-letter topic offset from which the dead letters of records after
    /// this batch will be found (stored with the progress; see the worker).
    pub dead_letter_marks: BTreeMap<i32, i64>,
    /// What the batch did.
    pub stats: BatchStats,
}

/// Folds records and writes their rows. Without a store (a dry run) it folds in memory only.
pub struct Applier {
    store: Option<ProjectionStore>,
    decoder: EventDecoder,
    topic: String,
    /// The topic's pinned partition count (`[kafka] partitions`): a record that is not on its
    /// key's partition is dead-lettered, never folded.
    partitions: i32,
    write_concurrency: usize,
    cache_sessions: usize,
    cache: HashMap<SessionId, Projection>,
    /// Usage rollups, loaded from the store when first touched.
    usage: HashMap<RollupId, Rollup>,
    health: Arc<Health>,
    policies: Arc<ContextPolicies>,
    trace_day_buckets: u16,
}

impl Applier {
    /// An applier of the records of `kafka`'s topic (of its pinned partition count) into
    /// `store` (`None`: fold only, write nothing).
    pub fn new(
        store: Option<ProjectionStore>,
        decoder: EventDecoder,
        kafka: &sessionlog_log::KafkaSettings,
        write_concurrency: usize,
        cache_sessions: usize,
    ) -> Self {
        Self {
            store,
            decoder,
            topic: kafka.topic.clone(),
            partitions: kafka.partitions.max(1),
            write_concurrency: write_concurrency.max(1),
            cache_sessions,
            cache: HashMap::new(),
            usage: HashMap::new(),
            health: Arc::new(Health::default()),
            policies: Arc::default(),
            trace_day_buckets: sessionlog_log::ProjectorSettings::default().trace_day_buckets,
        }
    }

    /// Spreads each day's spans over `buckets` partitions (`[projector] trace_day_buckets`).
    pub fn with_trace_day_buckets(mut self, buckets: u16) -> Self {
        self.trace_day_buckets = buckets.max(1);
        self
    }

    /// Builds sessions' context views with `policies` (`[context]`), chosen by agent name.
    pub fn with_context_policies(mut self, policies: ContextPolicies) -> Self {
        self.policies = Arc::new(policies);
        self
    }

    /// Reports to `health` (the projector's, which the consumer's statistics also update).
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = health;
        self
    }

    /// The health handle this applier updates.
    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// The store written to, if any.
    pub fn store(&self) -> Option<&ProjectionStore> {
        self.store.as_ref()
    }

    /// Forgets cached sessions: after a rebalance another instance may have advanced them.
    pub fn forget(&mut self) {
        self.cache.clear();
        self.usage.clear();
    }

    /// Folds a batch of records in log order. Decoding failures become dead letters;
    /// the fold's rejections become `rejected_events` rows.
    #[tracing::instrument(name = "fold_batch", skip_all, fields(
        records = records.len(),
        partition = records.first().map(|r| r.partition),
        first_offset = records.first().map(|r| r.offset),
        last_offset = records.last().map(|r| r.offset),
    ))]
    pub async fn fold(&mut self, records: &[RawRecord]) -> Result<Folded> {
        let mut folded = Folded {
            sessions: Vec::new(),
            positions: HashMap::new(),
            days: BTreeMap::new(),
            usage: Vec::new(),
            touched_usage: BTreeSet::new(),
            lists: Vec::new(),
            names: Vec::new(),
            topic: self.topic.clone(),
            next_offsets: BTreeMap::new(),
            last_records: BTreeMap::new(),
            ended: Vec::new(),
            ending: Default::default(),
            dead_letters: Vec::new(),
            dead_letter_marks: BTreeMap::new(),
            stats: BatchStats {
                consumed: records.len(),
                ..BatchStats::default()
            },
        };
        for (index, record) in records.iter().enumerate() {
            folded
                .next_offsets
                .insert(record.partition, record.offset + 1);
            folded
                .last_records
                .insert(record.partition, LastRecord::of(record));
            let decoded = record
                .decode(&self.decoder)
                .await
                .and_then(|event| record.on_pinned_partition(event, self.partitions));
            match decoded {
                Ok(event) => self.fold_event(event, record, &mut folded).await?,
                Err(reason) => {
                    tracing::warn!(
                        partition = record.partition,
                        offset = record.offset,
                        reason,
                        "record cannot be projected"
                    );
                    folded.stats.dead_lettered += 1;
                    folded.dead_letters.push(DeadLetter { index, reason });
                }
            }
        }
        let expires = self
            .store
            .as_ref()
            .is_some_and(ProjectionStore::expires_ended_sessions);
        // And each touched rollup's totals.
        for id in std::mem::take(&mut folded.touched_usage) {
            if let Some(rollup) = self.usage.get(&id) {
                let (key, partition) = &id;
                let row = CqlRow::usage(key, *partition, &rollup.totals, rollup.applied_offset);
                folded.usage.push(row);
            }
        }
        // Snapshot each touched session's views after the whole batch: one write each.
        for (session, rows) in &mut folded.sessions {
            if let Some(p) = self.cache.get_mut(session) {
                let ended = expires && p.row.state.status().has_ended();
                if ended {
                    // Every column is sent, so that none keeps a cell without the TTL.
                    p.written = LastWritten::default();
                }
                rows.push(CqlRow::context(&p.context, &p.row.state, &mut p.written));
                rows.push(CqlRow::session(&p.row, &mut p.written));
                if ended {
                    rows.iter_mut().for_each(CqlRow::set_expiring);
                    if folded.ending.contains(session) {
                        folded.ended.push((*session, p.row.applied_offset));
                    }
                }
            }
        }
        observe::count_batch(&folded.stats);
        Ok(folded)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(
        session = %event.session_id,
        partition = record.partition,
        offset = record.offset,
    ))]
    async fn fold_event(
        &mut self,
        event: EventEnvelope,
        record: &RawRecord,
        folded: &mut Folded,
    ) -> Result<()> {
        let (partition, offset) = (record.partition, record.offset);
        let session = event.session_id;
        let policies = Arc::clone(&self.policies);
        let bucket = day_bucket(session, self.trace_day_buckets);
        let known = self.entry(session, partition).await.row.state.started;
        let started_before = !known && self.started_before(&event, partition, offset).await;
        let entry = self.entry(session, partition).await;
        if entry.row.applied_offset >= offset {
            folded.stats.skipped += 1;
            return Ok(());
        }
        let span = span_of(&event, &entry.row.state, entry.row.last_model_call);
        let status = entry.row.state.status();
        let waited = Wait::of(status);
        let verdict = if started_before {
            Verdict::Rejected(Rejection::AlreadyStarted)
        } else {
            entry.row.state.apply(&event)
        };
        if !status.has_ended() && entry.row.state.status().has_ended() {
            folded.ending.insert(session);
        }
        // Whom the session waits for changes only with an event the fold accepted; the rows
        // follow each change, so any split of the log into batches writes the same ones.
        let waits = Wait::of(entry.row.state.status());
        folded
            .lists
            .extend(CqlRow::awaiting(&event, offset, waited, waits));
        entry.row.applied_offset = offset;
        entry.row.partition = partition;
        // The context window folds only records it has not seen (its row once could be written
        // ahead of the session row; both now land in one mutation).
        let mut turns = TurnChange::None;
        if entry.context.applied_offset < offset {
            if verdict.is_accepted() {
                turns = entry.context.fold(&event, &policies);
            }
            entry.context.applied_offset = offset;
        }
        let mut rows = CqlRow::turns(session, &entry.context, turns, offset);
        let mut usage = Vec::new();
        match verdict {
            Verdict::Accepted => {
                folded.stats.accepted += 1;
                entry.row.last_model_call =
                    last_model_call_after(&event, entry.row.last_model_call);
                if let Some(span) = span {
                    let agent = entry.row.state.agent.as_deref();
                    let tenant = entry.row.state.tenant.as_str();
                    usage = contributions(&span, tenant, agent);
                    let [by_session, by_day] =
                        CqlRow::span(&span, partition, offset, (tenant, agent), bucket);
                    rows.push(by_session);
                    folded
                        .days
                        .entry((tenant.to_string(), span.day(), bucket))
                        .or_default()
                        .push(by_day);
                }
                folded
                    .names
                    .extend(NameChange::of(&event, &entry.row.state));
                folded.lists.extend(CqlRow::child(&event, offset));
                folded
                    .lists
                    .extend(CqlRow::start(&event, partition, offset));
                let checkpoint = matches!(event.event, SessionEvent::Checkpoint { .. });
                // The window goes with the checkpoint only if it stands exactly there.
                let window = (entry.context.applied_offset == offset).then_some(&entry.context);
                let after = checkpoint.then_some((&entry.row.state, window));
                rows.extend(CqlRow::accepted(&event, partition, offset, after));
            }
            Verdict::Duplicate => folded.stats.duplicates += 1,
            Verdict::Rejected(why) => {
                folded.stats.rejected += 1;
                observe::count_rejection(why.label());
                rows.push(CqlRow::rejected(&event, partition, offset, &why));
            }
        }
        match folded.positions.get(&session) {
            Some(at) => folded.sessions[*at].1.extend(rows),
            None => {
                folded.positions.insert(session, folded.sessions.len());
                folded.sessions.push((session, rows));
            }
        }
        for (key, contribution) in usage {
            self.add_usage((key, partition), offset, &contribution, folded)
                .await;
        }
        Ok(())
    }

    /// Adds a call at `offset` to a rollup, unless the rollup has folded that record already:
    /// rollups are written before the session rows, so a batch folded again after a crash
    /// between the two finds its calls counted.
    async fn add_usage(
        &mut self,
        id: RollupId,
        offset: i64,
        contribution: &Contribution,
        folded: &mut Folded,
    ) {
        if !self.usage.contains_key(&id) {
            let stored = match &self.store {
                Some(store) => {
                    let (key, partition) = &id;
                    with_retry("load usage rollup", &self.health, || {
                        store.load_usage(key, *partition)
                    })
                    .await
                }
                None => None,
            };
            let (totals, applied_offset) = stored.unwrap_or((UsageTotals::default(), -1));
            self.usage.insert(
                id.clone(),
                Rollup {
                    totals,
                    applied_offset,
                },
            );
        }
        let Some(rollup) = self.usage.get_mut(&id) else {
            return;
        };
        if rollup.applied_offset >= offset {
            return;
        }
        rollup.totals.add(contribution);
        rollup.applied_offset = offset;
        folded.touched_usage.insert(id);
    }

    /// Whether `event`, folded into a session neither the cache nor a stored row knows as
    /// started, starts a session the log started before, at another record: its rows expired,
    /// but its permanent start row did not. The writers refuse such a start; a raw producer's
    /// is refused here, as a replay of the log would refuse it.
    async fn started_before(&self, event: &EventEnvelope, partition: i32, offset: i64) -> bool {
        let starts = matches!(
            event.event,
            SessionEvent::SessionStarted { .. } | SessionEvent::SessionForked { .. }
        );
        let Some(store) = self.store.as_ref().filter(|_| starts) else {
            return false;
        };
        let session = event.session_id;
        with_retry("load session start", &self.health, || {
            store.session_start(session)
        })
        .await
        .is_some_and(|start| start != (partition, offset))
    }

    async fn entry(&mut self, session: SessionId, partition: i32) -> &mut Projection {
        let loaded = match (&self.store, self.cache.contains_key(&session)) {
            (Some(store), false) => {
                let row =
                    with_retry("load session", &self.health, || store.load_session(session)).await;
                let context =
                    with_retry("load context", &self.health, || store.load_context(session)).await;
                Some((row, context))
            }
            _ => None,
        };
        self.cache.entry(session).or_insert_with(|| {
            let (row, context) = loaded.unwrap_or_default();
            Projection {
                row: row.unwrap_or_else(|| ProjectedSession {
                    state: SessionState::empty(session),
                    partition,
                    applied_offset: -1,
                    last_model_call: None,
                }),
                context: context.unwrap_or_default(),
                written: LastWritten::default(),
            }
        })
    }

    /// Makes a folded batch durable (see [`persist`]); without a store there is nothing to do.
    pub async fn persist(&self, folded: &Folded) {
        match &self.store {
            Some(store) => persist(store, folded, self.write_concurrency, &self.health).await,
            None => self.health.batch_done(),
        }
    }

    /// Concurrent CQL writes per batch.
    pub fn write_concurrency(&self) -> usize {
        self.write_concurrency
    }

    /// Whether the cache holds more sessions than configured and should start over (only
    /// with nothing in flight: a dropped session is reloaded from its stored row).
    pub fn cache_full(&self) -> bool {
        // Rollups count too: they grow with days, keys and partitions, and are reloaded the
        // same way.
        self.store.is_some() && self.cache.len() + self.usage.len() > self.cache_sessions
    }
}

/// Makes a folded batch durable: span rows by tenant and day and the lists' rows first, then each
/// touched session's rows as one mutation (its session row, the commit point, with its event
/// rows; small sessions share a request, see [`ProjectionStore::write_sessions`]), then the
/// partitions' progress. Retries until the store answers, so an outage stalls the projector
/// instead of losing anything.
#[tracing::instrument(name = "write_batch", skip_all, fields(
    sessions = folded.sessions.len(),
    partitions = ?folded.next_offsets.keys().collect::<Vec<_>>(),
    next_offsets = ?folded.next_offsets.values().collect::<Vec<_>>(),
))]
pub async fn persist(
    store: &ProjectionStore,
    folded: &Folded,
    concurrency: usize,
    health: &Health,
) {
    let concurrency = concurrency.max(1);
    let started = std::time::Instant::now();
    with_retry("write spans by day", health, || {
        stream::iter(
            folded
                .days
                .values()
                .flat_map(|rows| rows.chunks(ROWS_PER_BATCH))
                .map(Ok),
        )
        .try_for_each_concurrent(concurrency, |rows| store.write_rows(rows))
    })
    .await;
    // Rollups before the session rows, which are the commit point: see `add_usage`. Each
    // alone: they are few per batch, and keyed by day and dimension.
    with_retry("write usage rollups", health, || {
        stream::iter(folded.usage.iter().map(Ok)).try_for_each_concurrent(concurrency, |row| {
            store.write_rows(std::slice::from_ref(row))
        })
    })
    .await;
    // Each list row alone: they are few (forks, waits, the tenants' day buckets the spans went
    // to) and each is keyed by another partition. A tenant's day bucket is noted after its
    // spans, so a reader that finds the note finds them.
    let buckets: Vec<CqlRow> = (folded.days.keys())
        .map(|(tenant, day, bucket)| {
            CqlRow::tenant_day_bucket(tenant.clone(), day.clone(), *bucket)
        })
        .collect();
    with_retry("write lists", health, || {
        stream::iter(folded.lists.iter().chain(&buckets).map(Ok))
            .try_for_each_concurrent(concurrency, |row| {
                store.write_rows(std::slice::from_ref(row))
            })
    })
    .await;
    // Before the session rows, the commit point: a batch folded again after a crash takes
    // or frees the same names, which changes nothing the second time.
    with_retry("write session names", health, || async {
        let names = store.names().await?;
        for change in &folded.names {
            change.write(names).await?;
        }
        Ok::<_, sessionlog_store::Error>(())
    })
    .await;
    let days_done = started.elapsed();
    // A session that ended in this batch has its session row, the commit point, held back
    // until its earlier rows are written again with the TTL: if the projector dies in between,
    // the stored session row is still the one before the batch, so the batch is folded and
    // this is done again.
    let held_back = |session: &SessionId| folded.ended.iter().any(|(s, _)| s == session);
    let sessions: Vec<&[CqlRow]> = folded
        .sessions
        .iter()
        .map(|(session, rows)| {
            if held_back(session) {
                &rows[..rows.len().saturating_sub(1)]
            } else {
                &rows[..]
            }
        })
        .collect();
    let mut requests = with_retry("write sessions", health, || {
        store.write_sessions(&sessions, concurrency)
    })
    .await;
    if !folded.ended.is_empty() {
        for (session, applied_offset) in &folded.ended {
            with_retry("expire ended session", health, || {
                store.expire_session(*session, *applied_offset)
            })
            .await;
        }
        let commits: Vec<&[CqlRow]> = folded
            .sessions
            .iter()
            .filter(|(session, _)| held_back(session))
            .map(|(_, rows)| &rows[rows.len().saturating_sub(1)..])
            .collect();
        requests += with_retry("write ended sessions", health, || {
            store.write_sessions(&commits, concurrency)
        })
        .await;
    }
    let sessions_done = started.elapsed();
    let progress: Vec<CqlRow> = folded
        .next_offsets
        .iter()
        .map(|(p, next)| {
            let mark = folded.dead_letter_marks.get(p).copied();
            let last = folded.last_records.get(p).cloned().unwrap_or_default();
            CqlRow::progress(&folded.topic, *p, *next, mark, &last)
        })
        .collect();
    with_retry("write partition progress", health, || {
        store.write_rows(&progress)
    })
    .await;
    tracing::debug!(
        sessions = folded.sessions.len(),
        requests,
        ?days_done,
        ?sessions_done,
        total = ?started.elapsed(),
        "batch written"
    );
    health.batch_done();
}

/// A session name a start took or an erasure freed.
#[derive(Debug)]
struct NameChange {
    tenant: String,
    name_sha256: String,
    session: SessionId,
    taken: bool,
}

impl NameChange {
    /// The change an accepted `event` makes, with `state` already past it.
    fn of(event: &EventEnvelope, state: &sessionlog_session::SessionState) -> Option<Self> {
        let taken = match &event.event {
            SessionEvent::SessionStarted { .. } => true,
            SessionEvent::SessionErased { .. } => false,
            _ => return None,
        };
        Some(Self {
            tenant: state.tenant.clone(),
            name_sha256: state.name_sha256.clone()?,
            session: state.session_id,
            taken,
        })
    }

    async fn write(&self, names: &sessionlog_store::SessionNames) -> sessionlog_store::Result<()> {
        let (tenant, digest) = (self.tenant.as_str(), self.name_sha256.as_str());
        if !self.taken {
            return names.release(tenant, digest, self.session).await;
        }
        // Held by another session: ingest gave the name to one session only, so another
        // holder took it after this one was erased (and a replay restores it when it folds
        // that session's start). Nothing to do either way.
        names.claim(tenant, digest, self.session).await.map(|_| ())
    }
}

/// Retries a store operation with capped exponential backoff until it succeeds, reporting
/// the outage on `health` meanwhile.
pub(crate) async fn with_retry<T, F, Fut>(what: &'static str, health: &Health, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sessionlog_store::Error>>,
{
    // A projector cannot skip a write, so this waits as long as the outage lasts: the policy's
    // waits drive a loop that only success ends.
    let mut waits = retry::forever().build();
    loop {
        match op().await {
            Ok(value) => {
                health.store_answered();
                return value;
            }
            Err(
                e @ (sessionlog_store::Error::CorruptRow { .. }
                | sessionlog_store::Error::CorruptRollup { .. }),
            ) => {
                // Counted and reported by /health/ready, not mistaken for an outage; the fold
                // cannot go on without the row, so the partition waits for its repair.
                let wait = waits.next().unwrap_or(retry::MAX_DELAY);
                tracing::error!(error = %e, what, ?wait, "a stored row cannot be read; retrying");
                health.corrupt_row_found(e.to_string());
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                health.store_failed();
                let wait = waits.next().unwrap_or(retry::MAX_DELAY);
                tracing::warn!(error = %e, what, ?wait, "store unavailable; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
