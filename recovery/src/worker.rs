//! A harness's worker loop in Rust: take the sessions the wake component hands to an agent,
//! run each, and move on.
//!
//! ```no_run
//! # async fn example(recovery: std::sync::Arc<sessionlog_recovery::Recovery>) -> sessionlog_recovery::Result<()> {
//! use sessionlog_recovery::worker::{Work, Worker};
//! use sessionlog_schemas::TerminalOutcome;
//! Worker::new(recovery, "triage", "worker-1")
//!     .run(|work: Work| async move {
//!         let Some(mut writer) = work.bundle.writer else { return };
//!         // ... run the agent from work.bundle.context, appending with `writer` ...
//!         // Ending the run releases the lease; `release_lease` stops without ending it.
//!         let _ = writer.close(TerminalOutcome::Completed, None).await;
//!     }, tokio::signal::ctrl_c().map(drop))
//!     .await
//! # }
//! # use futures::FutureExt;
//! ```
//!
//! Each wake is taken with [`Recovery::take`]: the claim goes through the fold, so a session
//! another worker took since its wake is skipped ("already taken") and nothing runs twice. The
//! writer handed to the handler holds a lease (renewed while it lives): a worker that dies
//! mid-run leaves a lease that lapses, and the session is woken for another worker.

use crate::{Recovery, Result, ResumeBundle};
use sessionlog_log::retry::{self, BackoffBuilder};
use sessionlog_log::{Wake, WakeFeed};
use sessionlog_schemas::now_micros;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Wakes a worker took, by `outcome`: `taken`, `failed`, or why it was skipped, as
/// `GET /v1/work` counts it (`already_taken`, `session_ended`, `session_paused`,
/// `awaiting_approval`, `needs_resolution`, `unknown_session`).
pub const WAKES_TAKEN: &str = "sessionlog_worker_wakes_total";
/// Seconds from a wake's cause (a lease's expiry, a decision, a pause's end) to the claim
/// that took the session.
pub const CAUSE_TO_CLAIM: &str = "sessionlog_worker_cause_to_claim_seconds";

/// A session a worker took: the wake that named it and the resume bundle, whose writer
/// holds the session's lease.
pub struct Work {
    /// Why the session was handed out.
    pub wake: Wake,
    /// The session resumed: its state, context, in-doubt calls, and the writer to go on with.
    pub bundle: ResumeBundle,
}

/// A worker of one agent: a member of the agent's worker group on the wake topic.
pub struct Worker {
    recovery: Arc<Recovery>,
    agent: String,
    name: String,
    concurrency: usize,
    context_tokens: Option<usize>,
}

impl Worker {
    /// A worker named `name` (the writer its claims record) for `agent`'s sessions, running
    /// one session at a time.
    pub fn new(recovery: Arc<Recovery>, agent: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            recovery,
            agent: agent.into(),
            name: name.into(),
            concurrency: 1,
            context_tokens: None,
        }
    }

    /// Runs up to `sessions` sessions at once (at least one).
    pub fn concurrency(mut self, sessions: usize) -> Self {
        self.concurrency = sessions.max(1);
        self
    }

    /// The token budget of each bundle's context view (default: the agent's context policy).
    pub fn context_tokens(mut self, tokens: usize) -> Self {
        self.context_tokens = Some(tokens);
        self
    }

    /// Takes wakes and runs `handler` on each session taken until `shutdown` completes, then
    /// waits for the sessions running to finish. Reading wakes is retried through any outage
    /// (a broker restarting, the cluster unreachable): only joining the agent's worker group
    /// at the start can fail.
    pub async fn run<H, F>(self, handler: H, shutdown: impl Future<Output = ()>) -> Result<()>
    where
        H: Fn(Work) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        // A worker with the library reads the log itself: it serves the agent's sessions of
        // every tenant.
        let feed = WakeFeed::join(&self.recovery.settings().kafka, &self.agent, None)?;
        // A long-running worker's tail holds what was written since it started: a session
        // whose harness died recently is rebuilt from memory, not with a pooled reader's fetch.
        self.recovery.log().start_tail().await;
        let (handler, me) = (Arc::new(handler), Arc::new(self));
        let slots = Arc::new(Semaphore::new(me.concurrency));
        let mut running = JoinSet::new();
        let mut waits = retry::forever().build();
        tokio::pin!(shutdown);
        loop {
            // Finished runs are reaped as they end so the set does not grow.
            while running.try_join_next().is_some() {}
            let slot = tokio::select! {
                _ = &mut shutdown => break,
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break,
                },
            };
            let wake = tokio::select! {
                _ = &mut shutdown => break,
                wake = feed.next() => match wake {
                    Ok(wake) => {
                        waits = retry::forever().build();
                        wake
                    }
                    Err(e) => {
                        // The feed waits out a broker's restart itself; anything else (the
                        // cluster unreachable, an authorization refused) is retried, with the
                        // house's backoff, until the worker is shut down: a worker that exits
                        // leaves its agent's sessions to nobody.
                        let wait = waits.next().unwrap_or(retry::MAX_DELAY);
                        tracing::warn!(agent = %me.agent, error = %e, ?wait, "reading wakes failed; trying again");
                        drop(slot);
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(wait) => continue,
                        }
                    }
                },
            };
            let (me, handler) = (Arc::clone(&me), Arc::clone(&handler));
            running.spawn(async move {
                if let Some(work) = me.take(wake).await {
                    handler(work).await;
                }
                drop(slot);
            });
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    /// Takes the session `wake` names, or says why not (a skipped wake is no error).
    async fn take(&self, wake: Wake) -> Option<Work> {
        let taken = self
            .recovery
            .take(wake.session_id, &self.name, wake.epoch, self.context_tokens)
            .await;
        let outcome = match &taken {
            Ok(_) => "taken",
            Err(e) => crate::work::skipped(e).unwrap_or("failed"),
        };
        metrics::counter!(WAKES_TAKEN, "outcome" => outcome).increment(1);
        let mut bundle = match taken {
            Ok(bundle) => bundle,
            Err(e) if outcome == "failed" => {
                // The session keeps no live lease, so the wake component wakes it again.
                tracing::warn!(session = %wake.session_id, error = %e, "taking a woken session failed");
                return None;
            }
            Err(e) => {
                tracing::info!(session = %wake.session_id, reason = wake.reason.as_str(), why = %e, "wake skipped");
                return None;
            }
        };
        let seconds = now_micros().saturating_sub(wake.caused_at).max(0) as f64 / 1e6;
        metrics::histogram!(CAUSE_TO_CLAIM, "reason" => wake.reason.as_str()).record(seconds);
        if let Some(writer) = bundle.writer.as_mut()
            && let Err(e) = writer.hold_lease(&self.name).await
        {
            // It runs anyway: without a lease a crash is noticed only by an operator.
            tracing::warn!(session = %wake.session_id, error = %e, "holding the lease failed");
        }
        tracing::info!(session = %wake.session_id, reason = wake.reason.as_str(), epoch = bundle.epoch, "took a woken session");
        Some(Work { wake, bundle })
    }
}
