//! The Avro side of the event model: the kept schema versions, and a hand-written mapping
//! between [`EventEnvelope`] and [`apache_avro::types::Value`].
//!
//! Why by hand: serde mapping of Rust enums onto Avro unions of records is a known pitfall in
//! apache-avro (apache/avro-rs#449), and so is apache-avro's own union resolution, which picks
//! the *first branch the value fits* rather than the branch of the same name: a
//! `SessionResumed {}` would resolve into any record whose fields all have defaults. So
//! [`BodyDecoder`] decodes with the writer schema alone (exact union indices) and then resolves
//! into the current reader schema itself, matching union branches by name and record fields by
//! name or alias, and leaves only leaf values (promotions, enums, logical types) to apache-avro.

use crate::error::{Error, Result};
use crate::event::{
    Attestation, CallOutcome, Content, EffectClass, EventEnvelope, ForkPoint, InheritedApproval,
    ResultSource, SessionEvent, SessionId, TerminalOutcome,
};
use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, NamesRef, RecordSchema, ResolvedSchema, SchemaKind, UnionSchema};
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use uuid::Uuid;

/// The schema version this build writes. It is the highest kept version.
pub const CURRENT_SCHEMA_VERSION: u32 = 8;

/// The full name of the top-level record in every version.
pub const ENVELOPE_RECORD: &str = "sessionlog.events.SessionEventEnvelope";

/// Every kept `.avsc`, oldest first. A new version is a new file appended here, never an edit
/// of an old one: golden bytes and the registry's BACKWARD_TRANSITIVE check depend on it.
const KEPT: &[(u32, &str)] = &[
    (1, include_str!("../avro/session-event.v1.avsc")),
    (2, include_str!("../avro/session-event.v2.avsc")),
    (3, include_str!("../avro/session-event.v3.avsc")),
    (4, include_str!("../avro/session-event.v4.avsc")),
    (5, include_str!("../avro/session-event.v5.avsc")),
    (6, include_str!("../avro/session-event.v6.avsc")),
    (7, include_str!("../avro/session-event.v7.avsc")),
    (8, include_str!("../avro/session-event.v8.avsc")),
];

/// One kept version of the session-event schema.
#[derive(Debug)]
pub struct SchemaVersion {
    /// The version number (the `N` of `session-event.vN.avsc`).
    pub version: u32,
    /// The parsed schema.
    pub schema: Schema,
    /// The `.avsc` text as kept in the repository; this is what gets registered.
    pub text: &'static str,
}

static VERSIONS: LazyLock<Vec<SchemaVersion>> = LazyLock::new(|| {
    KEPT.iter()
        .map(|&(version, text)| SchemaVersion {
            version,
            // Compiled-in text, checked by this crate's tests: a failure here is a build defect.
            schema: Schema::parse_str(text)
                .unwrap_or_else(|e| panic!("kept schema v{version} does not parse: {e}")),
            text,
        })
        .collect()
});

/// Every kept schema version, oldest first; the last one is the current one.
pub fn schema_versions() -> &'static [SchemaVersion] {
    &VERSIONS
}

/// The schema this build writes (version [`CURRENT_SCHEMA_VERSION`]).
pub fn current_schema() -> &'static SchemaVersion {
    schema_version(CURRENT_SCHEMA_VERSION)
        .unwrap_or_else(|| panic!("CURRENT_SCHEMA_VERSION {CURRENT_SCHEMA_VERSION} is not kept"))
}

/// A kept schema version by number.
pub fn schema_version(version: u32) -> Option<&'static SchemaVersion> {
    schema_versions().iter().find(|v| v.version == version)
}

/// What encoding and decoding need from the current schema, built once per process:
/// resolving a schema's names is most of the cost of an Avro datum call (apache/avro-rs#310).
struct Current {
    schema: &'static Schema,
    names: ResolvedSchema<'static>,
    writer: GenericDatumWriter<'static>,
    /// Branch names of the `event` union, in union order.
    event_branches: Vec<String>,
    /// Branch names of the `Content` union, in union order.
    content_branches: Vec<String>,
}

static CURRENT: LazyLock<Current> = LazyLock::new(|| {
    let schema = &current_schema().schema;
    let build = || -> Result<Current> {
        let names = ResolvedSchema::new(schema).map_err(schema_error("current"))?;
        let writer = GenericDatumWriter::builder(schema)
            .build()
            .map_err(schema_error("current"))?;
        let event_branches = union_branch_names(schema, &names, &["event"])?;
        let content_branches =
            union_branch_names(schema, &names, &["event", "UserRequest", "content"])?;
        Ok(Current {
            schema,
            names,
            writer,
            event_branches,
            content_branches,
        })
    };
    build().unwrap_or_else(|e| panic!("current schema lacks the expected layout: {e}"))
});

fn schema_error(context: &str) -> impl Fn(apache_avro::Error) -> Error + '_ {
    move |source| Error::Schema {
        context: context.to_owned(),
        source,
    }
}

/// Follow `path` (record field names, or a union branch name) from `schema` to a union and
/// list its branches' short names.
fn union_branch_names(
    schema: &Schema,
    names: &ResolvedSchema<'_>,
    path: &[&str],
) -> Result<Vec<String>> {
    let mut at = schema;
    for step in path {
        at = deref(at, names.get_names())?;
        at = match at {
            Schema::Record(r) => r
                .fields
                .iter()
                .find(|f| f.name == *step)
                .map(|f| &f.schema)
                .ok_or_else(|| Error::malformed(*step, "no such field in the schema"))?,
            Schema::Union(u) => u
                .variants()
                .iter()
                .find(|s| s.name().is_some_and(|n| n.name() == *step))
                .ok_or_else(|| Error::malformed(*step, "no such union branch in the schema"))?,
            _ => return Err(Error::malformed(*step, "not a record or union")),
        };
    }
    match deref(at, names.get_names())? {
        Schema::Union(u) => u
            .variants()
            .iter()
            .map(|s| {
                s.name()
                    .map(|n| n.name().to_owned())
                    .ok_or_else(|| Error::malformed(path.join("."), "union branch without a name"))
            })
            .collect(),
        _ => Err(Error::malformed(path.join("."), "not a union")),
    }
}

fn deref<'a>(schema: &'a Schema, names: &NamesRef<'a>) -> Result<&'a Schema> {
    match schema {
        Schema::Ref { name } => names
            .get(name)
            .copied()
            .ok_or_else(|| Error::malformed(name.fullname(None), "reference to an unknown name")),
        other => Ok(other),
    }
}

// Enum symbols in declaration order of the Rust enums, so `variant as usize` is the index.
const EFFECT_CLASS: &[&str] = &["PURE", "IDEMPOTENT", "NON_IDEMPOTENT"];
const CALL_OUTCOME: &[&str] = &["SUCCEEDED", "FAILED"];
const RESULT_SOURCE: &[&str] = &["EXECUTED", "RESOLVER", "OPERATOR"];
const TERMINAL_OUTCOME: &[&str] = &["COMPLETED", "FAILED", "CANCELLED"];

mod decode;
mod encode;
mod fields;

pub use decode::{BodyDecoder, decode_body};
pub use encode::{encode_body, encode_body_for_version};
