//! Trace spans: a session's, and every session's of a tenant (or of all) by time, read from
//! the day partitions the day indexes name; and the bucket count those partitions are
//! written with.

use crate::{Error, ProjectionStore, Result};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sessionlog_schemas::SessionId;
use uuid::Uuid;

/// A `trace_spans_by_session` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct SpanRow {
    /// The seq that opened the span.
    pub span_seq: i64,
    /// `session`, `model_call`, `tool_call`, `steering` or `approval`.
    pub span_kind: String,
    /// The agent (session), model, tool, `steering`, or the approval's id.
    pub name: String,
    /// When it began.
    pub start_us: i64,
    /// The seq that closed it.
    pub end_seq: Option<i64>,
    /// When it ended.
    pub end_us: Option<i64>,
    /// How long it took.
    pub duration_us: Option<i64>,
    /// Prompt tokens.
    pub tokens_in: Option<i64>,
    /// Completion tokens.
    pub tokens_out: Option<i64>,
    /// Cost in millionths of a US dollar.
    pub cost_micros: Option<i64>,
    /// `running`, `ok`, `pending`, `succeeded`, `failed`, ...
    pub outcome: String,
    /// The span it hangs off (none for the session's own span, and for spans projected
    /// before migration 9).
    pub parent_seq: Option<i64>,
    /// The session's log partition.
    pub log_partition: Option<i32>,
    /// The log offset of the event that opened it.
    pub open_offset: Option<i64>,
    /// The log offset of the event that closed it.
    pub close_offset: Option<i64>,
}

/// A `trace_spans_by_tenant_day` row: a span of any session, found by its tenant and when it
/// began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, scylla::DeserializeRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub struct DaySpanRow {
    /// When it began.
    pub start_us: i64,
    /// The session.
    pub session_id: Uuid,
    /// The seq that opened it.
    pub span_seq: i64,
    /// `session`, `model_call`, `tool_call`, `steering` or `approval`.
    pub span_kind: String,
    /// The agent (session), model, tool, `steering`, or the approval's id.
    pub name: String,
    /// The session's agent.
    pub agent: Option<String>,
    /// The seq that closed it.
    pub end_seq: Option<i64>,
    /// When it ended.
    pub end_us: Option<i64>,
    /// How long it took.
    pub duration_us: Option<i64>,
    /// Prompt tokens.
    pub tokens_in: Option<i64>,
    /// Completion tokens.
    pub tokens_out: Option<i64>,
    /// Cost in millionths of a US dollar.
    pub cost_micros: Option<i64>,
    /// `running`, `ok`, `pending`, `succeeded`, `failed`, ...
    pub outcome: String,
    /// The span it hangs off.
    pub parent_seq: Option<i64>,
    /// The session's log partition.
    pub log_partition: Option<i32>,
    /// The log offset of the event that opened it.
    pub open_offset: Option<i64>,
    /// The log offset of the event that closed it.
    pub close_offset: Option<i64>,
    /// The session's tenant (`default` for sessions without one). Always present since
    /// migration 14, where it is part of the partition key; optional as the answer's schema
    /// has always had it.
    pub tenant: Option<String>,
}

/// A time-ordered read of spans ([`ProjectionStore::spans_between`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanSearch {
    /// Spans that began at or after this, µs since the Unix epoch.
    pub from_us: i64,
    /// And before this.
    pub to_us: i64,
    /// Only spans after this one in read order (the previous page's last
    /// [`DaySpanRow::order_key`]).
    pub after: Option<(i64, Uuid, i64)>,
    /// At most this many.
    pub limit: usize,
    /// Only this tenant's spans, read from its own partitions alone; `None`: every tenant's
    /// (an operator's listing, which reads every tenant's partitions of each day).
    pub tenant: Option<String>,
}

/// One `trace_spans_by_tenant_day` partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpanPartition {
    /// The tenant.
    pub tenant: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// The bucket of the day (by session id).
    pub bucket: i32,
}

