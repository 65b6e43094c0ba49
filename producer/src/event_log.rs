//! The process-wide handle on the session-events topic.

use crate::backend::{Backend, KafkaBackend, LogBackend};
use crate::epochs::{EpochsSeen, WriterSeen};
use crate::{Appended, Error, Result};
use serde::Serialize;
use sessionlog_keys::{Keyring, SecretAction, SecretFound, SecretScanner};
use sessionlog_log::lease::Release;
use sessionlog_log::{Lease, RawRecord, Settings, Start, partitioner, topic};
use sessionlog_schemas::{Epoch, Error as SchemaError};
use sessionlog_schemas::{EventDecoder, EventEncoder, EventEnvelope, SessionId, value_subject};
use sessionlog_store::ProjectionStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

pub use crate::kafka::LentReader;

/// Where an acknowledged event sits in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Position {
    /// The partition (the session's).
    pub partition: i32,
    /// The offset within it.
    pub offset: i64,
}

/// Producer tuning: the `[producer]` section of the settings.
pub type ProducerOptions = sessionlog_log::ProducerSettings;

/// Whether an append waits for room in the in-flight window or fails at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Wait until earlier events are acknowledged (backpressure).
    Wait,
    /// Fail with [`Error::Backpressure`] without sending anything.
    Fail,
}

/// The session-events topic as a harness process sees it: one Kafka producer, one encoder and
/// decoder, and one bounded in-flight window, shared by every session the process runs.
///
/// It also remembers, per session, the highest writer epoch any claim made through it
/// established or observed. A [`crate::SessionWriter`] checks it before every append, so a
/// writer of this process that another writer of this process took over is fenced without a
/// round trip. Writers of other processes are detected by the read-back at claim and at
/// checkpoint; whatever a fenced writer sends before then is rejected by the fold (a zombie
/// write), never accepted.
///
/// Under it is a [`crate::LogBackend`]: Kafka, or memory in unit tests
/// ([`crate::testing::MemoryLog`], feature `test-util`).
pub struct EventLog {
    pub(crate) backend: Backend,
    encoder: EventEncoder,
    decoder: EventDecoder,
    topic: String,
    partitions: i32,
    options: ProducerOptions,
    in_flight: Arc<Semaphore>,
    epochs: Arc<EpochsSeen>,
    pub(crate) keyring: Option<Arc<Keyring>>,
    projection: Option<ProjectionStore>,
    /// Signs the claims and forks written through this log (the recovery service's): a signed
    /// claim is one whose maker judged the session's gates (see `sessionlog_session::gate`).
    attester: Option<Arc<dyn Attester>>,
    /// `[lease] ttl_ms`: how long the leases writers hold through this log last (`None`: off).
    pub(crate) lease_ttl: Option<Duration>,
    /// `[privacy] secret_scan`: what sealing does with a text that holds a secret.
    secret_scan: Arc<SecretScanner>,
}

/// Signs an envelope's attestation statement (`sessionlog_session::attest::statement`): the
/// recovery service's notary, for the claims and forks it makes.
pub trait Attester: Send + Sync {
    /// Fills `envelope.attestation`, or says why it cannot.
    fn attest(&self, envelope: &mut EventEnvelope) -> std::result::Result<(), String>;
}

pub use sessionlog_log::reader::OFFSET_GAP;

impl EventLog {
    /// Connects with the `[producer]` settings.
    pub async fn from_settings(settings: &Settings) -> Result<Self> {
        Self::connect(settings, settings.producer.clone()).await
    }

    /// Registers the schemas (once per process), checks the topic's partition count against
    /// `[kafka] partitions` (see [`topic::pinned_partitions`]), opens
    /// the key store when `[privacy] encrypt` is on, and creates the producer.
    ///
    /// Fails with [`Error::RegistryUnavailable`] when the registry is unreachable: without a
    /// schema id no event can be written.
    pub async fn connect(settings: &Settings, options: ProducerOptions) -> Result<Self> {
        let url = settings.registry.url.clone();
        let registry = settings.registry.client()?;
        let encoder = EventEncoder::register(&registry, &value_subject(&settings.kafka.topic))
            .await
            .map_err(|source| match source {
                SchemaError::RegistryUnreachable { .. } => {
                    Error::RegistryUnavailable { url, source }
                }
                other => other.into(),
            })?;
        let keyring = sessionlog_store::keyring(settings).await?;
        let partitions = topic::pinned_partitions(&settings.kafka).await?;
        let backend = KafkaBackend::connect(&settings.kafka, partitions, &options)?;
        let mut log = Self::over(
            Backend::Kafka(backend),
            (encoder, EventDecoder::new(registry)),
            &settings.kafka.topic,
            partitions,
            options,
        );
        log.keyring = keyring;
        log.lease_ttl = settings.lease.ttl();
        log.secret_scan = Arc::new(SecretScanner::from_settings(&settings.privacy)?);
        Ok(log)
    }

