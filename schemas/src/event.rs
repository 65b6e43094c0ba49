//! The session event model: one envelope, many kinds.
//!
//! These types mirror `avro/session-event.v*.avsc`; `crate::avro` converts between the two.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// The stable identity of a session (a UUIDv7 unless the caller supplies one).
/// It is the Kafka record key, so every event of a session lands on one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct SessionId(pub Uuid);

impl SessionId {
    /// A fresh, time-ordered session id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for SessionId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// The position of an event in a session's gap-free sequence (the first event is 1).
pub type Seq = u64;

/// A writer epoch: the generation of the harness allowed to append to a session.
pub type Epoch = u64;

/// Microseconds since the Unix epoch (Avro `timestamp-micros`).
pub type Micros = i64;

/// The current time as event timestamps carry it.
pub fn now_micros() -> Micros {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// The part common to every event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventEnvelope {
    /// Unique id of this event (UUIDv7); a retry of the same event keeps it.
    pub event_id: Uuid,
    /// The session this event belongs to; also the Kafka record key.
    pub session_id: SessionId,
    /// Gap-free position in the session. For `WriterClaimed` it is the next seq the
    /// claimant expects, which the fold does not use for ordering (claims are arbitrated by epoch).
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub seq: Seq,
    /// The epoch of the writer that appended this event.
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub writer_epoch: Epoch,
    /// When the writer created the event.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub occurred_at: Micros,
    /// The event this one answers or follows from (e.g. the tool call a result answers).
    pub causation_id: Option<Uuid>,
    /// A key that lets an external service recognise a repeated side-effecting request.
    pub idempotency_key: Option<String>,
    /// The version of the session-event schema the writer used.
    pub schema_version: u32,
    /// What happened.
    pub event: SessionEvent,
    /// The signature of the service that appended a privileged event on a verified caller's
    /// behalf (schema v2); `None` on everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
}

impl EventEnvelope {
    /// A new event of `session_id` at `seq`, written at `writer_epoch`: a fresh UUIDv7 id, the
    /// time now, the schema version this build writes, and no cause, key or attestation (set
    /// those with [`Self::caused_by`], [`Self::with_idempotency_key`] or the fields).
    pub fn new(session_id: SessionId, seq: Seq, writer_epoch: Epoch, event: SessionEvent) -> Self {
        Self {
            event_id: Uuid::now_v7(),
            session_id,
            seq,
            writer_epoch,
            occurred_at: now_micros(),
            causation_id: None,
            idempotency_key: None,
            schema_version: crate::avro::CURRENT_SCHEMA_VERSION,
            event,
            attestation: None,
        }
    }

    /// The same event, answering or following from the event `cause`.
    pub fn caused_by(mut self, cause: Uuid) -> Self {
        self.causation_id = Some(cause);
        self
    }

    /// The same event, naming itself to a tool's service by `key`.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// A service's signature over a privileged event's attested statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attestation {
    /// Which of the service's keys signed.
    pub key_id: String,
    /// The signature.
    pub signature: Vec<u8>,
}

/// The tenant of a session written before tenants existed (schema v1), and of one created
/// with authentication disabled.
pub const DEFAULT_TENANT: &str = "default";

fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

/// A payload that may hold sensitive text: prompts, responses, tool arguments and outputs.
///
/// `Sealed` exists from schema v1 on so that per-session encryption (docs/design.md, "Privacy")
/// is not a breaking schema change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Content {
    /// Readable text.
    Plain(String),
    /// Text encrypted under the session's data key. In JSON the bytes are base64 strings
    /// (stored states and context turns keep them: an array of numbers would triple them).
    Sealed {
        /// Which data key (and version) sealed it.
        key_id: String,
        /// The AEAD nonce.
        #[serde(with = "base64_bytes")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Byte))]
        nonce: Vec<u8>,
        /// Ciphertext with its authentication tag.
        #[serde(with = "base64_bytes")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Byte))]
        ciphertext: Vec<u8>,
    },
}

impl Content {
    /// Plain text content.
    pub fn plain(text: impl Into<String>) -> Self {
        Self::Plain(text.into())
    }

    /// The text, if it is not sealed.
    pub fn as_plain(&self) -> Option<&str> {
        match self {
            Self::Plain(text) => Some(text),
            Self::Sealed { .. } => None,
        }
    }

