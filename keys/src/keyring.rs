//! A process's access to data keys: creating, fetching (cached), destroying and rewrapping
//! them, and opening sealed fields for readers.

use crate::data_key::{
    DataKey, KEY_VERSION, seal_envelope_as, sealed_as, sealed_per_record, sealed_place,
    sensitive_fields,
};
use crate::kek::Keks;
use crate::store::{DataKeyStore, ErasureReceipt, StoredKey, WrappedKey};
use crate::{Error, Result};
use dashmap::DashMap;
use futures::StreamExt;
use sessionlog_log::PrivacySettings;
use sessionlog_schemas::{Content, EventEnvelope, SessionId, now_micros};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Cached keys beyond this are dropped (oldest fetch first) so a long-lived reader of many
/// sessions stays bounded.
const CACHE_LIMIT: usize = 100_000;

/// How often a redaction whose conditional write lost to another change is tried again.
const REDACT_ATTEMPTS: usize = 5;

/// What a redaction did to the key store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordKeyDestroyed {
    /// The event's seq.
    pub seq: sessionlog_schemas::Seq,
    /// The field.
    pub field: String,
    /// The KEK that wraps the session's key now.
    pub kek_id: String,
    /// Whether the field had a key of its own, now destroyed (`false` for a field sealed under
    /// the session's key, before schema v8: it reads as redacted, but only erasing the session
    /// destroys its key).
    pub key_destroyed: bool,
}

/// A session's key as a process knows it.
#[derive(Clone)]
pub enum KeyState {
    /// The key: sealed fields open.
    Live(Arc<DataKey>),
    /// Destroyed: the session was erased.
    Destroyed,
    /// The session never had one (written without encryption, or not started).
    Absent,
}

/// What the key store answered for one session, and when it was asked (this process's clock):
/// an answer tells how the key stood no earlier than then.
#[derive(Clone)]
struct Answer {
    state: KeyState,
    asked: Instant,
}

/// A holder's hold on one session's key: the store's answer, when the store was asked, and
/// the keyring's count of forgotten keys just before. Every holder of a data key keeps one
/// (the keyring's cache keeps the answers themselves): a writer between appends
/// ([`HeldKey`]), a reader such as the OTLP export between batches ([`Opener`]), so that one
/// rule bounds them all. A lease is used for at most the key cache's TTL (`[privacy]
/// key_cache_secs`) after the store was asked, and not at all once this process destroyed
/// or forgot any key since; then the store is asked again before the key is used again
/// ([`Keyring::renew`]), and a destroyed key is dropped. An erasure made by another process
/// therefore stops every use of the key here within the TTL, and one made by this process at
/// once.
#[derive(Clone)]
struct KeyLease {
    session: SessionId,
    state: KeyState,
    asked: Instant,
    generation: u64,
}

/// Data keys for one process: the key store, the KEKs, and a short-lived cache.
pub struct Keyring {
    store: Arc<dyn DataKeyStore>,
    keks: Keks,
    ttl: Duration,
    /// Read on every append by every task, written once per session per TTL: sharded, so
    /// tasks on different cores sealing different sessions do not contend for one lock.
    cache: DashMap<SessionId, Answer>,
    /// Counts keys this process forgot or saw destroyed: a lease taken before a change is no
    /// longer used.
    forgotten: AtomicU64,
    /// Each field sealed under its own key (`[privacy] per_record_keys`, the default).
    per_record: bool,
}

impl Keyring {
    /// A keyring over `store`, wrapping with `keks`, trusting the store's answer about a key
    /// for `ttl` after it was asked.
    pub fn new(store: Arc<dyn DataKeyStore>, keks: Keks, ttl: Duration) -> Self {
        Self {
            store,
            keks,
            ttl,
            cache: DashMap::new(),
            forgotten: AtomicU64::new(0),
            per_record: true,
        }
    }

    /// The keyring the `[privacy]` settings describe over `store`; `None` when encryption is off.
    pub fn from_settings(
        settings: &PrivacySettings,
        store: Arc<dyn DataKeyStore>,
    ) -> Result<Option<Self>> {
        Ok(Keks::from_settings(settings)?.map(|keks| Self {
            per_record: settings.per_record_keys,
            ..Self::new(store, keks, Duration::from_secs(settings.key_cache_secs))
        }))
    }

    /// The id of the KEK new keys are wrapped with.
    pub fn kek_id(&self) -> &str {
        self.keks.current().id()
    }

    /// Whether an answer the store gave when asked at `asked` may still be used.
    fn fresh(&self, asked: Instant) -> bool {
        asked.elapsed() < self.ttl
    }

    /// Whether `lease` may still be used: the store was asked within the TTL, and this
    /// process has destroyed or forgotten no key since.
    fn is_current(&self, lease: &KeyLease) -> bool {
        lease.generation == self.forgotten.load(Ordering::Acquire) && self.fresh(lease.asked)
    }

    /// What the cache holds for `session`, if the store was asked within the TTL. There is
    /// no older answer to fall back on: while the store cannot be reached, a key is used
    /// until its TTL is up and then not at all, so that an erasure the store holds reaches
    /// this process within the TTL whatever happens to the store.
    fn cached(&self, session: SessionId) -> Option<Answer> {
        self.cache
            .get(&session)
            .filter(|entry| self.fresh(entry.asked))
            .map(|entry| entry.clone())
    }

