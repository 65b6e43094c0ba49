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

// ---------------------------------------------------------------------------------------------
// Encoding

/// Encode an envelope as a raw Avro datum of the current schema (no wire-format header).
pub fn encode_body(envelope: &EventEnvelope) -> Result<Vec<u8>> {
    let current = &*CURRENT;
    let value = envelope_to_value(envelope, current)?;
    current
        .writer
        .write_value_to_vec(value)
        .map_err(Error::Encode)
}

/// Encode an envelope as a raw Avro datum of kept version `version`, as a writer of that
/// version would have: for tests and tools that need records an older release wrote (a topic
/// holding v1 and v2 records), not for the hot path (it resolves the schema's names per call).
///
/// The envelope is mapped onto the current schema first and then onto `version`'s, field by
/// field and union branch by name. What the older version cannot carry is refused with
/// [`Error::Unrepresentable`], never dropped: a sealed text in a field that was a plain
/// string, or a field the older version lacks holding anything but its default (a tenant
/// other than `default`, an attestation, cache tokens, a provider, `forked_by`). The
/// envelope's `schema_version` must be `version`: a record says which schema wrote it.
pub fn encode_body_for_version(version: u32, envelope: &EventEnvelope) -> Result<Vec<u8>> {
    if version == CURRENT_SCHEMA_VERSION {
        return encode_body(envelope);
    }
    let target = schema_version(version).ok_or_else(|| {
        Error::malformed("schema_version", format!("version {version} is not kept"))
    })?;
    if envelope.schema_version != version {
        return Err(Error::Unrepresentable {
            version,
            what: format!(
                "an envelope whose schema_version is {} (set it to {version})",
                envelope.schema_version
            ),
        });
    }
    let current = &*CURRENT;
    let value = envelope_to_value(envelope, current)?;
    let names = ResolvedSchema::new(&target.schema).map_err(schema_error("target"))?;
    let value = Downgrade {
        version,
        from: current.names.get_names(),
        to: names.get_names(),
    }
    .map(value, current.schema, &target.schema, "envelope")?;
    GenericDatumWriter::builder(&target.schema)
        .build()
        .map_err(schema_error("target"))?
        .write_value_to_vec(value)
        .map_err(Error::Encode)
}

/// Maps a value of the current schema onto an older one (see [`encode_body_for_version`]).
struct Downgrade<'f, 't> {
    version: u32,
    from: &'f NamesRef<'f>,
    to: &'t NamesRef<'t>,
}

impl Downgrade<'_, '_> {
    fn refuse(&self, what: String) -> Error {
        Error::Unrepresentable {
            version: self.version,
            what,
        }
    }

    fn map(&self, value: Value, from: &Schema, to: &Schema, path: &str) -> Result<Value> {
        let from = deref(from, self.from)?;
        let to = deref(to, self.to)?;
        match (from, to, value) {
            // Only the branch written matters; find the older schema's branch of that name
            // (or kind), or the older schema's plain type where it had no union.
            (Schema::Union(fu), _, Value::Union(i, inner)) => {
                let branch = fu.variants().get(i as usize).ok_or_else(|| {
                    Error::malformed(path, format!("branch {i} beyond the schema"))
                })?;
                let branch = deref(branch, self.from)?;
                let what = || match branch.name() {
                    Some(name) => format!("a {} in `{path}`", name.name()),
                    None => format!("a {:?} in `{path}`", SchemaKind::from(branch)),
                };
                // Name the kind in paths below the event union: `envelope.event.SessionStarted.title`.
                let inner_path = match branch {
                    Schema::Record(r) => format!("{path}.{}", r.name.name()),
                    _ => path.to_owned(),
                };
                match to {
                    Schema::Union(tu) => {
                        let j =
                            pick_branch(branch, tu, self.to)?.ok_or_else(|| self.refuse(what()))?;
                        let inner = self.map(*inner, branch, &tu.variants()[j], &inner_path)?;
                        Ok(Value::Union(j as u32, Box::new(inner)))
                    }
                    _ if same_kind(branch, to) => self.map(*inner, branch, to, &inner_path),
                    _ => Err(self.refuse(what())),
                }
            }
            (Schema::Record(fr), Schema::Record(tr), Value::Record(fields)) => {
                let mut fields: HashMap<String, Value> = fields.into_iter().collect();
                let mut out = Vec::with_capacity(tr.fields.len());
                for tf in &tr.fields {
                    let ff = fr.fields.iter().find(|f| f.name == tf.name);
                    let (ff, value) = ff
                        .and_then(|ff| fields.remove(&ff.name).map(|v| (ff, v)))
                        .ok_or_else(|| {
                            Error::malformed(format!("{path}.{}", tf.name), "missing")
                        })?;
                    let path = format!("{path}.{}", tf.name);
                    out.push((
                        tf.name.clone(),
                        self.map(value, &ff.schema, &tf.schema, &path)?,
                    ));
                }
                // A field the older version lacks may only be dropped if it says nothing.
                for ff in &fr.fields {
                    if let Some(value) = fields.remove(&ff.name) {
                        let default = match &ff.default {
                            Some(default) => Some(default_value(default, &ff.schema, self.from)?),
                            None => None,
                        };
                        if default.as_ref() != Some(&value) {
                            return Err(self.refuse(format!(
                                "`{path}.{}` set to {value:?} (it has no such field)",
                                ff.name
                            )));
                        }
                    }
                }
                Ok(Value::Record(out))
            }
            (_, _, value) if same_kind(from, to) => Ok(value),
            (_, _, value) => Err(self.refuse(format!("{value:?} in `{path}`"))),
        }
    }
}

