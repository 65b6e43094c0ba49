//! A process's access to data keys: creating, fetching (cached), destroying and rewrapping
//! them, and opening sealed fields for readers.

use crate::data_key::{DataKey, KEY_VERSION, seal_envelope, sealed_as, sensitive_fields};
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

/// Data keys for one process: the key store, the KEKs, and a short-lived cache.
pub struct Keyring {
    store: Arc<dyn DataKeyStore>,
    keks: Keks,
    ttl: Duration,
    /// Read on every append by every task, written once per session per TTL: sharded, so
    /// tasks on different cores sealing different sessions do not contend for one lock.
    cache: DashMap<SessionId, (KeyState, Instant)>,
    /// Counts keys this process forgot or saw destroyed: a [`HeldKey`] taken before a change
    /// is no longer used.
    forgotten: AtomicU64,
}

impl Keyring {
    /// A keyring over `store`, wrapping with `keks`, trusting a fetched key for `ttl`.
    pub fn new(store: Arc<dyn DataKeyStore>, keks: Keks, ttl: Duration) -> Self {
        Self {
            store,
            keks,
            ttl,
            cache: DashMap::new(),
            forgotten: AtomicU64::new(0),
        }
    }

    /// The keyring the `[privacy]` settings describe over `store`; `None` when encryption is off.
    pub fn from_settings(
        settings: &PrivacySettings,
        store: Arc<dyn DataKeyStore>,
    ) -> Result<Option<Self>> {
        Ok(Keks::from_settings(settings)?
            .map(|keks| Self::new(store, keks, Duration::from_secs(settings.key_cache_secs))))
    }

    /// The id of the KEK new keys are wrapped with.
    pub fn kek_id(&self) -> &str {
        self.keks.current().id()
    }

    /// What the cache holds for `session`: only if fetched within the TTL, unless `any_age`.
    fn cached(&self, session: SessionId, any_age: bool) -> Option<KeyState> {
        self.cache
            .get(&session)
            .filter(|entry| any_age || entry.1.elapsed() < self.ttl)
            .map(|entry| entry.0.clone())
    }