    /// A log writing through `backend`, with nothing attached.
    pub(crate) fn over(
        backend: Backend,
        (encoder, decoder): (EventEncoder, EventDecoder),
        topic: &str,
        partitions: i32,
        options: ProducerOptions,
    ) -> Self {
        Self {
            backend,
            encoder,
            decoder,
            topic: topic.to_string(),
            partitions,
            in_flight: Arc::new(Semaphore::new(options.max_in_flight.max(1))),
            options,
            epochs: Arc::default(),
            keyring: None,
            projection: None,
            attester: None,
            lease_ttl: None,
            secret_scan: Arc::new(SecretScanner::defaults()),
        }
    }

    /// How long the leases writers hold through this log last: `[lease] ttl_ms`, `None` when
    /// leases are off (see [`crate::SessionWriter::hold_lease`]).
    pub fn lease_ttl(&self) -> Option<Duration> {
        self.lease_ttl
    }

    /// Writes `lease` to the lease topic (keyed by its session and epoch, partitioned as its
    /// session's events) and waits for the ack. Liveness only: it changes nothing about who
    /// may write.
    pub async fn put_lease(&self, lease: &Lease) -> Result<()> {
        self.send_lease(lease.session_id, &lease.key(), Some(&lease.encode()?))
            .await
    }

    /// Writes the record that releases `writer`'s lease on `session` at `epoch`, and waits for
    /// the ack. It releases that epoch's lease only: landing after a later epoch's lease (the
    /// releasing writer was fenced meanwhile), it hides nothing.
    pub async fn release_lease(
        &self,
        session: SessionId,
        epoch: Epoch,
        writer: &str,
    ) -> Result<()> {
        let release = Release::new(session, writer, epoch, sessionlog_schemas::now_micros());
        self.send_lease(session, &release.key(), Some(&release.encode()?))
            .await
    }

    /// Removes the lease records of `session`, which ended at `epoch` (tombstones on
    /// [`sessionlog_log::lease::end_keys`]), and waits for the acks: nothing runs an ended
    /// session again, and the lease topic keeps no record of it.
    pub async fn end_leases(&self, session: SessionId, epoch: Epoch) -> Result<()> {
        let keys = sessionlog_log::lease::end_keys(session, epoch);
        let sent = keys.iter().map(|key| self.send_lease(session, key, None));
        futures::future::try_join_all(sent).await.map(drop)
    }

    /// Writes `wake` to the wake topic (keyed and partitioned as its session's events, so a
    /// session's wakes stay in order) and waits for the ack.
    pub async fn put_wake(&self, wake: &sessionlog_log::Wake) -> Result<()> {
        Ok(self.backend.put_wake(wake).await?)
    }

    async fn send_lease(&self, session: SessionId, key: &str, value: Option<&[u8]>) -> Result<()> {
        let partition = self.partition_of(session);
        Ok(self.backend.send_lease(partition, key, value).await?)
    }

    /// Signs every claim and fork made through this log with `attester` (the recovery
    /// service's notary): such a claim passes a session's gates, because its maker judged them.
    pub fn with_attester(mut self, attester: Arc<dyn Attester>) -> Self {
        self.attester = Some(attester);
        self
    }

    /// The attester of the claims and forks made through this log, if it has one.
    pub fn attester(&self) -> Option<&Arc<dyn Attester>> {
        self.attester.as_ref()
    }

    /// Lets writers find where a session stands from the projection (its row and the
    /// partition's progress) plus the log after it, instead of folding the session's partition
    /// from its first offset: a claim, a create with a given id and
    /// [`crate::SessionWriter::current`] then cost the projector's lag, not the partition's
    /// length. The projection is a hint about where to start reading; the log still decides.
    pub fn with_projection(mut self, store: ProjectionStore) -> Self {
        self.projection = Some(store);
        self
    }

