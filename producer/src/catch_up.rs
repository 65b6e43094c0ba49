//! Where a session stands now, found without folding its partition from the start.
//!
//! The projection (when the [`EventLog`] has one) holds the session's folded state as of the
//! offset it applied, and the partition's progress: every record below it is in the tables.
//! So the session's state now is that row, or an empty state when there is no row below the
//! progress, plus the session's events in the log after it. A takeover and a stateless append
//! cost the projector's lag, not the partition's length. Without a projection, the fold starts
//! at the partition's first offset, as it always did.

use crate::{Appended, Error, EventLog, Position, Result};
use sessionlog_log::Start;
use sessionlog_schemas::{Seq, SessionId};
use sessionlog_session::SessionState;
use uuid::Uuid;

/// A session's state as of `next_offset`, and where its latest accepted events sit.
pub(crate) struct CaughtUp {
    /// The folded state (not started when the session is nowhere).
    pub state: SessionState,
    /// The session's partition.
    pub partition: i32,
    /// The first offset not folded: the partition's end when the catch-up read it.
    pub next_offset: i64,
    /// The accepted events read from the log (not those the projection held), in log order.
    pub accepted: Vec<Appended>,
    /// Whether the projection records that this id was started (`session_starts`), even
    /// if its rows have expired since: such an id is never started again.
    pub started_once: bool,
    /// Whether any record of the session was read from the log.
    found_in_log: bool,
    /// Where reading began.
    from: i64,
}

impl CaughtUp {
    /// `(seq, event id, position)` of the accepted events read from the log.
    pub fn positions(&self) -> impl Iterator<Item = (Seq, Uuid, Position)> + '_ {
        self.accepted
            .iter()
            .map(|a| (a.envelope.seq, a.envelope.event_id, a.position))
    }

    /// The error for a session with no accepted start: unknown, or its start deleted by
    /// retention (its events are there, its beginning is not).
    pub async fn not_started(&self, log: &EventLog) -> Error {
        let session = self.state.session_id;
        match log.low_watermark(self.partition).await {
            Ok(low_watermark) if self.found_in_log && low_watermark > self.from => {
                Error::StartDeleted {
                    session,
                    partition: self.partition,
                    low_watermark,
                }
            }
            Ok(_) => Error::UnknownSession(session),
            Err(e) => e,
        }
    }
}

/// Folds `session` up to the end of its partition, from the projection's row when `log` has a
/// projection, else from the partition's start.
pub(crate) async fn catch_up(log: &EventLog, session: SessionId) -> Result<CaughtUp> {
    let partition = log.partition_of(session);
    let mut started_once = false;
    let (state, from, bounded) = match log.projection() {
        Some(store) => {
            // The projector stores a partition's progress after every write below it, so a
            // session with no row below it has no event there. That holds only if the row is
            // read after the progress: read together, the row could be read before the batch
            // that writes it and the progress after, and a session whose start the projector
            // was applying at that moment read as unknown (ingest_chaos saw a 404 for a
            // session created a moment before).
            let progress = store.load_progress(log.topic()).await?;
            let row = store.load_session(session).await?;
            let progress = progress.get(&partition).copied().unwrap_or(0);
            match row.filter(|r| r.partition == partition && r.state.started) {
                Some(row) => (row.state, (row.applied_offset + 1).max(progress), true),
                // No row of a started session below the progress: a session the projector
                // never saw (or saw only refused records of), or one whose rows expired after
                // it ended. The permanent record of its start tells them apart; an expired one
                // is folded from its first event in the log.
                None => match store.session_start(session).await? {
                    // Its stretch of the partition is projected and expired, not behind: read
                    // whole (the projection no longer says which records are its own).
                    Some((p, first_offset)) if p == partition => {
                        started_once = true;
                        (SessionState::empty(session), first_offset, false)
                    }
                    _ => (SessionState::empty(session), progress, true),
                },
            }
        }
        None => (SessionState::empty(session), 0, false),
    };
    let mut caught = match bounded {
        true => catch_up_from(log, state, partition, from).await?,
        false => fold_from(log, state, partition, from, None, Start::AskTheLog).await?,
    };
    caught.started_once = started_once;
    Ok(caught)
}

/// Folds the session's events of `partition` from `from` to its end into `state`. With a
/// projection, what is read is what the projector has not applied yet: bounded, so a stopped
/// projector costs a fast refusal ([`Error::ProjectionBehind`]) rather than a read of
/// everything.
pub(crate) async fn catch_up_from(
    log: &EventLog,
    state: SessionState,
    partition: i32,
    from: i64,
) -> Result<CaughtUp> {
    match log.projection() {
        Some(_) => {
            let (log_start, end) = log.unprojected_end(partition, from).await?;
            // That round trip said where the partition starts too: a range above it needs no
            // second one to find out.
            let start = match log_start <= from {
                true => Start::Held,
                false => Start::AskTheLog,
            };
            fold_from(log, state, partition, from, Some(end), start).await
        }
        None => fold_from(log, state, partition, from, None, Start::AskTheLog).await,
    }
}

/// Folds the session's events of `partition` in `[from, until)` (`until`: its end) into `state`.
async fn fold_from(
    log: &EventLog,
    mut state: SessionState,
    partition: i32,
    from: i64,
    until: Option<i64>,
    start: Start,
) -> Result<CaughtUp> {
    let session = state.session_id;
    let (events, next_offset) = log
        .read_events_from(partition, from, until, Some(session), start)
        .await?;
    let found_in_log = !events.is_empty();
    let accepted = events
        .into_iter()
        .filter(|event| state.apply(&event.envelope).is_accepted())
        .collect();
    Ok(CaughtUp {
        state,
        partition,
        next_offset,
        accepted,
        started_once: false,
        found_in_log,
        from,
    })
}
