//! Writes the golden files of the current schema version: `golden/v{N}/<kind>.avro` (raw Avro
//! bodies) and `golden/v{N}/<kind>.json` (the envelope they must decode to).
//!
//! Run once when a new schema version is added, then commit the files and never regenerate
//! an older version's directory: those bytes stand for data already in the topic.
//!
//! `cargo run -p sessionlog-schemas --example write_golden [-- --force]`

use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, CallOutcome, Content, EffectClass, EventEnvelope, ForkPoint,
    ResultSource, SessionEvent, SessionId, TerminalOutcome, encode_body,
};
use std::path::PathBuf;
use uuid::Uuid;

/// The SHA-256 of a writer token the v5 examples name (of the text `test`).
const WRITER_TOKEN_SHA256: &str =
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let force = std::env::args().any(|a| a == "--force");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(format!("v{CURRENT_SCHEMA_VERSION}"));
    if dir.exists() && !force {
        return Err(format!(
            "{} exists; golden files of a released version must not change (use --force while it is unreleased)",
            dir.display()
        )
        .into());
    }
    std::fs::create_dir_all(&dir)?;
    for (name, envelope) in examples() {
        std::fs::write(dir.join(format!("{name}.avro")), encode_body(&envelope)?)?;
        let json = serde_json::to_string_pretty(&envelope)? + "\n";
        std::fs::write(dir.join(format!("{name}.json")), json)?;
        println!("wrote {}/{name}.{{avro,json}}", dir.display());
    }
    Ok(())
}

