"""What a writer knows about its session: its epoch, the next seq, the events it sent and not yet
had acknowledged, and the tool calls the log records (its own, and those it inherits from the
sessions it was forked from). Pure: no I/O, so ``Session`` and ``AsyncSession`` share it and it
is tested without a server. It is safe to share between threads and event loops: durable tools
of one session plan their calls here, and a call one caller runs is waited for by the others."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
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
    #: The ancestor session that recorded the call, when the session inherits it (a fork);
    #: ``None`` for the session's own calls. ``seq`` is then a seq of that session.
    inherited_from: str | None = None


#: What a durable tool does with a call: run it and record intent and result (``fresh``),
#: answer the recorded result (``recorded``), run it again under its first request and record
#: the result (``settle``), or wait for the caller running it now and plan again (``wait``).
PlanKind = Literal["fresh", "recorded", "settle", "wait"]

_SETTLE_ACTIONS = ("RunAgain", "ReissueWithSameKey")
# A default key: the session's id, the call's digest and its occurrence, all characters a URL
# path segment takes as they are (recovery's resolvers send the key in one).
_DEFAULT_KEY = re.compile(r"^[0-9a-fA-F-]{36}\.([0-9a-f]{32})\.([1-9][0-9]*)$")
# The key this library derived before keys named their session (`tool:digest`): read as the
# first occurrence, so that a session recorded by that release resumes without running again.
_OLD_DEFAULT_KEY = re.compile(r"^(.*):([0-9a-f]{32})$")


def default_key(session_id: str, digest: str, occurrence: int) -> str:
    """The key of the ``occurrence``-th call with ``digest`` in ``session_id``: unique per session
    and call, and the same when a run after a crash makes the same call again."""
    return f"{session_id}.{digest}.{occurrence}"


def identity_of(tool: str, key: str | None) -> tuple[str, int] | None:
    """The digest and occurrence a default key names (``None`` for a key the caller chose)."""
    if key is None:
        return None
    found = _DEFAULT_KEY.match(key)
    if found:
        return found[1], int(found[2])
    old = _OLD_DEFAULT_KEY.match(key)
    return (old[2], 1) if old and old[1] == tool else None


@dataclass(frozen=True)
class CallName:
    """Which call an invocation of a durable tool is: the call with the caller's ``key``, or the
    ``occurrence``-th call of its tool with arguments of ``digest`` (its key then derived)."""

    tool: str
    key: str | None = None
    digest: str = ""
    occurrence: int = 0

    def ref(self) -> tuple[str, str, str | int]:
        """How the ledger files the call (by key or by identity)."""
        return (self.tool, "key", self.key) if self.key is not None else (self.tool, self.digest, self.occurrence)


class Occurrences:
    """How many calls of each tool and argument digest one run of a harness made: a run after a
    crash counts again from the start, so its n-th call finds the n-th call the log records.
    ``scope`` names the part of the session one run covers (a LangGraph task) and is folded into
    the digests; ``None`` for a whole session.

    An invocation that raised without a definitive outcome (in doubt, or not recorded in an
    outage) leaves its occurrence open: the next invocation of the same call is its retry, and
    takes it over rather than counting a new call."""

    def __init__(self, scope: str | None = None) -> None:
        self.scope = scope
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._open: dict[tuple[str, str], set[int]] = {}

    def next(self, tool: str, digest: str) -> int:
        """The occurrence the next invocation of ``tool`` with ``digest`` is."""
        with self._lock:
            left = self._open.get((tool, digest))
            if left:
                n = min(left)
                left.discard(n)
                return n
            n = self._counts.get((tool, digest), 0) + 1
            self._counts[(tool, digest)] = n
            return n

    def leave_open(self, name: CallName) -> None:
        """``name``'s invocation ended without an outcome its caller can rely on."""
        if name.key is None:
            with self._lock:
                self._open.setdefault((name.tool, name.digest), set()).add(name.occurrence)


