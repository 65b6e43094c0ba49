//! Which table (and prepared statement) each row goes to, and how it is written there.

/// Which table (and prepared statement) a [`CqlRow`](super::CqlRow) goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Sessions,
    EventIndex,
    WriterClaims,
    Checkpoints,
    RejectedEvents,
    SpansBySession,
    /// `trace_spans_by_tenant_day` (since migration 14).
    SpansByTenantDay,
    /// `trace_tenant_day_buckets`: the (tenant, bucket) partitions a day's spans went to.
    TenantDayBuckets,
    /// `usage_rollups`.
    UsageRollups,
    ContextView,
    ContextTurns,
    ErasedTurns,
    /// The turns a summary replaced (or a retraction withdrew), by seq range.
    SummarizedTurns,
    /// Every checkpoint row of an erased session.
    ErasedCheckpoints,
    PartitionProgress,
    SessionChildren,
    AwaitingInsert,
    AwaitingDelete,
    /// `session_starts`: every started id, kept for good.
    SessionStarts,
}

impl Table {
    /// Every table, in the order of the prepared writes.
    pub(crate) const ALL: [Table; 19] = [
        Table::Sessions,
        Table::EventIndex,
        Table::WriterClaims,
        Table::Checkpoints,
        Table::RejectedEvents,
        Table::SpansBySession,
        Table::SpansByTenantDay,
        Table::TenantDayBuckets,
        Table::UsageRollups,
        Table::ContextView,
        Table::ContextTurns,
        Table::ErasedTurns,
        Table::SummarizedTurns,
        Table::ErasedCheckpoints,
        Table::PartitionProgress,
        Table::SessionChildren,
        Table::AwaitingInsert,
        Table::AwaitingDelete,
        Table::SessionStarts,
    ];

    /// The CQL table this write changes (a deletion's: the one it deletes from).
    pub(crate) fn cql_name(self) -> &'static str {
        match self {
            Table::Sessions => "sessions",
            Table::EventIndex => "event_index",
            Table::WriterClaims => "writer_claims",
            Table::Checkpoints | Table::ErasedCheckpoints => "checkpoints",
            Table::RejectedEvents => "rejected_events",
            Table::SpansBySession => "trace_spans_by_session",
            Table::SpansByTenantDay => "trace_spans_by_tenant_day",
            Table::TenantDayBuckets => "trace_tenant_day_buckets",
            Table::UsageRollups => "usage_rollups",
            Table::ContextView => "context_view",
            Table::ContextTurns | Table::ErasedTurns | Table::SummarizedTurns => "context_turns",
            Table::PartitionProgress => "partition_progress",
            Table::SessionChildren => "session_children",
            Table::AwaitingInsert | Table::AwaitingDelete => "sessions_awaiting",
            Table::SessionStarts => "session_starts",
        }
    }

    /// `delete` for a deletion, `insert` for the others.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Table::ErasedTurns
            | Table::SummarizedTurns
            | Table::ErasedCheckpoints
            | Table::AwaitingDelete => "delete",
            _ => "insert",
        }
    }

    /// Whether an ended session's rows in this table are written with the ended-session TTL
    /// (`[retention] ended_session_ttl_secs`): the tables whose partition is the session,
    /// which hold what it said and did. Not the lists keyed by something else: spans by tenant
    /// and day (a view of load, partitioned by tenant and day: rewriting it would mean a read
    /// of another partition per span, and it holds span names, timings and token counts, no
    /// content), a parent's children (the parent's lineage, which outlives a child), sessions
    /// awaiting someone (an ended session awaits no one: its row is already deleted) and the
    /// partitions' progress; nor the record that an id was started (`session_starts`), which
    /// outlives the session on purpose. A deletion (`ErasedTurns`) cannot carry a TTL.
    pub(crate) fn expires(self) -> bool {
        matches!(
            self,
            Table::Sessions
                | Table::EventIndex
                | Table::WriterClaims
                | Table::Checkpoints
                | Table::RejectedEvents
                | Table::SpansBySession
                | Table::ContextView
                | Table::ContextTurns
        )
    }
}
