//! Smoke tests of the registry client against a real Confluent-compatible registry.
//!
//! The tests that need a registry are `#[ignore]`d and read its URL from
//! `SESSIONLOG_REGISTRY__URL`, e.g.
//! `SESSIONLOG_REGISTRY__URL=http://127.0.0.1:8081/apis/ccompat/v7 cargo test -p sessionlog-schemas --test registry_smoke -- --ignored`

use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Error, EventDecoder, EventEncoder, EventEnvelope, SchemaRegistry,
    SessionEvent, SessionId, current_schema, value_subject,
};
use uuid::Uuid;

fn registry() -> SchemaRegistry {
    let url = std::env::var("SESSIONLOG_REGISTRY__URL")
        .expect("set SESSIONLOG_REGISTRY__URL to run the registry smoke tests");
    SchemaRegistry::new(url).expect("registry client")
}

fn fresh_subject() -> String {
    value_subject(&format!("sessionlog-smoke-{}", Uuid::now_v7()))
}

fn sample(seq: u64) -> EventEnvelope {
    EventEnvelope {
        event_id: Uuid::now_v7(),
        session_id: SessionId::new(),
        seq,
        writer_epoch: 1,
        occurred_at: 1_750_000_000_000_000,
        causation_id: None,
        idempotency_key: Some("k".into()),
        schema_version: CURRENT_SCHEMA_VERSION,
        event: SessionEvent::WriterClaimed {
            writer: "smoke".into(),
        },
        attestation: None,
    }
}

#[test]
fn subject_follows_the_topic_name_strategy() {
    assert_eq!(value_subject("session-events"), "session-events-value");
}

#[tokio::test]
async fn unreachable_registry_is_a_retriable_error_naming_the_url() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let registry = SchemaRegistry::new("http://127.0.0.1:1/apis/ccompat/v7").expect("client");
    let err = registry
        .schema_by_id(1)
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, Error::RegistryUnreachable { .. }), "{err:?}");
    assert!(err.is_retriable());
    assert!(
        err.to_string()
            .contains("http://127.0.0.1:1/apis/ccompat/v7"),
        "{err}"
    );
    let err = registry
        .register_all_versions("x-value")
        .await
        .expect_err("nothing listens on port 1");
    assert!(err.is_retriable(), "{err:?}");
}

#[tokio::test]
#[ignore = "needs a registry at SESSIONLOG_REGISTRY__URL"]
async fn registration_is_idempotent_and_fetch_by_id_returns_the_schema() {
    let registry = registry();
    let subject = fresh_subject();
    let id = registry
        .register_all_versions(&subject)
        .await
        .expect("registers");
    let again = registry
        .register_all_versions(&subject)
        .await
        .expect("re-registers");
    assert_eq!(
        id, again,
        "registering the same versions again returns the same id"
    );

    let fetched = registry.schema_by_id(id).await.expect("fetches by id");
    assert_eq!(
        fetched.canonical_form(),
        current_schema().schema.canonical_form()
    );
    // Second fetch comes from the cache: same Arc.
    let cached = registry.schema_by_id(id).await.expect("cached");
    assert!(std::sync::Arc::ptr_eq(&fetched, &cached));
}

#[tokio::test]
#[ignore = "needs a registry at SESSIONLOG_REGISTRY__URL"]
async fn unknown_id_is_distinguishable_from_an_outage() {
    let err = registry()
        .schema_by_id(2_000_000_000)
        .await
        .expect_err("no such id");
    assert!(
        matches!(err, Error::UnknownSchemaId(2_000_000_000)),
        "{err:?}"
    );
    assert!(!err.is_retriable());
}

#[tokio::test]
#[ignore = "needs a registry at SESSIONLOG_REGISTRY__URL"]
async fn the_subject_refuses_a_backward_incompatible_schema() {
    let registry = registry();
    let subject = fresh_subject();
    registry
        .register_all_versions(&subject)
        .await
        .expect("registers");
    // A new required field without a default cannot read old data.
    let breaking = current_schema().text.replacen(
        r#""fields": ["#,
        r#""fields": [{"name": "required_new", "type": "string"},"#,
        1,
    );
    let err = registry
        .register(&subject, &breaking)
        .await
        .expect_err("BACKWARD_TRANSITIVE must refuse it");
    assert!(matches!(err, Error::Registry { .. }), "{err:?}");
}

#[tokio::test]
#[ignore = "needs a registry at SESSIONLOG_REGISTRY__URL"]
async fn encoder_and_decoder_round_trip_through_the_registry() {
    let registry = registry();
    let subject = fresh_subject();
    let encoder = EventEncoder::register(&registry, &subject)
        .await
        .expect("encoder");
    let decoder = EventDecoder::new(registry.clone());
    for seq in 1..=3 {
        let e = sample(seq);
        let bytes = encoder.encode(&e).expect("encodes");
        assert_eq!(bytes[0], 0);
        assert_eq!(&bytes[1..5], &encoder.schema_id().to_be_bytes());
        assert_eq!(decoder.decode(&bytes).await.expect("decodes"), e);
    }
}
