//! Rebuilding a session's state from topic offsets.

use crate::index::{self, VerifiedCheckpoint};
use crate::observe;
use crate::resolver::Resolvers;
use crate::{Error, Result};
use serde::Serialize;
use sessionlog_log::{RawRecord, Settings, partitioner};
use sessionlog_producer::EventLog;
use sessionlog_schemas::{EventDecoder, EventEnvelope, SessionId};
use sessionlog_session::SessionState;
use sessionlog_store::{KeyTable, ProjectionStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many records a rebuild holds before folding them: memory stays bounded by this,
/// not by the session's length.
const WINDOW: usize = 4096;
/// How long a rebuild must have waited for a reader before it asks the projector's progress
/// again: a shorter wait leaves too little newly projected to repay two more round trips.
const REREAD_PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// Exports what reading leases has cost the process so far (consumers made, topic checks):
/// the log crate counts them, as it has no metrics of its own.
fn record_lease_costs() {
    metrics::counter!(observe::LEASE_READERS_MADE).absolute(sessionlog_log::lease::readers_made());
    metrics::counter!(observe::LEASE_TOPIC_CHECKS).absolute(sessionlog_log::lease::topic_checks());
}

/// Where a rebuild started reading.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum StartPoint {
    /// After the latest checkpoint the projector verified, from its stored state.
    Checkpoint {
        /// The checkpoint's seq.
        seq: u64,
        /// Its offset.
        offset: i64,
    },
    /// At the session's first event, as the event index gives it.
    FirstEvent {
        /// Its offset.
        offset: i64,
    },
    /// At the start of the partition: the tables know nothing of the session.
    PartitionStart {
        /// The partition's first offset.
        offset: i64,
    },
}

impl StartPoint {
    /// The first offset the read takes: the one after a checkpoint, or the start itself.
    pub fn first_offset(&self) -> i64 {
        match self {
            Self::Checkpoint { offset, .. } => offset + 1,
            Self::FirstEvent { offset } | Self::PartitionStart { offset } => *offset,
        }
    }
}

/// A session rebuilt from the log.
#[derive(Clone, Debug, Serialize)]
pub struct RebuiltSession {
    /// The folded state.
    pub state: SessionState,
    /// The session's partition.
    pub partition: i32,
    /// Where reading began.
    pub start: StartPoint,
    /// The partition's end when reading stopped (next offset to be written).
    pub end_offset: i64,
    /// The offset of the session's last record read, if any was read.
    pub last_offset: Option<i64>,
    /// Records read, of any session: from the partition, and the session's own taken from the
    /// process's tail (memory).
    pub records_read: u64,
    /// Records of this session folded.
    pub events_folded: u64,
    /// Read wholly from the process's tail of the log (memory), not the partition. A rebuild
    /// that read its indexed part from the partition and its unprojected rest from the tail
    /// says `false`.
    pub from_tail: bool,
}

impl RebuiltSession {
    /// Records read per record of this session folded (1.0 is ideal).
    pub fn read_amplification(&self) -> f64 {
        if self.events_folded == 0 {
            self.records_read as f64
        } else {
            self.records_read as f64 / self.events_folded as f64
        }
    }
}

/// One event of a session as it sits in the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoggedEvent {
    /// Its offset in the session's partition.
    pub offset: i64,
    /// The event.
    pub envelope: EventEnvelope,
    /// Whether the fold accepted it (rejected events are read but change nothing).
    pub accepted: bool,
}

/// The recovery service: rebuilds, resumes, resolves and forks sessions.
pub struct Recovery {
    settings: Settings,
    decoder: EventDecoder,
    store: ProjectionStore,
    partitions: i32,
    log: Arc<EventLog>,
    resolvers: Resolvers,
    notary: Arc<crate::notary::Notary>,
    keys: Arc<KeyTable>,
    readiness: sessionlog_http::Readiness,
    /// One permit per resume that may run (`[recovery] max_concurrent_resumes`).
    resumes: Arc<tokio::sync::Semaphore>,
    /// Resumes waiting for a permit now.
    resumes_waiting: AtomicUsize,
    /// Reads the sessions' leases `GET /v1/sessions/{id}` shows: kept consumers, and the
    /// lease topic checked once, not per request.
    leases: sessionlog_log::lease::LeaseReader,
    /// The MCP endpoint (and reader token) each resume bundle names (`[recovery.mcp]`).
    mcp: Option<crate::mcp_access::McpIssuer>,
}