fn same_kind(a: &Schema, b: &Schema) -> bool {
    SchemaKind::from(a) == SchemaKind::from(b)
}

fn envelope_to_value(e: &EventEnvelope, c: &Current) -> Result<Value> {
    let kind = e.event.kind();
    let index = c
        .event_branches
        .iter()
        .position(|b| b == kind)
        .ok_or_else(|| Error::malformed("event", format!("kind {kind} is not in the schema")))?;
    Ok(Value::Record(vec![
        field("event_id", Value::Uuid(e.event_id)),
        field("session_id", Value::Uuid(e.session_id.0)),
        field("seq", long("seq", e.seq)?),
        field("writer_epoch", long("writer_epoch", e.writer_epoch)?),
        field("occurred_at", Value::TimestampMicros(e.occurred_at)),
        field("causation_id", optional(e.causation_id.map(Value::Uuid))),
        field(
            "idempotency_key",
            optional(e.idempotency_key.clone().map(Value::String)),
        ),
        field(
            "schema_version",
            Value::Int(
                i32::try_from(e.schema_version).map_err(|_| Error::OutOfRange {
                    field: "schema_version",
                    value: e.schema_version.to_string(),
                })?,
            ),
        ),
        field(
            "event",
            Value::Union(index as u32, Box::new(event_to_value(&e.event, c)?)),
        ),
        field(
            "attestation",
            optional(e.attestation.as_ref().map(|a| {
                Value::Record(vec![
                    field("key_id", string(&a.key_id)),
                    field("signature", Value::Bytes(a.signature.clone())),
                ])
            })),
        ),
    ]))
}

fn event_to_value(event: &SessionEvent, c: &Current) -> Result<Value> {
    use SessionEvent as E;
    let fields = match event {
        E::SessionStarted {
            agent,
            title,
            tenant,
            writer_token_sha256,
            name_sha256,
        } => vec![
            field("agent", string(agent)),
            field("title", optional_sealable(title)),
            field("tenant", string(tenant)),
            field("writer_token_sha256", optional_string(writer_token_sha256)),
            field("name_sha256", optional_string(name_sha256)),
        ],
        E::UserRequest { content } => vec![field("content", content_to_value(content, c)?)],
        E::ModelResponse {
            model,
            tokens_in,
            tokens_out,
            cost_micros,
            started_at,
            content,
            cache_read_tokens,
            cache_creation_tokens,
            provider,
        } => vec![
            field("model", string(model)),
            field("tokens_in", long("tokens_in", *tokens_in)?),
            field("tokens_out", long("tokens_out", *tokens_out)?),
            field("cost_micros", long("cost_micros", *cost_micros)?),
            field("started_at", Value::TimestampMicros(*started_at)),
            field("content", content_to_value(content, c)?),
            field(
                "cache_read_tokens",
                long("cache_read_tokens", *cache_read_tokens)?,
            ),
            field(
                "cache_creation_tokens",
                long("cache_creation_tokens", *cache_creation_tokens)?,
            ),
            field("provider", optional_string(provider)),
        ],
        E::ToolCallRequested {
            tool,
            arguments,
            effect,
            approval_id,
        } => vec![
            field("tool", string(tool)),
            field("arguments", content_to_value(arguments, c)?),
            field("effect", symbol(EFFECT_CLASS, *effect as usize)),
            field("approval_id", optional_string(approval_id)),
        ],
        E::ToolCallResult {
            call_seq,
            outcome,
            output,
            source,
            recorded_by,
            note,
        } => vec![
            field("call_seq", long("call_seq", *call_seq)?),
            field("outcome", symbol(CALL_OUTCOME, *outcome as usize)),
            field("output", content_to_value(output, c)?),
            field("source", symbol(RESULT_SOURCE, *source as usize)),
            field("recorded_by", optional_string(recorded_by)),
            field("note", optional_sealable(note)),
        ],
        E::SteeringMessage { author, content } => vec![
            field("author", string(author)),
            field("content", content_to_value(content, c)?),
        ],
        E::PlanUpdated { plan } => vec![field("plan", content_to_value(plan, c)?)],
        E::ApprovalRequested {
            approval_id,
            action,
            action_digest,
        } => vec![
            field("approval_id", string(approval_id)),
            field("action", sealable(action)),
            field("action_digest", optional_string(action_digest)),
        ],
        E::ApprovalDecided {
            approval_id,
            approved,
            decided_by,
            reason,
            request_seq,
            action_digest,
        } => vec![
            field("approval_id", string(approval_id)),
            field("approved", Value::Boolean(*approved)),
            field("decided_by", string(decided_by)),
            field("reason", optional_sealable(reason)),
            field(
                "request_seq",
                optional(
                    request_seq
                        .map(|seq| long("request_seq", seq))
                        .transpose()?,
                ),
            ),
            field("action_digest", optional_string(action_digest)),
        ],
        E::Checkpoint {
            state_digest,
            workspace_revision,
        } => vec![
            field("state_digest", string(state_digest)),
            field("workspace_revision", optional_string(workspace_revision)),
        ],
        E::WriterClaimed {
            writer,
            writer_token_sha256,
        } => vec![
            field("writer", string(writer)),
            field("writer_token_sha256", optional_string(writer_token_sha256)),
        ],
        E::SessionForked {
            fork_point,
            agent,
            tenant,
            forked_by,
            writer_token_sha256,
            inherited_approvals,
        } => vec![
            field(
                "fork_point",
                Value::Record(vec![
                    field(
                        "parent_session_id",
                        Value::Uuid(fork_point.parent_session_id.0),
                    ),
                    field("parent_seq", long("parent_seq", fork_point.parent_seq)?),
                    field("parent_partition", Value::Int(fork_point.parent_partition)),
                    field("parent_offset", Value::Long(fork_point.parent_offset)),
                ]),
            ),
            field("agent", string(agent)),
            field("tenant", string(tenant)),
            field("forked_by", optional_string(forked_by)),
            field("writer_token_sha256", optional_string(writer_token_sha256)),
            field(
                "inherited_approvals",
                Value::Array(
                    inherited_approvals
                        .iter()
                        .map(inherited_approval_to_value)
                        .collect::<Result<_>>()?,
                ),
            ),
        ],
        E::ResolutionRequired { call_seq, reason } => vec![
            field("call_seq", long("call_seq", *call_seq)?),
            field("reason", sealable(reason)),
        ],
        E::SessionPaused { reason, until } => vec![
            field("reason", optional_sealable(reason)),
            field("until", optional(until.map(Value::TimestampMicros))),
        ],
        E::SessionResumed {} => vec![],
        E::SessionEnded { outcome, reason } => vec![
            field("outcome", symbol(TERMINAL_OUTCOME, *outcome as usize)),
            field("reason", optional_sealable(reason)),
        ],
        E::ContextSummarized {
            first_seq,
            last_seq,
            summarized_by,
            summary,
        } => vec![
            field("first_seq", long("first_seq", *first_seq)?),
            field("last_seq", long("last_seq", *last_seq)?),
            field("summarized_by", string(summarized_by)),
            field("summary", content_to_value(summary, c)?),
        ],
        E::EventRetracted {
            retracted_seq,
            retracted_by,
        } => vec![
            field("retracted_seq", long("retracted_seq", *retracted_seq)?),
            field("retracted_by", string(retracted_by)),
        ],
        E::FrameworkStateSaved {
            framework,
            key,
            state,
        } => vec![
            field("framework", string(framework)),
            field("key", string(key)),
            field("state", content_to_value(state, c)?),
        ],
        E::SessionErased {
            requested_by,
            reason,
        } => vec![
            field("requested_by", string(requested_by)),
            field("reason", Value::Union(0, Box::new(string(reason)))),
        ],
        E::PayloadRedacted {
            redacted_seq,
            field: redacted_field,
            redacted_by,
            reason,
            redacted_at,
            key_id,
            key_destroyed,
        } => vec![
            field("redacted_seq", long("redacted_seq", *redacted_seq)?),
            field("field", string(redacted_field)),
            field("redacted_by", string(redacted_by)),
            field("reason", string(reason)),
            field("redacted_at", Value::TimestampMicros(*redacted_at)),
            field("key_id", string(key_id)),
            field("key_destroyed", Value::Boolean(*key_destroyed)),
        ],
    };
    Ok(Value::Record(fields))
}

