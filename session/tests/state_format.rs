//! Stored states and checkpoint digests written by an earlier release still verify.
//!
//! `fixtures/checkpoint-before-sealing.json` was written by the release before sealed
//! sensitive strings (commit d40e063): a session's events as Avro bodies (every sensitive
//! string set), the digest its writer declared at a checkpoint, and the state it stored. The
//! current fold must read the same events to the same digest, and the stored state must load
//! and digest the same, or every checkpoint in a deployed topic would turn unverified at upgrade.
//! Regenerate (only on purpose, with the release that is to be "previous") with
//! `SESSIONLOG_WRITE_FIXTURES=1 cargo test -p sessionlog-session --test state_format`.

use serde_json::{Value, json};
use sessionlog_schemas::{
    BodyDecoder, CallOutcome, Content, EffectClass, EventEnvelope, ResultSource, SessionEvent,
    SessionId, TerminalOutcome, encode_body,
};
use sessionlog_session::SessionState;
use uuid::Uuid;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/checkpoint-before-sealing.json"
);

fn session() -> SessionId {
    SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_00a1))
}

fn ev(seq: u64, event: SessionEvent) -> EventEnvelope {
    EventEnvelope {
        event_id: Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0001_0000 + seq as u128),
        session_id: session(),
        seq,
        writer_epoch: 1,
        occurred_at: 1_700_000_000_000_000 + seq as i64,
        causation_id: None,
        idempotency_key: Some(format!("key-{seq}")),
        schema_version: 2,
        event,
        attestation: None,
    }
}

fn write_fixture() {
    let text = |s: &str| Content::plain(s);
    let events = vec![
        ev(1, serde_json::from_value(json!({"SessionStarted": {"agent": "fixture", "title": "a title", "tenant": "default"}})).unwrap()),
        ev(2, SessionEvent::UserRequest { content: text("a request") }),
        ev(3, SessionEvent::PlanUpdated { plan: text("a plan") }),
        ev(4, SessionEvent::ToolCallRequested { tool: "shell".into(), arguments: text("ls"), effect: EffectClass::NonIdempotent, approval_id: None }),
        ev(5, serde_json::from_value(json!({"ApprovalRequested": {"approval_id": "a1", "action": "an action"}})).unwrap()),
        ev(6, serde_json::from_value(json!({"ResolutionRequired": {"call_seq": 4, "reason": "a resolution reason"}})).unwrap()),
        ev(7, serde_json::from_value(json!({"ToolCallResult": {"call_seq": 4, "outcome": "Succeeded", "output": {"Plain": "an output"}, "source": "Operator", "recorded_by": "op", "note": "a note"}})).unwrap()),
        ev(8, serde_json::from_value(json!({"ApprovalDecided": {"approval_id": "a1", "approved": false, "decided_by": "op", "reason": "a decision reason"}})).unwrap()),
        ev(9, serde_json::from_value(json!({"SessionPaused": {"reason": "a pause reason"}})).unwrap()),
        ev(10, SessionEvent::SessionResumed {}),
    ];
    let mut state = SessionState::empty(session());
    for e in &events {
        assert!(state.apply(e).is_accepted(), "{e:?}");
    }
    let digest = state.digest();
    let fixture = json!({
        "written_by": "d40e063",
        "bodies": events.iter().map(|e| hex::encode(encode_body(e).unwrap())).collect::<Vec<_>>(),
        "declared_digest": digest,
        "state_json": state.canonical_json(),
    });
    std::fs::write(FIXTURE, serde_json::to_string_pretty(&fixture).unwrap()).unwrap();
    let _ = (
        CallOutcome::Succeeded,
        ResultSource::Operator,
        TerminalOutcome::Completed,
    );
}

#[test]
fn a_checkpoint_written_before_sealing_still_verifies() {
    if std::env::var_os("SESSIONLOG_WRITE_FIXTURES").is_some() {
        write_fixture();
    }
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let declared = fixture["declared_digest"].as_str().unwrap();
    let mut state = SessionState::empty(session());
    // The bodies were written with schema v2, the schema of the release that wrote them.
    let v2 = BodyDecoder::for_version(2).unwrap();
    for body in fixture["bodies"].as_array().unwrap() {
        let envelope = v2
            .decode(&hex::decode(body.as_str().unwrap()).unwrap())
            .unwrap();
        assert!(state.apply(&envelope).is_accepted(), "{envelope:?}");
    }
    assert_eq!(
        state.digest(),
        declared,
        "the fold's digest of the same events changed"
    );
    let stored: SessionState =
        serde_json::from_str(fixture["state_json"].as_str().unwrap()).unwrap();
    assert_eq!(
        stored.digest(),
        declared,
        "a stored state reads back to another digest"
    );
    assert_eq!(
        stored,
        SessionState {
            recent: stored.recent.clone(),
            ..state
        }
    );
}
