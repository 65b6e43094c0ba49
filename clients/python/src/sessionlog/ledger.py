"""What a writer knows about its session: its epoch, the next seq, the events it sent and not yet
had acknowledged, and the tool calls the log records. Pure: no I/O, so ``Session`` and
``AsyncSession`` share it and it is tested without a server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from .errors import CallInDoubt
from .models import Appended, CallOutcome, EffectClass, HistoryEvent, ResumeBundle, text_of


def new_session_id() -> str:
    """A fresh UUIDv7 (time-ordered, like the services' own ids). By hand because the standard
    library has ``uuid.uuid7`` only from Python 3.14."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | int.from_bytes(uuid.uuid4().bytes, "big") & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def now_micros() -> int:
    """Now, in microseconds since the Unix epoch (the log's clock unit)."""
    return time.time_ns() // 1000


@dataclass
class RecordedResult:
    """A tool call's result as the log has it."""

    outcome: CallOutcome
    #: Its output text; ``None`` when it did not open (an erased session).
    output: str | None
    #: Who established it: ``Executed`` (the harness), ``Resolver`` or ``Operator``.
    source: str


@dataclass
class ToolCall:
    """A tool call the log records, with its result once there is one."""

    seq: int
    event_id: str
    tool: str
    effect: EffectClass
    idempotency_key: str | None
    result: RecordedResult | None = None
    #: For a call in doubt at a resume: ``RunAgain`` or ``ReissueWithSameKey`` (from the bundle).
    action: str | None = None


#: What a durable tool does with a call: run it and record intent and result (``fresh``),
#: answer the recorded result (``recorded``), or run it again under its first request and
#: record the result (``settle``).
PlanKind = Literal["fresh", "recorded", "settle"]


class SessionLedger:
    """One writer's view of its session."""

    def __init__(self, session_id: str, epoch: int, next_seq: int, writer_token: str | None = None) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.next_seq = next_seq
        #: What proves this writer to the ingest service (``None`` when the service issued none).
        self.writer_token = writer_token
        #: Events sent without an answer (an outage outlasted the retries): sent again, with the
        #: same seqs and ids, before anything new, so none is lost or written twice.
        self.unacknowledged: list[dict[str, Any]] = []
        self._calls_by_key: dict[tuple[str, str], ToolCall] = {}
        self._calls_by_seq: dict[int, ToolCall] = {}

    @staticmethod
    def from_bundle(bundle: ResumeBundle) -> SessionLedger:
        """The ledger of a resumed writer, with the calls recovery left in doubt."""
        ledger = SessionLedger(bundle.session_id, bundle.epoch, bundle.next_seq, bundle.writer_token)
        for doubt in bundle.in_doubt:
            ledger._remember(
                ToolCall(doubt.seq, doubt.event_id, doubt.tool, doubt.effect, doubt.idempotency_key, action=doubt.action)
            )
        return ledger

    def event(
        self,
        kind: str,
        data: dict[str, Any],
        *,
        causation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """The next event to append, with its seq and a fresh id; counted as sent."""
        seq = self.next_seq + len(self.unacknowledged)
        event: dict[str, Any] = {
            "seq": seq,
            "event_id": str(uuid.uuid4()),
            "kind": kind,
            "data": data,
            "occurred_at": now_micros(),
        }
        if causation_id is not None:
            event["causation_id"] = causation_id
        if idempotency_key is not None:
            event["idempotency_key"] = idempotency_key
        self.unacknowledged.append(event)
        return event

    #: The most events one append request takes (the ingest service's limit).
    MAX_BATCH = 128

    def batch(self) -> list[dict[str, Any]]:
        """The next events to send: the oldest unacknowledged, at most ``MAX_BATCH``."""
        return self.unacknowledged[: self.MAX_BATCH]

    def acknowledged(self, appended: Appended) -> None:
        """The service accepted the first ``len(appended.events)`` events sent."""
        done = len(appended.events)
        for sent, ack in zip(self.unacknowledged[:done], appended.events, strict=True):
            self._learn_sent(sent, ack.seq)
        del self.unacknowledged[:done]
        self.next_seq = appended.next_seq

    def queue(self, events: Iterable[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
        """Numbers ``events`` (kind, data, envelope fields) after everything sent so far."""
        for kind, data, envelope in events:
            self.event(kind, data, **envelope)

    def failed(self, error: Exception) -> None:
        """Sending failed with ``error``. A refusal (a 4xx) means the events sent are not in the
        log and never will be: they are dropped. Anything else keeps them, to be sent again."""
        if not getattr(error, "retryable", True):
            self.unacknowledged.clear()

    def moved_to(self, seq: int) -> None:
        """The service appended an event at ``seq`` itself (a checkpoint, a close)."""
        self.next_seq = seq + 1

    def learn(self, events: Iterable[HistoryEvent]) -> None:
        """Takes in the session's tool calls and results from a range read."""
        for event in events:
            data = event.data or {}
            if event.kind == "ToolCallRequested":
                self._remember(
                    ToolCall(event.seq, event.event_id, str(data.get("tool")), data.get("effect", "NonIdempotent"),
                             event.idempotency_key)
                )
            elif event.kind == "ToolCallResult":
                call = self._calls_by_seq.get(int(data.get("call_seq", 0)))
                if call is not None:
                    call.result = RecordedResult(
                        data.get("outcome", "Failed"), text_of(data.get("output")), str(data.get("source"))
                    )
                    call.action = None

    def plan(self, tool: str, key: str) -> tuple[PlanKind, ToolCall | None]:
        """What a durable tool does with the call of ``tool`` known by ``key``."""
        call = self._calls_by_key.get((tool, key))
        if call is None:
            return "fresh", None
        if call.result is not None:
            return "recorded", call
        # In doubt: requested, no result. A pure call runs again; an idempotent one its service
        # never received is reissued with its key (recovery said which); anything else stops.
        if call.effect == "Pure" or call.action in ("RunAgain", "ReissueWithSameKey"):
            return "settle", call
        raise CallInDoubt(tool, call.seq)

    def call_with_key(self, key: str) -> ToolCall | None:
        """The tool call known by ``key``, whichever its tool."""
        return next((c for c in self._calls_by_seq.values() if c.idempotency_key == key), None)

    def call_at(self, seq: int) -> ToolCall | None:
        """The tool call requested at ``seq``."""
        return self._calls_by_seq.get(seq)

    def _learn_sent(self, sent: dict[str, Any], seq: int) -> None:
        data = sent["data"]
        if sent["kind"] == "ToolCallRequested":
            self._remember(ToolCall(seq, sent["event_id"], data["tool"], data["effect"], sent.get("idempotency_key")))
        elif sent["kind"] == "ToolCallResult":
            call = self._calls_by_seq.get(data["call_seq"])
            if call is not None:
                call.result = RecordedResult(data["outcome"], text_of(data["output"]), data["source"])
                call.action = None

    def _remember(self, call: ToolCall) -> None:
        known = self._calls_by_seq.get(call.seq)
        if known is not None:
            # What this writer learned (the bundle's action, a result) stands: a re-read adds to it.
            call.action = call.action or known.action
            call.result = call.result or known.result
        self._calls_by_seq[call.seq] = call
        if call.idempotency_key is not None:
            self._calls_by_key[(call.tool, call.idempotency_key)] = call