    /// The projection writers catch up from, if one is attached.
    pub fn projection(&self) -> Option<&ProjectionStore> {
        self.projection.as_ref()
    }

    /// Scans the texts written through this log with `scanner` instead of the one its
    /// settings describe.
    pub fn with_secret_scanner(mut self, scanner: SecretScanner) -> Self {
        self.secret_scan = Arc::new(scanner);
        self
    }

    /// The secret scan every text written through this log meets (`[privacy] secret_scan`).
    pub fn secret_scanner(&self) -> &SecretScanner {
        &self.secret_scan
    }

    /// The data keys events are sealed with; `None` when `[privacy] encrypt` is off.
    pub fn keyring(&self) -> Option<&Arc<Keyring>> {
        self.keyring.as_ref()
    }

    /// Makes the data key of a session about to start under a fresh id (nothing when
    /// encryption is off): one plain write at creation instead of a conditional one on the
    /// session's first text (see [`Keyring::key_fresh_session`]).
    pub(crate) async fn key_fresh_session(&self, session: SessionId) -> Result<()> {
        match &self.keyring {
            Some(keyring) => Ok(keyring.key_fresh_session(session).await?),
            None => Ok(()),
        }
    }

    /// Makes the data key of a session about to start under an id a caller chose, unless it
    /// has one (nothing when encryption is off): the store's conditional insert, so two
    /// processes agree on one key. Done before the start so that no reader can meet the
    /// session keyless: a recovery instance that opened it then would keep that answer for the
    /// key cache's TTL, and its later sealed texts would read as sealed.
    pub(crate) async fn key_session(&self, session: SessionId) -> Result<()> {
        match &self.keyring {
            Some(keyring) => keyring
                .sealing_key(session)
                .await
                .map(|_| ())
                .map_err(Into::into),
            None => Ok(()),
        }
    }

    /// Seals the sensitive fields of envelopes about to be written (nothing when encryption
    /// is off), after the secret scan (see [`Self::seal_scanned`]); a field withheld for a
    /// secret is redacted at once, as nothing here knows when the envelopes are written. A
    /// writer folds what this returns, so its state and digests are the readers'.
    pub async fn seal(&self, envelopes: &mut [EventEnvelope]) -> Result<()> {
        let found = self.seal_scanned(None, envelopes).await?;
        self.record_redactions(&found).await;
        Ok(())
    }

    /// [`Self::seal`] for one session's writer, holding its key in `held` between appends
    /// (see [`Keyring::seal_held`]).
    pub async fn seal_held(
        &self,
        held: &mut sessionlog_keys::HeldKey,
        envelopes: &mut [EventEnvelope],
    ) -> Result<()> {
        let found = self.seal_scanned(Some(held), envelopes).await?;
        self.record_redactions(&found).await;
        Ok(())
    }

    /// The one way texts are sealed for the log: every door that writes (ingest, the library's
    /// writers, [`Self::append`]) comes through here. Scans the plain text fields first
    /// (`[privacy] secret_scan`); in redact mode a field holding a secret is written without
    /// its text (its sealed form keeps its place and key id, with nothing to open), and the
    /// caller records the redaction ([`Self::record_redactions`]) once the event is in the
    /// log; with encryption off such a field cannot be sealed, and the batch is refused
    /// ([`sessionlog_keys::Error::SecretNotSealable`]) before anything is written. In warn mode
    /// it is sealed as usual. Returns what was found; no log line holds a text.
    pub(crate) async fn seal_scanned(
        &self,
        held: Option<&mut sessionlog_keys::HeldKey>,
        envelopes: &mut [EventEnvelope],
    ) -> Result<Vec<SecretFound>> {
        let found = self.secret_scan.scan(envelopes);
        if self.keyring.is_none()
            && let Some(refused) = found.iter().find(|f| f.action == SecretAction::Redacted)
        {
            return Err(sessionlog_keys::Error::SecretNotSealable {
                seq: refused.seq,
                field: refused.field,
                rule: refused.rule.clone(),
            }
            .into());
        }
        for f in &found {
            tracing::warn!(
                session = %f.session,
                seq = f.seq,
                field = f.field,
                rule = %f.rule,
                action = ?f.action,
                "a text to seal holds what looks like a secret"
            );
        }
        match (&self.keyring, held) {
            (Some(keyring), Some(held)) => keyring.seal_held(held, envelopes).await?,
            (Some(keyring), None) => keyring.seal(envelopes).await?,
            (None, _) => {}
        }
        sessionlog_keys::withhold(envelopes, &found_redacted(&found));
        Ok(found)
    }

