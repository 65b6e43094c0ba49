//! The service's state ([`Ingest`]): the log it appends to, a bounded cache of the writers of
//! sessions it served lately, and how it is served.

use crate::{CACHED_SESSIONS, Error, IN_FLIGHT, Result, caught_up, describe_metrics, service};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use lru::LruCache;
use metrics_exporter_prometheus::PrometheusHandle;
use sessionlog_http::{Authenticator, Problem, Readiness};
use sessionlog_log::{IngestSettings, Settings};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::SessionId;
use sessionlog_store::SessionNames;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

/// One session's writer, shared by the requests for that session on this instance.
pub(crate) type SharedWriter = Arc<tokio::sync::Mutex<SessionWriter>>;

/// The service's state: the shared log and a cache of recently served sessions' writers.
pub struct Ingest {
    pub(crate) log: Arc<EventLog>,
    access: Arc<dyn Authenticator>,
    pub(crate) settings: IngestSettings,
    /// A cache, not a registry: a writer missing here is rebuilt from the projection and the
    /// log, and one that is behind the log (another instance wrote since) catches up when an
    /// append does not fit it.
    writers: Mutex<LruCache<SessionId, SharedWriter>>,
    /// What `/health/ready` asks.
    readiness: Readiness,
}

impl Ingest {
    /// Connects to the log with the projection attached (read-only: the keyspace must exist,
    /// `sessionlog init` creates it), letting through whom `access` lets through.
    pub async fn connect(settings: &Settings, access: Arc<dyn Authenticator>) -> Result<Arc<Self>> {
        let projection = sessionlog_store::ProjectionStore::open_checked(settings).await?;
        let log = EventLog::from_settings(settings)
            .await?
            .with_projection(projection.clone());
        // Every append is confirmed: the tail runs from the start.
        log.start_tail().await;
        // Ready while the servers every append needs answer: Kafka (the write and its
        // read-back), the registry (encoding and decoding), the store (the projection writers
        // catch up from, and the data keys, which live in the same cluster).
        let readiness = Readiness::new()
            .kafka(&settings.kafka)
            .registry(log.registry().clone(), log.schema_id())
            .store(projection);
        Ok(Arc::new(Self::build(
            Arc::new(log),
            settings.ingest.clone(),
            access,
            readiness,
        )))
    }

    /// A service writing through `log` (attach the projection to it, see
    /// [`EventLog::with_projection`], or every cache miss folds a partition from its start).
    /// It checks nothing for `/health/ready` ([`Self::connect`] checks the servers).
    pub fn new(
        log: Arc<EventLog>,
        settings: IngestSettings,
        access: Arc<dyn Authenticator>,
    ) -> Arc<Self> {
        Arc::new(Self::build(log, settings, access, Readiness::new()))
    }

    fn build(
        log: Arc<EventLog>,
        settings: IngestSettings,
        access: Arc<dyn Authenticator>,
        readiness: Readiness,
    ) -> Self {
        let capacity = NonZeroUsize::new(settings.cached_sessions).unwrap_or(NonZeroUsize::MIN);
        Self {
            log,
            access,
            settings,
            writers: Mutex::new(LruCache::new(capacity)),
            readiness,
        }
    }

    /// The log the service appends to.
    pub fn log(&self) -> &Arc<EventLog> {
        &self.log
    }

    /// The routes, with the body limit of the settings, rendering `metrics` at `/metrics`.
    pub fn router(self: &Arc<Self>, metrics: PrometheusHandle) -> Router {
        let gauges = Arc::clone(self);
        service()
            .before_scrape(move || {
                metrics::gauge!(CACHED_SESSIONS).set(gauges.writers().len() as f64);
                metrics::gauge!(IN_FLIGHT).set(gauges.log.in_flight() as f64);
            })
            .readiness(self.readiness.clone())
            .router(Arc::clone(self), metrics, Arc::clone(&self.access))
            .layer(DefaultBodyLimit::max(self.settings.max_body_bytes))
    }

    /// Serves on `listener` until `shutdown` completes, then flushes the producer. Installs
    /// the process's metrics recorder.
    pub async fn serve(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let metrics = sessionlog_http::metrics::install(&[
            describe_metrics,
            sessionlog_http::auth::describe_metrics,
        ]);
        axum::serve(listener, self.router(metrics))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)?;
        Ok(self.log.flush(std::time::Duration::from_secs(30)).await?)
    }

    /// The writer of `session`: cached, or caught up from the projection and the log.
    pub(crate) async fn writer(
        &self,
        session: SessionId,
    ) -> sessionlog_producer::Result<SharedWriter> {
        if let Some(writer) = self.writers().get(&session) {
            return Ok(Arc::clone(writer));
        }
        caught_up();
        let writer = SessionWriter::current(Arc::clone(&self.log), session).await?;
        Ok(self.keep(writer))
    }

    /// Caches `writer`, unless a concurrent request cached one for its session first: then
    /// that one is returned, so requests for a session on this instance take turns.
    fn keep(&self, writer: SessionWriter) -> SharedWriter {
        let session = writer.session_id();
        let mut writers = self.writers();
        if let Some(cached) = writers.get(&session) {
            return Arc::clone(cached);
        }
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        writers.put(session, Arc::clone(&writer));
        writer
    }

    /// The names table of the projection the log reads, prepared once.
    pub(crate) async fn names(&self) -> Result<&SessionNames, Problem> {
        let store = self.log.projection().ok_or_else(|| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "session names live in the projection store, which this ingest instance was started without",
            )
        })?;
        Ok(store.names().await?)
    }

    /// Replaces the cached writer of its session (a claim's new writer).
    pub(crate) fn replace(&self, writer: SessionWriter) {
        let session = writer.session_id();
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        self.writers().put(session, writer);
    }

    /// Drops `session`'s cached writer after a failure that may leave it unlike the log: the
    /// next request catches up afresh.
    pub(crate) fn forget(&self, session: SessionId) {
        self.writers().pop(&session);
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, LruCache<SessionId, SharedWriter>> {
        // Every operation on the cache is a single call: a panic cannot leave it torn.
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