    /// Keeps the store's `answer` about the session's key; returns the answer kept.
    fn remember(&self, session: SessionId, answer: Answer) -> Answer {
        let cache = &self.cache;
        if cache.len() >= CACHE_LIMIT {
            cache.retain(|_, answer| self.fresh(answer.asked));
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        let destroyed = matches!(answer.state, KeyState::Destroyed);
        let kept = match cache.entry(session) {
            // A destroyed key never comes back: an answer given before the destruction and
            // arriving after it (a fetch racing this process's own erasure) is not kept.
            dashmap::Entry::Occupied(entry)
                if !destroyed && matches!(entry.get().state, KeyState::Destroyed) =>
            {
                entry.get().clone()
            }
            dashmap::Entry::Occupied(mut entry) => {
                entry.insert(answer.clone());
                answer
            }
            dashmap::Entry::Vacant(entry) => entry.insert(answer).clone(),
        };
        // After the insert: a holder that reads the count after this sees the new state.
        if destroyed {
            self.forgotten.fetch_add(1, Ordering::AcqRel);
        }
        kept
    }

    /// Drops what this process remembers of the session's key, and ends every lease taken
    /// before (a writer's hold, a reader's opener), which ask the store again before next use.
    pub fn forget(&self, session: SessionId) {
        self.cache.remove(&session);
        self.forgotten.fetch_add(1, Ordering::AcqRel);
    }

    fn unwrap_stored(&self, session: SessionId, stored: Option<StoredKey>) -> Result<KeyState> {
        Ok(match stored {
            None => KeyState::Absent,
            Some(StoredKey::Destroyed { .. }) => KeyState::Destroyed,
            Some(StoredKey::Live(key)) => {
                let kek = self
                    .keks
                    .find(&key.kek_id)
                    .ok_or_else(|| Error::UnknownKek {
                        session,
                        kek_id: key.kek_id.clone(),
                    })?;
                KeyState::Live(Arc::new(kek.unwrap(session, &key.wrapped)?))
            }
        })
    }

    /// Asks the store about the session's key now, whatever the cache holds, and remembers
    /// the answer.
    async fn ask(&self, session: SessionId) -> Result<Answer> {
        // Taken before the question: the answer says how the key stood no earlier than this.
        let asked = Instant::now();
        let stored = self.store.get(session).await?;
        let answer = Answer {
            state: self.unwrap_stored(session, stored)?,
            asked,
        };
        Ok(self.remember(session, answer))
    }

    /// A lease on the session's key: the cached answer if the store gave it within the TTL
    /// (the lease expires with it, not a TTL after this call), else the store's answer now.
    async fn lease(&self, session: SessionId) -> Result<KeyLease> {
        // Read before the answer: a key forgotten meanwhile ends this lease at once.
        let generation = self.forgotten.load(Ordering::Acquire);
        let answer = match self.cached(session) {
            Some(answer) => answer,
            None => self.ask(session).await?,
        };
        Ok(KeyLease {
            session,
            state: answer.state,
            asked: answer.asked,
            generation,
        })
    }

    /// Renews `lease` unless it is current. Its key is dropped before the store is asked, so
    /// a lease the store could not renew holds no key.
    async fn renew_lease(&self, lease: &mut KeyLease) -> Result<()> {
        if self.is_current(lease) {
            return Ok(());
        }
        lease.state = KeyState::Absent;
        *lease = self.lease(lease.session).await?;
        Ok(())
    }

    /// The session's key as the store has it (cached for the configured time). While the key
    /// store cannot be reached, a key the store answered about within the TTL is used; an
    /// older one is not: this fails with the store's error.
    pub async fn key(&self, session: SessionId) -> Result<KeyState> {
        Ok(self.lease(session).await?.state)
    }

    /// Asks the store about the session's key now, whatever the cache holds: for a holder
    /// that must know of an erasure before it acts (the OTLP export before each batch).
    pub async fn key_now(&self, session: SessionId) -> Result<KeyState> {
        Ok(self.ask(session).await?.state)
    }

    /// The key to seal the session's events with, made and stored if the session has none yet
    /// (a new session, or one written before encryption was on). [`Error::Erased`] once the
    /// key was destroyed. A key store that fails (a timeout of its conditional write under a
    /// burst of new sessions, a node restarting) is tried again a few times before the
    /// append fails with its error.
    pub async fn sealing_key(&self, session: SessionId) -> Result<Arc<DataKey>> {
        match self.sealing_lease(session).await?.state {
            KeyState::Live(key) => Ok(key),
            _ => Err(Error::Erased(session)),
        }
    }

    /// A lease on the live key to seal the session's events with (see [`Self::sealing_key`]).
    async fn sealing_lease(&self, session: SessionId) -> Result<KeyLease> {
        use sessionlog_log::retry::{self, Retryable};
        // The common case, on every append: a key the store answered about within the TTL.
        let generation = self.forgotten.load(Ordering::Acquire);
        if let Some(
            answer @ Answer {
                state: KeyState::Live(_),
                ..
            },
        ) = self.cached(session)
        {
            return Ok(KeyLease {
                session,
                state: answer.state,
                asked: answer.asked,
                generation,
            });
        }
        (|| self.sealing_lease_once(session))
            .retry(retry::tries(5))
            .when(Error::is_store)
            .await
    }

    async fn sealing_lease_once(&self, session: SessionId) -> Result<KeyLease> {
        let lease = self.lease(session).await?;
        match lease.state {
            KeyState::Live(_) => return Ok(lease),
            KeyState::Destroyed => return Err(Error::Erased(session)),
            KeyState::Absent => {}
        }
        let (_, wrapped) = self.generate(session);
        let asked = Instant::now();
        // Another process may have made one first: the store keeps one, and everyone uses it.
        let stored = self.store.create(session, wrapped).await?;
        let answer = self.remember(
            session,
            Answer {
                state: self.unwrap_stored(session, Some(stored))?,
                asked,
            },
        );
        match answer.state {
            KeyState::Live(_) => Ok(KeyLease {
                session,
                state: answer.state,
                asked: answer.asked,
                generation: lease.generation,
            }),
            _ => Err(Error::Erased(session)),
        }
    }

    /// Makes and stores the key of a session about to start under a fresh id (a UUIDv7 this
    /// process just made, which no other process can know before the start is written): one
    /// plain write, where a session created under a caller's id, or keyed on its first text,
    /// needs the store's conditional insert so that two processes agree on one key.
    pub async fn key_fresh_session(&self, session: SessionId) -> Result<()> {
        use sessionlog_log::retry::{self, Retryable};
        let (key, wrapped) = self.generate(session);
        let asked = Instant::now();
        // The write is idempotent (the same key each try), so an outage is worth a few tries.
        (|| self.store.insert_fresh(session, wrapped.clone()))
            .retry(retry::tries(5))
            .when(Error::is_store)
            .await?;
        self.remember(
            session,
            Answer {
                state: KeyState::Live(Arc::new(key)),
                asked,
            },
        );
        Ok(())
    }

    /// A new data key for `session`, and the same wrapped by the current KEK.
    fn generate(&self, session: SessionId) -> (DataKey, WrappedKey) {
        let key = DataKey::generate();
        let wrapped = WrappedKey {
            version: KEY_VERSION,
            kek_id: self.kek_id().to_string(),
            wrapped: self.keks.current().wrap(session, &key),
            created_at: now_micros(),
        };
        (key, wrapped)
    }

    /// Seals the sensitive fields of `envelopes` (of any sessions) before they are written.
    /// A field already sealed is kept only if it opens with the session's key as that event's
    /// field (an exact retry of an envelope this library sealed and returned); any other sealed
    /// content is refused: every sealed field in the log must open with its session's key.
    pub async fn seal(&self, envelopes: &mut [EventEnvelope]) -> Result<()> {
        let mut keys: HashMap<SessionId, Arc<DataKey>> = HashMap::new();
        for envelope in envelopes.iter_mut() {
            if !carries_text(envelope) {
                continue;
            }
            let session = envelope.session_id;
            let key = match keys.get(&session) {
                Some(key) => Arc::clone(key),
                None => {
                    let key = self.sealing_key(session).await?;
                    keys.insert(session, Arc::clone(&key));
                    key
                }
            };
            seal_checked(&key, envelope, self.per_record)?;
        }
        Ok(())
    }

    /// [`Self::seal`] for the envelopes of one session's writer, which holds the key in `held`
    /// between appends: on every append a writer would otherwise look it up in the cache
    /// every task of the process shares, which cost more than sealing. The hold is a lease:
    /// it ends a TTL after the store answered about the key (not after the hold was taken),
    /// and at once when this process destroys or forgets any key.
    pub async fn seal_held(
        &self,
        held: &mut HeldKey,
        envelopes: &mut [EventEnvelope],
    ) -> Result<()> {
        for envelope in envelopes.iter_mut() {
            if !carries_text(envelope) {
                continue;
            }
            let session = envelope.session_id;
            let current = held
                .0
                .as_ref()
                .is_some_and(|lease| lease.session == session && self.is_current(lease));
            if !current {
                // Dropped first: a hold the store could not renew keeps no key.
                held.0 = None;
                held.0 = Some(self.sealing_lease(session).await?);
            }
            let Some(KeyLease {
                state: KeyState::Live(key),
                ..
            }) = &held.0
            else {
                return Err(Error::Erased(session));
            };
            seal_checked(key, envelope, self.per_record)?;
        }
        Ok(())
    }

    /// What a reader of `session` needs to open its fields. A reader that keeps it beyond
    /// the request it serves renews it with [`Self::renew`] before each use.
    pub async fn opener(&self, session: SessionId) -> Result<Opener> {
        Ok(Opener {
            lease: self.lease(session).await?,
            erased: false,
            redacted: Vec::new(),
        })
    }

    /// Renews a kept `opener` unless the store answered about its key within the TTL (and
    /// this process forgot no key since): a session erased elsewhere then reads as erased,
    /// its key dropped. When the store cannot be reached, the error is returned and the
    /// opener holds no key any more (its sealed fields read as [`Text::Sealed`]).
    pub async fn renew(&self, opener: &mut Opener) -> Result<()> {
        self.renew_lease(&mut opener.lease).await
    }

    /// Destroys the session's data key and records the erasure's receipt.
    pub async fn destroy(&self, receipt: ErasureReceipt) -> Result<()> {
        let session = receipt.session_id;
        let asked = Instant::now();
        self.store.destroy(receipt).await?;
        self.remember(
            session,
            Answer {
                state: KeyState::Destroyed,
                asked,
            },
        );
        Ok(())
    }

    /// Redacts field `field` of event `seq` of `session` (sealed under its own key when
    /// `per_record`: see [`crate::sealed_per_record`]): destroys that field's own key, if it has
    /// one, and records why with the session's key, in one conditional write of the key store
    /// (a redaction racing another, or a rotation, is tried again on what the store holds
    /// then). Every reader that opens through an [`Opener`] then reads the field as
    /// [`Text::Redacted`]: this process at once, others once their answer about the key is
    /// `key_cache_secs` old. Redacting again changes nothing and answers the same. `None`
    /// when the session has no data key (written without encryption: nothing to destroy).
    pub async fn redact(
        &self,
        session: SessionId,
        seq: sessionlog_schemas::Seq,
        field: &str,
        per_record: bool,
        reason: &str,
    ) -> Result<Option<RecordKeyDestroyed>> {
        for _ in 0..REDACT_ATTEMPTS {
            let asked = Instant::now();
            let old = match self.store.get(session).await? {
                Some(StoredKey::Live(old)) => old,
                Some(StoredKey::Destroyed { .. }) => return Err(Error::Erased(session)),
                None => return Ok(None),
            };
            let KeyState::Live(key) =
                self.unwrap_stored(session, Some(StoredKey::Live(old.clone())))?
            else {
                return Err(Error::Erased(session));
            };
            // Done before, unless only its reason was recorded (the secret scan's, which
            // destroys no key) and this one destroys the key.
            if key.redaction(seq, field).is_some()
                && !(per_record && key.has_record_key(seq, field))
            {
                return Ok(Some(RecordKeyDestroyed {
                    seq,
                    field: field.to_string(),
                    kek_id: old.kek_id,
                    key_destroyed: per_record,
                }));
            }
            let mut redacted = key.duplicate();
            redacted.redact(seq, field, reason, per_record);
            let current = self.keks.current();
            let new = WrappedKey {
                version: redacted.version(),
                kek_id: current.id().to_string(),
                wrapped: current.wrap(session, &redacted),
                created_at: old.created_at,
            };
            let kek_id = new.kek_id.clone();
            if self.store.rewrap(session, old, new).await? {
                self.remember(
                    session,
                    Answer {
                        state: KeyState::Live(Arc::new(redacted)),
                        asked,
                    },
                );
                // Every lease taken before holds the key that still opens the field.
                self.forgotten.fetch_add(1, Ordering::AcqRel);
                return Ok(Some(RecordKeyDestroyed {
                    seq,
                    field: field.to_string(),
                    kek_id,
                    key_destroyed: per_record,
                }));
            }
        }
        Err(Error::Store(
            format!(
                "the data key of session {session} kept changing while a redaction was written"
            )
            .into(),
        ))
    }

    /// The KEK that wraps the session's live key, if it has one.
    pub async fn wrapping_kek(&self, session: SessionId) -> Result<Option<String>> {
        Ok(match self.store.get(session).await? {
            Some(StoredKey::Live(key)) => Some(key.kek_id),
            _ => None,
        })
    }

    /// The receipt of the session's erasure, if it was erased.
    pub async fn receipt(&self, session: SessionId) -> Result<Option<ErasureReceipt>> {
        self.store.receipt(session).await
    }

    /// Rewraps every live data key not wrapped by the current KEK under it, calling
    /// `progress` with the keys looked at so far. After a rotation with nothing missing, no
    /// key depends on a retired KEK: it can be destroyed.
    pub async fn rotate(&self, mut progress: impl FnMut(u64)) -> Result<Rotation> {
        let current = self.keks.current();
        let mut rotation = Rotation {
            current_kek_id: current.id().to_string(),
            ..Rotation::default()
        };
        let mut keys = self.store.live_keys();
        while let Some(row) = keys.next().await {
            let (session, key) = row?;
            rotation.examined += 1;
            progress(rotation.examined);
            if key.kek_id == current.id() {
                rotation.already_current += 1;
                continue;
            }
            let Some(old) = self.keks.find(&key.kek_id) else {
                *rotation.missing_kek.entry(key.kek_id).or_default() += 1;
                continue;
            };
            let data_key = old.unwrap(session, &key.wrapped)?;
            let rewrapped = WrappedKey {
                wrapped: current.wrap(session, &data_key),
                kek_id: current.id().to_string(),
                ..key.clone()
            };
            let old_kek_id = key.kek_id.clone();
            if self.store.rewrap(session, key, rewrapped).await? {
                *rotation.rewrapped.entry(old_kek_id).or_default() += 1;
            } else {
                rotation.destroyed_meanwhile += 1;
            }
        }
        Ok(rotation)
    }
}

/// Refuses envelopes carrying sealed content: a writer sends plain text and the service
/// seals it, so every sealed field in the log opens with the session's key.
pub fn refuse_sealed(envelopes: &mut [EventEnvelope]) -> Result<()> {
    for envelope in envelopes.iter_mut() {
        let seq = envelope.seq;
        let mut sealed = None;
        sensitive_fields(&mut envelope.event, |field, content| {
            if content.is_sealed() {
                sealed.get_or_insert(field);
            }
        });
        if let Some(field) = sealed {
            return Err(Error::AlreadySealed { seq, field });
        }
    }
    Ok(())
}

/// What `sessionlog keys rotate` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    /// The KEK every rewrapped key is wrapped by now.
    pub current_kek_id: String,
    /// Live keys looked at.
    pub examined: u64,
    /// Keys that were wrapped by the current KEK already.
    pub already_current: u64,
    /// Keys rewrapped, by the KEK that wrapped them before.
    pub rewrapped: BTreeMap<String, u64>,
    /// Keys wrapped by a KEK this process was not given, by its id: those KEKs are still needed.
    pub missing_kek: BTreeMap<String, u64>,
    /// Keys destroyed (their sessions erased) or changed (a redaction) while the rotation ran:
    /// rotate again for the changed ones.
    pub destroyed_meanwhile: u64,
}