fn inherited_approval_to_value(a: &InheritedApproval) -> Result<Value> {
    Ok(Value::Record(vec![
        field("approval_id", string(&a.approval_id)),
        field("action_digest", optional_string(&a.action_digest)),
        field("decided_by", string(&a.decided_by)),
        field(
            "parent_decision_seq",
            long("parent_decision_seq", a.parent_decision_seq)?,
        ),
    ]))
}

fn content_to_value(content: &Content, c: &Current) -> Result<Value> {
    let (branch, record) = match content {
        Content::Plain(text) => ("PlainText", vec![field("text", string(text))]),
        Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } => ("SealedText", sealed_text(key_id, nonce, ciphertext)),
    };
    let index = c
        .content_branches
        .iter()
        .position(|b| b == branch)
        .ok_or_else(|| Error::malformed("content", format!("{branch} is not in the schema")))?;
    Ok(Value::Union(index as u32, Box::new(Value::Record(record))))
}

fn field(name: &str, value: Value) -> (String, Value) {
    (name.to_owned(), value)
}

fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

fn optional(v: Option<Value>) -> Value {
    // Every optional field is `["null", T]`: branch 0 is null.
    match v {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(v) => Value::Union(1, Box::new(v)),
    }
}

fn optional_string(s: &Option<String>) -> Value {
    optional(s.as_deref().map(string))
}

/// The fields of a `SealedText` record.
fn sealed_text(key_id: &str, nonce: &[u8], ciphertext: &[u8]) -> Vec<(String, Value)> {
    vec![
        field("key_id", string(key_id)),
        field("nonce", Value::Bytes(nonce.to_vec())),
        field("ciphertext", Value::Bytes(ciphertext.to_vec())),
    ]
}

/// A sealable string's value without its union: a string, or a `SealedText` record.
fn sealable_value(content: &Content) -> Value {
    match content {
        Content::Plain(text) => string(text),
        Content::Sealed {
            key_id,
            nonce,
            ciphertext,
        } => Value::Record(sealed_text(key_id, nonce, ciphertext)),
    }
}

/// A required sealable field: `["string", "SealedText"]` (schema v2).
fn sealable(content: &Content) -> Value {
    let branch = u32::from(content.is_sealed());
    Value::Union(branch, Box::new(sealable_value(content)))
}