/// The spans a read by time found ([`ProjectionStore::spans_between`]), and what it read to
/// find them: which partitions it queried and how many rows it took from them, so what a
/// listing costs can be checked (a tenant's must not grow with other tenants' spans).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanListing {
    /// The spans, by [`DaySpanRow::order_key`].
    pub spans: Vec<DaySpanRow>,
    /// Every span partition queried, in the order the day indexes listed them.
    pub partitions: Vec<SpanPartition>,
    /// Span rows taken from those partitions, kept or filtered out. The driver fetches a page
    /// at a time, so a partition read that stopped early may have fetched up to a page more.
    pub rows_read: u64,
}

/// Span partitions one read by time queries at once: an operator's listing of a day queries
/// every tenant's, which can be many.
const SPAN_PARTITION_READS: usize = 16;

/// What a read of one span partition is called in errors.
const SPANS_BY_DAY: &str = "read trace spans by day";

/// The most days one read of spans by time may touch ([`ProjectionStore::spans_between`]).
pub const MAX_SPAN_DAYS: i64 = 31;

impl DaySpanRow {
    /// The order spans are read back in: by start, then session and seq (the table's own
    /// clustering order within a bucket).
    pub fn order_key(&self) -> (i64, Uuid, i64) {
        (self.start_us, self.session_id, self.span_seq)
    }
}

impl ProjectionStore {
    /// The trace spans of `session`, by the seq that opened each.
    pub async fn spans(&self, session: SessionId) -> Result<Vec<SpanRow>> {
        let ks = &self.keyspace;
        self.query_paged(
            format!(
                "SELECT span_seq, span_kind, name, start_us, end_seq, end_us, duration_us,
                 tokens_in, tokens_out, cost_micros, outcome, parent_seq, log_partition,
                 open_offset, close_offset
                 FROM {ks}.trace_spans_by_session WHERE session_id = ?"
            ),
            (session.0,),
            "read trace spans",
        )
        .await
    }

    /// The first `search.limit` spans that began in `[from_us, to_us)`, come after
    /// `search.after` and that `keep` keeps, in start order (then session and seq), of
    /// `search.tenant`'s sessions (`None`: every tenant's), from `trace_spans_by_tenant_day`.
    /// Each day's partitions are those `trace_tenant_day_buckets` names: a tenant's slice of
    /// the day (so its listing reads its own partitions alone, whatever other tenants hold),
    /// or the whole day for every tenant. They are read and merged; a partition is read only
    /// until it has given as many spans as the page still lacks, which is all the merge can
    /// take from it; `keep` filters as rows stream in, so a narrow filter reads more of a day
    /// than it answers.
    pub async fn spans_between(
        &self,
        search: &SpanSearch,
        keep: impl Fn(&DaySpanRow) -> bool + Sync,
    ) -> Result<SpanListing> {
        let SpanSearch {
            from_us,
            to_us,
            after,
            limit,
            ref tenant,
        } = *search;
        // Spans at the cursor's start time can still follow it (a later session or seq).
        let from_us = after.map_or(from_us, |(start, _, _)| start.max(from_us));
        let mut listing = SpanListing::default();
        if from_us >= to_us || limit == 0 {
            return Ok(listing);
        }
        const DAY_US: i64 = 86_400_000_000;
        // Each day is at least one read, so a range is bounded in days.
        let (first_day, last_day) = (from_us.div_euclid(DAY_US), (to_us - 1).div_euclid(DAY_US));
        let days = last_day - first_day + 1;
        if days > MAX_SPAN_DAYS {
            return Err(Error::SpanRangeTooWide {
                from_us,
                to_us,
                days,
                max: MAX_SPAN_DAYS,
            });
        }
        // The first day's start can lie before i64::MIN µs: start the loop at the range's own
        // start then (days only serve to name partitions).
        let mut day_start = first_day.checked_mul(DAY_US).unwrap_or(from_us);
        let keep = &keep;
        while day_start < to_us && listing.spans.len() < limit {
            let day = sessionlog_session::trace::day_of(day_start);
            let partitions = self.span_partitions(&day, tenant.as_deref()).await?;
            listing.partitions.extend(partitions.iter().cloned());
            // Earlier days' spans all come first: a partition need give no more than this.
            let wanted = limit - listing.spans.len();
            let reads = partitions.into_iter().map(|partition| async move {
                let SpanPartition {
                    tenant,
                    day,
                    bucket,
                } = partition;
                let values = (tenant, day, bucket, from_us, to_us);
                let rows = self
                    .session
                    .execute_iter(self.reads.partition_spans.clone(), values)
                    .await
                    .map_err(Error::cql(SPANS_BY_DAY))?
                    .rows_stream::<DaySpanRow>()
                    .map_err(Error::cql(SPANS_BY_DAY))?
                    .map_err(Error::cql(SPANS_BY_DAY));
                let mut rows = std::pin::pin!(rows);
                let (mut kept, mut read) = (Vec::new(), 0u64);
                while kept.len() < wanted {
                    let Some(row) = rows.try_next().await? else {
                        break;
                    };
                    read += 1;
                    if after.is_none_or(|after| row.order_key() > after) && keep(&row) {
                        kept.push(row);
                    }
                }
                Ok::<_, Error>((kept, read))
            });
            let mut reads = futures::stream::iter(reads).buffer_unordered(SPAN_PARTITION_READS);
            let mut day_rows: Vec<DaySpanRow> = Vec::new();
            while let Some((rows, read)) = reads.try_next().await? {
                listing.rows_read += read;
                day_rows.extend(rows);
                // Only the day's first `wanted` can be answered: with many partitions (every
                // tenant's), the rest are dropped as they come, not held until the day is read.
                if day_rows.len() >= wanted.saturating_mul(2) {
                    day_rows.sort_by_key(DaySpanRow::order_key);
                    day_rows.truncate(wanted);
                }
            }
            day_rows.sort_by_key(DaySpanRow::order_key);
            day_rows.truncate(wanted);
            listing.spans.extend(day_rows);
            day_start = day_start.saturating_add(DAY_US);
        }
        Ok(listing)
    }