impl Recovery {
    /// Connects to the registry, the store and the cluster (checking the partition count, see
    /// `sessionlog_log::topic::pinned_partitions`), with
    /// the HTTP resolvers the settings name. The store is opened read-only
    /// ([`ProjectionStore::open`]): recovery never creates or migrates a keyspace, and fails
    /// with the command to run when the keyspace is missing or outdated.
    pub async fn connect(settings: &Settings) -> Result<Self> {
        let notary = crate::notary::Notary::from_settings(&settings.recovery)?;
        let mcp = crate::mcp_access::McpIssuer::from_settings(settings)?;
        Ok(Self {
            mcp,
            ..Self::connect_with(settings, notary).await?
        })
    }

    /// As [`Recovery::connect`], for a reader that rebuilds sessions and appends nothing
    /// privileged (the OTLP export): it reads no signing key, so it runs where none is mounted
    /// and never holds one it does not need. Approvals, operator results and resumes that rely
    /// on a signed decision fail through it.
    pub async fn connect_reader(settings: &Settings) -> Result<Self> {
        Self::connect_with(settings, crate::notary::Notary::unsigned()).await
    }

    async fn connect_with(settings: &Settings, notary: crate::notary::Notary) -> Result<Self> {
        let decoder = EventDecoder::new(settings.registry.client()?);
        let store = ProjectionStore::open_checked(settings).await?;
        let notary = Arc::new(notary);
        // Claims made through this log catch up from the projection, not the partition's start.
        let mut log = EventLog::from_settings(settings)
            .await?
            .with_projection(store.clone());
        // Recovery's claims and forks are signed: it judged the session's gates before each.
        if notary.can_sign() {
            log = log.with_attester(Arc::clone(&notary) as Arc<dyn sessionlog_producer::Attester>);
        }
        let log = Arc::new(log);
        // Erasure receipts live in the key store, with encryption on or off.
        let keys = Arc::new(KeyTable::open(settings).await?);
        // Ready while the servers every operation needs answer: Kafka (rebuilds and the claims,
        // outcomes and forks recovery appends), the registry, the store.
        let readiness = sessionlog_http::Readiness::new()
            .kafka(&settings.kafka)
            .registry(decoder.registry().clone(), log.schema_id())
            .store(store.clone());
        let leases = sessionlog_log::lease::LeaseReader::new(&settings.kafka, log.partitions());
        Ok(Self {
            settings: settings.clone(),
            decoder,
            store,
            partitions: log.partitions(),
            log,
            resolvers: Resolvers::http(&settings.recovery.resolvers),
            notary,
            keys,
            readiness,
            resumes: Arc::new(tokio::sync::Semaphore::new(
                settings.recovery.max_concurrent_resumes.max(1),
            )),
            resumes_waiting: AtomicUsize::new(0),
            leases,
            mcp: None,
        })
    }

    /// Replaces the resolvers (e.g. with in-process ones).
    pub fn with_resolvers(mut self, resolvers: Resolvers) -> Self {
        self.resolvers = resolvers;
        self
    }