/// An optional sealable field: `["null", "string", "SealedText"]` (schema v2).
fn optional_sealable(content: &Option<Content>) -> Value {
    match content {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(content) => {
            let branch = 1 + u32::from(content.is_sealed());
            Value::Union(branch, Box::new(sealable_value(content)))
        }
    }
}

fn long(name: &'static str, n: u64) -> Result<Value> {
    i64::try_from(n)
        .map(Value::Long)
        .map_err(|_| Error::OutOfRange {
            field: name,
            value: n.to_string(),
        })
}

// Enum symbols in declaration order of the Rust enums, so `variant as usize` is the index.
const EFFECT_CLASS: &[&str] = &["PURE", "IDEMPOTENT", "NON_IDEMPOTENT"];
const CALL_OUTCOME: &[&str] = &["SUCCEEDED", "FAILED"];
const RESULT_SOURCE: &[&str] = &["EXECUTED", "RESOLVER", "OPERATOR"];
const TERMINAL_OUTCOME: &[&str] = &["COMPLETED", "FAILED", "CANCELLED"];

fn symbol(symbols: &[&str], index: usize) -> Value {
    // The writer validates (index, symbol) against the schema before writing, so a drift
    // between these tables and the `.avsc` is an encoding error, not silent corruption.
    Value::Enum(index as u32, symbols[index].to_owned())
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Decodes raw Avro bodies written with one writer schema, resolving them into the current
/// reader schema and then into [`EventEnvelope`]. Build one per writer schema and reuse it.
pub struct BodyDecoder {
    writer_schema: &'static Schema,
    writer_names: ResolvedSchema<'static>,
    reader: GenericDatumReader<'static>,
    /// The writer is the current schema: resolution would be the identity, so skip it.
    is_current: bool,
}

impl std::fmt::Debug for BodyDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyDecoder")
            .field(
                "writer",
                &self.writer_schema.name().map(|n| n.fullname(None)),
            )
            .field("is_current", &self.is_current)
            .finish()
    }
}

/// Writer schemas with `'static` lifetime, interned by their full JSON form.
///
/// apache-avro's datum reader borrows its schema, so a decoder that owns one would be
/// self-referential. A process meets only a handful of distinct writer schemas (one per
/// registered version), so each distinct schema is leaked once and shared from then on:
/// memory is bounded by the number of distinct schemas, not by decoders built.
static INTERNED: LazyLock<Mutex<HashMap<String, &'static Schema>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn intern(schema: &Schema) -> Result<&'static Schema> {
    let key = serde_json::to_string(schema)
        .map_err(|e| Error::malformed("writer schema", e.to_string()))?;
    for kept in schema_versions() {
        if serde_json::to_string(&kept.schema).is_ok_and(|k| k == key) {
            return Ok(&kept.schema);
        }
    }
    // A poisoned lock only means another thread panicked mid-insert of a complete entry.
    let mut map = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
    Ok(*map
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(schema.clone()))))
}

impl BodyDecoder {
    /// A decoder for bodies written with `writer` (any kept version, or a schema from the registry).
    pub fn new(writer: &Schema) -> Result<Self> {
        let writer_schema = intern(writer)?;
        let writer_names = ResolvedSchema::new(writer_schema).map_err(schema_error("writer"))?;
        let reader = GenericDatumReader::builder(writer_schema)
            .build()
            .map_err(schema_error("writer"))?;
        let current = &*CURRENT;
        Ok(Self {
            writer_schema,
            writer_names,
            reader,
            is_current: std::ptr::eq(writer_schema, current.schema),
        })
    }

    /// A decoder for bodies written with kept version `version`.
    pub fn for_version(version: u32) -> Result<Self> {
        let kept = schema_version(version).ok_or_else(|| {
            Error::malformed("schema_version", format!("version {version} is not kept"))
        })?;
        Self::new(&kept.schema)
    }

    /// The writer schema this decoder reads.
    pub fn writer_schema(&self) -> &Schema {
        self.writer_schema
    }

    /// Decode one raw Avro body (without the wire-format header).
    pub fn decode(&self, body: &[u8]) -> Result<EventEnvelope> {
        value_to_envelope(self.decode_value(body)?, &CURRENT)
    }

    /// Decode one raw Avro body into a `Value` of the current reader schema.
    pub fn decode_value(&self, body: &[u8]) -> Result<Value> {
        let value = self.read_written(body)?;
        if self.is_current {
            return Ok(value);
        }
        let current = &*CURRENT;
        Resolver {
            writer: self.writer_names.get_names(),
            reader: current.names.get_names(),
        }
        .resolve(value, self.writer_schema, current.schema)
    }

    /// Decode one raw body into a `Value` of kept version `reader_version`'s schema, resolved
    /// as this crate resolves into its current one: what a release whose current version was
    /// `reader_version` reads (its resolution is unchanged since v1). For upgrade tests, e.g.
    /// what a projector of the previous release makes of a record written by this one.
    pub fn decode_value_as(&self, body: &[u8], reader_version: u32) -> Result<Value> {
        let reader = schema_version(reader_version).ok_or_else(|| {
            Error::malformed(
                "reader_version",
                format!("version {reader_version} is not kept"),
            )
        })?;
        let names = ResolvedSchema::new(&reader.schema).map_err(schema_error("reader"))?;
        let written = self.read_written(body)?;
        Resolver {
            writer: self.writer_names.get_names(),
            reader: names.get_names(),
        }
        .resolve(written, self.writer_schema, &reader.schema)
    }

