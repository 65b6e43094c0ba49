//! Session events, their Avro schemas and the Confluent wire-format codec.
//!
//! Layout:
//! - [`event`]: the Rust event model ([`EventEnvelope`] and the [`SessionEvent`] kinds).
//! - `avro/session-event.vN.avsc`: one self-contained schema per version. Every version is
//!   kept; the highest is the one this build writes ([`avro::CURRENT_SCHEMA_VERSION`]).
//! - [`avro`]: the kept versions, and a hand-written mapping between the model and Avro
//!   values. [`avro::encode_body`] writes a raw datum with the current schema
//!   ([`avro::encode_body_for_version`] with an older one, as its writers did);
//!   [`avro::BodyDecoder`] reads a datum of any writer schema into the current model.
//! - [`wire`]: the Confluent framing (magic byte 0, 4-byte big-endian schema id, body).
//! - [`registry`]: a Confluent-compatible schema registry client (Apicurio's ccompat API or
//!   Confluent's), plus [`EventEncoder`] / [`EventDecoder`], which combine all of the above
//!   into the bytes of a Kafka record value.
//! - `golden/vN/`: bodies written by version N, which every later build must still decode.
//! - [`error`]: the crate's one error type.
//! - `testing` (feature `testing`): fixtures for tests and benchmarks, [`EventEnvelope::new`]
//!   and a `testing::Script` of a session's envelopes.

#![warn(missing_docs)]

pub mod avro;
pub mod error;
pub mod event;
pub mod registry;
/// Fixtures for tests and benchmarks: build with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wire;

pub use avro::{
    BodyDecoder, CURRENT_SCHEMA_VERSION, SchemaVersion, current_schema, decode_body, encode_body,
    encode_body_for_version, schema_versions,
};
pub use error::{Error, Result};
pub use event::{
    Attestation, CallOutcome, Content, DEFAULT_TENANT, EffectClass, Epoch, EventEnvelope,
    ForkPoint, InheritedApproval, Micros, ResultSource, SEALED_FIELDS, Seq, SessionEvent,
    SessionId, TerminalOutcome, action_digest, call_digest, now_micros, sealable,
    session_name_sha256,
};
pub use registry::{
    CompatibilityLevel, DEFAULT_REGISTRY_URL, EventDecoder, EventEncoder, RegistryAbout,
    RegistryAccess, RegistryCredentials, SchemaRegistry, value_subject,
};
pub use wire::{frame, unframe};