class Flight:
    """A call one caller runs now. Others of the same call wait for it to land, then plan again
    (and find its result, or find it in doubt). Blocking callers wait on an event, async ones on
    a future of their own loop, woken from whichever thread lands the flight."""

    def __init__(self, key: str, land: Callable[[], None]) -> None:
        self.key = key
        self._land = land
        self._lock = threading.Lock()
        self._landed = threading.Event()
        self._futures: list[asyncio.Future[None]] = []
        #: How many callers wait for it (for diagnostics and tests).
        self.waiting = 0

    def __enter__(self) -> Flight:
        return self

    def __exit__(self, *_: object) -> None:
        self._land()
        with self._lock:
            futures, self._futures = self._futures, []
            self._landed.set()
        for future in futures:
            try:
                future.get_loop().call_soon_threadsafe(_wake, future)
            except RuntimeError:
                pass  # its loop is closed: nobody is left to wake

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the flight lands; whether it did (``False``: ``timeout`` seconds passed)."""
        with self._lock:
            self.waiting += 1
        try:
            return self._landed.wait(timeout)
        finally:
            with self._lock:
                self.waiting -= 1

    async def wait_async(self) -> None:
        """Waits, without blocking the loop, until the flight lands."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._landed.is_set():
                return
            self._futures.append(future)
            self.waiting += 1
        try:
            await future
        finally:
            with self._lock:
                self.waiting -= 1


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class Plan:
    """What a durable tool does with one call."""

    kind: PlanKind
    #: The key the call runs under: what its service dedupes by.
    key: str
    #: The call the log records (``recorded``, ``settle``); ``None`` for a fresh one.
    call: ToolCall | None = None
    #: ``fresh``, ``settle``: the flight this caller holds (leave its ``with`` when done);
    #: ``wait``: the flight of the caller running the call.
    flight: Flight | None = None