    /// The datum of the writer schema, before any resolution.
    fn read_written(&self, body: &[u8]) -> Result<Value> {
        let mut input = EofTracking {
            rest: body,
            hit_eof: false,
        };
        let decoded = self.reader.read_value(&mut input);
        // apache-avro decodes a union index missing at end of input as the null branch, so a
        // body cut just before an optional field would decode "successfully" to different data.
        // A well-formed datum never reads past its end, so any such read means truncation.
        if input.hit_eof {
            return Err(Error::Truncated);
        }
        let value = decoded.map_err(Error::Decode)?;
        // A datum of the writer schema consumes its bytes exactly; leftovers mean corruption.
        if !input.rest.is_empty() {
            return Err(Error::TrailingBytes(input.rest.len()));
        }
        Ok(value)
    }
}

/// A byte-slice reader that remembers whether the decoder asked for bytes past the end.
struct EofTracking<'a> {
    rest: &'a [u8],
    hit_eof: bool,
}

impl std::io::Read for EofTracking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !buf.is_empty() && self.rest.is_empty() {
            self.hit_eof = true;
        }
        self.rest.read(buf)
    }
}

/// Decode a raw body written with the current schema.
pub fn decode_body(body: &[u8]) -> Result<EventEnvelope> {
    static SELF_DECODER: LazyLock<Result<BodyDecoder>> =
        LazyLock::new(|| BodyDecoder::new(&current_schema().schema));
    match &*SELF_DECODER {
        Ok(decoder) => decoder.decode(body),
        Err(e) => Err(Error::malformed("current schema", e.to_string())),
    }
}

/// Writer-to-reader resolution that matches union branches by name (see the module docs).
struct Resolver<'w, 'r> {
    writer: &'w NamesRef<'w>,
    reader: &'r NamesRef<'r>,
}

impl Resolver<'_, '_> {
    fn resolve(&self, value: Value, writer: &Schema, reader: &Schema) -> Result<Value> {
        let writer = deref(writer, self.writer)?;
        let reader = deref(reader, self.reader)?;
        match (writer, reader, value) {
            // Strip the writer's union: only the branch actually written matters.
            (Schema::Union(wu), _, Value::Union(i, inner)) => {
                let branch = wu.variants().get(i as usize).ok_or_else(|| {
                    Error::malformed("union", format!("branch {i} beyond the writer schema"))
                })?;
                self.resolve(*inner, branch, reader)
            }
            (_, Schema::Union(ru), value) => match pick_branch(writer, ru, self.reader)? {
                Some(j) => {
                    let inner = self.resolve(value, writer, &ru.variants()[j])?;
                    Ok(Value::Union(j as u32, Box::new(inner)))
                }
                // A named type the reader has no branch for (an event kind of a newer schema):
                // apache-avro would pick the first branch the value fits, e.g. a record whose
                // fields all have defaults, and the reader would fold an event nobody wrote.
                None if writer.name().is_some() => Err(Error::malformed(
                    "union",
                    format!(
                        "a {}, which the reader's schema has no branch for: a record of a newer \
                         schema version; upgrade this reader",
                        writer.name().map(|n| n.fullname(None)).unwrap_or_default()
                    ),
                )),
                // Unnamed and no same-kind branch (e.g. a promotion into a union): apache-avro's
                // matching is safe here since no named type is involved.
                None => value
                    .resolve_with_names(reader, self.reader)
                    .map_err(Error::Decode),
            },
            (Schema::Record(wr), Schema::Record(rr), Value::Record(fields)) => {
                self.resolve_record(wr, rr, fields)
            }
            (_, _, value) => value
                .resolve_with_names(reader, self.reader)
                .map_err(Error::Decode),
        }
    }

    fn resolve_record(
        &self,
        writer: &RecordSchema,
        reader: &RecordSchema,
        fields: Vec<(String, Value)>,
    ) -> Result<Value> {
        let mut written: HashMap<String, Value> = fields.into_iter().collect();
        let mut out = Vec::with_capacity(reader.fields.len());
        for rf in &reader.fields {
            let wf = writer
                .fields
                .iter()
                .find(|wf| wf.name == rf.name || rf.aliases.contains(&wf.name));
            let value = match wf.and_then(|wf| written.remove(&wf.name).map(|v| (wf, v))) {
                Some((wf, v)) => self.resolve(v, &wf.schema, &rf.schema)?,
                None => match &rf.default {
                    Some(default) => default_value(default, &rf.schema, self.reader)?,
                    None => {
                        return Err(Error::malformed(
                            &rf.name,
                            format!(
                                "the writer has no such field and the reader ({}) no default",
                                reader.name.fullname(None)
                            ),
                        ));
                    }
                },
            };
            out.push((rf.name.clone(), value));
        }
        Ok(Value::Record(out))
    }
}

/// The branch of `union` (whose names are `names`) for a value of schema `branch`: same full
/// name or an alias for named types, same kind otherwise.
fn pick_branch(
    branch: &Schema,
    union: &UnionSchema,
    names: &NamesRef<'_>,
) -> Result<Option<usize>> {
    let name = branch.name().map(|n| n.fullname(None));
    for (j, candidate) in union.variants().iter().enumerate() {
        let candidate = deref(candidate, names)?;
        let found = match (&name, candidate.name()) {
            (Some(w), Some(r)) => same_name(w, r, candidate),
            (None, None) => SchemaKind::from(branch) == SchemaKind::from(candidate),
            _ => false,
        };
        if found {
            return Ok(Some(j));
        }
    }
    Ok(None)
}