    /// Records the scan's reason for every field `found` withheld with the session's key
    /// ([`Keyring::redact`]): every reader then reads such a field as redacted. No key is
    /// destroyed: the field was written without its text, so nothing sealed under its key
    /// left the process, and the key of that seq and field is the one of whichever event the
    /// session holds there (a writer fenced without knowing it writes at the winner's seqs;
    /// destroying the key would take the winner's field). A field that still opens reads as
    /// its text whatever the key records ([`sessionlog_keys::Opener`]). Called once the events
    /// are in the log. A redaction that fails is logged and left: the field reads as unreadable
    /// instead.
    pub(crate) async fn record_redactions(&self, found: &[SecretFound]) {
        let Some(keyring) = &self.keyring else {
            return;
        };
        for f in found_redacted(found) {
            if let Err(e) = keyring
                .redact(f.session, f.seq, f.field, false, &f.reason)
                .await
            {
                tracing::warn!(
                    session = %f.session,
                    seq = f.seq,
                    field = f.field,
                    error = %e,
                    "a field withheld for a secret could not be redacted: it reads as unreadable"
                );
            }
        }
    }

    /// The registry events are encoded and decoded with.
    pub fn registry(&self) -> &sessionlog_schemas::SchemaRegistry {
        self.decoder.registry()
    }

    /// The schema id written into every record.
    pub fn schema_id(&self) -> u32 {
        self.encoder.schema_id()
    }

    /// The topic written to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition count sessions are placed by (`[kafka] partitions`, checked against the
    /// topic at connect).
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// The partition every event of `session` lands on.
    pub fn partition_of(&self, session: SessionId) -> i32 {
        partitioner::partition_for(session, self.partitions)
    }

    /// The producer settings in force.
    pub fn options(&self) -> &ProducerOptions {
        &self.options
    }

    /// Events sent and not yet acknowledged, over every session of the process.
    pub fn in_flight(&self) -> usize {
        self.options.max_in_flight.max(1) - self.in_flight.available_permits()
    }

    /// Encodes, sends keyed by session id, and waits for the ack (`acks=all`). When the
    /// in-flight window is full the call waits: backpressure, never a silent drop.
    /// Sensitive fields are sealed first (with encryption on): pass plain text.
    pub async fn append(&self, envelope: &EventEnvelope) -> Result<Position> {
        self.append_sealed(std::slice::from_ref(envelope), WhenFull::Wait)
            .await
            .and_then(first_outcome)
    }

    /// Scans and seals `envelopes` ([`Self::seal_scanned`]), sends them, and records the
    /// redactions of those acknowledged.
    async fn append_sealed(
        &self,
        envelopes: &[EventEnvelope],
        when_full: WhenFull,
    ) -> Result<Vec<Result<Position>>> {
        let mut sealed = envelopes.to_vec();
        let found = self.seal_scanned(None, &mut sealed).await?;
        let outcomes = self.send_all(&sealed, when_full).await?;
        if !found.is_empty() {
            let written: Vec<SecretFound> = found
                .into_iter()
                .filter(|f| {
                    sealed
                        .iter()
                        .zip(&outcomes)
                        .any(|(e, o)| o.is_ok() && e.seq == f.seq && e.session_id == f.session)
                })
                .collect();
            self.record_redactions(&written).await;
        }
        Ok(outcomes)
    }

    /// Like [`Self::append`], but fails with [`Error::Backpressure`] instead of waiting when
    /// the in-flight window is full.
    pub async fn try_append(&self, envelope: &EventEnvelope) -> Result<Position> {
        self.append_sealed(std::slice::from_ref(envelope), WhenFull::Fail)
            .await
            .and_then(first_outcome)
    }

    /// Sends several events in order and waits for every ack. Events of one session keep
    /// their order in the log (the idempotent producer never reorders a partition). Fails on
    /// the first event not acknowledged; [`crate::SessionWriter::append_envelopes`] tells which
    /// were.
    pub async fn append_batch(&self, envelopes: &[EventEnvelope]) -> Result<Vec<Position>> {
        self.append_sealed(envelopes, WhenFull::Wait)
            .await?
            .into_iter()
            .collect()
    }

