//! A resolved Avro record, field by field, into the event model.

use super::*;

/// The fields of one decoded record, taken by name so that field order does not matter.
pub(super) struct Fields {
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

pub(super) fn unwrap_union(value: Value) -> Value {
    match value {
        Value::Union(_, inner) => *inner,
        other => other,
    }
}

pub(super) fn value_to_envelope(value: Value, c: &Current) -> Result<EventEnvelope> {
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

pub(super) fn value_to_event(kind: &str, value: Value, c: &Current) -> Result<SessionEvent> {
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
