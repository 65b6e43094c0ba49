//! Decoding: a raw Avro datum of any kept writer schema, resolved into the current reader
//! schema by name (union branches, record fields), then into an [`EventEnvelope`].

use super::fields::value_to_envelope;
use super::*;

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
pub(super) static INTERNED: LazyLock<Mutex<HashMap<String, &'static Schema>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

pub(super) fn intern(schema: &Schema) -> Result<&'static Schema> {
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
pub(super) struct EofTracking<'a> {
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
pub(super) struct Resolver<'w, 'r> {
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
pub(super) fn pick_branch(
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
pub(super) fn default_value(
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

pub(super) fn same_name(writer_fullname: &str, reader_name: &Name, reader: &Schema) -> bool {
    if reader_name.fullname(None) == writer_fullname {
        return true;
    }
    reader.aliases().is_some_and(|aliases| {
        aliases
            .iter()
            .any(|a| a.fullname(reader_name.namespace()) == writer_fullname)
    })
}