    /// Encodes and size-checks every event (sending none if one fails), enqueues them in
    /// order, then waits for each ack. The outer error is raised before anything is sent;
    /// the inner results are per event.
    pub(crate) async fn send_all(
        &self,
        envelopes: &[EventEnvelope],
        when_full: WhenFull,
    ) -> Result<Vec<Result<Position>>> {
        let limit = self.options.max_event_bytes;
        let payloads = envelopes
            .iter()
            .map(|e| {
                let payload = self.encoder.encode(e)?;
                if payload.len() > limit {
                    return Err(Error::TooLarge {
                        size: payload.len(),
                        limit,
                    });
                }
                Ok(payload)
            })
            .collect::<Result<Vec<_>>>()?;
        // Fail mode reserves room for the whole batch up front, or sends nothing; Wait mode
        // takes room event by event, so a batch larger than the window still goes through.
        let _whole_batch = match when_full {
            WhenFull::Fail => Some(self.try_reserve(envelopes.len())?),
            WhenFull::Wait => None,
        };
        let mut pending = Vec::with_capacity(envelopes.len());
        for (envelope, payload) in envelopes.iter().zip(&payloads) {
            let permit = match when_full {
                WhenFull::Wait => Some(self.reserve().await?),
                WhenFull::Fail => None,
            };
            let key = partitioner::session_key(envelope.session_id);
            let partition = self.partition_of(envelope.session_id);
            let delivery = self.backend.enqueue(partition, &key, payload).await;
            pending.push((envelope, key, delivery, permit));
        }
        let mut outcomes = Vec::with_capacity(pending.len());
        for (envelope, key, delivery, permit) in pending {
            let outcome = match delivery {
                Ok(delivery) => delivery.await,
                Err(source) => Err(source),
            };
            drop(permit);
            outcomes.push(outcome.map_err(|source| Error::NotAcknowledged {
                session: key,
                seq: envelope.seq,
                source,
            }));
        }
        Ok(outcomes)
    }

    async fn reserve(&self) -> Result<OwnedSemaphorePermit> {
        Arc::clone(&self.in_flight)
            .acquire_owned()
            .await
            // The semaphore is never closed; treat a closed one as a full window that never frees.
            .map_err(|_| Error::Backpressure {
                limit: self.options.max_in_flight,
                wanted: 1,
            })
    }

    fn try_reserve(&self, wanted: usize) -> Result<OwnedSemaphorePermit> {
        let full = || Error::Backpressure {
            limit: self.options.max_in_flight,
            wanted,
        };
        let count = u32::try_from(wanted).map_err(|_| full())?;
        Arc::clone(&self.in_flight)
            .try_acquire_many_owned(count)
            .map_err(|_: TryAcquireError| full())
    }

    /// Waits until everything sent so far is acknowledged or `timeout` passes. Call it on
    /// shutdown: events still queued when the process exits are lost unacknowledged.
    pub async fn flush(&self, timeout: Duration) -> Result<()> {
        Ok(self.backend.flush(timeout).await?)
    }

    /// Reads `partition` from `from` (inclusive) up to `until` (exclusive; `None`: its end as
    /// of now) and decodes the records of `session` (of every session when `None`), in log
    /// order. Returns them and the offset after the last record read.
    ///
    /// A record that will never decode is skipped, as the projector dead-letters it: the fold
    /// never sees it. A registry outage is an error.
    pub async fn read_events(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        session: Option<SessionId>,
    ) -> Result<(Vec<Appended>, i64)> {
        self.read_events_from(partition, from, until, session, Start::AskTheLog)
            .await
    }

    /// [`Self::read_events`] of a range that begins where this process's own last write or
    /// read of the session ended (a writer confirming its appends): the tail answers it
    /// without asking the log where the partition starts.
    pub(crate) async fn read_events_after_own(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        session: SessionId,
    ) -> Result<(Vec<Appended>, i64)> {
        self.read_events_from(partition, from, until, Some(session), Start::Held)
            .await
    }

    /// [`Self::read_events`], asking the log where the partition starts only when `start`
    /// says the range may reach below it.
    pub(crate) async fn read_events_from(
        &self,
        partition: i32,
        from: i64,
        until: Option<i64>,
        session: Option<SessionId>,
        start: Start,
    ) -> Result<(Vec<Appended>, i64)> {
        let key = session.map(partitioner::session_key);
        let (records, next) = self
            .backend
            .read(partition, from, until, key.as_deref(), start)
            .await?;
        let mut events = Vec::with_capacity(records.len());
        for record in records {
            match self.decoded(&record).await? {
                Some(envelope) if session.is_none_or(|s| s == envelope.session_id) => {
                    events.push(Appended {
                        envelope,
                        position: Position {
                            partition,
                            offset: record.offset,
                        },
                        secrets: Vec::new(),
                    });
                }
                _ => {}
            }
        }
        Ok((events, next))
    }