/// A field's default as a value of its schema (whose names are `names`).
fn default_value(
    default: &serde_json::Value,
    schema: &Schema,
    names: &NamesRef<'_>,
) -> Result<Value> {
    let schema = deref(schema, names)?;
    let value = Value::try_from(default.clone()).map_err(Error::Decode)?;
    match schema {
        // A union's default belongs to its first branch (Avro spec).
        Schema::Union(u) => {
            let first = u
                .variants()
                .first()
                .ok_or_else(|| Error::malformed("default", "empty union"))?;
            let inner = value
                .resolve_with_names(first, names)
                .map_err(Error::Decode)?;
            Ok(Value::Union(0, Box::new(inner)))
        }
        _ => value
            .resolve_with_names(schema, names)
            .map_err(Error::Decode),
    }
}

fn same_name(writer_fullname: &str, reader_name: &Name, reader: &Schema) -> bool {
    if reader_name.fullname(None) == writer_fullname {
        return true;
    }
    reader.aliases().is_some_and(|aliases| {
        aliases
            .iter()
            .any(|a| a.fullname(reader_name.namespace()) == writer_fullname)
    })
}

/// The fields of one decoded record, taken by name so that field order does not matter.
struct Fields {
    path: &'static str,
    items: Vec<(String, Value)>,
}

impl Fields {
    fn of(value: Value, path: &'static str) -> Result<Self> {
        match value {
            Value::Record(items) => Ok(Self { path, items }),
            other => Err(Error::malformed(
                path,
                format!("expected a record, got {other:?}"),
            )),
        }
    }

    fn take(&mut self, name: &str) -> Result<Value> {
        let at = self
            .items
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| Error::malformed(format!("{}.{name}", self.path), "missing"))?;
        Ok(self.items.swap_remove(at).1)
    }

    fn err(&self, name: &str, reason: impl Into<String>) -> Error {
        Error::malformed(format!("{}.{name}", self.path), reason)
    }

    /// A string, or the plain branch of a sealable field (`["string", "SealedText"]`, v2).
    fn string(&mut self, name: &str) -> Result<String> {
        match unwrap_union(self.take(name)?) {
            Value::String(s) => Ok(s),
            Value::Record(_) => Err(self.err(
                name,
                "sealed text in a field this build reads as plain text: upgrade the reader",
            )),
            other => Err(self.err(name, format!("expected a string, got {other:?}"))),
        }
    }

    /// A sealable string (`["string", "SealedText"]`, v2; a plain string in v1).
    fn sealable(&mut self, name: &str) -> Result<Content> {
        let value = unwrap_union(self.take(name)?);
        self.sealable_value(name, value)
    }

    /// An optional sealable string (`["null", "string", "SealedText"]`).
    fn opt_sealable(&mut self, name: &str) -> Result<Option<Content>> {
        match unwrap_union(self.take(name)?) {
            Value::Null => Ok(None),
            other => self.sealable_value(name, other).map(Some),
        }
    }

    fn sealable_value(&self, name: &str, value: Value) -> Result<Content> {
        match value {
            Value::String(s) => Ok(Content::Plain(s)),
            record @ Value::Record(_) => Fields::of(record, "sealed")?.sealed(),
            other => Err(self.err(name, format!("expected text, got {other:?}"))),
        }
    }

    /// The fields of a `SealedText` record.
    fn sealed(&mut self) -> Result<Content> {
        Ok(Content::Sealed {
            key_id: self.string("key_id")?,
            nonce: self.bytes("nonce")?,
            ciphertext: self.bytes("ciphertext")?,
        })
    }

    fn opt_string(&mut self, name: &str) -> Result<Option<String>> {
        match unwrap_union(self.take(name)?) {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            other => Err(self.err(name, format!("expected a string or null, got {other:?}"))),
        }
    }

    fn bytes(&mut self, name: &str) -> Result<Vec<u8>> {
        match self.take(name)? {
            Value::Bytes(b) => Ok(b),
            other => Err(self.err(name, format!("expected bytes, got {other:?}"))),
        }
    }

    fn boolean(&mut self, name: &str) -> Result<bool> {
        match self.take(name)? {
            Value::Boolean(b) => Ok(b),
            other => Err(self.err(name, format!("expected a boolean, got {other:?}"))),
        }
    }

    fn long(&mut self, name: &str) -> Result<i64> {
        match self.take(name)? {
            Value::Long(n) | Value::TimestampMicros(n) => Ok(n),
            Value::Int(n) => Ok(i64::from(n)),
            other => Err(self.err(name, format!("expected a long, got {other:?}"))),
        }
    }

    fn unsigned(&mut self, name: &str) -> Result<u64> {
        let n = self.long(name)?;
        u64::try_from(n).map_err(|_| self.err(name, format!("negative: {n}")))
    }

    /// An optional long or timestamp (`["null", "long"]`, `["null", timestamp-micros]`).
    fn opt_long(&mut self, name: &str) -> Result<Option<i64>> {
        match unwrap_union(self.take(name)?) {
            Value::Null => Ok(None),
            Value::Long(n) | Value::TimestampMicros(n) => Ok(Some(n)),
            other => Err(self.err(name, format!("expected a long or null, got {other:?}"))),
        }
    }

    /// An optional non-negative long (`["null", "long"]`).
    fn opt_unsigned(&mut self, name: &str) -> Result<Option<u64>> {
        match unwrap_union(self.take(name)?) {
            Value::Null => Ok(None),
            Value::Long(n) => u64::try_from(n)
                .map(Some)
                .map_err(|_| self.err(name, format!("negative: {n}"))),
            other => Err(self.err(name, format!("expected a long or null, got {other:?}"))),
        }
    }

    /// The `InheritedApproval` records of a fork (v5; an empty array before).
    fn inherited_approvals(&mut self, name: &str) -> Result<Vec<InheritedApproval>> {
        let items = match self.take(name)? {
            Value::Array(items) => items,
            other => return Err(self.err(name, format!("expected an array, got {other:?}"))),
        };
        items
            .into_iter()
            .map(|item| {
                let mut a = Fields::of(item, "event.inherited_approvals")?;
                Ok(InheritedApproval {
                    approval_id: a.string("approval_id")?,
                    action_digest: a.opt_string("action_digest")?,
                    decided_by: a.string("decided_by")?,
                    parent_decision_seq: a.unsigned("parent_decision_seq")?,
                })
            })
            .collect()
    }

    fn int(&mut self, name: &str) -> Result<i32> {
        match self.take(name)? {
            Value::Int(n) => Ok(n),
            other => Err(self.err(name, format!("expected an int, got {other:?}"))),
        }
    }

    fn uuid(&mut self, name: &str) -> Result<Uuid> {
        let value = self.take(name)?;
        self.uuid_value(name, value)
    }

    fn opt_uuid(&mut self, name: &str) -> Result<Option<Uuid>> {
        match unwrap_union(self.take(name)?) {
            Value::Null => Ok(None),
            other => self.uuid_value(name, other).map(Some),
        }
    }

    fn uuid_value(&self, name: &str, value: Value) -> Result<Uuid> {
        match value {
            Value::Uuid(u) => Ok(u),
            Value::String(s) => Uuid::parse_str(&s).map_err(|e| self.err(name, e.to_string())),
            other => Err(self.err(name, format!("expected a uuid, got {other:?}"))),
        }
    }

    fn symbol(&mut self, name: &str, symbols: &[&str]) -> Result<usize> {
        let symbol = match self.take(name)? {
            Value::Enum(_, s) | Value::String(s) => s,
            other => return Err(self.err(name, format!("expected an enum, got {other:?}"))),
        };
        symbols
            .iter()
            .position(|s| *s == symbol)
            .ok_or_else(|| self.err(name, format!("unknown symbol {symbol}")))
    }

    fn content(&mut self, name: &str, c: &Current) -> Result<Content> {
        let (index, inner) = match self.take(name)? {
            Value::Union(i, inner) => (i, *inner),
            other => return Err(self.err(name, format!("expected a content union, got {other:?}"))),
        };
        let branch = c
            .content_branches
            .get(index as usize)
            .ok_or_else(|| self.err(name, format!("content branch {index} is unknown")))?;
        let mut f = Fields::of(inner, "content")?;
        match branch.as_str() {
            "PlainText" => Ok(Content::Plain(f.string("text")?)),
            "SealedText" => f.sealed(),
            other => Err(self.err(name, format!("content kind {other} is unknown"))),
        }
    }
}

