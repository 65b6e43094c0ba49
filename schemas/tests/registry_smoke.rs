//! Smoke tests of the registry client against a real Confluent-compatible registry.
//!
//! The tests that need a registry find it as the services do, in `SESSIONLOG_REGISTRY__URL`
//! with the credentials and CA of `SESSIONLOG_REGISTRY__USERNAME`/`__PASSWORD`,
//! `__BEARER_TOKEN` and `__CA_FILE` (built into a client the way `RegistrySettings::client`
//! builds it). `scripts/test` runs them against the stack's registry and `scripts/test-secure`
//! against the secure stack's, which asks for basic auth; by hand, source the stack's settings:
//! `set -a; . .stack/stack.env; set +a; cargo test -p sessionlog-schemas --test registry_smoke`.
//! Without a URL they say on stderr that they were skipped and pass, so the crate's other tests
//! need no stack; both scripts refuse to run without one.

use sessionlog_schemas::{
    CURRENT_SCHEMA_VERSION, Content, Error, EventDecoder, EventEncoder, EventEnvelope,
    RegistryAccess, RegistryCredentials, SchemaRegistry, SessionEvent, SessionId, current_schema,
    value_subject,
};
use std::io::Write;
use uuid::Uuid;

/// A client for the registry the environment names, or `None`, said on stderr, when it names
/// none.
fn registry(test: &str) -> Option<SchemaRegistry> {
    let var = |name: &str| {
        std::env::var(format!("SESSIONLOG_REGISTRY__{name}"))
            .ok()
            .filter(|value| !value.is_empty())
    };
    let Some(url) = var("URL") else {
        // Straight to stderr: libtest hides what a passing test prints with `eprintln!`, and a
        // skipped test must not pass unseen.
        let _ = std::io::stderr().write_all(
            format!(
                "registry_smoke::{test}: skipped, SESSIONLOG_REGISTRY__URL is not set \
                 (scripts/test sets it from the stack's stack.env)\n"
            )
            .as_bytes(),
        );
        return None;
    };
    // As `RegistrySettings::client`: a bearer token wins over basic auth.
    let credentials = match (var("BEARER_TOKEN"), var("USERNAME")) {
        (Some(token), _) => RegistryCredentials::Bearer(token),
        (None, Some(username)) => RegistryCredentials::Basic {
            username,
            password: var("PASSWORD").unwrap_or_default(),
        },
        (None, None) => RegistryCredentials::None,
    };
    let access = RegistryAccess {
        credentials,
        ca_file: var("CA_FILE").map(Into::into),
    };
    Some(SchemaRegistry::with_access(url, access).expect("registry client"))
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
        event: SessionEvent::UserRequest {
            content: Content::plain(format!("smoke {seq}")),
        },
        attestation: None,
    }
}

/// The current schema with `field` (a JSON field definition) added first to the envelope's
/// own fields.
fn current_schema_with(field: &str) -> String {
    let text = current_schema().text;
    let changed = text.replacen(r#""fields": ["#, &format!(r#""fields": [{field},"#), 1);
    assert_ne!(changed, text, "the envelope's fields were not found");
    changed
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
async fn registration_is_idempotent_and_fetch_by_id_returns_the_schema() {
    let Some(registry) = registry("registration_is_idempotent_and_fetch_by_id_returns_the_schema")
    else {
        return;
    };
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
async fn unknown_id_is_distinguishable_from_an_outage() {
    let Some(registry) = registry("unknown_id_is_distinguishable_from_an_outage") else {
        return;
    };
    let err = registry
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
async fn the_subject_refuses_a_backward_incompatible_schema() {
    let Some(registry) = registry("the_subject_refuses_a_backward_incompatible_schema") else {
        return;
    };
    let subject = fresh_subject();
    let id = registry
        .register_all_versions(&subject)
        .await
        .expect("registers");
    // A new required field without a default cannot read old data.
    let breaking = current_schema_with(r#"{"name": "required_new", "type": "string"}"#);
    let err = registry
        .register(&subject, &breaking)
        .await
        .expect_err("BACKWARD_TRANSITIVE must refuse it");
    assert!(matches!(err, Error::Registry { .. }), "{err:?}");
    assert!(!err.is_retriable(), "{err:?}");
    // 409 Conflict: Confluent's and Apicurio's answer to an incompatible schema.
    assert!(err.to_string().contains("409"), "{err}");
    // The same field with a default can read old data, so the refusal above was about
    // compatibility, not a schema the registry could not parse.
    let compatible = current_schema_with(
        r#"{"name": "optional_new", "type": ["null", "string"], "default": null}"#,
    );
    let evolved = registry
        .register(&subject, &compatible)
        .await
        .expect("a backward-compatible schema is accepted");
    assert_ne!(evolved, id, "a changed schema gets a new id");
}

#[tokio::test]
async fn encoder_and_decoder_round_trip_through_the_registry() {
    let Some(registry) = registry("encoder_and_decoder_round_trip_through_the_registry") else {
        return;
    };
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