/// A sensitive field as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    /// The text.
    Plain(String),
    /// Sealed, and this reader has no keys (encryption is off here).
    Sealed,
    /// The session was erased: its key is destroyed (or its plain text withdrawn).
    Erased,
    /// Sealed, but it does not open: sealed as another event or field, or tampered with.
    Unreadable,
    /// Redacted: the field's key is destroyed (or its text withdrawn), for this reason.
    Redacted(String),
}

impl Text {
    /// The text, if it could be read.
    pub fn readable(&self) -> Option<&str> {
        match self {
            Self::Plain(text) => Some(text),
            _ => None,
        }
    }

    /// The text, or a marker that says why there is none (`[erased]`, `[sealed]`,
    /// `[unreadable]`, `[redacted: WHY]`).
    pub fn shown(self) -> String {
        match self {
            Self::Plain(text) => text,
            Self::Sealed => "[sealed]".into(),
            Self::Erased => "[erased]".into(),
            Self::Unreadable => "[unreadable]".into(),
            Self::Redacted(reason) => format!("[redacted: {reason}]"),
        }
    }
}

/// Opens one session's fields for a reader. Never fails: what cannot be opened says why.
/// It holds the session's key on a lease (see [`Keyring::renew`]).
#[derive(Clone)]
pub struct Opener {
    lease: KeyLease,
    erased: bool,
    /// Redactions the session's state records (its `PayloadRedacted` events), by seq and
    /// field, with their reasons: a process whose answer about the key predates a redaction
    /// made elsewhere still reads the field as redacted.
    redacted: Vec<(sessionlog_schemas::Seq, String, String)>,
}

