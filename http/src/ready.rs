//! Liveness and readiness: `/health/live` answers while the process serves; `/health/ready`
//! (and `/health`) asks every server the service needs, and answers 503 when one does not
//! answer, so that a load balancer stops sending work a service cannot do. Which one, and its
//! error (internal addresses), only a caller with the operator role sees. The checks run at
//! most once per [`REPORT_FRESH_FOR`], whoever asks: a flood of probes costs the servers
//! behind the service nothing more.

use axum::Json;
use axum::http::StatusCode;
use futures::future::BoxFuture;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use utoipa::ToSchema;

/// How long one check may take before it counts as failed: a probe must answer well within
/// its own timeout (Kubernetes' default is one second more than this).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

type Check = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How long a readiness report answers every probe before the checks run again.
pub const REPORT_FRESH_FOR: Duration = Duration::from_secs(1);

/// The servers (and loops) a service needs, each with a check, for `/health/ready`.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<Vec<(&'static str, Check)>>,
    /// The last report and when it was made; the lock also makes concurrent probes wait for
    /// one run of the checks instead of each starting its own.
    last: Arc<tokio::sync::Mutex<Option<(Instant, ReadinessReport)>>>,
}

/// What `/health/live` answers: the process serves.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct Liveness {
    /// Always `live`.
    #[schema(example = "live")]
    pub status: &'static str,
}

impl Liveness {
    /// The answer.
    pub const LIVE: Self = Self { status: "live" };
}

/// One check's outcome.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CheckOutcome {
    /// Whether it answered in time.
    pub ok: bool,
    /// What went wrong, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub ms: u64,
}

/// What `/health/ready` answers.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReadinessReport {
    /// `ready`, or `not_ready` when any check failed.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// Every check, by name (`kafka`, `registry`, `store`, ...); empty unless the caller has
    /// the operator role.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub checks: BTreeMap<&'static str, CheckOutcome>,
}

impl ReadinessReport {
    /// Whether every check passed.
    pub fn ready(&self) -> bool {
        self.checks.values().all(|c| c.ok)
    }
}

impl Readiness {
    /// No checks yet: ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the check `name`: `check` resolves to `Err(why)` when the dependency cannot serve.
    pub fn with<F, Fut, E>(mut self, name: &'static str, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let boxed: Check = Arc::new(move || {
            let fut = check();
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        Arc::make_mut(&mut self.checks).push((name, boxed));
        self
    }

    /// Checks that Kafka answers metadata for the session-events topic.
    pub fn kafka(self, settings: &sessionlog_log::KafkaSettings) -> Self {
        let settings = settings.clone();
        self.with("kafka", move || {
            let settings = settings.clone();
            async move {
                sessionlog_log::topic::partition_count(&settings, &settings.topic)
                    .await
                    .map(|_| ())
            }
        })
    }

    /// Checks that the registry serves schema `id`, the one events are written with.
    pub fn registry(self, registry: sessionlog_schemas::SchemaRegistry, id: u32) -> Self {
        self.with("registry", move || {
            let registry = registry.clone();
            async move { registry.ping(id).await }
        })
    }

    /// Checks that the projection store answers.
    pub fn store(self, store: sessionlog_store::ProjectionStore) -> Self {
        self.with("store", move || {
            let store = store.clone();
            async move { store.ping().await }
        })
    }

    /// Runs every check at once, each within [`CHECK_TIMEOUT`].
    pub async fn report(&self) -> ReadinessReport {
        let runs = self.checks.iter().map(|(name, check)| async move {
            let started = Instant::now();
            let outcome = tokio::time::timeout(CHECK_TIMEOUT, check()).await;
            let error = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some(why),
                Err(_) => Some(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
            };
            let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            (
                *name,
                CheckOutcome {
                    ok: error.is_none(),
                    error,
                    ms,
                },
            )
        });
        let checks: BTreeMap<_, _> = futures::future::join_all(runs).await.into_iter().collect();
        let ready = checks.values().all(|c| c.ok);
        ReadinessReport {
            status: if ready { "ready" } else { "not_ready" },
            checks,
        }
    }

    /// The report with its status code: 200 when ready, 503 when not. A report made within
    /// [`REPORT_FRESH_FOR`] is answered again.
    pub async fn answer(&self) -> (StatusCode, Json<ReadinessReport>) {
        let mut last = self.last.lock().await;
        let report = match &*last {
            Some((at, report)) if at.elapsed() < REPORT_FRESH_FOR => report.clone(),
            _ => {
                let report = self.report().await;
                *last = Some((Instant::now(), report.clone()));
                report
            }
        };
        drop(last);
        let status = if report.ready() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, Json(report))
    }
}