    /// Whether the text is encrypted.
    pub fn is_sealed(&self) -> bool {
        matches!(self, Self::Sealed { .. })
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Self::plain(text)
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Self::Plain(text)
    }
}

/// Bytes as a base64 string in JSON (standard alphabet, padded).
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Serde for the sensitive strings schema v2 made sealable (a title, an approval's action, a
/// reason, a note): plain text is a bare JSON string, as these fields were before they could be
/// sealed, so stored states and the checkpoint digests over them are what they were; sealed
/// text is [`Content`]'s own form. Either form is read.
pub mod sealable {
    use super::Content;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Content(Content),
    }

    impl From<Repr> for Content {
        fn from(repr: Repr) -> Self {
            match repr {
                Repr::Text(text) => Content::Plain(text),
                Repr::Content(content) => content,
            }
        }
    }

    /// Writes plain text as a string, sealed text as [`Content`].
    pub fn serialize<S: Serializer>(content: &Content, serializer: S) -> Result<S::Ok, S::Error> {
        match content {
            Content::Plain(text) => text.serialize(serializer),
            sealed => sealed.serialize(serializer),
        }
    }

    /// Reads a string or a [`Content`].
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        Repr::deserialize(deserializer).map(Content::from)
    }

    /// The same for an optional field.
    pub mod option {
        use super::{Content, Repr};
        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes `None` as null, plain text as a string, sealed text as [`Content`].
        pub fn serialize<S: Serializer>(
            content: &Option<Content>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match content {
                None => serializer.serialize_none(),
                Some(content) => super::serialize(content, serializer),
            }
        }

        /// Reads null, a string or a [`Content`].
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Content>, D::Error> {
            Ok(Option::<Repr>::deserialize(deserializer)?.map(Content::from))
        }
    }
}

/// Whether a tool call may be repeated safely, which decides what recovery may do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EffectClass {
    /// No side effect: may run again.
    Pure,
    /// Repeating with the same idempotency key returns the first result.
    Idempotent,
    /// Repeating may repeat the side effect.
    NonIdempotent,
}

/// How a tool call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CallOutcome {
    /// The tool did what was asked.
    Succeeded,
    /// The tool reported an error.
    Failed,
}

/// Who established a tool call's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ResultSource {
    /// The harness ran the call and saw its result.
    Executed,
    /// A resolver asked the tool's service by idempotency key.
    Resolver,
    /// An operator recorded the outcome by hand.
    Operator,
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TerminalOutcome {
    /// The run finished its task.
    Completed,
    /// The run gave up on an error.
    Failed,
    /// Someone stopped the run.
    Cancelled,
}

/// Where a forked session branched off its parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkPoint {
    /// The parent session.
    pub parent_session_id: SessionId,
    /// The last parent event the child inherits.
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub parent_seq: Seq,
    /// The parent's partition.
    pub parent_partition: i32,
    /// The offset of the parent event at `parent_seq`.
    pub parent_offset: i64,
}

/// A granted approval of a parent that a fork carries over, named in the fork's first event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InheritedApproval {
    /// The approval's id in the parent (and in the fork).
    pub approval_id: String,
    /// The digest of what was approved, as the parent's request named it.
    pub action_digest: Option<String>,
    /// Who decided, in the parent.
    pub decided_by: String,
    /// The seq of the decision in the parent.
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub parent_decision_seq: Seq,
}

/// The digest naming one tool call (schema v5), what an approval that gates the call names:
/// hex SHA-256 over the tool, the idempotency key and the arguments' text, each length-prefixed
/// so no two calls share an encoding. Clients in other languages compute the same:
/// `sha256("sessionlog-call-v1\n" + field(tool) + field(key) + field(arguments))` where
/// `field(s)` is the UTF-8 byte length in decimal, `:`, then the bytes, and a missing key is `-`.
pub fn call_digest(tool: &str, idempotency_key: Option<&str>, arguments: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"sessionlog-call-v1\n");
    let mut field = |text: Option<&str>| match text {
        Some(text) => {
            hash.update(text.len().to_string().as_bytes());
            hash.update(b":");
            hash.update(text.as_bytes());
        }
        None => hash.update(b"-"),
    };
    field(Some(tool));
    field(idempotency_key);
    field(Some(arguments));
    hex::encode(hash.finalize())
}