/// One fixed envelope per event kind (plus a sealed-content variant), with fixed ids and times
/// so that regenerating gives the same bytes.
fn examples() -> Vec<(String, EventEnvelope)> {
    let session = SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001));
    let parent = SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002));
    let base_time = 1_750_000_000_000_000_i64;
    let sealed = Content::Sealed {
        key_id: "session-dek/1".into(),
        nonce: (0u8..12).collect(),
        ciphertext: vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0x10, 0x20],
    };
    let events: Vec<(&str, SessionEvent, Option<u64>, Option<&str>)> = vec![
        (
            "session_started",
            SessionEvent::SessionStarted {
                agent: "coder-1".into(),
                title: Some("Fix the flaky test".into()),
                tenant: "acme".into(),
                writer_token_sha256: Some(WRITER_TOKEN_SHA256.into()),
                name_sha256: Some(sessionlog_schemas::session_name_sha256("acme", "thread:42")),
            },
            None,
            None,
        ),
        (
            "user_request",
            SessionEvent::UserRequest {
                content: Content::plain("Why does test_login fail?"),
            },
            None,
            None,
        ),
        (
            "user_request_sealed",
            SessionEvent::UserRequest {
                content: sealed.clone(),
            },
            None,
            None,
        ),
        (
            "model_response",
            SessionEvent::ModelResponse {
                model: "claude-x".into(),
                tokens_in: 1234,
                tokens_out: 567,
                cost_micros: 8910,
                started_at: base_time + 1_500_000,
                content: Content::plain("Let me look at the logs."),
                cache_read_tokens: 512,
                cache_creation_tokens: 64,
                provider: Some("anthropic".into()),
            },
            Some(2),
            None,
        ),
        (
            "tool_call_requested",
            SessionEvent::ToolCallRequested {
                tool: "shell".into(),
                arguments: Content::plain(r#"{"cmd":"pytest -k login"}"#),
                effect: EffectClass::NonIdempotent,
                approval_id: Some("deploy-1".into()),
            },
            None,
            Some("sess-1/call-5"),
        ),
        (
            "tool_call_result",
            SessionEvent::ToolCallResult {
                call_seq: 5,
                outcome: CallOutcome::Failed,
                output: Content::plain("1 failed"),
                source: ResultSource::Operator,
                recorded_by: Some("alice".into()),
                note: Some("ran it by hand".into()),
            },
            Some(5),
            Some("sess-1/call-5"),
        ),
        (
            "steering_message",
            SessionEvent::SteeringMessage {
                author: "bob".into(),
                content: Content::plain("Check the clock skew first."),
            },
            None,
            None,
        ),
        (
            "plan_updated",
            SessionEvent::PlanUpdated { plan: sealed },
            None,
            None,
        ),
        (
            "approval_requested",
            SessionEvent::ApprovalRequested {
                approval_id: "deploy-1".into(),
                action: "deploy to staging".into(),
                action_digest: Some(sessionlog_schemas::action_digest("deploy to staging")),
            },
            None,
            None,
        ),
        (
            "approval_decided",
            SessionEvent::ApprovalDecided {
                approval_id: "deploy-1".into(),
                approved: true,
                decided_by: "carol".into(),
                reason: None,
                action_digest: Some(sessionlog_schemas::action_digest("deploy to staging")),
                request_seq: Some(9),
            },
            Some(10),
            None,
        ),
        (
            "checkpoint",
            SessionEvent::Checkpoint {
                state_digest: "sha256:00ff".into(),
                workspace_revision: Some("git:abc123".into()),
            },
            None,
            None,
        ),
        (
            "writer_claimed",
            SessionEvent::WriterClaimed {
                writer: "harness-7".into(),
                writer_token_sha256: Some(WRITER_TOKEN_SHA256.into()),
            },
            None,
            None,
        ),
        (
            "session_forked",
            SessionEvent::SessionForked {
                fork_point: ForkPoint {
                    parent_session_id: parent,
                    parent_seq: 11,
                    parent_partition: 3,
                    parent_offset: 424_242,
                },
                agent: "coder-2".into(),
                tenant: "acme".into(),
                forked_by: Some("alice".into()),
                inherited_approvals: vec![sessionlog_schemas::InheritedApproval {
                    approval_id: "deploy-1".into(),
                    action_digest: Some(sessionlog_schemas::action_digest("deploy to staging")),
                    decided_by: "carol".into(),
                    parent_decision_seq: 10,
                }],
                writer_token_sha256: Some(WRITER_TOKEN_SHA256.into()),
            },
            None,
            None,
        ),
        (
            "resolution_required",
            SessionEvent::ResolutionRequired {
                call_seq: 5,
                reason: "non-idempotent call in doubt".into(),
            },
            Some(5),
            None,
        ),
        (
            "session_paused",
            SessionEvent::SessionPaused {
                reason: Some("lunch".into()),
                // An hour after the pause (schema v7).
                until: Some(base_time + 15 * 1_000_000 + 3_600 * 1_000_000),
            },
            None,
            None,
        ),
        (
            "session_resumed",
            SessionEvent::SessionResumed {},
            None,
            None,
        ),
        (
            "session_ended",
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Cancelled,
                reason: Some("superseded".into()),
            },
            None,
            None,
        ),
        (
            "context_summarized",
            SessionEvent::ContextSummarized {
                first_seq: 2,
                last_seq: 5,
                summarized_by: "claude-sonnet-4".into(),
                summary: Content::plain("The user asked for a fix; the agent ran the tests."),
            },
            None,
            None,
        ),
        (
            "session_erased",
            SessionEvent::SessionErased {
                requested_by: "dpo@example.com".into(),
                reason: "GDPR art. 17".into(),
            },
            None,
            None,
        ),
        (
            "event_retracted",
            SessionEvent::EventRetracted {
                retracted_seq: 2,
                retracted_by: "openai-agents:pop_item".into(),
            },
            None,
            None,
        ),
        (
            "framework_state_saved",
            SessionEvent::FrameworkStateSaved {
                framework: "langgraph".into(),
                key: "checkpoint::1ef4f797-8335-6428-8001-8a1503f9b875".into(),
                state: Content::plain(
                    r#"{"v":1,"id":"1ef4f797-8335-6428-8001-8a1503f9b875","channel_values":{"messages":"gAWVAAAA"}}"#,
                ),
            },
            None,
            None,
        ),
        (
            "payload_redacted",
            SessionEvent::PayloadRedacted {
                redacted_seq: 5,
                field: "output".into(),
                redacted_by: "operator:dpo@example.com".into(),
                reason: "a credential the tool printed".into(),
                redacted_at: base_time + 30_000_000,
                key_id: "dk2g:5:output".into(),
                key_destroyed: true,
            },
            None,
            None,
        ),
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(i, (name, event, causes, key))| {
            let seq = i as u64 + 1;
            let envelope = EventEnvelope {
                event_id: Uuid::from_u128(
                    0x0190_0000_0000_7000_9000_0000_0000_0000 + u128::from(seq),
                ),
                session_id: session,
                seq,
                writer_epoch: 1,
                occurred_at: base_time + (seq as i64) * 1_000_000,
                causation_id: causes.map(|s| {
                    Uuid::from_u128(0x0190_0000_0000_7000_9000_0000_0000_0000 + u128::from(s))
                }),
                idempotency_key: key.map(str::to_owned),
                schema_version: CURRENT_SCHEMA_VERSION,
                // Privileged events carry the recovery service's signature (fixed bytes here:
                // the codec does not check signatures, recovery does).
                attestation: matches!(
                    event,
                    SessionEvent::ApprovalDecided { .. } | SessionEvent::PayloadRedacted { .. }
                )
                .then(|| sessionlog_schemas::Attestation {
                    key_id: "recovery-key-1".into(),
                    signature: (0u8..64).collect(),
                }),
                event,
            };
            (name.to_owned(), envelope)
        })
        .collect()
}