    fn remember(&self, session: SessionId, state: KeyState) {
        let cache = &self.cache;
        if cache.len() >= CACHE_LIMIT {
            let ttl = self.ttl;
            cache.retain(|_, (_, at)| at.elapsed() < ttl);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        let destroyed = matches!(state, KeyState::Destroyed);
        cache.insert(session, (state, Instant::now()));
        // After the insert: a writer that reads the count after this sees the new state.
        if destroyed {
            self.forgotten.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Drops what this process remembers of the session's key.
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

    /// The session's key as the store has it (cached for the configured time). While the key
    /// store cannot be reached, a key this process already held is used however old: a writer
    /// of a running session goes on through a store outage (an erasure made meanwhile reaches
    /// it when the store is back); a key it never held fails with the store's error.
    pub async fn key(&self, session: SessionId) -> Result<KeyState> {
        if let Some(state) = self.cached(session, false) {
            return Ok(state);
        }
        let stored = match self.store.get(session).await {
            Ok(stored) => stored,
            Err(error) => match self.cached(session, true) {
                Some(state) if error.is_store() => {
                    tracing::warn!(%session, %error, "key store unreachable; using the key held");
                    return Ok(state);
                }
                _ => return Err(error),
            },
        };
        let state = self.unwrap_stored(session, stored)?;
        self.remember(session, state.clone());
        Ok(state)
    }

    /// The key to seal the session's events with, made and stored if the session has none yet
    /// (a new session, or one written before encryption was on). [`Error::Erased`] once the
    /// key was destroyed. A key store that fails (a timeout of its conditional write under a
    /// burst of new sessions, a node restarting) is tried again a few times before the
    /// append fails with its error.
    pub async fn sealing_key(&self, session: SessionId) -> Result<Arc<DataKey>> {
        use sessionlog_log::retry::{self, Retryable};
        // The common case, on every append: a key fetched within the TTL.
        if let Some(KeyState::Live(key)) = self.cached(session, false) {
            return Ok(key);
        }
        (|| self.sealing_key_once(session))
            .retry(retry::tries(5))
            .when(Error::is_store)
            .await
    }

    async fn sealing_key_once(&self, session: SessionId) -> Result<Arc<DataKey>> {
        match self.key(session).await? {
            KeyState::Live(key) => return Ok(key),
            KeyState::Destroyed => return Err(Error::Erased(session)),
            KeyState::Absent => {}
        }
        let (_, wrapped) = self.generate(session);
        // Another process may have made one first: the store keeps one, and everyone uses it.
        let stored = self.store.create(session, wrapped).await?;
        let state = self.unwrap_stored(session, Some(stored))?;
        self.remember(session, state.clone());
        match state {
            KeyState::Live(key) => Ok(key),
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
        // The write is idempotent (the same key each try), so an outage is worth a few tries.
        (|| self.store.insert_fresh(session, wrapped.clone()))
            .retry(retry::tries(5))
            .when(Error::is_store)
            .await?;
        self.remember(session, KeyState::Live(Arc::new(key)));
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
            seal_checked(&key, envelope)?;
        }
        Ok(())
    }

    /// [`Self::seal`] for the envelopes of one session's writer, which holds the key in `held`
    /// between appends: on every append a writer would otherwise look it up in the cache
    /// every task of the process shares, which cost more than sealing. The hold lasts the
    /// cache's TTL and ends at once when this process destroys or forgets any key.
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
            let mut fetched = None;
            let key = match held.valid(session, self) {
                Some(key) => key,
                None => {
                    let generation = self.forgotten.load(Ordering::Acquire);
                    let key = self.sealing_key(session).await?;
                    &fetched.insert((session, key, Instant::now(), generation)).1
                }
            };
            seal_checked(key, envelope)?;
            if fetched.is_some() {
                held.0 = fetched;
            }
        }
        Ok(())
    }

    /// What a reader of `session` needs to open its fields.
    pub async fn opener(&self, session: SessionId) -> Result<Opener> {
        Ok(Opener {
            session,
            key: self.key(session).await?,
            erased: false,
        })
    }

    /// Destroys the session's data key and records the erasure's receipt.
    pub async fn destroy(&self, receipt: ErasureReceipt) -> Result<()> {
        let session = receipt.session_id;
        self.store.destroy(receipt).await?;
        self.remember(session, KeyState::Destroyed);
        Ok(())
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
            if self
                .store
                .rewrap(session, key.kek_id.clone(), rewrapped)
                .await?
            {
                *rotation.rewrapped.entry(key.kek_id).or_default() += 1;
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
    /// Keys destroyed (their sessions erased) while the rotation ran.
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
}

impl Text {
    /// The text, if it could be read.
    pub fn readable(&self) -> Option<&str> {
        match self {
            Self::Plain(text) => Some(text),
            _ => None,
        }
    }

    /// The text, or a marker that says why there is none (`[erased]`, `[sealed]`, `[unreadable]`).
    pub fn shown(self) -> String {
        match self {
            Self::Plain(text) => text,
            Self::Sealed => "[sealed]".into(),
            Self::Erased => "[erased]".into(),
            Self::Unreadable => "[unreadable]".into(),
        }
    }
}

/// Opens one session's fields for a reader. Never fails: what cannot be opened says why.
#[derive(Clone)]
pub struct Opener {
    session: SessionId,
    key: KeyState,
    erased: bool,
}

impl Opener {
    /// An opener without keys, for a reader where encryption is off: sealed fields read as
    /// [`Text::Sealed`].
    pub fn without_keys(session: SessionId) -> Self {
        Self {
            session,
            key: KeyState::Absent,
            erased: false,
        }
    }

    /// Marks the session erased (its state says so): every field reads as [`Text::Erased`],
    /// plain text written before encryption was on included.
    pub fn erased(mut self, erased: bool) -> Self {
        self.erased = erased;
        self
    }

    /// Whether the session's key is destroyed or the session is marked erased.
    pub fn is_erased(&self) -> bool {
        self.erased || matches!(self.key, KeyState::Destroyed)
    }

    /// A field's text, where it is not known which event and field it came from (a title in
    /// a state, a turn of a context view).
    pub fn text(&self, content: &Content) -> Text {
        if self.erased {
            return Text::Erased;
        }
        match content {
            Content::Plain(text) => Text::Plain(text.clone()),
            Content::Sealed {
                key_id,
                nonce,
                ciphertext,
            } => match &self.key {
                KeyState::Live(key) => key
                    .open(self.session, key_id, nonce, ciphertext)
                    .map_or(Text::Unreadable, Text::Plain),
                KeyState::Destroyed => Text::Erased,
                KeyState::Absent => Text::Sealed,
            },
        }
    }

    /// An optional field's text.
    pub fn text_of(&self, content: Option<&Content>) -> Option<Text> {
        content.map(|c| self.text(c))
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
                other => self.text(other),
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
fn seal_checked(key: &DataKey, envelope: &mut EventEnvelope) -> Result<()> {
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
    seal_envelope(key, envelope);
    Ok(())
}

/// One writer's hold on its session's sealing key (see [`Keyring::seal_held`]).
#[derive(Default)]
pub struct HeldKey(Option<(SessionId, Arc<DataKey>, Instant, u64)>);

impl HeldKey {
    /// The key held for `session`, if still good: fetched within the TTL, and no key forgotten
    /// or destroyed by this process since.
    fn valid(&self, session: SessionId, keyring: &Keyring) -> Option<&DataKey> {
        let (held_for, key, fetched, generation) = self.0.as_ref()?;
        (*held_for == session
            && *generation == keyring.forgotten.load(Ordering::Acquire)
            && fetched.elapsed() < keyring.ttl)
            .then_some(key.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kek;
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
            old: String,
            key: WrappedKey,
        ) -> futures::future::BoxFuture<'_, Result<bool>> {
            let mut map = self.0.lock().unwrap();
            let done = match map.get(&session) {
                Some(StoredKey::Live(k)) if k.kek_id == old => {
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
        assert!(held.valid(session, &ring).is_some());
        assert!(held.valid(other, &ring).is_none());

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
            assert!(
                held.valid(session, &ring).is_none(),
                "a TTL of zero holds nothing"
            );
        }
    }

    #[tokio::test]
    async fn a_key_held_outlives_a_store_outage_and_a_new_one_does_not() {
        let store = Arc::new(MapStore::default());
        // A TTL of zero: every lookup goes to the store first.
        let ring = keyring(&store, Keks::new(Kek::generate(), vec![]));
        let (running, new) = (SessionId::new(), SessionId::new());
        ring.seal(&mut [envelope(running, 1, "before")])
            .await
            .unwrap();
        store.1.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut during = [envelope(running, 2, "during")];
        ring.seal(&mut during).await.unwrap();
        assert_eq!(
            ring.opener(running).await.unwrap().open_event(&during[0]).1,
            vec![]
        );
        assert!(matches!(
            ring.seal(&mut [envelope(new, 1, "x")]).await,
            Err(Error::Store(_))
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
}