/// The digest naming an approval's action by its text (schema v5), for an approval that gates
/// something other than one tool call: `sha256("sessionlog-action-v1\n" + text)`, hex.
pub fn action_digest(action: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"sessionlog-action-v1\n");
    hash.update(action.as_bytes());
    hex::encode(hash.finalize())
}

/// The digest of a session's name within its tenant (schema v6): what a start records and
/// the names index is keyed by, so neither keeps the name, which users often fill with their
/// own identifiers. `sha256("sessionlog-name-v1\n" + tenant + "\n" + name)`, hex.
pub fn session_name_sha256(tenant: &str, name: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"sessionlog-name-v1\n");
    hash.update(tenant.as_bytes());
    hash.update(b"\n");
    hash.update(name.as_bytes());
    hex::encode(hash.finalize())
}

/// The kinds of session event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SessionEvent {
    /// A new session begins (always seq 1 of a session that is not a fork).
    SessionStarted {
        /// Which agent or harness runs it.
        agent: String,
        /// The human-readable task.
        #[serde(default, with = "sealable::option")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        title: Option<Content>,
        /// The tenant the session belongs to, fixed at its start (schema v2).
        #[serde(default = "default_tenant")]
        tenant: String,
        /// Hex SHA-256 of the token this epoch's writer holds (schema v5): the services let
        /// only a caller presenting the token append at this epoch. `None` before v5.
        #[serde(default)]
        writer_token_sha256: Option<String>,
        /// Hex SHA-256 of the session's tenant-scoped name (schema v6, see
        /// [`session_name_sha256`]): a replay restores the name's index from it. `None` for a
        /// session without a name, and before v6.
        #[serde(default)]
        name_sha256: Option<String>,
    },
    /// A user asked something.
    UserRequest {
        /// The request.
        content: Content,
    },
    /// The model answered.
    ModelResponse {
        /// Model name.
        model: String,
        /// Prompt tokens.
        tokens_in: u64,
        /// Completion tokens.
        tokens_out: u64,
        /// Cost in millionths of a US dollar.
        cost_micros: u64,
        /// When the model call began.
        #[cfg_attr(feature = "openapi", schema(value_type = i64))]
        started_at: Micros,
        /// The response.
        content: Content,
        /// Prompt tokens served from the provider's cache (schema v2).
        #[serde(default)]
        cache_read_tokens: u64,
        /// Prompt tokens written to the provider's cache (schema v2).
        #[serde(default)]
        cache_creation_tokens: u64,
        /// Who served the model (`openai`, `anthropic`, ...), if known (schema v2).
        #[serde(default)]
        provider: Option<String>,
    },
    /// The agent asked for a tool call. The envelope's `idempotency_key` names it to the tool's service.
    ToolCallRequested {
        /// Tool name.
        tool: String,
        /// The arguments.
        arguments: Content,
        /// What repeating it would do.
        effect: EffectClass,
        /// The granted approval this call acts on (schema v5): the call's digest
        /// ([`call_digest`]) must be the one approved, and an approval is acted on once.
        #[serde(default)]
        approval_id: Option<String>,
    },
    /// A tool call's result. The envelope's `causation_id` is the call's event id.
    ToolCallResult {
        /// The seq of the `ToolCallRequested` this answers.
        #[cfg_attr(feature = "openapi", schema(value_type = u64))]
        call_seq: Seq,
        /// How it ended.
        outcome: CallOutcome,
        /// The output.
        output: Content,
        /// Who established it.
        source: ResultSource,
        /// Who recorded it (an operator's name, or a resolver's).
        recorded_by: Option<String>,
        /// Why (an operator's reason).
        #[serde(default, with = "sealable::option")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        note: Option<Content>,
    },
    /// A human steered the run mid-flight.
    SteeringMessage {
        /// Who.
        author: String,
        /// What they said.
        content: Content,
    },
    /// The agent's plan changed.
    PlanUpdated {
        /// The new plan.
        plan: Content,
    },
    /// The run waits for a human decision.
    ApprovalRequested {
        /// Names the approval within the session.
        approval_id: String,
        /// What is to be approved.
        #[serde(with = "sealable")]
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        action: Content,
        /// Hex SHA-256 naming what is to be approved (schema v5): for a tool call its
        /// [`call_digest`], else the [`action_digest`] of the action's text. The decision is
        /// signed over it, so it approves exactly this.
        #[serde(default)]
        action_digest: Option<String>,
    },
    /// A human decided.
    ApprovalDecided {
        /// Which approval.
        approval_id: String,
        /// Yes or no.
        approved: bool,
        /// Who decided.
        decided_by: String,
        /// Why.
        #[serde(default, with = "sealable::option")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        reason: Option<Content>,
        /// The seq of the request this decides (schema v5).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>))]
        request_seq: Option<Seq>,
        /// The digest the request named: what was approved (schema v5).
        #[serde(default)]
        action_digest: Option<String>,
    },
    /// A verified position to resume or fork from.
    Checkpoint {
        /// Digest of the session state covering every event before this one, as the writer computed it.
        state_digest: String,
        /// The workspace revision at this point, if the harness has one.
        workspace_revision: Option<String>,
    },
    /// A harness took over the session with a new epoch (equal to the envelope's `writer_epoch`).
    WriterClaimed {
        /// Which harness.
        writer: String,
        /// Hex SHA-256 of the token this epoch's writer holds (schema v5): the services let
        /// only a caller presenting the token append at this epoch. `None` before v5.
        #[serde(default)]
        writer_token_sha256: Option<String>,
    },
    /// First event of a session forked from another.
    SessionForked {
        /// Where it branched.
        fork_point: ForkPoint,
        /// Which agent or harness runs the branch.
        agent: String,
        /// The tenant: the parent's (schema v2).
        #[serde(default = "default_tenant")]
        tenant: String,
        /// The verified caller who asked for the fork, when the recovery service made it for
        /// one (schema v2).
        #[serde(default)]
        forked_by: Option<String>,
        /// Hex SHA-256 of the token this epoch's writer holds (schema v5): the services let
        /// only a caller presenting the token append at this epoch. `None` before v5.
        #[serde(default)]
        writer_token_sha256: Option<String>,
        /// Granted approvals of the parent the fork carries over (schema v5): none unless
        /// the fork names them.
        #[serde(default)]
        inherited_approvals: Vec<InheritedApproval>,
    },
    /// An in-doubt tool call needs an operator to record its outcome.
    ResolutionRequired {
        /// The seq of the call in doubt.
        #[cfg_attr(feature = "openapi", schema(value_type = u64))]
        call_seq: Seq,
        /// Why it could not be resolved automatically.
        #[serde(with = "sealable")]
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        reason: Content,
    },
    /// The run paused.
    SessionPaused {
        /// Why.
        #[serde(default, with = "sealable::option")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        reason: Option<Content>,
        /// When the pause lapses and the session wants its harness again, in microseconds
        /// since the Unix epoch (schema v7). `None`: until someone unpauses it; always `None`
        /// before v7.
        #[serde(default)]
        until: Option<Micros>,
    },
    /// The run resumed.
    SessionResumed {},
    /// The run ended.
    SessionEnded {
        /// How.
        outcome: TerminalOutcome,
        /// Why.
        #[serde(default, with = "sealable::option")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        reason: Option<Content>,
    },
    /// The session's data key was destroyed: its payloads are unreadable from now on.
    SessionErased {
        /// Who asked.
        requested_by: String,
        /// Why. Never sealed: it is written as the session's key is destroyed and stays the
        /// readable record of the erasure, so it must not hold personal data.
        reason: String,
    },
    /// A summary of a range of this session's own history (schema v3), written by the harness
    /// or a summariser it runs. It hides nothing: the covered events stay readable by range;
    /// the context view shows the summary, with a reference to the range, in their place.
    ContextSummarized {
        /// The first seq covered.
        first_seq: Seq,
        /// The last seq covered; before this event's own seq.
        last_seq: Seq,
        /// Who wrote the summary: the summariser's model or author.
        summarized_by: String,
        /// The summary.
        summary: Content,
    },
    /// Withdraws an earlier event of this session from the conversation (schema v4): the context view
    /// stops showing it and conversation readers skip it; the log keeps both.
    EventRetracted {
        /// The seq of the withdrawn event: an earlier event of this session.
        retracted_seq: Seq,
        /// Who withdrew it (a harness, a framework adapter such as `openai-agents:pop_item`).
        retracted_by: String,
    },
    /// A framework's own state, saved in the log (schema v4): a LangGraph checkpoint or pending
    /// write, kept sealed like any text and read back by range reads. The fold does not interpret it.
    FrameworkStateSaved {
        /// Which framework wrote it (`langgraph`).
        framework: String,
        /// The framework's name for it (`checkpoint:{ns}:{id}`, `writes:{ns}:{id}:{task}:{idx}`).
        key: String,
        /// The state itself (the framework's serialisation, e.g. JSON with base64 blobs): sealed.
        state: Content,
    },
    /// One sealed field of an earlier event of this session redacted (schema v8): the field's
    /// own key is destroyed, so its text is gone wherever it was copied, while the event's
    /// metadata and every digest stay. Appended signed by the recovery service for an operator.
    PayloadRedacted {
        /// The seq of the event whose field is redacted: an earlier event of this session.
        #[cfg_attr(feature = "openapi", schema(value_type = u64))]
        redacted_seq: Seq,
        /// The sealed field (`output`, `arguments`, `content`, ...).
        field: String,
        /// Who redacted it: the verified operator.
        redacted_by: String,
        /// Why. Never sealed: the readable record of the redaction, so it must not hold
        /// personal data.
        reason: String,
        /// When the field's key was destroyed (microseconds since the Unix epoch).
        #[cfg_attr(feature = "openapi", schema(value_type = i64))]
        redacted_at: Micros,
        /// Which key: the sealed field's key id (`dk2g:{seq}:{field}`: its own key), a
        /// per-session one (`dk1g:...`), or empty for plain text.
        key_id: String,
        /// Whether the field had a key of its own, now destroyed.
        key_destroyed: bool,
    },
}

