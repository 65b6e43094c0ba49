"""The OpenAI Agents SDK on sessionlog: ``SessionlogSession`` implements the SDK's ``Session``
protocol over a sessionlog session, so an agent's conversation is the session's log. The SDK
session id ``id`` finds its sessionlog session by the name ``openai-agents:{id}`` within the
caller's tenant: two tenants using the same id have two sessions, and neither learns of the
other's.

Items map to event kinds, for what the log needs (recovery, the context view, analytics): a
user message is a ``UserRequest`` (its text parts), an assistant message a ``ModelResponse``, a
function call a ``ToolCallRequested`` (its ``call_id`` is the call's idempotency key) and its
output a ``ToolCallResult``. Beside each such event, a ``FrameworkStateSaved`` (framework
``openai-agents``, key ``item``, its ``causation_id`` the event's id, chosen before sending)
keeps the item whole, so ``get_items`` answers exactly what ``add_items`` was given: ids,
statuses, content parts, annotations, in order. Any other item (reasoning, hosted tool calls) is
kept whole, as JSON, in a ``ModelResponse`` whose model names the item's type
(``openai-agents:item:reasoning``). One ``add_items`` is one append (up to 128 events), so a call
and its output given together land together. A function call given without its output (it
waits for an approval, perhaps in another process) is kept whole on its own, and its
``ToolCallRequested`` is written with its output, naming that item: a request with no result
is a call recovery must not guess about, and nothing ran yet. ``pop_item`` appends an ``EventRetracted`` naming
the popped item's event, which the fold and the context view honour; the log is never rewritten.
A popped output added back (its call has its result already) is kept whole on its own.
``clear_session`` retracts every item.

A write whose answer was lost is found by the next read: the session sends it again first, with
the event ids it chose before sending, and the service answers the duplicate with the first
write's position; a new process reads what landed. Either way ``get_items`` shows the items as
given, which is what the SDK's deferred-writes reconciliation compares (item fingerprints), so it
finds its own write and does not write it, or run its tools, again.

A function tool wrapped by ``SessionlogSession.durable_tool`` records its own request and result
(see ``sessionlog.tools``), so a harness that crashes mid-call and runs the turn again gets the
recorded result instead of a second side effect. The SDK's items of such a call are not
written as events again: each is kept whole beside the wrapper's record (its request, found by
tool and the model's arguments; its result), or on its own when there is none yet (a call
waiting for approval claims its request when its output comes, see ``CLAIM_KEY``). Until the
SDK saves them, the wrapper's records of this process are no items; those a crashed process
left unsaved are, under the durable key, so that the resumed run knows the call ran; one shown
with its result stays where it was (a later call of the same tool is kept on its own).

    session = SessionlogSession("user-42", AsyncClient(token=TOKEN), writer="support-bot")

    @function_tool
    @session.durable_tool(effect="Idempotent", key=lambda order: f"refund-{order}")
    async def refund(order: str) -> str: ...

    await Runner.run(agent, "Refund order 4711", session=session)
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from .. import errors
from ..client import AsyncClient
from ..ledger import ToolCall
from ..models import EffectClass, HistoryEvent
from ..session import (
    AsyncSession,
    Event,
    framework_state,
    model_response,
    retraction,
    tool_call,
    tool_result,
    user_request,
)
from ..tools import durable_tool
from ._agents_items import (
    CLAIM_KEY,
    FRAMEWORK,
    ITEM_KEY,
    ITEM_MODEL,
    claimed_requests,
    event_of,
    item_of_event,
    item_record,
    parse_arguments,
    same_call,
    saved_items,
    text_parts,
    whole_items,
)
from ._loop import LoopWriter, serve, stop

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
else:
    TResponseInputItem = dict

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: Who the retractions name. (The item records' framework and keys are in ``_agents_items``.)
RETRACTED_BY = "openai-agents:pop_item"
#: How often a caller waiting for the session's loop looks whether its thread still runs (seconds).
_WATCH = 1.0
_ITEM_KINDS = ["UserRequest", "ModelResponse", "ToolCallRequested", "ToolCallResult", "EventRetracted", "FrameworkStateSaved"]


def session_name(session_id: str) -> str:
    """The name of an SDK session's sessionlog session, unique within the caller's tenant (the
    same in every process)."""
    return f"openai-agents:{session_id}"


class SessionlogSession:
    """An OpenAI Agents SDK ``Session`` whose items live in a sessionlog session.

    The first call takes the session named after ``session_id`` over as ``writer`` (resume: the
    next epoch, so a crashed process is fenced, and its tool calls settled), or starts it. ``model`` names assistant
    messages' model in the log; ``tool_effects`` gives each function tool's effect class
    (``NonIdempotent`` when not named), which recovery settles an unfinished call by.
    ``session_settings`` (a ``SessionSettings`` or a dict, as the SDK's own sessions take) gives
    ``get_items`` its default limit.

    Its work runs on an event loop of its own, in a thread of its own, with a twin of ``client``
    (see ``AsyncClient.twin``), started on first use: no asyncio object it keeps belongs to the
    caller's loop, so ``Runner.run``, ``Runner.run_sync`` (a new loop per call) and
    ``Runner.run_streamed`` all work across turns, and callers on several threads (each with its
    own loop) take turns. ``close`` stops the loop and closes the twin's connections. A session
    used before ``os.fork()`` says so in the child (its loop's thread stayed in the parent): make
    a new one there.
    """

    def __init__(
        self,
        session_id: str,
        client: AsyncClient,
        *,
        writer: str,
        agent: str | None = None,
        model: str = "openai-agents",
        tool_effects: dict[str, EffectClass] | None = None,
        wait_for: float = 30.0,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.client = client
        self.writer_name = writer
        self.agent = agent or writer
        self.model = model
        self.tool_effects = dict(tool_effects or {})
        self.wait_for = wait_for
        self._writer: AsyncSession | None = None
        # Used on the session's loop only (it binds to the first loop it waits on).
        self._lock = asyncio.Lock()
        self._durable: set[str] = set()
        # The call ids of durable calls the SDK saved whose outputs it has not saved yet: an
        # output with such an id is that call's (a provider may use an id again later).
        self._durable_calls: set[str] = set()
        # Function calls kept whole with no request written yet (see ``_events``), by call id:
        # the item record's event id, and the item.
        self._waiting: dict[str, tuple[str, dict[str, Any]]] = {}
        # The requests durable tools of this process recorded (the SDK saves their items).
        self._own_calls: set[str] = set()
        # The durable requests get_items answered as items of their own with their results (a
        # process before left them unsaved): the SDK has that call and its output, so a later
        # call of the same tool claims none of them. (One it answered with no result, in doubt,
        # is claimed by the call that settles it.)
        self._shown: set[str] = set()
        # Those the latest read of the items found (see ``_live_items``).
        self._found: set[str] = set()
        # The session's loop and its client, once started; `_closed` after close().
        self._starting = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncClient | None = None
        self._closed = False
        # The process the loop's thread runs in: a child of os.fork() has the loop, not the thread.
        self._pid: int | None = None

    @property
    def writer(self) -> AsyncSession:
        """The open sessionlog writer (the SDK opens it with its first call), for its session id
        and ledger: it belongs to the session's loop, where its methods run."""
        if self._writer is None:
            raise errors.SessionlogError("the session is not open yet: call get_items() (Runner.run does) first")
        return self._writer

    def durable_tool(
        self, *, effect: EffectClass, key: Callable[..., str] | None = None, name: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Makes an ``async def`` a durable tool of this session (put ``@function_tool`` above it)."""

        def wrap(fn: Callable[P, R]) -> Callable[P, R]:
            tool = name or fn.__name__
            self._durable.add(tool)
            self.tool_effects[tool] = effect
            return durable_tool(self._tool_writer, effect=effect, key=key, name=tool)(fn)

        return wrap

    def _tool_writer(self) -> LoopWriter:
        """The writer a durable tool records its calls with: each step runs on the session's
        loop, and the requests it records are this process's (see ``_unsaved``)."""
        writer = self.writer
        return LoopWriter(writer, writer.occurrences, self._on_loop, recorded=lambda call: self._own_calls.add(call.event_id))

    def close(self) -> None:
        """Closes the session's connections and stops its loop; the session is not used after.
        (Closing again does nothing; a session dropped unclosed stops its loop when collected.)"""
        if self._forked():
            # The loop and its thread are the parent's: nothing of them is here to stop.
            self._closed = True
            return
        with self._starting:
            loop, thread, self._closed = self._loop, self._thread, True
            self._loop = self._thread = self._client = None
        if loop is None or thread is None:
            return
        stop(loop)
        if thread is not threading.current_thread():
            thread.join(timeout=self.wait_for)

    def _started(self) -> tuple[asyncio.AbstractEventLoop, AsyncClient]:
        """The session's loop and client, started on first use (call with ``_starting`` held)."""
        if self._closed:
            raise errors.SessionlogError(f"session {self.session_id!r} is closed")
        if self._loop is None or self._client is None:
            loop, client = asyncio.new_event_loop(), self.client.twin()
            self._thread = threading.Thread(target=serve, args=(loop, client), name="sessionlog-openai-agents", daemon=True)
            self._thread.start()
            self._loop, self._client, self._pid = loop, client, os.getpid()
            # A session nobody closes (one per request, say) must not keep a thread forever.
            weakref.finalize(self, stop, loop)
        return self._loop, self._client

    def _forked(self) -> bool:
        """Whether this is a child of os.fork() of the process the session's loop runs in."""
        return self._pid is not None and self._pid != os.getpid()

    async def _on_loop(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Runs ``work()`` on the session's loop, awaited from whichever loop the caller runs."""
        if self._forked():
            # Checked before taking a lock another thread of the parent may have held at the fork.
            raise errors.SessionlogError(
                f"session {self.session_id!r} was used before os.fork(): its loop runs in the parent;"
                " make a new SessionlogSession in the child"
            )
        # Submitted under the lock close() takes: work is on the loop before it stops, so the
        # loop's last turn cancels it, and no caller waits for a loop that is gone.
        with self._starting:
            loop, _ = self._started()
            thread = self._thread
            future = asyncio.run_coroutine_threadsafe(work(), loop)
        waiting = asyncio.wrap_future(future)
        try:
            while not waiting.done():
                await asyncio.wait({waiting}, timeout=_WATCH)
                if not future.done() and (thread is None or not thread.is_alive()):
                    # The loop's thread is gone (it failed) and left the work unanswered: nothing will answer.
                    waiting.cancel()
                    raise errors.SessionlogError(f"session {self.session_id!r}: its loop's thread stopped during the call")
            return waiting.result()
        except asyncio.CancelledError:
            waiting.cancel()
            caller = asyncio.current_task()
            if self._closed and (caller is None or caller.cancelling() == 0):
                # The loop's last turn cancelled the work, not the caller: say why.
                raise errors.SessionlogError(f"session {self.session_id!r} was closed during the call") from None
            raise

    def _loop_client(self) -> AsyncClient:
        with self._starting:
            return self._started()[1]

    async def open(self) -> AsyncSession:
        """Takes the session over, or starts it; idempotent. Another process (or our own retried
        create) that started it first leaves it to be taken over."""
        return await self._on_loop(self._locked_open)

    async def _locked_open(self) -> AsyncSession:
        async with self._lock:
            return await self._open()

    async def _open(self) -> AsyncSession:
        if self._writer is None:
            self._writer = await AsyncSession.open_named(
                self._loop_client(),
                session_name(self.session_id),
                agent=self.agent,
                writer=self.writer_name,
                title=self.session_id,
                wait_for=self.wait_for,
            )
        return self._writer

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation, oldest first: the latest ``limit`` items (``session_settings.limit``
        when not given), as the SDK's ``SQLiteSession`` answers: every item when there is no
        limit or it is negative or beyond the history, none when it is 0. (The runner, not the
        session, drops a tool output whose call the limit cut off.)"""
        limit = resolve_session_limit(limit, self.session_settings)
        items = await self._on_loop(self._items)
        if limit is None or limit < 0:
            return items
        return items[-limit:] if limit > 0 else []

    async def _items(self) -> list[TResponseInputItem]:
        async with self._lock:
            items = [item for _, item in await self._live_items()]
            self._shown |= self._found
            return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends items, in one request when their events (about two per item) fit in one
        (128); a longer batch takes several."""
        await self._on_loop(lambda: self._add_items(items))

    async def _add_items(self, items: list[TResponseInputItem]) -> None:
        async with self._lock:
            writer = await self._open()
            outputs = {str(i.get("call_id")) for i in items if i.get("type") == "function_call_output"}
            calls = {str(i.get("call_id")) for i in items if i.get("type") == "function_call"}
            unknown = outputs - calls - self._durable_calls - self._waiting.keys()
            if any(writer.ledger.call_with_key(c) is None for c in unknown):
                await self._live_items()  # a call another process left waiting: learn it from the log
            durable = self._durable_items(items, self._durable_calls)[0]
            claims: dict[int, str] = {}
            markers: dict[str, str] = {}
            # An output of a durable call saved before its tool ran (approval) has no call the
            # ledger knows either: it needs the log too.
            orphans = self._durable and any(writer.ledger.call_with_key(c) is None for c in outputs - calls)
            if orphans or durable:
                events = await self._read(writer)
                # Durable calls the SDK saved before (another process, perhaps): their outputs are too.
                self._durable_calls = self._durable_items([item for _, item in saved_items(events)], set())[1]
                durable = self._durable_items(items, self._durable_calls)[0]
                claims, markers = self._claims(events, items, durable)
            planned: list[tuple[str, tuple[str, dict[str, Any]] | None]] = []
            # One request (up to 128 events): a call and its output in one batch land together.
            await writer.append_planned(
                lambda first_seq: self._events(writer, items, first_seq, outputs, durable, claims, markers, planned)
            )
            # Written: the durable calls now waiting for their outputs. (Raised: written later with
            # the same ids, or never, as the error says; the next read of the log tells.)
            self._durable_calls = self._durable_items(items, self._durable_calls)[1]
            # Written (or kept to be sent again with the same ids): the calls now waiting, or not.
            for call_id, waiting in planned:
                if waiting is None:
                    self._waiting.pop(call_id, None)
                else:
                    self._waiting[call_id] = waiting

    def _events(
        self,
        writer: AsyncSession,
        items: list[TResponseInputItem],
        first_seq: int,
        outputs: set[str],
        durable: set[int],
        claims: dict[int, str],
        markers: dict[str, str],
        planned: list[tuple[str, tuple[str, dict[str, Any]] | None]],
    ) -> list[Event]:
        """The events of ``items``, the first at ``first_seq``: each item's event for the log,
        and the item whole (see ``ITEM_KEY``) naming that event by the id chosen here.

        A function call whose output is not among ``items`` (it waits for an approval, or the
        run was interrupted) is kept whole on its own, with no ``ToolCallRequested`` yet: the
        log would hold a call without a result, which recovery rightly refuses to guess about,
        while nothing ran. Its request is written with its output, naming the item it stands
        for (``causation_id``); ``planned`` collects which calls wait now and which no longer."""
        events: list[Event] = []
        batch_calls: dict[str, ToolCall] = {}
        waiting = dict(self._waiting)

        def add(event: Event, event_id: str, causation: str | None = None) -> None:
            kind, data, envelope = event
            if kind == "ToolCallRequested":
                batch_calls[str(envelope["idempotency_key"])] = ToolCall(
                    first_seq + len(events), event_id, data["tool"], data["effect"], envelope["idempotency_key"]
                )
            events.append((kind, data, {**envelope, "event_id": event_id, **({"causation_id": causation} if causation else {})}))

        for requested, sdk_call in markers.items():
            _, marker, _ = framework_state(FRAMEWORK, CLAIM_KEY, sdk_call)
            events.append(("FrameworkStateSaved", marker, {"causation_id": requested}))
        for index, given in enumerate(items):
            item, event_id = dict(given), str(uuid.uuid4())
            _, whole, _ = framework_state(FRAMEWORK, ITEM_KEY, json.dumps(item))
            kind = item.get("type")
            call_id = str(item.get("call_id"))
            if index in durable:
                # Its wrapper recorded the call (under its own key) and its result: the item
                # stands whole beside the event it claimed, or on its own.
                if index in claims:
                    events.append(("FrameworkStateSaved", whole, {"causation_id": claims[index]}))
                else:
                    events.append(("FrameworkStateSaved", whole, {"event_id": event_id}))
                continue
            if kind == "function_call" and call_id not in outputs:
                events.append(("FrameworkStateSaved", whole, {"event_id": event_id}))
                waiting[call_id] = (event_id, item)
                planned.append((call_id, (event_id, item)))
                continue
            if kind == "function_call_output" and call_id in waiting:
                record, call = waiting.pop(call_id)
                planned.append((call_id, None))
                add(self._event(writer, call, batch_calls), str(uuid.uuid4()), causation=record)
            elif kind == "function_call_output" and call_id not in batch_calls and self._answered(writer, call_id):
                # Its call has a result already, retracted (pop_item, then the SDK adds the
                # output back): a second result is no event; the item is kept whole on its own.
                events.append(("FrameworkStateSaved", whole, {"event_id": event_id}))
                continue
            event = self._event(writer, item, batch_calls)
            add(event, event_id)
            if event[0] == "ModelResponse" and str(event[1].get("model", "")).startswith(ITEM_MODEL):
                continue  # kept whole already
            events.append(("FrameworkStateSaved", whole, {"causation_id": event_id}))
        return events

    @staticmethod
    def _call_of(writer: AsyncSession, call_id: str, batch_calls: dict[str, ToolCall]) -> ToolCall | None:
        """The recorded call a function call output answers (its call id is the call's key)."""
        return batch_calls.get(call_id) or writer.ledger.call_with_key(call_id)

    @staticmethod
    def _answered(writer: AsyncSession, call_id: str) -> bool:
        """Whether the latest recorded call with ``call_id`` as its key has its result."""
        call = writer.ledger.call_with_key(call_id)
        return call is not None and call.result is not None

    async def pop_item(self) -> TResponseInputItem | None:
        """Retracts the latest item and answers it (``None`` when there is none)."""
        return await self._on_loop(self._pop_item)

    async def _pop_item(self) -> TResponseInputItem | None:
        async with self._lock:
            live = await self._live_items()
            if not live:
                return None
            seq, item = live[-1]
            await self.writer.append(retraction(seq, RETRACTED_BY))
            return item

    async def clear_session(self) -> None:
        """Retracts every item; the log keeps them (erase the session to destroy their text)."""
        await self._on_loop(self._clear_session)

    async def _clear_session(self) -> None:
        async with self._lock:
            live = await self._live_items()
            await self.writer.append_all([retraction(seq, RETRACTED_BY) for seq, _ in live])

    def _event(self, writer: AsyncSession, item: dict[str, Any], batch_calls: dict[str, ToolCall]) -> Event:
        """The event of an item that is not a durable call's (see ``_events`` for those)."""
        kind = str(item.get("type", "message"))
        # The event keeps a message's text (what the context view shows); the item whole, with
        # its other parts (an image, a file), is kept beside it.
        if kind == "message" and item.get("role") == "user":
            return user_request(text_parts(item.get("content")))
        if kind == "message" and item.get("role") == "assistant":
            return model_response(self.model, text_parts(item.get("content")))
        if kind == "function_call":
            call_id, tool = str(item["call_id"]), str(item["name"])
            effect = self.tool_effects.get(tool, "NonIdempotent")
            return tool_call(tool, str(item.get("arguments", "")), effect=effect, idempotency_key=call_id)
        if kind == "function_call_output":
            call_id = str(item["call_id"])
            call = self._call_of(writer, call_id, batch_calls)
            if call is None:
                raise errors.SessionlogError(f"function_call_output for call {call_id!r}, whose call is not in the session")
            output = item.get("output")
            return tool_result(call, output if isinstance(output, str) else json.dumps(output))
        return model_response(f"{ITEM_MODEL}{kind}", json.dumps(item, sort_keys=True))

    async def _read(self, writer: AsyncSession) -> list[HistoryEvent]:
        """The session's events of the kinds items are kept in, to its last."""
        # A write whose answer was lost goes again first, with the ids it was sent with (the
        # service answers a duplicate with the first write's position): then this read shows it.
        await writer.send_unacknowledged()
        last = writer.ledger.next_seq - 1
        if last < 1:
            return []
        await writer.wait_projected(last, self.wait_for)
        events = [e async for e in writer.client.events(writer.session_id, kinds=_ITEM_KINDS, to_seq=last, limit=1000)]
        writer.ledger.learn(events)
        return events

    def _durable_items(
        self, items: list[TResponseInputItem] | list[dict[str, Any]], pending: set[str]
    ) -> tuple[set[int], set[str]]:
        """Which of ``items`` (by index) are a durable tool's call or the output of one, and the
        durable calls still waiting for their outputs after them. An output is the latest call's
        with its id: one of the batch before it, or of ``pending`` (durable calls saved before
        whose outputs were not). Once its output is saved, or a plain call takes the id, the id
        no longer marks an output durable: some providers number calls per response."""
        found: set[int] = set()
        pending = set(pending)
        for index, item in enumerate(items):
            call_id = str(item.get("call_id"))
            if item.get("type") == "function_call":
                if str(item.get("name")) in self._durable:
                    found.add(index)
                    pending.add(call_id)
                else:
                    pending.discard(call_id)
            elif item.get("type") == "function_call_output" and call_id in pending:
                found.add(index)
                pending.discard(call_id)
        return found, pending

    def _claims(
        self, events: list[HistoryEvent], items: list[TResponseInputItem], durable: set[int]
    ) -> tuple[dict[int, str], dict[str, str]]:
        """Which events of durable calls the SDK's items of them stand beside, by the items'
        index: a function call beside the request its wrapper recorded (of its tool, with the
        model's arguments, not yet claimed nor answered by get_items as an item of its own with
        its result; this process's first), its output beside that call's result.
        An item that finds none is kept whole on its own. A call kept on its own before its tool
        ran (it waited for approval) claims its request when its output comes: the second answer,
        the claims to record (request event id, the SDK's call id; see ``CLAIM_KEY``)."""
        beside, alone = whole_items(events)
        claimed = claimed_requests(events)
        results = {int((e.data or {}).get("call_seq", 0)): e.event_id for e in events if e.kind == "ToolCallResult"}
        # The SDK's call ids of durable calls already claimed, by the request they stand for.
        by_call_id = {str(item.get("call_id")): eid for eid, item in beside.items() if item.get("type") == "function_call"}
        by_call_id.update({call_id: eid for eid, call_id in claimed.items()})
        waited = {str(i.get("call_id")): i for i in alone.values() if i.get("type") == "function_call" and i.get("name") in self._durable}
        seq_of = {e.event_id: e.seq for e in events}
        # A request get_items answered as an item of its own stays that item (the SDK read it
        # there); those this process recorded come first.
        unclaimed = sorted(
            (
                e for e in events
                if e.kind == "ToolCallRequested"
                and (e.data or {}).get("tool") in self._durable
                and e.event_id not in beside
                and e.event_id not in claimed
                and e.event_id not in self._shown
            ),
            key=lambda e: (e.event_id not in self._own_calls, e.seq),
        )

        def claim(call: dict[str, Any]) -> str | None:
            asked = parse_arguments(str(call.get("arguments", "")))
            found = next((e for e in unclaimed if same_call(e, str(call.get("name")), asked)), None)
            if found is None:
                return None
            unclaimed.remove(found)
            by_call_id[str(call.get("call_id"))] = found.event_id
            return found.event_id

        claims: dict[int, str] = {}
        markers: dict[str, str] = {}
        for index, item in enumerate(items):
            if index not in durable:
                continue
            call_id = str(item.get("call_id"))
            if item.get("type") == "function_call":
                request = claim(dict(item))
                if request is not None:
                    claims[index] = request
                continue
            if call_id not in by_call_id and call_id in waited:
                request = claim(waited[call_id])
                if request is not None:
                    markers[request] = call_id
            result = results.get(seq_of.get(by_call_id.get(call_id, ""), 0))
            if result is not None and result not in beside:
                claims[index] = result
        return claims, markers

    async def _live_items(self) -> list[tuple[int, TResponseInputItem]]:
        """Every item the log holds and no retraction withdrew, oldest first, each with the seq a
        retraction of it names.

        An item kept whole is where its record is (beside its event: right after it, in the same
        append; a durable call's: where the SDK saved it). An event with no record (a session
        written before items were kept whole, an erased item) gives what the log kept. A durable
        call this process made and the SDK has not saved yet is not an item: the SDK saves it,
        and compares what it saved with what this answers. One a process before left unsaved (it
        crashed) is, so that the run that resumes knows the call ran (``_found`` has the event ids
        of such requests it answers with their results)."""
        events = await self._read(await self._open())
        retracted = {int((e.data or {}).get("retracted_seq", 0)) for e in events if e.kind == "EventRetracted"}
        calls = {e.seq: e for e in events if e.kind == "ToolCallRequested"}
        by_id = {e.event_id: e for e in events}
        whole, alone = whole_items(events)
        claimed = claimed_requests(events)
        # Requests written with their output stand for a call kept whole before, where it is.
        standing_for = {e.causation_id for e in events if e.kind == "ToolCallRequested" and e.causation_id in alone}
        withdrawn = {e.event_id for e in events if e.seq in retracted}
        self._waiting = {
            str(item.get("call_id")): (eid, item)
            for eid, item in alone.items()
            if item.get("type") == "function_call" and item.get("name") not in self._durable and eid not in standing_for | withdrawn
        }
        items: list[tuple[int, TResponseInputItem]] = []
        self._found = set()
        # Where the run of durable calls the last items belong to began, if they do.
        durable_run: int | None = None
        for event in events:
            if event.seq in retracted or event.kind == "EventRetracted":
                continue
            seq = event.seq
            if event.kind == "FrameworkStateSaved":
                item = item_record(event)
                beside = by_id.get(event.causation_id or "")
                if item is not None and beside is not None and event_of(beside, item):
                    # Withdrawn with its event: a retraction names the event (the context view reads it).
                    if beside.seq in retracted:
                        continue
                    seq = beside.seq
            elif event.event_id in whole or event.event_id in claimed or event.causation_id in alone:
                item = None  # its record stands for it
            elif self._unsaved(event, calls):
                item = None
            else:
                item = item_of_event(event, calls, self._durable)
                if item is not None and event.kind == "ToolCallResult" and self._is_durable(event, calls):
                    self._found.add(calls[int((event.data or {}).get("call_seq", 0))].event_id)
            if item is None:
                continue
            entry = (seq, cast(TResponseInputItem, item))
            if self._is_durable(event, calls):
                durable_run = len(items) if durable_run is None else durable_run
                items.append(entry)
            elif item.get("type") == "reasoning" and durable_run is not None:
                # A durable call a process before recorded while it ran, the SDK never saved the
                # turn that asked for it; the turn's reasoning belongs before the call (the API checks).
                items.insert(durable_run, entry)
                durable_run += 1
            else:
                durable_run = None
                items.append(entry)
        return items

    def _unsaved(self, event: HistoryEvent, calls: dict[int, HistoryEvent]) -> bool:
        """Whether ``event`` is a durable call's request or result this process recorded."""
        if event.kind == "ToolCallResult":
            call = calls.get(int((event.data or {}).get("call_seq", 0)))
            return call is not None and call.event_id in self._own_calls
        return event.kind == "ToolCallRequested" and event.event_id in self._own_calls

    def _is_durable(self, event: HistoryEvent, calls: dict[int, HistoryEvent]) -> bool:
        data = event.data or {}
        if event.kind == "ToolCallResult":
            data = calls[int(data.get("call_seq", 0))].data or {} if int(data.get("call_seq", 0)) in calls else {}
        return event.kind in ("ToolCallRequested", "ToolCallResult") and data.get("tool") in self._durable