    /// The span partitions of `day` that `trace_tenant_day_buckets` names: `tenant`'s (a
    /// slice of the day's index) or, for `None`, every tenant's.
    async fn span_partitions(&self, day: &str, tenant: Option<&str>) -> Result<Vec<SpanPartition>> {
        let action = "read trace day partitions";
        let rows: Vec<(String, i32)> = match tenant {
            Some(tenant) => {
                let statement = &self.reads.tenant_span_partitions;
                self.select_paged(statement, (day, tenant), action).await?
            }
            None => {
                let statement = &self.reads.day_span_partitions;
                self.select_paged(statement, (day,), action).await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(tenant, bucket)| SpanPartition {
                tenant,
                day: day.to_string(),
                bucket,
            })
            .collect())
    }

    /// Checks `wanted` (`[projector] trace_day_buckets`) against the count the keyspace's spans
    /// were written with, recording it if this is the first writer. A span's opening and
    /// closing writes must pick the same bucket, so a projector or replay with another count
    /// refuses to start ([`Error::TraceDayBucketsDiffer`] says what to do).
    pub async fn fix_trace_day_buckets(&self, wanted: u16) -> Result<()> {
        let ks = &self.keyspace;
        let stored = || async {
            let rows: Vec<(Option<String>,)> = self
                .query_paged(
                    format!(
                        "SELECT value FROM {ks}.projection_settings WHERE name = 'trace_day_buckets'"
                    ),
                    (),
                    "read projection settings",
                )
                .await?;
            Ok::<_, Error>(
                rows.into_iter()
                    .next()
                    .and_then(|(v,)| v?.parse::<u16>().ok()),
            )
        };
        let stored = match stored().await? {
            Some(stored) => stored,
            None => {
                // Without LWT (not portable) two first writers could race; the read back
                // below makes the loser refuse, as any later writer with another count would.
                self.session
                    .query_unpaged(
                        format!(
                            "INSERT INTO {ks}.projection_settings (name, value)
                             VALUES ('trace_day_buckets', ?)"
                        ),
                        (wanted.to_string(),),
                    )
                    .await
                    .map_err(Error::cql("write projection settings"))?;
                stored().await?.unwrap_or(wanted)
            }
        };
        if stored == wanted {
            Ok(())
        } else {
            Err(Error::TraceDayBucketsDiffer {
                keyspace: ks.clone(),
                stored,
                wanted,
            })
        }
    }
}