/// The names of every sealed (sensitive) field an event can carry, in the order their
/// per-record keys are numbered (`sessionlog_keys` derives a field's key from its place here):
/// append only. A redaction (`PayloadRedacted`) names one of them.
pub const SEALED_FIELDS: [&str; 10] = [
    "title",
    "content",
    "arguments",
    "output",
    "note",
    "plan",
    "summary",
    "state",
    "action",
    "reason",
];

impl SessionEvent {
    /// Every kind's stable name, in the schema's order (what [`Self::kind`] answers).
    pub const KINDS: [&'static str; 21] = [
        "SessionStarted",
        "UserRequest",
        "ModelResponse",
        "ToolCallRequested",
        "ToolCallResult",
        "SteeringMessage",
        "PlanUpdated",
        "ApprovalRequested",
        "ApprovalDecided",
        "Checkpoint",
        "WriterClaimed",
        "SessionForked",
        "ResolutionRequired",
        "SessionPaused",
        "SessionResumed",
        "SessionEnded",
        "SessionErased",
        "ContextSummarized",
        "EventRetracted",
        "FrameworkStateSaved",
        "PayloadRedacted",
    ];

    /// The event kind's stable name, as in the Avro schema.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionStarted { .. } => "SessionStarted",
            Self::UserRequest { .. } => "UserRequest",
            Self::ModelResponse { .. } => "ModelResponse",
            Self::ToolCallRequested { .. } => "ToolCallRequested",
            Self::ToolCallResult { .. } => "ToolCallResult",
            Self::SteeringMessage { .. } => "SteeringMessage",
            Self::PlanUpdated { .. } => "PlanUpdated",
            Self::ApprovalRequested { .. } => "ApprovalRequested",
            Self::ApprovalDecided { .. } => "ApprovalDecided",
            Self::Checkpoint { .. } => "Checkpoint",
            Self::WriterClaimed { .. } => "WriterClaimed",
            Self::SessionForked { .. } => "SessionForked",
            Self::ResolutionRequired { .. } => "ResolutionRequired",
            Self::SessionPaused { .. } => "SessionPaused",
            Self::SessionResumed { .. } => "SessionResumed",
            Self::SessionEnded { .. } => "SessionEnded",
            Self::SessionErased { .. } => "SessionErased",
            Self::ContextSummarized { .. } => "ContextSummarized",
            Self::EventRetracted { .. } => "EventRetracted",
            Self::FrameworkStateSaved { .. } => "FrameworkStateSaved",
            Self::PayloadRedacted { .. } => "PayloadRedacted",
        }
    }
}
