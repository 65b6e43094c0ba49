"""What the services answer, as typed values (the JSON shapes are in each service's OpenAPI
document: ``GET /v1/openapi.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

#: What running a tool call again would do; recovery settles a call in doubt by it.
EffectClass = Literal["Pure", "Idempotent", "NonIdempotent"]
#: How a tool call ended.
CallOutcome = Literal["Succeeded", "Failed"]
#: How a session ended.
TerminalOutcome = Literal["Completed", "Failed", "Cancelled"]


def _token(doc: dict[str, Any]) -> str | None:
    token = doc.get("writer_token")
    return str(token) if token else None


@dataclass(frozen=True)
class SecretNotice:
    """A secret the service's scan found in a text of an appended event (``[privacy]
    secret_scan``). It never holds the text."""

    #: The field (``output``, ``arguments``, ``content``, ...).
    field: str
    #: The id of the rule that matched (``aws-access-token``, ``private-key``, ...).
    rule: str
    #: ``redacted``: written without its text and redacted at once (it reads as redacted, with
    #: ``reason``, everywhere); ``warned``: written sealed as usual.
    action: str
    #: The redaction's reason: ``secret detected: RULE``.
    reason: str

    @staticmethod
    def from_json(doc: dict[str, Any]) -> SecretNotice:
        return SecretNotice(
            field=str(doc["field"]),
            rule=str(doc["rule"]),
            action=str(doc["action"]),
            reason=str(doc.get("reason", "")),
        )


@dataclass(frozen=True)
class EventAck:
    """One event's durable position in the log."""

    seq: int
    event_id: str
    partition: int
    offset: int
    #: True when the event had been written before (a retry): the position is the first write's.
    duplicate: bool
    #: Secrets the service's scan found in the event's texts; empty when none.
    secrets: tuple[SecretNotice, ...] = ()

    @property
    def redacted(self) -> bool:
        """Whether a text of the event was withheld and redacted for a secret."""
        return any(s.action == "redacted" for s in self.secrets)

    @staticmethod
    def from_json(doc: dict[str, Any]) -> EventAck:
        return EventAck(
            seq=int(doc["seq"]),
            event_id=str(doc["event_id"]),
            partition=int(doc["partition"]),
            offset=int(doc["offset"]),
            duplicate=bool(doc.get("duplicate", False)),
            secrets=tuple(SecretNotice.from_json(s) for s in doc.get("secrets") or ()),
        )


@dataclass(frozen=True)
class Lease:
    """A writer's lease on a session, as ingest wrote it: liveness, not permission to write."""

    session_id: str
    #: Who holds it.
    writer: str
    #: The epoch it is held at.
    epoch: int
    #: When it was renewed and when it lapses unless renewed again, in microseconds since the epoch.
    renewed_at: int
    expires_at: int
    #: The service's ``[lease] ttl_ms``: renew every third of it.
    ttl_ms: int

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Lease:
        return Lease(
            session_id=str(doc["session_id"]),
            writer=str(doc["writer"]),
            epoch=int(doc["epoch"]),
            renewed_at=int(doc["renewed_at"]),
            expires_at=int(doc["expires_at"]),
            ttl_ms=int(doc["ttl_ms"]),
        )


@dataclass(frozen=True)
class Opened:
    """A created or claimed session: the epoch to write with and the next seq."""

    session_id: str
    epoch: int
    next_seq: int
    event: EventAck
    #: What proves this writer on its appends, checkpoints and close (``None`` from a service
    #: that issues none). A secret: kept out of ``repr``.
    writer_token: str | None = field(default=None, repr=False)
    #: The session's name within its tenant, when it was created with one.
    name: str | None = None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Opened:
        name = doc.get("name")
        return Opened(
            session_id=str(doc["session_id"]),
            epoch=int(doc["epoch"]),
            next_seq=int(doc["next_seq"]),
            event=EventAck.from_json(doc["event"]),
            writer_token=_token(doc),
            name=str(name) if name is not None else None,
        )


@dataclass(frozen=True)
class NamedSession:
    """The session a name points to within the caller's tenant, and whether this call made it."""

    session_id: str
    name: str
    #: The create's answer when this call started the session: write with its epoch and token.
    #: ``None`` when the name already pointed to a session: take that one over (claim or resume).
    opened: Opened | None = None

    @property
    def created(self) -> bool:
        """Whether this call started the session."""
        return self.opened is not None


@dataclass(frozen=True)
class Appended:
    """An append's answer: each event's position, in request order."""

    session_id: str
    next_seq: int
    events: list[EventAck]

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Appended:
        return Appended(
            session_id=str(doc["session_id"]),
            next_seq=int(doc["next_seq"]),
            events=[EventAck.from_json(e) for e in doc["events"]],
        )


@dataclass(frozen=True)
class InDoubtCall:
    """A tool call with no recorded result that the resumed harness may settle itself."""

    seq: int
    event_id: str
    tool: str
    effect: EffectClass
    idempotency_key: str | None
    #: ``RunAgain`` (a pure call) or ``ReissueWithSameKey`` (an idempotent call its service
    #: never received).
    action: str

    @staticmethod
    def from_json(doc: dict[str, Any]) -> InDoubtCall:
        call = doc["call"]
        return InDoubtCall(
            seq=int(call["seq"]),
            event_id=str(call["event_id"]),
            tool=str(call["tool"]),
            effect=call["effect"],
            idempotency_key=call.get("idempotency_key"),
            action=str(doc["action"]),
        )


