//! Where a session's events sit in the log: one event's position, and bounded pages of a
//! range of its index (range reads of its history).

use crate::{ProjectionStore, Result};
use serde::Serialize;
use sessionlog_schemas::SessionId;
use uuid::Uuid;

/// An `event_index` row: where one accepted event of a session sits in the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexRow {
    /// The event's seq.
    pub seq: u64,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset.
    pub log_offset: i64,
    /// Its kind (`SessionEvent::kind`).
    pub kind: String,
    /// Its event id.
    pub event_id: Uuid,
    /// The epoch of the writer that appended it.
    pub epoch: u64,
    /// When it happened (microseconds since the Unix epoch).
    pub occurred_at_us: i64,
}

/// The most rows one query of [`ProjectionStore::index_range`] asks for: a page of the index
/// never grows with the range or the session, whatever the caller's limit.
pub const INDEX_PAGE_ROWS: usize = 1000;

/// The smallest page [`ProjectionStore::index_range`] reads when a kinds filter may drop rows:
/// a page the size of a small limit would take a round trip per few rows of a sparse kind.
const FILTERED_PAGE_ROWS: usize = 100;

impl ProjectionStore {
    /// The `(partition, offset)` of a session's event at `seq`, from the index.
    pub async fn locate(&self, session: SessionId, seq: u64) -> Result<Option<(i32, i64)>> {
        let rows: Vec<(i32, i64)> = self
            .select(
                &self.reads.locate,
                (session.0, crate::rows::to_i64(seq)),
                "locate event",
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// The index rows of `session` with `from_seq <= seq <= to_seq` and, when `kinds` is not
    /// empty, a kind among `kinds`: at most `limit` of them, by seq.
    ///
    /// Reads pages of at most [`INDEX_PAGE_ROWS`] rows, each with a CQL `LIMIT`, until `limit`
    /// rows match or the range ends: without a filter that is `limit` rows; with one, the
    /// pages go on past the rows of other kinds, a bounded page at a time, never one
    /// unbounded read of the rest of the range.
    pub async fn index_range(
        &self,
        session: SessionId,
        from_seq: u64,
        to_seq: u64,
        kinds: &[String],
        limit: usize,
    ) -> Result<Vec<IndexRow>> {
        type Row = (
            i64,
            i32,
            i64,
            Option<String>,
            Option<Uuid>,
            Option<i64>,
            Option<i64>,
        );
        let action = "read event index range";
        let mut found = Vec::new();
        if limit == 0 || from_seq > to_seq {
            return Ok(found);
        }
        let (mut next, last) = (crate::rows::to_i64(from_seq), crate::rows::to_i64(to_seq));
        let page = if kinds.is_empty() {
            limit
        } else {
            limit.max(FILTERED_PAGE_ROWS)
        }
        .min(INDEX_PAGE_ROWS);
        // `page` is at most INDEX_PAGE_ROWS, so it fits CQL's int.
        let page_limit = i32::try_from(page).unwrap_or(i32::MAX);
        loop {
            let rows: Vec<Row> = self
                .select(
                    &self.reads.index_range,
                    (session.0, next, last, page_limit),
                    action,
                )
                .await?;
            let full = rows.len() == page;
            let mut last_read = None;
            for (seq, log_partition, log_offset, kind, event_id, epoch, occurred_at_us) in rows {
                last_read = Some(seq);
                let kind = kind.unwrap_or_default();
                if !kinds.is_empty() && !kinds.contains(&kind) {
                    continue;
                }
                found.push(IndexRow {
                    seq: u64::try_from(seq).unwrap_or_default(),
                    log_partition,
                    log_offset,
                    kind,
                    event_id: event_id.unwrap_or_default(),
                    epoch: epoch
                        .and_then(|e| u64::try_from(e).ok())
                        .unwrap_or_default(),
                    occurred_at_us: occurred_at_us.unwrap_or_default(),
                });
                if found.len() == limit {
                    return Ok(found);
                }
            }
            // A short page is the end of the range; so is a full one that reached its last seq.
            match last_read {
                Some(seq) if full && seq < last => next = seq + 1,
                _ => return Ok(found),
            }
        }
    }
}