impl Opener {
    /// An opener without keys, for a reader where encryption is off: sealed fields read as
    /// [`Text::Sealed`].
    pub fn without_keys(session: SessionId) -> Self {
        Self {
            lease: KeyLease {
                session,
                state: KeyState::Absent,
                asked: Instant::now(),
                generation: 0,
            },
            erased: false,
            redacted: Vec::new(),
        }
    }

    /// Marks the session erased (its state says so): every field reads as [`Text::Erased`],
    /// plain text written before encryption was on included.
    pub fn erased(mut self, erased: bool) -> Self {
        self.erased = erased;
        self
    }

    /// Adds the redactions the session's state records (seq, field, reason): those fields read
    /// as [`Text::Redacted`] whatever the key this process holds, plain text included.
    pub fn redacted(
        mut self,
        redactions: impl IntoIterator<Item = (sessionlog_schemas::Seq, String, String)>,
    ) -> Self {
        self.redacted.extend(redactions);
        self
    }

    /// Why field `field` of event `seq` was redacted, if it was: by the state (its
    /// `PayloadRedacted` events, which only an operator's signed act puts there), or by the key.
    /// The key's record of a field sealed under its own key counts when that key is gone or the
    /// field was written without its text: the secret scan records its reason without
    /// destroying a key (its withheld field has no ciphertext), and a writer fenced without
    /// knowing it records one for a seq whose event is another writer's, whose field (its key
    /// kept, its text written) must still read.
    fn redaction(
        &self,
        seq: sessionlog_schemas::Seq,
        content: &Content,
        field: &str,
    ) -> Option<String> {
        if let Some((_, _, reason)) = self
            .redacted
            .iter()
            .find(|(s, f, _)| *s == seq && f == field)
        {
            return Some(reason.clone());
        }
        let KeyState::Live(key) = &self.lease.state else {
            return None;
        };
        let redaction = key.redaction(seq, field)?;
        let readable = matches!(content, Content::Sealed { key_id, ciphertext, .. }
            if sealed_per_record(key_id)
                && !ciphertext.is_empty()
                && key.has_record_key(seq, field));
        (!readable).then(|| redaction.reason.clone())
    }

    /// Whether the session's key is destroyed or the session is marked erased.
    pub fn is_erased(&self) -> bool {
        self.erased || matches!(self.lease.state, KeyState::Destroyed)
    }

    /// A field's text, where it is not known which event and field it came from (a title in
    /// a state, a turn of a context view).
    pub fn text(&self, content: &Content) -> Text {
        self.text_at(content, None)
    }