fn unwrap_union(value: Value) -> Value {
    match value {
        Value::Union(_, inner) => *inner,
        other => other,
    }
}

fn value_to_envelope(value: Value, c: &Current) -> Result<EventEnvelope> {
    let mut f = Fields::of(value, "envelope")?;
    let (index, event) = match f.take("event")? {
        Value::Union(i, inner) => (i, *inner),
        other => return Err(f.err("event", format!("expected a union, got {other:?}"))),
    };
    let kind = c
        .event_branches
        .get(index as usize)
        .ok_or_else(|| f.err("event", format!("event branch {index} is unknown")))?;
    let schema_version = f.int("schema_version")?;
    Ok(EventEnvelope {
        event_id: f.uuid("event_id")?,
        session_id: SessionId(f.uuid("session_id")?),
        seq: f.unsigned("seq")?,
        writer_epoch: f.unsigned("writer_epoch")?,
        occurred_at: f.long("occurred_at")?,
        causation_id: f.opt_uuid("causation_id")?,
        idempotency_key: f.opt_string("idempotency_key")?,
        schema_version: u32::try_from(schema_version)
            .map_err(|_| f.err("schema_version", format!("negative: {schema_version}")))?,
        event: value_to_event(kind, event, c)?,
        attestation: match unwrap_union(f.take("attestation")?) {
            Value::Null => None,
            record => {
                let mut a = Fields::of(record, "envelope.attestation")?;
                Some(Attestation {
                    key_id: a.string("key_id")?,
                    signature: a.bytes("signature")?,
                })
            }
        },
    })
}