    /// The envelope in `record`, or `None` for a record without one or that will never
    /// decode (skipped, as the projector dead-letters it); a registry outage is an error.
    async fn decoded(&self, record: &RawRecord) -> Result<Option<EventEnvelope>> {
        let Some(payload) = record.payload.as_deref() else {
            return Ok(None);
        };
        match self.decoder.decode(payload).await {
            Ok(envelope) => Ok(Some(envelope)),
            Err(e) if e.is_retriable() => Err(e.into()),
            Err(e) => {
                let (partition, offset) = (record.partition, record.offset);
                tracing::warn!(partition, offset, error = %e, "skipping undecodable record");
                Ok(None)
            }
        }
    }

    /// Reads and decodes the records of `partition` at `offsets` (any order, duplicates
    /// ignored), with this log's kept readers: the way to read exactly the events an index
    /// points at. Offsets at most [`OFFSET_GAP`] apart are read as one range and the records
    /// between them dropped, so a session interleaved with others costs a few fetches, not one
    /// per event. Returns the events by offset; an offset whose record is gone (retention) or
    /// will never decode is absent. A registry outage is an error.
    pub async fn read_at(
        &self,
        partition: i32,
        offsets: &[i64],
    ) -> Result<std::collections::BTreeMap<i64, EventEnvelope>> {
        let mut wanted = offsets.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut events = std::collections::BTreeMap::new();
        for span in wanted.chunk_by(|a, b| b.saturating_sub(*a) <= OFFSET_GAP) {
            let (first, last) = (span[0], span[span.len() - 1]);
            let until = Some(last.saturating_add(1));
            let (records, _) = self
                .backend
                .read(partition, first, until, None, Start::AskTheLog)
                .await?;
            for record in records {
                if span.binary_search(&record.offset).is_err() {
                    continue;
                }
                if let Some(envelope) = self.decoded(&record).await? {
                    events.insert(record.offset, envelope);
                }
            }
        }
        Ok(events)
    }

    /// The records of `session` in `[from, until)` of `partition`, from the process's tail
    /// when it runs and holds the whole range (`None` otherwise, also when it has not read to
    /// `until` within `[producer] tail_wait_ms`: the caller reads the partition). `log_start`
    /// is where the partition starts, as the caller asked it: from below it (retention removed
    /// those records) the tail does not answer, though it may still hold them. No read of the
    /// log, no reader: a burst of rebuilds of recent sessions (a fleet's harnesses dying at
    /// once) costs memory copies instead of a pooled reader's fetch each.
    pub async fn read_held(
        &self,
        partition: i32,
        from: i64,
        until: i64,
        log_start: i64,
        session: SessionId,
    ) -> Result<Option<Vec<RawRecord>>> {
        if log_start > from {
            return Ok(None);
        }
        let key = partitioner::session_key(session);
        Ok(self.backend.read_held(partition, from, until, &key).await?)
    }

    /// The first offset of `partition` the process's tail holds: `None` before a keyed read
    /// started it and it positioned itself, or without a tail.
    pub fn tail_start(&self, partition: i32) -> Option<i64> {
        self.backend.tail_bounds(partition).map(|(start, _)| start)
    }

    /// The offset after the last record of `partition` the process's tail has read: `None`
    /// without a tail or before it positioned itself. Records of `[tail_start, tail_end)` are
    /// read from memory, with no round trip.
    pub fn tail_end(&self, partition: i32) -> Option<i64> {
        self.backend.tail_bounds(partition).map(|(_, end)| end)
    }

    /// The first offset `partition` still holds and the offset its next record will get, in
    /// one round trip to its leader (through the tail's consumer when the process runs one,
    /// and then shared with the process's other callers at that moment; this does not start
    /// it): everything acknowledged before the call is below the second.
    pub async fn watermarks(&self, partition: i32) -> Result<(i64, i64)> {
        Ok(self.backend.watermarks(partition).await?)
    }

