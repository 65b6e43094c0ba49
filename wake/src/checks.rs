//! Checking causes against the sessions' projected state and writing the wakes that stand,
//! and loading watched sessions' states from the projection.

use crate::watch::{Cause, ENDED, Load, claimed_by_operator, needs_no_harness};
use crate::{WakeService, observe, queue};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rdkafka::producer::FutureProducer;
use sessionlog_log::lease::LeaseReader;
use sessionlog_log::{PartitionReader, Wake, WakeWriter, wake::WAKE_VERSION};
use sessionlog_schemas::{Micros, now_micros};
use sessionlog_session::SessionState;
use sessionlog_store::ProjectionStore;
use std::sync::Arc;
use std::time::Duration;

/// How soon a cause the projection has not reached yet is looked at again, and a state it
/// could not give yet is asked for again, in microseconds.
const RETRY_MICROS: Micros = 200_000;
/// Causes checked and written at once: a mass expiry is a thousand store reads and writes.
const CONCURRENCY: usize = 64;

/// What checking a cause and loading a state need, shared by the checks and loads in flight.
pub(super) struct Checker {
    pub(super) store: ProjectionStore,
    pub(super) log: Arc<WakeWriter>,
    /// The lease topic read afresh before a cause wakes anyone (see [`wake_one`]).
    pub(super) leases: LeaseReader,
    /// The events topic, for its partitions' ends (see [`unprojected`]).
    pub(super) events: PartitionReader,
    pub(super) events_topic: String,
    /// Writes the tombstones that remove ended sessions' lease records.
    pub(super) lease_producer: FutureProducer,
    pub(super) lease_topic: String,
    pub(super) delivery_timeout: Duration,
}

/// The causes being checked and those waiting for a turn. A check runs beside the loop that
/// reads leases and events, so a cause found while others are checked starts as soon as one
/// ends instead of after the whole batch (a mass expiry came due over a second or two, and
/// each tick's batch waited for its slowest check). One check at a time per session keeps a
/// session's outcomes in the order of its causes; the queue holds one cause per session.
#[derive(Default)]
pub(super) struct Checks {
    pub(super) running: FuturesUnordered<BoxFuture<'static, (Cause, Outcome)>>,
    pub(super) queue: queue::CheckQueue,
}

/// What a load of states from the projection answered for each: the state and the offset it
/// was folded through (`None`: no row), or `None` when it is to be asked again later.
pub(super) type Loaded = Vec<(Load, Option<Option<(SessionState, i64)>>)>;

impl WakeService {
    /// Queues `causes` to be checked against the sessions' projected state (the wakes that
    /// stand are written) and starts as many checks as there is room for.
    pub(super) fn check(&mut self, causes: Vec<Cause>) {
        for cause in causes {
            self.checks.queue.push(cause);
        }
        self.start_checks();
    }

    pub(super) fn start_checks(&mut self) {
        let room = CONCURRENCY.saturating_sub(self.checks.running.len());
        for cause in self.checks.queue.start(room) {
            let checker = Arc::clone(&self.checker);
            self.checks.running.push(Box::pin(async move {
                let outcome = wake_one(&checker, &cause).await;
                (cause, outcome)
            }));
        }
    }

    /// Starts loading the states the watches want from the projection, unless a batch is
    /// being loaded (its sessions were handed out; the rest wait for the next tick).
    pub(super) fn load(&mut self) {
        if !self.loading.is_empty() {
            return;
        }
        let loads = self.watches.loads(now_micros());
        if !loads.is_empty() {
            let checker = Arc::clone(&self.checker);
            self.loading
                .push(Box::pin(async move { load_states(&checker, loads).await }));
        }
    }

    /// Folds the events read meanwhile onto the states loaded; the causes among them are
    /// checked, and a state not given yet is asked for again.
    pub(super) fn loaded(&mut self, loaded: Loaded) {
        let now = now_micros();
        let mut causes = Vec::new();
        for (load, answer) in loaded {
            match answer {
                Some(projected) => causes.extend(self.watches.loaded(&load, projected, now)),
                None => self
                    .watches
                    .load_later(&load, now.saturating_add(RETRY_MICROS)),
            }
        }
        self.check(causes);
        self.load();
    }

    /// Records a check's outcome in the watches.
    pub(super) fn settle(&mut self, cause: &Cause, outcome: Outcome) {
        match outcome {
            Outcome::Woken => self.watches.woke(cause, self.rewake_at()),
            Outcome::NotNeeded(why @ (ENDED | EXPIRED)) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.ended(cause.session, now_micros());
            }
            Outcome::NotNeeded(why) => {
                tracing::debug!(session = %cause.session, reason = cause.reason.as_str(), why, "no wake needed");
                self.watches.settled(cause);
            }
            Outcome::Later => self
                .watches
                .retry(cause, now_micros().saturating_add(RETRY_MICROS)),
            // Looked at again after the re-wake interval: the projector may be down.
            Outcome::Unprojected(end) => self.watches.unprojected(cause, end, self.rewake_at()),
            // Tried again after the re-wake interval, as a wake nobody answered is.
            Outcome::Failed => self.watches.woke(cause, self.rewake_at()),
        }
    }

    /// When a wake written now is written again if no harness took the session.
    pub(super) fn rewake_at(&self) -> Micros {
        now_micros()
            .saturating_add(Micros::try_from(self.rewake_after.as_micros()).unwrap_or(Micros::MAX))
    }
}