fn value_to_event(kind: &str, value: Value, c: &Current) -> Result<SessionEvent> {
    use SessionEvent as E;
    let mut f = Fields::of(value, "event")?;
    Ok(match kind {
        "SessionStarted" => E::SessionStarted {
            agent: f.string("agent")?,
            title: f.opt_sealable("title")?,
            tenant: f.string("tenant")?,
            writer_token_sha256: f.opt_string("writer_token_sha256")?,
            name_sha256: f.opt_string("name_sha256")?,
        },
        "UserRequest" => E::UserRequest {
            content: f.content("content", c)?,
        },
        "ModelResponse" => E::ModelResponse {
            model: f.string("model")?,
            tokens_in: f.unsigned("tokens_in")?,
            tokens_out: f.unsigned("tokens_out")?,
            cost_micros: f.unsigned("cost_micros")?,
            started_at: f.long("started_at")?,
            content: f.content("content", c)?,
            cache_read_tokens: f.unsigned("cache_read_tokens")?,
            cache_creation_tokens: f.unsigned("cache_creation_tokens")?,
            provider: f.opt_string("provider")?,
        },
        "ToolCallRequested" => E::ToolCallRequested {
            tool: f.string("tool")?,
            arguments: f.content("arguments", c)?,
            effect: [
                EffectClass::Pure,
                EffectClass::Idempotent,
                EffectClass::NonIdempotent,
            ][f.symbol("effect", EFFECT_CLASS)?],
            approval_id: f.opt_string("approval_id")?,
        },
        "ToolCallResult" => E::ToolCallResult {
            call_seq: f.unsigned("call_seq")?,
            outcome: [CallOutcome::Succeeded, CallOutcome::Failed]
                [f.symbol("outcome", CALL_OUTCOME)?],
            output: f.content("output", c)?,
            source: [
                ResultSource::Executed,
                ResultSource::Resolver,
                ResultSource::Operator,
            ][f.symbol("source", RESULT_SOURCE)?],
            recorded_by: f.opt_string("recorded_by")?,
            note: f.opt_sealable("note")?,
        },
        "SteeringMessage" => E::SteeringMessage {
            author: f.string("author")?,
            content: f.content("content", c)?,
        },
        "PlanUpdated" => E::PlanUpdated {
            plan: f.content("plan", c)?,
        },
        "ApprovalRequested" => E::ApprovalRequested {
            approval_id: f.string("approval_id")?,
            action: f.sealable("action")?,
            action_digest: f.opt_string("action_digest")?,
        },
        "ApprovalDecided" => E::ApprovalDecided {
            approval_id: f.string("approval_id")?,
            approved: f.boolean("approved")?,
            decided_by: f.string("decided_by")?,
            reason: f.opt_sealable("reason")?,
            request_seq: f.opt_unsigned("request_seq")?,
            action_digest: f.opt_string("action_digest")?,
        },
        "Checkpoint" => E::Checkpoint {
            state_digest: f.string("state_digest")?,
            workspace_revision: f.opt_string("workspace_revision")?,
        },
        "WriterClaimed" => E::WriterClaimed {
            writer: f.string("writer")?,
            writer_token_sha256: f.opt_string("writer_token_sha256")?,
        },
        "SessionForked" => {
            let mut p = Fields::of(f.take("fork_point")?, "event.fork_point")?;
            E::SessionForked {
                fork_point: ForkPoint {
                    parent_session_id: SessionId(p.uuid("parent_session_id")?),
                    parent_seq: p.unsigned("parent_seq")?,
                    parent_partition: p.int("parent_partition")?,
                    parent_offset: p.long("parent_offset")?,
                },
                agent: f.string("agent")?,
                tenant: f.string("tenant")?,
                forked_by: f.opt_string("forked_by")?,
                writer_token_sha256: f.opt_string("writer_token_sha256")?,
                inherited_approvals: f.inherited_approvals("inherited_approvals")?,
            }
        }
        "ResolutionRequired" => E::ResolutionRequired {
            call_seq: f.unsigned("call_seq")?,
            reason: f.sealable("reason")?,
        },
        "SessionPaused" => E::SessionPaused {
            reason: f.opt_sealable("reason")?,
            until: f.opt_long("until")?,
        },
        "SessionResumed" => E::SessionResumed {},
        "SessionEnded" => E::SessionEnded {
            outcome: [
                TerminalOutcome::Completed,
                TerminalOutcome::Failed,
                TerminalOutcome::Cancelled,
            ][f.symbol("outcome", TERMINAL_OUTCOME)?],
            reason: f.opt_sealable("reason")?,
        },
        "SessionErased" => E::SessionErased {
            requested_by: f.string("requested_by")?,
            reason: f.string("reason")?,
        },
        "ContextSummarized" => E::ContextSummarized {
            first_seq: f.unsigned("first_seq")?,
            last_seq: f.unsigned("last_seq")?,
            summarized_by: f.string("summarized_by")?,
            summary: f.content("summary", c)?,
        },
        "EventRetracted" => E::EventRetracted {
            retracted_seq: f.unsigned("retracted_seq")?,
            retracted_by: f.string("retracted_by")?,
        },
        "FrameworkStateSaved" => E::FrameworkStateSaved {
            framework: f.string("framework")?,
            key: f.string("key")?,
            state: f.content("state", c)?,
        },
        "PayloadRedacted" => E::PayloadRedacted {
            redacted_seq: f.unsigned("redacted_seq")?,
            field: f.string("field")?,
            redacted_by: f.string("redacted_by")?,
            reason: f.string("reason")?,
            redacted_at: f.long("redacted_at")?,
            key_id: f.string("key_id")?,
            key_destroyed: f.boolean("key_destroyed")?,
        },
        other => return Err(Error::malformed("event", format!("unknown kind {other}"))),
    })
}