    /// Waits for one of the `[recovery] max_concurrent_resumes` permits: held by a
    /// [`crate::ResumePoint`] until its claim is answered.
    pub(crate) async fn resume_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        /// Counts a resume as waiting until it is dropped: one whose caller went away while
        /// it waited stops counting too.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
                metrics::gauge!(observe::RESUMES_WAITING).decrement(1.0);
            }
        }
        self.resumes_waiting.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(observe::RESUMES_WAITING).increment(1.0);
        let _waiting = Waiting(&self.resumes_waiting);
        Arc::clone(&self.resumes)
            .acquire_owned()
            .await
            .map_err(|_| sessionlog_log::Error::Task("resume permits closed".into()).into())
    }

    /// Resumes waiting for their turn now, over `[recovery] max_concurrent_resumes`.
    pub fn resumes_waiting(&self) -> usize {
        self.resumes_waiting.load(Ordering::Relaxed)
    }

    /// `session`'s writer lease as the lease topic holds it (`None`: none, released, or leases
    /// are off in these settings, `[lease] ttl_ms = 0`, and the topic is not read); see
    /// [`sessionlog_log::lease::LeaseReader`]. Whether it is live is the caller's to judge
    /// against its clock and the session's current epoch. A read borrows one of the service's
    /// consumers of the lease topic and reads what was written to the session's partition of
    /// it since the last read there (the first read of a partition reads it whole).
    pub async fn lease(&self, session: SessionId) -> Result<Option<sessionlog_log::Lease>> {
        if self.settings.lease.ttl().is_none() {
            return Ok(None);
        }
        let lease = self.leases.read(session).await;
        record_lease_costs();
        Ok(lease?)
    }

    /// The log recovery appends claims, outcomes and forks to.
    pub fn log(&self) -> &Arc<EventLog> {
        &self.log
    }

    /// What a resume bundle says about the MCP server over `session`'s history, for
    /// `writer` of `tenant`; `None` unless `[recovery.mcp] url` is set (a reader's recovery,
    /// [`Recovery::connect_reader`], names none).
    pub fn mcp_access(
        &self,
        session: SessionId,
        writer: &str,
        tenant: &str,
    ) -> Option<crate::mcp_access::McpAccess> {
        self.mcp
            .as_ref()
            .map(|issuer| issuer.access(session, writer, tenant))
    }

    /// Signs the privileged events recovery appends and checks those a session relies on.
    pub fn notary(&self) -> &crate::notary::Notary {
        &self.notary
    }

    /// The resolvers recovery asks about in-doubt idempotent calls.
    pub fn resolvers(&self) -> &Resolvers {
        &self.resolvers
    }

    /// What `/health/ready` asks: Kafka, the registry, the store.
    pub fn readiness(&self) -> &sessionlog_http::Readiness {
        &self.readiness
    }

    /// The settings recovery runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The key store: data keys (through the log's keyring) and erasure receipts.
    pub fn key_table(&self) -> &KeyTable {
        &self.keys
    }

    /// The projection store recovery reads checkpoints and the index from.
    pub fn store(&self) -> &ProjectionStore {
        &self.store
    }

    /// The partition `session` lives on.
    pub fn partition_of(&self, session: SessionId) -> i32 {
        partitioner::partition_for(session, self.partitions)
    }

    /// Rebuilds `session`: from its latest verified checkpoint if any, else from its first
    /// event, reading its partition to the end and folding its events.
    pub async fn rebuild(&self, session: SessionId) -> Result<RebuiltSession> {
        self.rebuild_with(session, None, |_, _| {}).await
    }

    /// Rebuilds `session` from a checkpoint no later than `at_most_seq` (or the latest), and
    /// calls `visit` with every event of the session read after the start point and the state
    /// just after the fold judged it.
    pub async fn rebuild_with(
        &self,
        session: SessionId,
        at_most_seq: Option<u64>,
        visit: impl FnMut(&LoggedEvent, &SessionState),
    ) -> Result<RebuiltSession> {
        self.rebuild_through(session, at_most_seq, None, visit)
            .await
    }

    /// [`Self::rebuild_with`] that reads no further than `through_offset` (inclusive) when
    /// given: the session as it stood there, at the cost of the events up to it.
    #[tracing::instrument(name = "rebuild", skip(self, visit), fields(
        %session,
        partition = tracing::field::Empty,
        offset = tracing::field::Empty,
        end_offset = tracing::field::Empty,
    ))]
    pub async fn rebuild_through(
        &self,
        session: SessionId,
        at_most_seq: Option<u64>,
        through_offset: Option<i64>,
        mut visit: impl FnMut(&LoggedEvent, &SessionState),
    ) -> Result<RebuiltSession> {
        let started = std::time::Instant::now();
        let partition = self.partition_of(session);
        let span = tracing::Span::current();
        span.record("partition", partition);
        // Every table read first, together, and only then a reader from the log's pool: a
        // reader held across table round trips idles while other rebuilds queue for it (a
        // fleet restart of 1,000 sessions spent a quarter of its time waiting for readers so).
        // Boxed: joined, the three futures sit side by side in this one, and a fork (a rebuild
        // inside a rebuild) overflowed a 2 MiB thread stack in a debug build.
        let (checkpoint, row, progress) = tokio::try_join!(
            Box::pin(index::latest_verified_checkpoint(
                &self.store,
                session,
                at_most_seq
            )),
            Box::pin(async { Ok(self.store.load_session(session).await?) }),
            Box::pin(async { Ok(self.store.load_progress(&self.settings.kafka.topic).await?) }),
        )?;
        // Where the read starts, as far as the tables know it; only the partition's start
        // needs the log (below, once a reader is lent).
        let mut index_expired = false;
        let known_start = match checkpoint {
            Some(VerifiedCheckpoint {
                seq, offset, state, ..
            }) => Some((StartPoint::Checkpoint { seq, offset }, state)),
            None => match self.store.locate(session, 1).await? {
                Some((p, offset)) if p == partition => Some((
                    StartPoint::FirstEvent { offset },
                    SessionState::empty(session),
                )),
                // No index, but the permanent record of its start: an ended session whose rows
                // expired. The index no longer says which offsets are its own, so its whole
                // stretch of the partition is read, from its first event.
                _ => match self.store.session_start(session).await? {
                    Some((p, offset)) if p == partition => {
                        index_expired = true;
                        Some((
                            StartPoint::FirstEvent { offset },
                            SessionState::empty(session),
                        ))
                    }
                    _ => None,
                },
            },
        };
        // A start the process's tail still holds (a session written to recently, as most whose
        // harness just died were) is read from memory: no reader, no index, no fetch.
        if let Some((start, state)) = &known_start
            && let Some(rebuilt) = self
                .rebuild_held(session, start, state, through_offset, &mut visit)
                .await?
        {
            return Ok(self.rebuilt(rebuilt, started));
        }
        // Where the projection covers the session, its index says which offsets matter: read
        // only those. Beyond it (the projector is behind, or down) read everything to the end.
        let session_covered = match &row {
            Some(row) if row.partition == partition => row.applied_offset,
            _ => -1,
        };
        // The projector stores a partition's progress only after every write below it (the
        // index included) is durable, so the index is complete up to there even when this
        // session's last event is far behind it: without this, every record of other sessions
        // after the session's last event would be read as tail.
        let partition_covered = progress.get(&partition).map_or(-1, |next| next - 1);
        let indexed = if index_expired {
            -1
        } else {
            session_covered.max(partition_covered)
        };
        let after_seq = match &known_start {
            Some((StartPoint::Checkpoint { seq, .. }, _)) => *seq,
            _ => 0,
        };
        // Without a known start, every indexed offset: those below the partition's start are
        // dropped once it is known.
        let indexed_from = known_start
            .as_ref()
            .map_or(0, |(start, _)| start.first_offset());
        let mut offsets = if indexed >= indexed_from {
            index::accepted_offsets(&self.store, session, after_seq, indexed_from, indexed).await?
        } else {
            Vec::new()
        };

        let waited = std::time::Instant::now();
        let reader = self.log().lend_reader().await?;
        observe::phase_done("wait_reader", started);
        // While this rebuild queued for a reader the projector went on: in a fleet restart the
        // wait is about a second, and every record it projected meanwhile (mostly the fleet's
        // own claims) would otherwise be read below as unindexed tail. Asking again costs two
        // table round trips with the reader held, so only after a wait long enough to matter.
        let mut indexed = indexed;
        if !index_expired && waited.elapsed() >= REREAD_PROGRESS_AFTER {
            let progress = self.store.load_progress(&self.settings.kafka.topic).await?;
            let now_covered = progress.get(&partition).map_or(-1, |next| next - 1);
            let from = indexed.saturating_add(1).max(indexed_from);
            if now_covered >= from {
                offsets.extend(
                    index::accepted_offsets(&self.store, session, after_seq, from, now_covered)
                        .await?,
                );
                indexed = now_covered;
            }
        }
        // Through the process's tail when it runs one: a burst of takes shares the round trip.
        let (first_offset, end_offset) = self.log().watermarks_lent(&reader, partition).await?;
        let (start, mut state) = known_start.unwrap_or_else(|| {
            (
                StartPoint::PartitionStart {
                    offset: first_offset,
                },
                SessionState::empty(session),
            )
        });
        let from = start.first_offset();
        let end_offset = match through_offset {
            Some(through) => end_offset.min(through.saturating_add(1)),
            None => end_offset,
        };
        span.record("offset", from);
        span.record("end_offset", end_offset);
        let mut fold = StreamingFold::new(&self.decoder, session, &mut state, &mut visit);

        let covered = indexed.min(end_offset - 1);
        let mut tail_from = from;
        if covered >= from {
            offsets.retain(|offset| (from..=covered).contains(offset));
            for chunk in offsets.chunks(WINDOW) {
                let mut records = Vec::with_capacity(chunk.len());
                let read = reader
                    .read_offsets(partition, chunk, &mut |r| records.push(r))
                    .await?;
                // The records read between wanted offsets count as read too.
                fold.records_read += read.saturating_sub(records.len()) as u64;
                fold.fold(records).await?;
            }
            tail_from = covered + 1;
        }
        // Beyond the index lies what the projector has not applied. What of it the process's
        // tail holds (in a fleet restart, mostly the fleet's own claims, written since the
        // service started) is taken from memory, the session's records only: otherwise every
        // record of the partition past the projection is read, most of them other sessions'.
        // Only as far as the tail has read, with no wait (a stalled tail would hold this
        // reader); the rest is read from the log below.
        let mut next = tail_from;
        if next < end_offset
            && let Some(upto) = self
                .log()
                .tail_end(partition)
                .map(|end| end.min(end_offset))
            && upto > next
            && let Some(records) = self
                .log()
                .read_held(partition, next, upto, first_offset, session)
                .await?
        {
            fold.fold(records).await?;
            next = upto;
        }
        // What is left to read from the log is bounded, so a stopped projector costs a fast
        // 503 rather than a read of everything it left (a session whose rows expired has no
        // index at all, and is read whole).
        if !index_expired && next < end_offset {
            self.log()
                .check_unprojected(partition, end_offset.saturating_sub(next))?;
        }
        while next < end_offset {
            let until = (next + WINDOW as i64).min(end_offset);
            let mut records = Vec::new();
            let key = fold.key.clone();
            let mut read = 0u64;
            next = reader
                .read_range(partition, next, until, &mut |r: RawRecord| {
                    read += 1;
                    if r.key.as_deref() == Some(key.as_bytes()) {
                        records.push(r);
                    }
                })
                .await?;
            // Records of other sessions count as read too: that is the amplification.
            fold.records_read += read - records.len() as u64;
            fold.fold(records).await?;
        }
        reader.keep();
        let read = fold.read();
        let rebuilt = RebuiltSession::of(state, partition, start, end_offset, read)?;
        Ok(self.rebuilt(rebuilt, started))
    }

    /// [`Self::rebuild_through`] from `start` (with the `state` it gives) when the process's
    /// tail holds everything from there to the partition's end: `None` when it does not (or
    /// the log no longer starts below `start`), and the caller reads the partition.
    async fn rebuild_held(
        &self,
        session: SessionId,
        start: &StartPoint,
        state: &SessionState,
        through_offset: Option<i64>,
        visit: &mut impl FnMut(&LoggedEvent, &SessionState),
    ) -> Result<Option<RebuiltSession>> {
        let partition = self.partition_of(session);
        let from = start.first_offset();
        if self
            .log()
            .tail_start(partition)
            .is_none_or(|held| held > from)
        {
            return Ok(None);
        }
        // Asked through the tail: a burst of takes shares the round trip.
        let (log_start, end_offset) = self.log().watermarks(partition).await?;
        let end_offset = match through_offset {
            Some(through) => end_offset.min(through.saturating_add(1)),
            None => end_offset,
        };
        let Some(records) = self
            .log()
            .read_held(partition, from, end_offset, log_start, session)
            .await?
        else {
            return Ok(None);
        };
        let mut state = state.clone();
        let mut fold = StreamingFold::new(&self.decoder, session, &mut state, visit);
        fold.fold(records).await?;
        let read = fold.read();
        let rebuilt = RebuiltSession::of(state, partition, start.clone(), end_offset, read)?;
        Ok(Some(RebuiltSession {
            from_tail: true,
            ..rebuilt
        }))
    }

    /// `rebuilt`, counted in the rebuild metrics.
    fn rebuilt(&self, rebuilt: RebuiltSession, started: std::time::Instant) -> RebuiltSession {
        let start_label = match rebuilt.start {
            StartPoint::Checkpoint { .. } => "checkpoint",
            StartPoint::FirstEvent { .. } => "first_event",
            StartPoint::PartitionStart { .. } => "partition_start",
        };
        let (records_read, events_folded) = (rebuilt.records_read, rebuilt.events_folded);
        let read = if rebuilt.from_tail { "tail" } else { "log" };
        metrics::counter!(observe::REBUILDS, "start" => start_label, "read" => read).increment(1);
        metrics::histogram!(observe::REBUILD_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::counter!(observe::RECORDS_READ).increment(records_read);
        metrics::counter!(observe::EVENTS_FOLDED).increment(events_folded);
        tracing::debug!(
            start = start_label,
            read,
            records_read,
            events_folded,
            "rebuilt"
        );
        rebuilt
    }
}