@dataclass(frozen=True)
class McpAccess:
    """The MCP server over a session's history (``sessionlog mcp``), as a resume bundle names
    it: hand ``url`` and ``token`` to the agent so its model can fetch what its view left out."""

    #: The Streamable HTTP endpoint.
    url: str
    #: ``Authorization: Bearer <token>``: the ``reader`` role on this session only; ``None`` when
    #: the recovery service holds no token key (bring a credential of your own).
    token: str | None = field(default=None, repr=False)
    #: When the token stops being valid (RFC 3339).
    expires_at: str | None = None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> McpAccess:
        token = doc.get("token")
        expires = doc.get("expires_at")
        return McpAccess(url=str(doc["url"]), token=str(token) if token else None, expires_at=str(expires) if expires else None)


@dataclass(frozen=True)
class ResumeBundle:
    """What a new harness gets when it takes a session over."""

    session_id: str
    epoch: int
    next_seq: int
    #: Calls to settle before going on.
    in_doubt: list[InDoubtCall]
    #: The session's state as the log had it (``last_seq``, ``pending_calls``, ``status``...).
    state: dict[str, Any]
    #: The working set for the next model call, within the token budget asked for.
    context: dict[str, Any]
    #: Results recovery learned from the tools' services and recorded, as log events.
    resolved: list[dict[str, Any]] = field(default_factory=list)
    #: What proves the resumed writer (see ``Opened.writer_token``).
    writer_token: str | None = field(default=None, repr=False)
    #: The MCP server the agent's model can read the session's history from, with a token for
    #: it; ``None`` unless the recovery service is configured with one (``[recovery.mcp]``).
    mcp: McpAccess | None = None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> ResumeBundle:
        state = doc["state"]
        return ResumeBundle(
            session_id=str(state["session_id"]),
            epoch=int(doc["epoch"]),
            next_seq=int(doc["next_seq"]),
            in_doubt=[InDoubtCall.from_json(c) for c in doc.get("in_doubt", [])],
            state=state,
            context=doc.get("context", {}),
            resolved=list(doc.get("resolved", [])),
            writer_token=_token(doc),
            mcp=McpAccess.from_json(doc["mcp"]) if doc.get("mcp") else None,
        )


@dataclass(frozen=True)
class SessionView:
    """A session rebuilt from the log to its end."""

    #: The folded state (``last_seq``, ``epoch``, ``pending_calls``, ``terminal``, ...), texts opened.
    state: dict[str, Any]
    #: ``running``, ``completed``, ``needs_resolution``, ...
    status: str
    #: The state's digest, as checkpoints record it.
    digest: str
    #: The writer lease (``writer``, ``epoch``, ``renewed_at``, ``expires_at``, ``live``), or ``None``.
    lease: dict[str, Any] | None = None
    #: When the session's pause lapses and it wants its harness again (aware, UTC), or ``None``:
    #: not paused, or paused until someone unpauses it (``sessionlog pause --until``).
    paused_until: datetime | None = None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> SessionView:
        lease = doc.get("lease")
        until = doc.get("paused_until")
        return SessionView(
            state=dict(doc["rebuilt"]["state"]),
            status=str(doc["status"]),
            digest=str(doc["digest"]),
            lease=dict(lease) if isinstance(lease, dict) else None,
            paused_until=datetime.fromisoformat(until) if isinstance(until, str) else None,
        )


@dataclass(frozen=True)
class HistoryEvent:
    """One event of a range read, its texts opened."""

    session_id: str
    seq: int
    kind: str
    occurred_at: int
    writer_epoch: int
    event_id: str
    causation_id: str | None
    idempotency_key: str | None
    #: The kind's fields (``{"content": {"Plain": "..."}}``); ``None`` when the log no longer
    #: holds the record.
    data: dict[str, Any] | None
    #: Text fields that did not open, and why (``erased``, ``sealed``, ``unreadable``).
    unopened: dict[str, str]

    @staticmethod
    def from_json(doc: dict[str, Any]) -> HistoryEvent:
        event = doc.get("event")
        data = event.get(doc["kind"]) if isinstance(event, dict) else None
        return HistoryEvent(
            session_id=str(doc["session_id"]),
            seq=int(doc["seq"]),
            kind=str(doc["kind"]),
            occurred_at=int(doc["occurred_at"]),
            writer_epoch=int(doc["writer_epoch"]),
            event_id=str(doc["event_id"]),
            causation_id=doc.get("causation_id"),
            idempotency_key=doc.get("idempotency_key"),
            data=data,
            unopened=dict(doc.get("unopened", {})),
        )


@dataclass(frozen=True)
class EventPage:
    """One page of a range read; pass ``next_cursor`` back for the next."""

    events: list[HistoryEvent]
    next_cursor: str | None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> EventPage:
        return EventPage(
            events=[HistoryEvent.from_json(e) for e in doc.get("events", [])],
            next_cursor=doc.get("next_cursor"),
        )


def text_of(content: Any) -> str | None:
    """The text of a ``Content`` value as a read gives it (``{"Plain": "..."}``), or ``None`` when
    it did not open."""
    if isinstance(content, dict) and isinstance(content.get("Plain"), str):
        return str(content["Plain"])
    if isinstance(content, str):
        return content
    return None