    /// A field's text; `place` is the event seq and field it came from, when the reader knows
    /// (a sealed field names its own).
    fn text_at(&self, content: &Content, place: Option<(sessionlog_schemas::Seq, &str)>) -> Text {
        if self.erased {
            return Text::Erased;
        }
        let place = match content {
            Content::Sealed { key_id, .. } => sealed_place(key_id).or(place),
            Content::Plain(_) => place,
        };
        if let Some(reason) = place.and_then(|(seq, field)| self.redaction(seq, content, field))
            && !matches!(self.lease.state, KeyState::Destroyed)
        {
            return Text::Redacted(reason);
        }
        match content {
            Content::Plain(text) => Text::Plain(text.clone()),
            Content::Sealed {
                key_id,
                nonce,
                ciphertext,
            } => match &self.lease.state {
                KeyState::Live(key) => key
                    .open(self.lease.session, key_id, nonce, ciphertext)
                    .map_or(Text::Unreadable, Text::Plain),
                KeyState::Destroyed => Text::Erased,
                KeyState::Absent => Text::Sealed,
            },
        }
    }

    /// Replaces `content` by its opened text. What does not open keeps its sealed form with
    /// the ciphertext removed (so a reader can tell something was there, and why not from
    /// the returned [`Text`]); plain text of an erased session is withdrawn (empty).
    pub fn open_in_place(&self, content: &mut Content) -> Text {
        let text = self.text(content);
        Self::replace(content, text)
    }

    fn replace(content: &mut Content, text: Text) -> Text {
        match text {
            Text::Plain(text) => {
                *content = Content::Plain(text);
                Text::Plain(String::new())
            }
            other => {
                match content {
                    Content::Sealed {
                        ciphertext, nonce, ..
                    } => {
                        ciphertext.clear();
                        nonce.clear();
                    }
                    Content::Plain(text) => text.clear(),
                }
                other
            }
        }
    }

    /// A copy of an event of this session with every sealed field opened, checking that each
    /// was sealed as this event's field; the fields that did not open, and why.
    pub fn open_event(
        &self,
        envelope: &EventEnvelope,
    ) -> (EventEnvelope, Vec<(&'static str, Text)>) {
        let mut opened = envelope.clone();
        let seq = envelope.seq;
        let mut unopened = Vec::new();
        sensitive_fields(&mut opened.event, |field, content| {
            let text = match &*content {
                Content::Sealed { key_id, .. } if !sealed_as(key_id, seq, field) => {
                    Text::Unreadable
                }
                other => self.text_at(other, Some((seq, field))),
            };
            match Self::replace(content, text) {
                Text::Plain(_) => {}
                other => unopened.push((field, other)),
            }
        });
        (opened, unopened)
    }
}

/// Whether `envelope` has a sensitive field. A claim, a checkpoint, a resume carry nothing to
/// seal: no key is needed (nor made) for them, and an erased session's claim is judged by the
/// fold, not here.
fn carries_text(envelope: &mut EventEnvelope) -> bool {
    let mut texts = false;
    sensitive_fields(&mut envelope.event, |_, _| texts = true);
    texts
}

/// Seals `envelope`'s plain fields with `key`, refusing sealed ones that are not its own (see
/// [`Keyring::seal`]).
fn seal_checked(key: &DataKey, envelope: &mut EventEnvelope, per_record: bool) -> Result<()> {
    let (session, seq) = (envelope.session_id, envelope.seq);
    let mut foreign = None;
    sensitive_fields(&mut envelope.event, |field, content| {
        if let Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } = content
            && !(sealed_as(key_id, seq, field)
                && key.open(session, key_id, nonce, ciphertext).is_some())
        {
            foreign.get_or_insert(field);
        }
    });
    if let Some(field) = foreign {
        return Err(Error::AlreadySealed { seq, field });
    }
    seal_envelope_as(key, envelope, per_record);
    Ok(())
}