/// Folds windows of raw records into a state, decoding only this session's records.
struct StreamingFold<'a, V: FnMut(&LoggedEvent, &SessionState)> {
    decoder: &'a EventDecoder,
    session: SessionId,
    key: String,
    state: &'a mut SessionState,
    records_read: u64,
    events_folded: u64,
    last_offset: Option<i64>,
    visit: &'a mut V,
}

/// What a fold read: records, events of the session folded, the last one's offset.
struct Read {
    records: u64,
    events: u64,
    last_offset: Option<i64>,
}

impl RebuiltSession {
    /// The session folded into `state` from `start` to `end_offset`; an error if nothing of it
    /// was there to fold.
    fn of(
        state: SessionState,
        partition: i32,
        start: StartPoint,
        end_offset: i64,
        read: Read,
    ) -> Result<Self> {
        if !state.is_started() {
            return Err(Error::UnknownSession(state.session_id.to_string()));
        }
        Ok(Self {
            state,
            partition,
            start,
            end_offset,
            last_offset: read.last_offset,
            records_read: read.records,
            events_folded: read.events,
            from_tail: false,
        })
    }
}

impl<'a, V: FnMut(&LoggedEvent, &SessionState)> StreamingFold<'a, V> {
    fn new(
        decoder: &'a EventDecoder,
        session: SessionId,
        state: &'a mut SessionState,
        visit: &'a mut V,
    ) -> Self {
        Self {
            decoder,
            session,
            key: partitioner::session_key(session),
            state,
            records_read: 0,
            events_folded: 0,
            last_offset: None,
            visit,
        }
    }

    fn read(&self) -> Read {
        Read {
            records: self.records_read,
            events: self.events_folded,
            last_offset: self.last_offset,
        }
    }

    async fn fold(&mut self, records: Vec<RawRecord>) -> Result<()> {
        for record in records {
            self.records_read += 1;
            if record.key.as_deref() != Some(self.key.as_bytes()) {
                continue;
            }
            let Some(payload) = record.payload.as_deref() else {
                continue;
            };
            // A record of this session that does not decode is a dead letter for the projector;
            // recovery skips it the same way so both folds see the same events.
            match self.decoder.decode(payload).await {
                Ok(envelope) if envelope.session_id == self.session => {
                    let accepted = self.state.apply(&envelope).is_accepted();
                    self.events_folded += 1;
                    self.last_offset = Some(record.offset);
                    (self.visit)(
                        &LoggedEvent {
                            offset: record.offset,
                            envelope,
                            accepted,
                        },
                        self.state,
                    );
                }
                Ok(_) => {}
                Err(e) if e.is_retriable() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(offset = record.offset, error = %e, "skipping undecodable record")
                }
            }
        }
        Ok(())
    }
}
