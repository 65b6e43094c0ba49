//! The projection tables in CQL: the one place that speaks CQL.
//!
//! - [`migrations`]: the versioned schema, applied by [`ProjectionStore::migrate`] (the
//!   writers' way in: `sessionlog init`, `sessionlog project`, a replay's target) and checked,
//!   changing nothing, by [`ProjectionStore::open`] (the readers' way in: `inspect`, `verify`,
//!   recovery and its commands), which fails with the command that fixes a missing or outdated
//!   keyspace;
//! - [`rows`]: what the projector's fold becomes in each table ([`CqlRow`]);
//! - [`write`]: writing a batch's rows, one session's as one atomic mutation;
//! - [`written`]: what those writes send to each table (rows, cells, bytes), as counters;
//! - `stored`: the compact JSON the `sessions` and `context_view` rows store and how it reads
//!   back;
//! - [`read`]: every typed read: the rows the projector reloads, the checkpoints and index
//!   recovery starts from, a range of a session's index for range reads of its history, the
//!   lists operators ask for (a session's children, sessions awaiting someone) and the rows
//!   tests check;
//! - [`verify`]: comparing two keyspaces table by table;
//! - [`nodes`]: each contact point and node of the cluster, its release, and how keyspaces
//!   are replicated (`sessionlog doctor`);
//! - `topic_guard`: telling the topic a keyspace was projected from from another of the same
//!   name ([`ProjectionStore::check_topic`]);
//! - `expire`: with `[retention] ended_session_ttl_secs`, giving an ended session's rows a TTL
//!   ([`ProjectionStore::expire_session`]).
//!
//! Every write is keyed by `(session_id, seq)`, by log position or by what it lists, and the
//! rows that change are written `USING TIMESTAMP` a log offset, so a crash, a rebalance or a
//! replay leaves the same tables. The portable subset of CQL only (ScyllaDB and Cassandra): no
//! LWT, no materialized views, no secondary indexes, no `ALLOW FILTERING`. The exceptions are
//! [`keys`], the key store, which is not a projection, and [`names`], whose names are unique
//! within a tenant (see there why each needs LWT).

mod answering;
mod connect;
mod error;
mod expire;
pub mod keys;
pub mod migrations;
pub mod names;
pub mod nodes;
pub mod read;
pub mod rows;
mod statements;
mod stored;
mod topic_guard;
pub mod verify;
pub mod write;
pub mod written;

pub use connect::ProjectionStore;
pub use error::{DriverError, Error, Result};
pub use keys::{KeyTable, KeyringError, keyring};
pub use names::{NameClaim, SessionNames};
pub use read::{
    AwaitingSession, CheckpointRow, ContextViewRow, DaySpanRow, INDEX_PAGE_ROWS, IndexRow,
    MAX_SPAN_DAYS, ProjectedSession, RejectedRow, SpanListing, SpanPartition, SpanRow, SpanSearch,
    VerifiedCheckpoint,
};
pub use rows::{CqlRow, LastWritten, Wait};
pub use topic_guard::{LastRecord, ProgressMark};
pub use write::{REQUEST_BYTES, ROWS_PER_BATCH, SESSIONS_PER_REQUEST};