class _Calls:
    """Tool calls by seq, by caller's key and by identity (digest and occurrence)."""

    def __init__(self) -> None:
        self.by_seq: dict[tuple[str | None, int], ToolCall] = {}
        self.by_ref: dict[tuple[str, str, str | int], ToolCall] = {}

    def add(self, call: ToolCall) -> None:
        self.by_seq[(call.inherited_from, call.seq)] = call
        if call.idempotency_key is not None:
            self.by_ref[(call.tool, "key", call.idempotency_key)] = call
            identity = identity_of(call.tool, call.idempotency_key)
            if identity is not None:
                self.by_ref[(call.tool, identity[0], identity[1])] = call


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
        #: The calls of this run of the session's harness (see ``Occurrences``).
        self.occurrences = Occurrences()
        # Guards the calls and flights: planning a call and taking off happen as one step.
        self._lock = threading.RLock()
        self._own = _Calls()
        self._inherited = _Calls()
        self._flights: dict[tuple[str, str, str | int], Flight] = {}

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
        event_id: str | None = None,
    ) -> dict[str, Any]:
        """The next event to append, with its seq and its id (``event_id`` when the caller
        chose one, to name the event in others of its batch; else a fresh one); counted as sent."""
        seq = self.next_seq + len(self.unacknowledged)
        event: dict[str, Any] = {
            "seq": seq,
            "event_id": event_id or str(uuid.uuid4()),
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
        """Numbers ``events`` (kind, data, envelope fields: ``causation_id``, ``idempotency_key``,
        ``event_id``) after everything sent so far."""
        for kind, data, envelope in events:
            self.event(kind, data, **envelope)

    def failed(self, error: Exception) -> None:
        """Sending failed with ``error``. A refusal (a 4xx) means the events sent are not in the
        log and never will be: they are dropped. Anything else keeps them, to be sent again."""
        if not getattr(error, "retryable", True):
            self.unacknowledged.clear()

    def never_sent(self, error: Exception, planned: int) -> None:
        """Sending the ``planned`` events queued last failed with ``error``: when none of them
        was answered and no request of them reached the service (``sent`` false), they are not
        in the log and never will be: dropped. Else they are kept, to be sent again."""
        if getattr(error, "sent", True) is False and len(self.unacknowledged) == planned:
            self.unacknowledged.clear()

    def moved_to(self, seq: int) -> None:
        """The service appended an event at ``seq`` itself (a checkpoint, a close)."""
        self.next_seq = seq + 1

    def learn(self, events: Iterable[HistoryEvent]) -> None:
        """Takes in tool calls and results from a range read; with ``inherited=true``, those of
        the ancestors up to each fork point too (each event names the session it belongs to)."""
        for event in events:
            data = event.data or {}
            ancestor = None if event.session_id == self.session_id else event.session_id
            if event.kind == "ToolCallRequested":
                effect = data.get("effect", "NonIdempotent")
                call = ToolCall(event.seq, event.event_id, str(data.get("tool")), effect, event.idempotency_key)
                call.inherited_from = ancestor
                self._remember(call)
            elif event.kind == "ToolCallResult":
                result = RecordedResult(data.get("outcome", "Failed"), text_of(data.get("output")), str(data.get("source")))
                self._record(ancestor, int(data.get("call_seq", 0)), result)

    def name_call(
        self, tool: str, *, key: str | None = None, digest: str = "", occurrences: Occurrences | None = None
    ) -> CallName:
        """The call an invocation is: the one with the caller's ``key``, else the next occurrence
        of ``tool`` with arguments of ``digest`` in ``occurrences`` (the ledger's own by default)."""
        if key is not None:
            return CallName(tool, key=key)
        return CallName(tool, digest=digest, occurrence=(occurrences or self.occurrences).next(tool, digest))

    def plan_call(self, name: CallName) -> Plan:
        """What a durable tool does with the call ``name``; for ``fresh`` and ``settle`` the
        caller takes off (``Plan.flight``) in the same step, so no other caller plans it too.

        The session's own record of a call comes first; a call it inherits answers its recorded
        result, and one inherited without a result runs as a fresh call of this session (a fork
        cannot record a result in its ancestor), an idempotent one under its first key so that
        its service dedupes it (a non-idempotent one is in doubt). Raises ``CallInDoubt`` for a call whose outcome is unknown and
        whose effect forbids running it again."""
        ref = name.ref()
        with self._lock:
            flight = self._flights.get(ref)
            if flight is not None:
                return Plan("wait", flight.key, flight=flight)
            key = name.key if name.key is not None else default_key(self.session_id, name.digest, name.occurrence)
            call = self._own.by_ref.get(ref)
            inherited = self._inherited.by_ref.get(ref) if call is None else None
            if inherited is not None and inherited.result is not None:
                return Plan("recorded", inherited.idempotency_key or key, inherited)
            if inherited is not None and inherited.effect == "NonIdempotent":
                # Recovery refuses such a fork; should one exist, never guess.
                raise CallInDoubt(name.tool, inherited.seq)
            if inherited is not None and inherited.effect == "Idempotent" and inherited.idempotency_key:
                key = inherited.idempotency_key
            if call is None:
                return self._take_off(ref, Plan("fresh", key))
            key = call.idempotency_key or key
            if call.result is not None:
                return Plan("recorded", key, call)
            # In doubt: requested, no result. A pure call runs again; an idempotent one its
            # service never received is reissued with its key (recovery said which, or this
            # process saw it fail); anything else stops.
            if call.effect == "Pure" or call.action in _SETTLE_ACTIONS:
                return self._take_off(ref, Plan("settle", key, call))
            raise CallInDoubt(name.tool, call.seq)

    def left_in_doubt(self, call: ToolCall) -> None:
        """``call`` raised before its outcome was known. An idempotent call may be reissued with
        its key (its service dedupes it), so the next plan of it settles it; a pure call always
        may; any other stays in doubt."""
        with self._lock:
            if call.effect == "Idempotent" and call.result is None:
                call.action = "ReissueWithSameKey"

    def call_with_key(self, key: str) -> ToolCall | None:
        """The session's own tool call known by ``key``, whichever its tool (the latest, should
        the key have been used again)."""
        with self._lock:
            return max((c for c in self._own.by_seq.values() if c.idempotency_key == key), key=lambda c: c.seq, default=None)

    def call_at(self, seq: int) -> ToolCall | None:
        """The session's own tool call requested at ``seq``."""
        with self._lock:
            return self._own.by_seq.get((None, seq))

    def waiters(self, tool: str, key: str) -> int:
        """How many callers wait for the call of ``tool`` with ``key`` that another runs now."""
        with self._lock:
            return sum(f.waiting for ref, f in self._flights.items() if ref[0] == tool and f.key == key)

    def _take_off(self, ref: tuple[str, str, str | int], plan: Plan) -> Plan:
        plan.flight = self._flights[ref] = Flight(plan.key, lambda: self._land(ref))
        return plan

    def _land(self, ref: tuple[str, str, str | int]) -> None:
        with self._lock:
            self._flights.pop(ref, None)

    def _learn_sent(self, sent: dict[str, Any], seq: int) -> None:
        data = sent["data"]
        if sent["kind"] == "ToolCallRequested":
            self._remember(ToolCall(seq, sent["event_id"], data["tool"], data["effect"], sent.get("idempotency_key")))
        elif sent["kind"] == "ToolCallResult":
            self._record(None, data["call_seq"], RecordedResult(data["outcome"], text_of(data["output"]), data["source"]))

    def _record(self, ancestor: str | None, call_seq: int, result: RecordedResult) -> None:
        with self._lock:
            call = (self._own if ancestor is None else self._inherited).by_seq.get((ancestor, call_seq))
            if call is not None:
                call.result = result
                call.action = None

    def _remember(self, call: ToolCall) -> None:
        with self._lock:
            calls = self._own if call.inherited_from is None else self._inherited
            known = calls.by_seq.get((call.inherited_from, call.seq))
            if known is not None:
                # What this writer learned (the bundle's action, a result) stands: a re-read adds to it.
                call.action = call.action or known.action
                call.result = call.result or known.result
            calls.add(call)
