//! The integration tests against the real stack (`scripts/stack up`), one module per subject,
//! in one test binary: a binary per file linked the whole dependency tree 45 times (about
//! 20 GB of debug binaries and most of a cold CI build). Each test gets its own topic,
//! keyspace and consumer group (`sessionlog_testkit::TestStack`), so they run in parallel.
//!
//! The tests that stop a shared server are in `tests/faults/`, a binary of their own, because
//! cargo runs the tests of one binary in parallel.
//!
//! Run one subject with a filter: `scripts/test -- --test integration walking_skeleton::`.

mod access_control;
mod cli_dlq;
mod cli_doctor;
mod cli_exit;
mod cli_pause;
mod cli_schemas;
mod cli_status;
mod cluster;
mod compose;
mod context_offloading;
mod fleet_tail;
mod framework_state;
mod ingest_chaos;
mod ingest_fleet;
mod ingest_names;
mod interop_python;
mod leases;
mod log_contract;
mod mcp;
mod openapi;
mod otlp_export;
mod partitions_pinned;
mod pause_until;
mod privacy;
mod producer_claims;
mod producer_ingest;
mod producer_log;
mod projector_corrupt_row;
mod projector_crash;
mod projector_dead_letter_crash;
mod projector_dead_letters;
mod projector_legacy_cells;
mod projector_lists;
mod projector_replay;
mod projector_views;
mod promises;
mod promises_race;
mod reader_reuse;
mod recovery_events;
mod recovery_flows;
mod recovery_gates;
mod recovery_http;
mod recovery_rebuild;
mod recovery_tool_calls;
mod retention;
mod schema_upgrade;
mod secret_scan;
mod secure_transport;
mod serve;
mod spans_by_tenant;
mod store_metadata;
mod store_read_only;
mod topic_recreated;
mod traces;
mod wake;
mod walking_skeleton;
mod work_http;
