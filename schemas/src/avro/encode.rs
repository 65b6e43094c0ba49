//! Encoding: an [`EventEnvelope`] as a raw Avro datum of the current schema or a kept older one.

use super::decode::{default_value, pick_branch};
use super::*;

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
pub(super) struct Downgrade<'f, 't> {
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

pub(super) fn same_kind(a: &Schema, b: &Schema) -> bool {
    SchemaKind::from(a) == SchemaKind::from(b)
}

pub(super) fn envelope_to_value(e: &EventEnvelope, c: &Current) -> Result<Value> {
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

pub(super) fn event_to_value(event: &SessionEvent, c: &Current) -> Result<Value> {
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

pub(super) fn inherited_approval_to_value(a: &InheritedApproval) -> Result<Value> {
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

pub(super) fn content_to_value(content: &Content, c: &Current) -> Result<Value> {
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

pub(super) fn field(name: &str, value: Value) -> (String, Value) {
    (name.to_owned(), value)
}

pub(super) fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

pub(super) fn optional(v: Option<Value>) -> Value {
    // Every optional field is `["null", T]`: branch 0 is null.
    match v {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(v) => Value::Union(1, Box::new(v)),
    }
}

pub(super) fn optional_string(s: &Option<String>) -> Value {
    optional(s.as_deref().map(string))
}

/// The fields of a `SealedText` record.
pub(super) fn sealed_text(key_id: &str, nonce: &[u8], ciphertext: &[u8]) -> Vec<(String, Value)> {
    vec![
        field("key_id", string(key_id)),
        field("nonce", Value::Bytes(nonce.to_vec())),
        field("ciphertext", Value::Bytes(ciphertext.to_vec())),
    ]
}

/// A sealable string's value without its union: a string, or a `SealedText` record.
pub(super) fn sealable_value(content: &Content) -> Value {
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
pub(super) fn sealable(content: &Content) -> Value {
    let branch = u32::from(content.is_sealed());
    Value::Union(branch, Box::new(sealable_value(content)))
}

/// An optional sealable field: `["null", "string", "SealedText"]` (schema v2).
pub(super) fn optional_sealable(content: &Option<Content>) -> Value {
    match content {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(content) => {
            let branch = 1 + u32::from(content.is_sealed());
            Value::Union(branch, Box::new(sealable_value(content)))
        }
    }
}

pub(super) fn long(name: &'static str, n: u64) -> Result<Value> {
    i64::try_from(n)
        .map(Value::Long)
        .map_err(|_| Error::OutOfRange {
            field: name,
            value: n.to_string(),
        })
}

pub(super) fn symbol(symbols: &[&str], index: usize) -> Value {
    // The writer validates (index, symbol) against the schema before writing, so a drift
    // between these tables and the `.avsc` is an encoding error, not silent corruption.
    Value::Enum(index as u32, symbols[index].to_owned())
}