    /// [`Self::watermarks`] for a borrower of `reader`: with the reader when the process runs
    /// no tail (lending a second one could wait for itself).
    pub async fn watermarks_lent(
        &self,
        reader: &LentReader<'_>,
        partition: i32,
    ) -> Result<(i64, i64)> {
        match &self.backend {
            Backend::Kafka(kafka) => Ok(kafka.watermarks_with(reader, partition).await?),
            #[cfg(any(test, feature = "test-util"))]
            Backend::Memory(_) => self.watermarks(partition).await,
        }
    }

    /// The offset `partition`'s next record will get (see [`Self::watermarks`]): everything
    /// acknowledged before is below it.
    pub async fn high_watermark(&self, partition: i32) -> Result<i64> {
        Ok(self.watermarks(partition).await?.1)
    }

    /// Where `partition` starts and ends for a catch-up from `from`, the projection's
    /// position: the end checked by [`Self::check_unprojected`] (what the tail holds is read
    /// from memory and does not count). Every record acknowledged before the call is below the
    /// end.
    pub async fn unprojected_end(&self, partition: i32, from: i64) -> Result<(i64, i64)> {
        let (start, end) = self.watermarks(partition).await?;
        let held = self
            .tail_start(partition)
            .is_some_and(|start| start <= from);
        if !held {
            self.check_unprojected(partition, end.saturating_sub(from))?;
        }
        Ok((start, end))
    }

    /// Refuses with [`Error::ProjectionBehind`] a catch-up that would read `unprojected`
    /// records of `partition` past the projection's position from the partition, more than
    /// `[producer] max_unprojected_records`: the one bound for claims, cold appends and
    /// recovery's rebuilds.
    pub fn check_unprojected(&self, partition: i32, unprojected: i64) -> Result<()> {
        let limit = self.options.max_unprojected_records;
        if unprojected > limit {
            return Err(Error::ProjectionBehind {
                partition,
                unprojected,
                limit,
            });
        }
        Ok(())
    }

    /// The first offset `partition` still holds: above 0 once retention deleted records.
    pub async fn low_watermark(&self, partition: i32) -> Result<i64> {
        Ok(self.watermarks(partition).await?.0)
    }

    /// Starts the process's tail of the topic now, if it is not running (see
    /// [`sessionlog_log::LogTail`]): every record acknowledged afterwards is one a
    /// confirmation finds in memory. A service that confirms (ingest) calls it at start-up; a
    /// writer starts it before its session's first event, so that none of its confirmations
    /// reads the partition.
    pub async fn start_tail(&self) {
        self.backend.start_tail().await;
    }

    /// A reader of the topic lent from this log's pool, within its permits (so a thousand
    /// concurrent rebuilds share `[producer] readers` consumers instead of making one each): it goes
    /// back to the pool when [`LentReader::keep`] is called, and is dropped if the borrower
    /// fails before that, as a failed read-back's reader is. Kafka only: the in-memory log of
    /// unit tests lends none.
    pub async fn lend_reader(&self) -> Result<LentReader<'_>> {
        match &self.backend {
            Backend::Kafka(kafka) => Ok(kafka.lend_reader().await?),
            #[cfg(any(test, feature = "test-util"))]
            Backend::Memory(_) => Err(sessionlog_log::Error::Task(
                "the in-memory log lends no Kafka reader".into(),
            )
            .into()),
        }
    }

    /// The highest epoch a claim made or observed through this log established for `session`.
    pub fn highest_epoch_seen(&self, session: SessionId) -> Option<Epoch> {
        self.epochs.highest(session)
    }

    /// Records that `session` reached `epoch` (keeps the highest).
    pub(crate) fn note_epoch(&self, session: SessionId, epoch: Epoch) {
        self.epochs.note(session, epoch);
    }

    /// Registers a writer of `session` at `epoch`, for as long as the returned guard lives.
    pub(crate) fn writer_made(&self, session: SessionId, epoch: Epoch) -> WriterSeen {
        EpochsSeen::writer_made(&self.epochs, session, epoch)
    }
}

fn first_outcome(outcomes: Vec<Result<Position>>) -> Result<Position> {
    outcomes
        .into_iter()
        .next()
        .unwrap_or(Err(Error::Unconfirmed {
            partition: -1,
            offset: -1,
        }))
}

/// The findings whose fields were withheld (redact mode).
fn found_redacted(found: &[SecretFound]) -> Vec<SecretFound> {
    found
        .iter()
        .filter(|f| f.action == SecretAction::Redacted)
        .cloned()
        .collect()
}