/// Why a session whose rows are gone needs no wake (and is forgotten, as an ended one is).
const EXPIRED: &str = "the projection holds no row of the session: its rows expired";

/// What checking a cause found.
pub(super) enum Outcome {
    Woken,
    Later,
    NotNeeded(&'static str),
    /// No projected row, while the session's events partition ended at this offset.
    Unprojected(i64),
    Failed,
}

/// Writes `cause`'s wake if the session, as projected, still needs a harness.
///
/// The session's lease is first read afresh from the lease topic: this instance's own reading
/// may trail it (a burst of events to judge, a partition re-read), and waking a session whose
/// harness renewed meanwhile (or paused its own session and waits) would have a worker's claim
/// fence a live harness.
async fn wake_one(checker: &Checker, cause: &Cause) -> Outcome {
    let Checker {
        store, log, leases, ..
    } = checker;
    match leases.read(cause.session).await {
        Ok(Some(lease)) if lease.is_live(now_micros()) && lease.epoch >= cause.epoch => {
            return Outcome::NotNeeded("a live lease holds it");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "reading the lease afresh failed");
            return Outcome::Failed;
        }
    }
    let projected = match store.load_session(cause.session).await {
        // The state must include the causing event (a decision clears its wait only then).
        Ok(Some(projected))
            if cause
                .cause_offset
                .is_none_or(|offset| projected.applied_offset >= offset) =>
        {
            projected
        }
        // Not projected that far yet: the projector lags by milliseconds; look again soon.
        Ok(Some(_)) => return Outcome::Later,
        // Not projected at all: the projector is behind or down, or the session's rows
        // expired; not something a quick retry mends.
        Ok(None) => return unprojected(checker, cause).await,
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "reading the session for a wake failed");
            return Outcome::Failed;
        }
    };
    let state = &projected.state;
    if let Some(why) = needs_no_harness(state, now_micros()) {
        return Outcome::NotNeeded(why);
    }
    // Someone who runs the session claimed it since (an operator's act runs nothing: its own
    // cause, or the pause it made, decides).
    if state.epoch > cause.epoch && !claimed_by_operator(state) {
        return Outcome::NotNeeded("the session was claimed since");
    }
    let Some(agent) = state.agent.clone() else {
        return Outcome::NotNeeded("the session has no agent");
    };
    let wake = Wake {
        version: WAKE_VERSION,
        session_id: cause.session,
        agent,
        tenant: state.tenant.clone(),
        reason: cause.reason,
        // The session's epoch now: a worker's take refuses a session claimed past it.
        epoch: cause.epoch.max(state.epoch),
        cause_offset: cause.cause_offset,
        caused_at: cause.caused_at,
        woken_at: now_micros(),
    };
    match log.put(&wake).await {
        Ok(()) => {
            observe::woken(&wake, cause.repeat);
            Outcome::Woken
        }
        Err(e) => {
            tracing::warn!(session = %cause.session, error = %e, "writing a wake failed");
            Outcome::Failed
        }
    }
}

/// A cause of a session the projection holds no row of. Once the projector applied its
/// partition past where the partition ended when that was first seen, the row will never come:
/// the session's rows expired (an ended session past `[cql] ended_session_ttl`), or it never
/// started; it is forgotten and its lease record removed. Until then it is looked at again.
async fn unprojected(checker: &Checker, cause: &Cause) -> Outcome {
    let end = match cause.unprojected_end {
        Some(end) => end,
        None => match checker.events.watermarks(cause.partition).await {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::warn!(partition = cause.partition, error = %e, "reading the partition's end failed");
                return Outcome::Failed;
            }
        },
    };
    match checker.store.load_progress(&checker.events_topic).await {
        Ok(progress)
            if progress
                .get(&cause.partition)
                .is_some_and(|next| *next >= end) =>
        {
            Outcome::NotNeeded(EXPIRED)
        }
        Ok(_) => Outcome::Unprojected(end),
        Err(e) => {
            tracing::warn!(error = %e, "reading the projector's progress failed");
            Outcome::Failed
        }
    }
}

/// Loads `loads`' states from the projection: each one whose partition the projector applied
/// below its `before` (read first, so the row read after holds at least that much).
async fn load_states(checker: &Checker, loads: Vec<Load>) -> Loaded {
    let progress = match checker.store.load_progress(&checker.events_topic).await {
        Ok(progress) => progress,
        Err(e) => {
            tracing::warn!(error = %e, "reading the projector's progress failed; loads wait");
            return loads.into_iter().map(|load| (load, None)).collect();
        }
    };
    futures::stream::iter(loads)
        .map(|load| {
            let reached = progress
                .get(&load.partition)
                .is_some_and(|next| *next >= load.before);
            async move {
                if !reached {
                    return (load, None);
                }
                match checker.store.load_session(load.session).await {
                    Ok(row) => (load, Some(row.map(|p| (p.state, p.applied_offset)))),
                    Err(e) => {
                        tracing::warn!(session = %load.session, error = %e, "loading a session's state failed");
                        (load, None)
                    }
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}