/// One writer's hold on its session's sealing key (see [`Keyring::seal_held`]): a lease.
#[derive(Default)]
pub struct HeldKey(Option<KeyLease>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kek;
    use crate::data_key::seal_envelope;
    use futures::FutureExt;
    use std::sync::Mutex;

    /// The store as a map: enough to test the keyring's rules (the CQL one is tested against
    /// Cassandra in the integration tests).
    #[derive(Default)]
    struct MapStore(
        Mutex<HashMap<SessionId, StoredKey>>,
        std::sync::atomic::AtomicBool,
    );

    impl DataKeyStore for MapStore {
        fn create(
            &self,
            session: SessionId,
            key: WrappedKey,
        ) -> futures::future::BoxFuture<'_, Result<StoredKey>> {
            let mut map = self.0.lock().unwrap();
            let stored = map.entry(session).or_insert(StoredKey::Live(key)).clone();
            async move { Ok(stored) }.boxed()
        }
        fn insert_fresh(
            &self,
            session: SessionId,
            key: WrappedKey,
        ) -> futures::future::BoxFuture<'_, Result<()>> {
            self.0.lock().unwrap().insert(session, StoredKey::Live(key));
            async { Ok(()) }.boxed()
        }
        fn get(
            &self,
            session: SessionId,
        ) -> futures::future::BoxFuture<'_, Result<Option<StoredKey>>> {
            let stored = self.0.lock().unwrap().get(&session).cloned();
            let down = self.1.load(std::sync::atomic::Ordering::Relaxed);
            async move {
                if down {
                    return Err(Error::Store("the store is down".into()));
                }
                Ok(stored)
            }
            .boxed()
        }
        fn destroy(&self, receipt: ErasureReceipt) -> futures::future::BoxFuture<'_, Result<()>> {
            self.0.lock().unwrap().insert(
                receipt.session_id,
                StoredKey::Destroyed {
                    at: receipt.erased_at,
                },
            );
            async { Ok(()) }.boxed()
        }
        fn receipt(
            &self,
            _: SessionId,
        ) -> futures::future::BoxFuture<'_, Result<Option<ErasureReceipt>>> {
            async { Ok(None) }.boxed()
        }
        fn live_keys(&self) -> futures::stream::BoxStream<'_, Result<(SessionId, WrappedKey)>> {
            let live: Vec<_> = self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter_map(|(s, k)| match k {
                    StoredKey::Live(k) => Some(Ok((*s, k.clone()))),
                    StoredKey::Destroyed { .. } => None,
                })
                .collect();
            futures::stream::iter(live).boxed()
        }
        fn rewrap(
            &self,
            session: SessionId,
            old: WrappedKey,
            key: WrappedKey,
        ) -> futures::future::BoxFuture<'_, Result<bool>> {
            let mut map = self.0.lock().unwrap();
            let done = match map.get(&session) {
                Some(StoredKey::Live(k)) if *k == old => {
                    map.insert(session, StoredKey::Live(key));
                    true
                }
                _ => false,
            };
            async move { Ok(done) }.boxed()
        }
    }

    fn envelope(session: SessionId, seq: u64, text: &str) -> EventEnvelope {
        EventEnvelope {
            event_id: uuid::Uuid::now_v7(),
            session_id: session,
            seq,
            writer_epoch: 1,
            occurred_at: 0,
            causation_id: None,
            idempotency_key: None,
            schema_version: 2,
            event: sessionlog_schemas::SessionEvent::UserRequest {
                content: Content::plain(text),
            },
            attestation: None,
        }
    }

    /// An operator's erasure of `session` at its seq 2.
    fn receipt(session: SessionId) -> ErasureReceipt {
        ErasureReceipt {
            session_id: session,
            requested_by: "op".into(),
            reason: "test".into(),
            erased_at: 1,
            erased_seq: 2,
            log_partition: 0,
            log_offset: 0,
            destroyed_kek_id: None,
        }
    }

    fn keyring(store: &Arc<MapStore>, keks: Keks) -> Keyring {
        Keyring::new(
            Arc::clone(store) as Arc<dyn DataKeyStore>,
            keks,
            Duration::ZERO,
        )
    }

    #[tokio::test]
    async fn sealed_events_open_until_the_key_is_destroyed() {
        let store = Arc::new(MapStore::default());
        let ring = keyring(&store, Keks::new(Kek::generate(), vec![]));
        let session = SessionId::new();
        let mut events = vec![envelope(session, 1, "canary")];
        ring.seal(&mut events).await.unwrap();
        assert!(
            matches!(&events[0].event, sessionlog_schemas::SessionEvent::UserRequest { content } if content.is_sealed())
        );
        let opener = ring.opener(session).await.unwrap();
        let (opened, unopened) = opener.open_event(&events[0]);
        assert_eq!(
            opened,
            EventEnvelope {
                event: envelope(session, 1, "canary").event,
                ..events[0].clone()
            }
        );
        assert!(unopened.is_empty());

        // Moved to another seq, it does not read as that event's text.
        let moved = EventEnvelope {
            seq: 2,
            ..events[0].clone()
        };
        assert_eq!(
            opener.open_event(&moved).1,
            vec![("content", Text::Unreadable)]
        );

        // Sealing again what this keyring sealed (a retry) changes nothing; content sealed
        // with another key is refused.
        let again = events.clone();
        ring.seal(&mut events).await.unwrap();
        assert_eq!(events, again);
        let mut foreign = vec![envelope(session, 1, "x")];
        seal_envelope(&DataKey::generate(), &mut foreign[0]);
        assert!(matches!(
            ring.seal(&mut foreign).await,
            Err(Error::AlreadySealed { seq: 1, .. })
        ));

        ring.destroy(receipt(session)).await.unwrap();
        let opener = ring.opener(session).await.unwrap();
        assert!(opener.is_erased());
        assert_eq!(
            opener.open_event(&events[0]).1,
            vec![("content", Text::Erased)]
        );
        let mut more = vec![envelope(session, 2, "after")];
        assert!(matches!(ring.seal(&mut more).await, Err(Error::Erased(_))));
    }

    #[tokio::test]
    async fn a_writers_held_key_ends_when_this_process_erases_the_session() {
        let store = Arc::new(MapStore::default());
        // A TTL long enough that only the erasure can end the hold.
        let ring = Keyring::new(
            Arc::clone(&store) as Arc<dyn DataKeyStore>,
            Keks::new(Kek::generate(), vec![]),
            Duration::from_secs(3600),
        );
        let (session, other) = (SessionId::new(), SessionId::new());
        let mut held = HeldKey::default();
        let mut first = vec![envelope(session, 1, "first")];
        ring.seal_held(&mut held, &mut first).await.unwrap();
        let opener = ring.opener(session).await.unwrap();
        assert!(
            opener.open_event(&first[0]).1.is_empty(),
            "opens with the stored key"
        );
        // Held for the next append, and never lent to another session.
        assert!(holds(&held, session, &ring));
        assert!(!holds(&held, other, &ring));

        ring.destroy(receipt(session)).await.unwrap();
        let mut after = vec![envelope(session, 2, "after")];
        assert!(matches!(
            ring.seal_held(&mut held, &mut after).await,
            Err(Error::Erased(_))
        ));
        assert!(matches!(
            &after[0].event,
            sessionlog_schemas::SessionEvent::UserRequest { content } if !content.is_sealed()
        ));
    }

    #[tokio::test]
    async fn with_no_cache_a_writer_fetches_its_key_on_every_append() {
        let store = Arc::new(MapStore::default());
        let ring = keyring(&store, Keks::new(Kek::generate(), vec![]));
        let session = SessionId::new();
        let mut held = HeldKey::default();
        for seq in 1..=3 {
            let mut events = vec![envelope(session, seq, "text")];
            ring.seal_held(&mut held, &mut events).await.unwrap();
            let opener = ring.opener(session).await.unwrap();
            assert!(opener.open_event(&events[0]).1.is_empty());
            assert!(!holds(&held, session, &ring), "a TTL of zero holds nothing");
        }
    }

    /// Whether `held` holds a key `ring` lets the writer seal `session`'s events with
    /// without asking the store.
    fn holds(held: &HeldKey, session: SessionId, ring: &Keyring) -> bool {
        held.0.as_ref().is_some_and(|lease| {
            lease.session == session
                && ring.is_current(lease)
                && matches!(lease.state, KeyState::Live(_))
        })
    }

    /// Moves every answer `ring` remembers `by` into the past, and each of `leases`: time
    /// passing, without waiting for it.
    fn age(ring: &Keyring, leases: &mut [&mut KeyLease], by: Duration) {
        let back = |at: Instant| at.checked_sub(by).expect("an instant that far back");
        for mut entry in ring.cache.iter_mut() {
            entry.asked = back(entry.asked);
        }
        for lease in leases {
            lease.asked = back(lease.asked);
        }
    }

    /// The TTL of [`ten_second_keyring`].
    const TTL: Duration = Duration::from_secs(10);

    /// A keyring over `store` trusting an answer for [`TTL`].
    fn ten_second_keyring(store: &Arc<MapStore>) -> Keyring {
        Keyring::new(
            Arc::clone(store) as Arc<dyn DataKeyStore>,
            Keks::new(Kek::generate(), vec![]),
            TTL,
        )
    }

    #[tokio::test]
    async fn a_writers_hold_ends_a_ttl_after_the_store_answered_not_after_it_was_taken() {
        let store = Arc::new(MapStore::default());
        let ring = ten_second_keyring(&store);
        let session = SessionId::new();
        ring.seal(&mut [envelope(session, 1, "first")])
            .await
            .unwrap();
        // The store answered nine seconds ago; the writer takes its hold from the cache now.
        age(&ring, &mut [], Duration::from_secs(9));
        let mut held = HeldKey::default();
        ring.seal_held(&mut held, &mut [envelope(session, 2, "second")])
            .await
            .unwrap();
        // Another process erases the session; two seconds later the answer is 11 s old.
        store.destroy(receipt(session)).await.unwrap();
        let lease = held.0.as_mut().expect("a hold");
        age(&ring, &mut [lease], Duration::from_secs(2));
        let mut after = [envelope(session, 3, "after")];
        assert!(matches!(
            ring.seal_held(&mut held, &mut after).await,
            Err(Error::Erased(_))
        ));
        assert!(held.0.is_none(), "the erased session's key is dropped");
    }

    #[tokio::test]
    async fn a_kept_opener_reads_an_erasure_made_elsewhere_once_renewed_after_the_ttl() {
        let store = Arc::new(MapStore::default());
        let ring = ten_second_keyring(&store);
        let session = SessionId::new();
        let mut events = [envelope(session, 1, "text")];
        ring.seal(&mut events).await.unwrap();
        let mut opener = ring.opener(session).await.unwrap();
        store.destroy(receipt(session)).await.unwrap();

        // Within the TTL the answer the store gave stands: the bound the promise allows.
        ring.renew(&mut opener).await.unwrap();
        assert!(opener.open_event(&events[0]).1.is_empty());

        age(&ring, &mut [&mut opener.lease], TTL);
        ring.renew(&mut opener).await.unwrap();
        assert!(opener.is_erased());
        assert!(
            matches!(opener.lease.state, KeyState::Destroyed),
            "key dropped"
        );
        assert_eq!(
            opener.open_event(&events[0]).1,
            vec![("content", Text::Erased)]
        );
    }

    #[tokio::test]
    async fn through_a_store_outage_a_key_is_used_until_its_ttl_is_up_and_not_after() {
        let store = Arc::new(MapStore::default());
        let ring = ten_second_keyring(&store);
        let (running, new) = (SessionId::new(), SessionId::new());
        let mut held = HeldKey::default();
        let mut before = [envelope(running, 1, "before")];
        ring.seal_held(&mut held, &mut before).await.unwrap();
        let mut opener = ring.opener(running).await.unwrap();
        store.1.store(true, std::sync::atomic::Ordering::Relaxed);

        // Within the TTL the writer and the reader go on; a session without a key waits.
        let mut during = [envelope(running, 2, "during")];
        ring.seal_held(&mut held, &mut during).await.unwrap();
        ring.seal(&mut [envelope(running, 3, "during")])
            .await
            .unwrap();
        ring.renew(&mut opener).await.unwrap();
        assert_eq!(opener.open_event(&during[0]).1, vec![]);
        assert!(matches!(
            ring.seal(&mut [envelope(new, 1, "x")]).await,
            Err(Error::Store(_))
        ));

        // Past it, the key could have been destroyed meanwhile: none of them uses it.
        let lease = held.0.as_mut().expect("a hold");
        age(&ring, &mut [lease, &mut opener.lease], TTL);
        assert!(matches!(
            ring.seal_held(&mut held, &mut [envelope(running, 4, "after")])
                .await,
            Err(Error::Store(_))
        ));
        assert!(
            held.0.is_none(),
            "a hold the store cannot renew keeps no key"
        );
        assert!(matches!(
            ring.seal(&mut [envelope(running, 4, "after")]).await,
            Err(Error::Store(_))
        ));
        assert!(ring.opener(running).await.is_err());
        assert!(matches!(
            ring.renew(&mut opener).await,
            Err(Error::Store(_))
        ));
        assert_eq!(
            opener.open_event(&during[0]).1,
            vec![("content", Text::Sealed)],
            "an opener the store cannot renew holds no key"
        );
    }

    #[tokio::test]
    async fn a_destroyed_key_is_not_brought_back_by_an_answer_given_before() {
        let store = Arc::new(MapStore::default());
        let ring = ten_second_keyring(&store);
        let session = SessionId::new();
        let asked = Instant::now();
        let live = Answer {
            state: KeyState::Live(Arc::new(DataKey::generate())),
            asked,
        };
        ring.remember(
            session,
            Answer {
                state: KeyState::Destroyed,
                asked,
            },
        );
        // A fetch that read the key before this process destroyed it, answering after.
        ring.remember(session, live);
        assert!(matches!(
            ring.key(session).await.unwrap(),
            KeyState::Destroyed
        ));
    }

    #[tokio::test]
    async fn rotation_rewraps_every_key_under_the_new_kek() {
        let store = Arc::new(MapStore::default());
        let old = Kek::generate();
        let old_copy = Kek::from_base64(&old.to_base64(), "copy").unwrap();
        let ring = keyring(&store, Keks::new(old, vec![]));
        let sessions: Vec<_> = (0..3).map(|_| SessionId::new()).collect();
        let mut events: Vec<_> = sessions.iter().map(|s| envelope(*s, 1, "text")).collect();
        ring.seal(&mut events).await.unwrap();

        let new = Kek::generate();
        let new_copy = Kek::from_base64(&new.to_base64(), "copy").unwrap();
        let rotating = keyring(&store, Keks::new(new, vec![old_copy]));
        let rotation = rotating.rotate(|_| {}).await.unwrap();
        assert_eq!(rotation.examined, 3);
        assert_eq!(rotation.rewrapped.values().sum::<u64>(), 3);

        // Only the new KEK is needed now.
        let after = keyring(&store, Keks::new(new_copy, vec![]));
        for e in &events {
            let opener = after.opener(e.session_id).await.unwrap();
            assert_eq!(opener.open_event(e).1, vec![]);
        }
        assert_eq!(after.rotate(|_| {}).await.unwrap().already_current, 3);
    }

    fn tool_result(session: SessionId, seq: u64, output: &str) -> EventEnvelope {
        EventEnvelope {
            event: sessionlog_schemas::SessionEvent::ToolCallResult {
                call_seq: seq - 1,
                outcome: sessionlog_schemas::CallOutcome::Succeeded,
                output: Content::plain(output),
                source: sessionlog_schemas::ResultSource::Executed,
                recorded_by: None,
                note: Some(Content::plain("note")),
            },
            ..envelope(session, seq, "")
        }
    }

    fn key_id_of(envelope: &EventEnvelope, field: &str) -> String {
        let mut event = envelope.event.clone();
        let mut found = None;
        sensitive_fields(&mut event, |f, content| {
            if let (true, Content::Sealed { key_id, .. }) = (f == field, content) {
                found = Some(key_id.clone());
            }
        });
        found.expect("a sealed field")
    }

    /// The secret scan's record (no key destroyed) names a field that still opens (a fenced
    /// writer's finding at the winner's seq): it reads as its text. An operator's redaction of
    /// it afterwards destroys its key, and the field reads with the operator's reason.
    #[tokio::test]
    async fn a_scan_record_gives_way_to_a_field_that_opens_and_to_an_operators_redaction() {
        let store = Arc::new(MapStore::default());
        let kek = Kek::generate();
        let kek_copy = Kek::from_base64(&kek.to_base64(), "copy").unwrap();
        let ring = keyring(&store, Keks::new(kek, vec![]));
        let session = SessionId::new();
        let mut events = vec![tool_result(session, 3, "the winner's output")];
        ring.seal(&mut events).await.unwrap();
        let scan = ring
            .redact(
                session,
                3,
                "output",
                false,
                "secret detected: aws-access-token",
            )
            .await
            .unwrap()
            .expect("a key");
        assert!(!scan.key_destroyed);
        async fn read(ring: &Keyring, event: &EventEnvelope) -> Vec<(&'static str, Text)> {
            let opener = ring.opener(event.session_id).await.unwrap();
            opener.open_event(event).1
        }
        assert_eq!(
            read(&ring, &events[0]).await,
            vec![],
            "the winner's field opens"
        );

        let operator = ring
            .redact(session, 3, "output", true, "withdrawn by alice")
            .await
            .unwrap()
            .expect("a key");
        assert!(operator.key_destroyed, "the scan's record did not stop it");
        // Another process, reading the store afresh.
        let other = keyring(&store, Keks::new(kek_copy, vec![]));
        assert_eq!(
            read(&other, &events[0]).await,
            vec![("output", Text::Redacted("withdrawn by alice".into()))]
        );
    }

    #[tokio::test]
    async fn a_redaction_destroys_one_fields_key_for_every_process_and_survives_rotation() {
        let store = Arc::new(MapStore::default());
        let kek = Kek::generate();
        let kek_copy = Kek::from_base64(&kek.to_base64(), "copy").unwrap();
        let ring = keyring(&store, Keks::new(kek, vec![]));
        let session = SessionId::new();
        let mut events: Vec<_> = (2..=5)
            .map(|seq| tool_result(session, seq, &format!("canary-{seq}")))
            .collect();
        ring.seal(&mut events).await.unwrap();
        let target = key_id_of(&events[1], "output");
        assert_eq!(target, "dk2g:3:output");

        let (seq, field) = sealed_place(&target).unwrap();
        let redact = |reason| ring.redact(session, seq, field, sealed_per_record(&target), reason);
        let done = redact("a secret printed").await.unwrap().expect("a key");
        assert!(done.key_destroyed);
        assert_eq!((done.seq, done.field.as_str()), (3, "output"));
        assert_eq!(redact("again").await.unwrap(), Some(done));

        // This process, and another one reading the store after a KEK rotation.
        let before_rotation = ring.opener(session).await.unwrap();
        let new = Kek::generate();
        let rotated = keyring(&store, Keks::new(new, vec![kek_copy]));
        assert_eq!(
            rotated
                .rotate(|_| {})
                .await
                .unwrap()
                .rewrapped
                .values()
                .sum::<u64>(),
            1
        );
        for opener in [before_rotation, rotated.opener(session).await.unwrap()] {
            for (i, event) in events.iter().enumerate() {
                let (opened, unopened) = opener.open_event(event);
                if i == 1 {
                    assert_eq!(
                        unopened,
                        vec![("output", Text::Redacted("a secret printed".into()))]
                    );
                    let sessionlog_schemas::SessionEvent::ToolCallResult { output, note, .. } =
                        &opened.event
                    else {
                        panic!("a result");
                    };
                    assert!(
                        matches!(output, Content::Sealed { ciphertext, .. } if ciphertext.is_empty())
                    );
                    assert_eq!(
                        note.as_ref(),
                        Some(&Content::plain("note")),
                        "its other field"
                    );
                } else {
                    assert!(unopened.is_empty(), "{unopened:?}");
                }
            }
        }
        // Nothing kept derives the destroyed key: with the redaction's record removed from the
        // opener's view, the field still does not open.
        let KeyState::Live(key) = rotated.key(session).await.unwrap() else {
            panic!("live");
        };
        let sessionlog_schemas::SessionEvent::ToolCallResult {
            output:
                Content::Sealed {
                    key_id,
                    nonce,
                    ciphertext,
                },
            ..
        } = &events[1].event
        else {
            panic!("a sealed result");
        };
        assert_eq!(key.open(session, key_id, nonce, ciphertext), None);
        // New events of the session are still sealed and opened.
        let mut later = vec![tool_result(session, 6, "after")];
        rotated.seal(&mut later).await.unwrap();
        assert!(
            rotated
                .opener(session)
                .await
                .unwrap()
                .open_event(&later[0])
                .1
                .is_empty()
        );
        // Erasing the session still destroys every key with the one row.
        ring.destroy(receipt(session)).await.unwrap();
        assert!(matches!(
            ring.redact(session, 4, "output", true, "x").await,
            Err(Error::Erased(_))
        ));
    }

    #[tokio::test]
    async fn an_opener_reads_a_redaction_its_state_records_whatever_key_it_holds() {
        let store = Arc::new(MapStore::default());
        let ring = keyring(&store, Keks::new(Kek::generate(), vec![]));
        let session = SessionId::new();
        let mut events = vec![envelope(session, 1, "withdrawn")];
        ring.seal(&mut events).await.unwrap();
        let opener = ring.opener(session).await.unwrap().redacted([(
            1,
            "content".to_string(),
            "user withdrew it".to_string(),
        )]);
        assert_eq!(
            opener.open_event(&events[0]).1,
            vec![("content", Text::Redacted("user withdrew it".into()))]
        );
        assert_eq!(
            Text::Redacted("user withdrew it".into()).shown(),
            "[redacted: user withdrew it]"
        );
        // Plain text written without encryption reads as redacted too, where its place is known.
        let plain = envelope(session, 1, "plain");
        assert_eq!(
            Opener::without_keys(session)
                .redacted([(1, "content".to_string(), "why".to_string())])
                .open_event(&plain)
                .1,
            vec![("content", Text::Redacted("why".into()))]
        );
    }
}
