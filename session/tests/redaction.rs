//! The fold's redaction rules (schema v8): a `PayloadRedacted` is an operator's, signed; it
//! names an earlier event and a sealed field; a field is redacted once; an ended session may
//! still be redacted, an erased one not; and the state's digest stays what it was until one.

use sessionlog_schemas::{
    Attestation, CURRENT_SCHEMA_VERSION, Content, EventEnvelope, SessionEvent, SessionId,
    TerminalOutcome,
};
use sessionlog_session::{Rejection, SessionState, Verdict};
use uuid::Uuid;

fn session() -> SessionId {
    SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0054))
}

/// `event` at `seq`, epoch 1, signed when `signed`.
fn ev(seq: u64, event: SessionEvent, signed: bool) -> EventEnvelope {
    EventEnvelope {
        event_id: Uuid::from_u128(u128::from(seq) << 8 | u128::from(signed)),
        session_id: session(),
        seq,
        writer_epoch: 1,
        occurred_at: 1_750_000_000_000_000 + i64::try_from(seq).expect("small"),
        causation_id: None,
        idempotency_key: None,
        schema_version: CURRENT_SCHEMA_VERSION,
        event,
        attestation: signed.then(|| Attestation {
            key_id: "recovery-1".into(),
            signature: vec![1; 64],
        }),
    }
}

fn redaction(seq: u64, field: &str) -> SessionEvent {
    SessionEvent::PayloadRedacted {
        redacted_seq: seq,
        field: field.into(),
        redacted_by: "operator:alice".into(),
        reason: "a key the tool printed".into(),
        redacted_at: 1_750_000_001_000_000,
        key_id: format!("dk2g:{seq}:{field}"),
        key_destroyed: true,
    }
}

/// A started session with a user request at seq 2 and a model response at seq 3.
fn session_of_three() -> SessionState {
    let mut state = SessionState::empty(session());
    let events = [
        SessionEvent::SessionStarted {
            agent: "harness".into(),
            title: None,
            tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
            writer_token_sha256: None,
            name_sha256: None,
        },
        SessionEvent::UserRequest {
            content: Content::plain("hello"),
        },
        SessionEvent::PlanUpdated {
            plan: Content::plain("a plan"),
        },
    ];
    for (i, event) in events.into_iter().enumerate() {
        let seq = u64::try_from(i).expect("small") + 1;
        assert_eq!(state.apply(&ev(seq, event, false)), Verdict::Accepted);
    }
    state
}

fn invalid(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Rejected(Rejection::Invalid(_)))
}

#[test]
fn a_signed_redaction_of_an_earlier_field_is_kept_once() {
    let mut state = session_of_three();
    let digest_before = state.digest();
    assert!(
        !state.canonical_json().contains("redacted"),
        "no key while empty"
    );

    assert_eq!(
        state.apply(&ev(4, redaction(2, "content"), true)),
        Verdict::Accepted
    );
    let kept = state.redaction(2, "content").expect("kept");
    assert_eq!(
        (kept.redacted_by.as_str(), kept.redaction_seq),
        ("operator:alice", 4)
    );
    assert_eq!(
        state.redactions().collect::<Vec<_>>(),
        [(
            2,
            "content".to_string(),
            "a key the tool printed".to_string()
        )]
    );
    // The plan still held in the state (its text sealed or not) is untouched: the fold runs
    // on what was written, and readers learn of the redaction from the record.
    assert_eq!(state.plan, Some(Content::plain("a plan")));
    assert_ne!(state.digest(), digest_before, "the state now records it");

    // Not twice; another field of the same event, or another event, is another redaction.
    assert!(invalid(&state.apply(&ev(5, redaction(2, "content"), true))));
    assert_eq!(
        state.apply(&ev(5, redaction(3, "plan"), true)),
        Verdict::Accepted
    );
}

#[test]
fn an_unsigned_redaction_is_refused_whoever_writes_it() {
    let mut state = session_of_three();
    assert_eq!(
        state.apply(&ev(4, redaction(2, "content"), false)),
        Verdict::Rejected(Rejection::Unsigned {
            kind: "a redaction".into()
        })
    );
    assert!(state.redaction(2, "content").is_none());
}

#[test]
fn a_redaction_names_an_earlier_event_and_a_sealed_field() {
    let mut state = session_of_three();
    for (seq, field) in [(0, "content"), (4, "content"), (9, "content"), (2, "tool")] {
        let verdict = state.apply(&ev(4, redaction(seq, field), true));
        assert!(invalid(&verdict), "seq {seq} {field}: {verdict:?}");
    }
    assert_eq!(state.last_seq, 3, "nothing accepted");
}

#[test]
fn an_ended_session_may_be_redacted_an_erased_one_not() {
    let mut state = session_of_three();
    let end = SessionEvent::SessionEnded {
        outcome: TerminalOutcome::Completed,
        reason: None,
    };
    assert_eq!(state.apply(&ev(4, end, false)), Verdict::Accepted);
    assert_eq!(
        state.apply(&ev(5, redaction(2, "content"), true)),
        Verdict::Accepted
    );
    let erase = SessionEvent::SessionErased {
        requested_by: "dpo".into(),
        reason: "art. 17".into(),
    };
    assert_eq!(state.apply(&ev(6, erase, false)), Verdict::Accepted);
    assert_eq!(
        state.apply(&ev(7, redaction(3, "plan"), true)),
        Verdict::Rejected(Rejection::AfterTerminal)
    );
}

#[test]
fn a_redaction_without_a_reason_or_an_operator_is_refused_whoever_writes_it() {
    for (redacted_by, reason) in [
        ("operator:alice", ""),
        ("operator:alice", " \t\n"),
        ("", "a key the tool printed"),
    ] {
        let mut state = session_of_three();
        let mut event = redaction(2, "content");
        if let SessionEvent::PayloadRedacted {
            redacted_by: by,
            reason: why,
            ..
        } = &mut event
        {
            *by = redacted_by.into();
            *why = reason.into();
        }
        let verdict = state.apply(&ev(4, event, true));
        assert!(invalid(&verdict), "{redacted_by:?} {reason:?}: {verdict:?}");
        assert!(state.redaction(2, "content").is_none());
        assert_eq!(state.last_seq, 3, "nothing accepted");
    }
}
