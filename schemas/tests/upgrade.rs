//! What a reader of the previous release (current schema v1) makes of the records this release
//! writes (v2). Its resolution is this crate's (`BodyDecoder::decode_value_as` with reader
//! version 1 runs the same code into v1's schema), so these tests say what its projector does:
//! a record is dead-lettered exactly when resolution fails.
//!
//! Found by these tests: a v1 reader refuses only a v2 record that holds sealed text where v1
//! has a plain string; any other v2 record it reads, dropping v2's fields (tenant,
//! attestation, cache tokens, provider, forked_by) without a dead letter. Hence readers upgrade
//! first (docs/design.md section 2).

use apache_avro::types::Value;
use sessionlog_schemas::{
    Attestation, BodyDecoder, Content, Error, EventEnvelope, SessionEvent, encode_body_for_version,
};
use std::path::Path;

fn golden(version: u32, name: &str) -> (Vec<u8>, EventEnvelope) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(format!("v{version}"));
    let body = std::fs::read(dir.join(format!("{name}.avro"))).expect("golden body");
    let json = std::fs::read_to_string(dir.join(format!("{name}.json"))).expect("golden json");
    (
        body,
        serde_json::from_str(&json).expect("golden json parses"),
    )
}

fn sealed() -> Content {
    Content::Sealed {
        key_id: "dk1:3:title".into(),
        nonce: vec![7; 24],
        ciphertext: vec![0xab; 40],
    }
}

/// The fields of the event record inside a resolved envelope value.
fn event_fields(envelope: &Value) -> Vec<String> {
    let Value::Record(fields) = envelope else {
        panic!("an envelope is a record: {envelope:?}")
    };
    let event = fields
        .iter()
        .find(|(name, _)| name == "event")
        .map(|(_, v)| v)
        .expect("an event field");
    let Value::Union(_, inner) = event else {
        panic!("the event is a union: {event:?}")
    };
    let Value::Record(fields) = inner.as_ref() else {
        panic!("an event kind is a record: {inner:?}")
    };
    fields.iter().map(|(name, _)| name.clone()).collect()
}

fn envelope_fields(envelope: &Value) -> Vec<String> {
    let Value::Record(fields) = envelope else {
        panic!("an envelope is a record: {envelope:?}")
    };
    fields.iter().map(|(name, _)| name.clone()).collect()
}

/// Every v2 record with sealed text in a field v1 kept as a plain string (what this release
/// writes with encryption on): the v1 reader fails, so the previous release's projector
/// dead-letters it. Today's reader reads each one.
#[test]
fn a_v1_reader_refuses_v2_records_with_sealed_text_where_v1_has_a_string() {
    use SessionEvent as E;
    let v2 = BodyDecoder::for_version(2).expect("v2 decoder");
    /// Seals one sealable field of a golden event.
    type Seal = fn(&mut SessionEvent);
    let cases: Vec<(&str, Seal)> = vec![
        ("session_started", |e| {
            if let E::SessionStarted { title, .. } = e {
                *title = Some(sealed());
            }
        }),
        ("approval_requested", |e| {
            if let E::ApprovalRequested { action, .. } = e {
                *action = sealed();
            }
        }),
        ("approval_decided", |e| {
            if let E::ApprovalDecided { reason, .. } = e {
                *reason = Some(sealed());
            }
        }),
        ("tool_call_result", |e| {
            if let E::ToolCallResult { note, .. } = e {
                *note = Some(sealed());
            }
        }),
        ("resolution_required", |e| {
            if let E::ResolutionRequired { reason, .. } = e {
                *reason = sealed();
            }
        }),
        ("session_paused", |e| {
            if let E::SessionPaused { reason, .. } = e {
                *reason = Some(sealed());
            }
        }),
        ("session_ended", |e| {
            if let E::SessionEnded { reason, .. } = e {
                *reason = Some(sealed());
            }
        }),
    ];
    for (name, seal) in cases {
        let (_, mut envelope) = golden(2, name);
        let before = envelope.clone();
        seal(&mut envelope.event);
        assert_ne!(envelope, before, "{name}: the case sealed nothing");
        let body = encode_body_for_version(2, &envelope).expect("a v2 writer encodes");
        assert_eq!(
            v2.decode(&body).expect("today's reader"),
            envelope,
            "{name}"
        );
        let refused = v2
            .decode_value_as(&body, 1)
            .expect_err(&format!("{name}: a v1 reader read sealed text as a string"));
        assert!(
            matches!(refused, Error::Decode(_) | Error::Malformed { .. })
                && !refused.is_retriable(),
            "{name}: {refused:?}"
        );
        println!("{name}: a v1 reader says: {refused}");
    }
}

/// A v2 record with nothing sealed outside `Content` resolves into v1: the previous release
/// projects it, without v2's fields and without a dead letter. Sealed `Content` was in v1.
#[test]
fn a_v1_reader_reads_other_v2_records_without_their_v2_fields() {
    let v2 = BodyDecoder::for_version(2).expect("v2 decoder");
    for name in [
        "session_started",
        "session_forked",
        "model_response",
        "user_request_sealed",
        "plan_updated",
        "approval_decided",
        "tool_call_result",
    ] {
        let (body, _) = golden(2, name);
        let read = v2
            .decode_value_as(&body, 1)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let fields = event_fields(&read);
        for v2_only in [
            "tenant",
            "forked_by",
            "cache_read_tokens",
            "cache_creation_tokens",
            "provider",
        ] {
            assert!(
                !fields.iter().any(|f| f == v2_only),
                "{name}: {v2_only} in {fields:?}"
            );
        }
    }
    // The golden start's tenant is `acme`, its fork's and response's v2 fields are set: all of
    // it is read past, not refused.
    let (_, started) = golden(2, "session_started");
    assert!(
        matches!(&started.event, SessionEvent::SessionStarted { tenant, .. } if tenant == "acme")
    );
    let (body, _) = golden(2, "session_started");
    assert_eq!(
        event_fields(&v2.decode_value_as(&body, 1).expect("reads")),
        ["agent", "title"]
    );

    // An attested decision: the signature is dropped too.
    let (_, mut decided) = golden(2, "approval_decided");
    decided.attestation = Some(Attestation {
        key_id: "recovery-1".into(),
        signature: vec![1; 64],
    });
    let body = encode_body_for_version(2, &decided).expect("a v2 writer encodes");
    let read = v2.decode_value_as(&body, 1).expect("reads");
    assert!(!envelope_fields(&read).iter().any(|f| f == "attestation"));
    assert_eq!(v2.decode(&body).expect("today's reader"), decided);
}
