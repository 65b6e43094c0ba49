//! Versioned, idempotent schema migrations of the projection keyspace.
//!
//! CQL that runs unchanged on ScyllaDB and Cassandra: no LWT, no materialized views,
//! no SASI, and column names that are keywords in neither (`log_offset`, not `offset`).
//! A migration is applied once; its version is recorded in `schema_migrations`. Every
//! statement is `IF NOT EXISTS`, and a column is added only if `system_schema.columns` lacks
//! it (`ADD IF NOT EXISTS` is not portable), so a migration interrupted half-way can simply run
//! again.

/// One migration: a version and the statements that bring the keyspace to it.
pub struct Migration {
    /// Monotonic version number.
    pub version: i32,
    /// What it does.
    pub description: &'static str,
    /// The statements; `{ks}` stands for the keyspace.
    pub statements: &'static [&'static str],
    /// Columns added to existing tables, after the statements.
    pub columns: &'static [AddedColumn],
}

/// A column a migration adds to an existing table.
pub struct AddedColumn {
    /// The table.
    pub table: &'static str,
    /// The new column's name.
    pub column: &'static str,
    /// Its CQL type.
    pub cql_type: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "sessions, event index, writer claims, checkpoints, rejected events",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.sessions (
            session_id uuid PRIMARY KEY,
            status text,
            agent text,
            title text,
            epoch bigint,
            writer text,
            last_seq bigint,
            parent_session_id uuid,
            parent_seq bigint,
            started_at_us bigint,
            updated_at_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            pending_calls int,
            pending_approvals int,
            log_partition int,
            applied_offset bigint,
            state_digest text,
            state_json text)",
            "CREATE TABLE IF NOT EXISTS {ks}.event_index (
            session_id uuid,
            seq bigint,
            log_partition int,
            log_offset bigint,
            kind text,
            event_id uuid,
            epoch bigint,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), seq))",
            "CREATE TABLE IF NOT EXISTS {ks}.writer_claims (
            session_id uuid,
            epoch bigint,
            writer text,
            log_partition int,
            log_offset bigint,
            event_id uuid,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), epoch))",
            "CREATE TABLE IF NOT EXISTS {ks}.checkpoints (
            session_id uuid,
            seq bigint,
            log_partition int,
            log_offset bigint,
            declared_digest text,
            computed_digest text,
            verified boolean,
            state_json text,
            PRIMARY KEY ((session_id), seq))
            WITH CLUSTERING ORDER BY (seq DESC)",
            "CREATE TABLE IF NOT EXISTS {ks}.rejected_events (
            session_id uuid,
            log_partition int,
            log_offset bigint,
            seq bigint,
            epoch bigint,
            event_id uuid,
            kind text,
            label text,
            reason text,
            PRIMARY KEY ((session_id), log_partition, log_offset))",
        ],
        columns: &[],
    },
    Migration {
        version: 2,
        description: "trace spans by session and by day, context view, partition progress",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_session (
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            start_us bigint,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            PRIMARY KEY ((session_id), span_seq))",
            // Analytics read a day at a time; spans of a day sort by start.
            "CREATE TABLE IF NOT EXISTS {ks}.trace_spans_by_day (
            day text,
            start_us bigint,
            session_id uuid,
            span_seq bigint,
            span_kind text,
            name text,
            end_seq bigint,
            end_us bigint,
            duration_us bigint,
            tokens_in bigint,
            tokens_out bigint,
            cost_micros bigint,
            outcome text,
            PRIMARY KEY ((day), start_us, session_id, span_seq))",
            "CREATE TABLE IF NOT EXISTS {ks}.context_view (
            session_id uuid PRIMARY KEY,
            applied_offset bigint,
            last_seq bigint,
            plan text,
            recent_turns text,
            unresolved_calls text,
            older_ranges text,
            left_out text)",
            "CREATE TABLE IF NOT EXISTS {ks}.partition_progress (
            topic text,
            log_partition int,
            next_offset bigint,
            PRIMARY KEY ((topic), log_partition))",
        ],
        columns: &[],
    },
    Migration {
        version: 3,
        description: "claim seqs (to rebuild the duplicate window); context turns as rows",
        statements: &[
            // The context view's turns, one row each, written once: rewriting the whole window
            // with every batch was most of what the projector sent. The view row names the
            // first turn of its window (`first_turn_seq`) and stops filling `recent_turns`.
            "CREATE TABLE IF NOT EXISTS {ks}.context_turns (
            session_id uuid,
            seq bigint,
            role text,
            name text,
            call_seq bigint,
            text text,
            truncated boolean,
            sealed boolean,
            occurred_at_us bigint,
            PRIMARY KEY ((session_id), seq))",
        ],
        columns: &[
            AddedColumn {
                table: "writer_claims",
                column: "claim_seq",
                cql_type: "bigint",
            },
            AddedColumn {
                table: "context_view",
                column: "first_turn_seq",
                cql_type: "bigint",
            },
        ],
    },
];
