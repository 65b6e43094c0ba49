"""LangGraph on sessionlog: ``SessionlogSaver`` is a ``BaseCheckpointSaver`` that keeps a
thread's checkpoints and pending writes in a sessionlog session's log.

A thread is a session, found by its name ``thread:{thread_id}`` within the caller's tenant (so
two tenants' threads of the same id are two sessions, and neither learns of the other's). Each
checkpoint and each pending write is a ``FrameworkStateSaved`` event (framework ``langgraph``),
its state sealed under the session's key like any text and read back by range reads, so the
graph's state has the log's guarantees: acknowledged means durable, and a new process on any
machine resumes the thread where the last one stopped. Nothing is rewritten: ``delete_thread``,
``prune`` and ``delete_for_runs`` append markers that readers honour (``sessionlog erase``
destroys the text itself), and ``copy_thread`` is a fork, so the copy keeps its lineage.

A framework state's key is plain in the log (only the state is sealed), so no key holds text a
user chose: checkpoints and writes are keyed by what LangGraph generates (checkpoint and task
ids, and the checkpoint namespace, which holds the graph's node names), and the thread id is
only in sealed state.

Every thread a saver starts is also recorded in its catalogue session (named
``catalogue:{catalogue}``), so ``list(None)`` and ``delete_for_runs`` reach threads other
processes wrote.

Both the blocking and the async methods run on one event loop the saver owns, in a thread of its
own: one implementation serves both, whichever loop (if any) the caller runs.

    saver = SessionlogSaver(token=TOKEN)          # roles harness, reader (and operator to copy)
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "ticket-4711"}})
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.config import get_config

from .. import errors
from ..client import AsyncClient, Credential
from ..ledger import Occurrences
from ..models import EffectClass, HistoryEvent, SessionView, text_of
from ..session import AsyncSession, await_projected, framework_state
from ..tools import durable_tool
from ._loop import AdapterLoop, BlockingLoopWriter
from ._records import framework_records

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
FRAMEWORK = "langgraph"
#: The key of a catalogue's record of a thread: a constant, as a key is plain in the log (the
#: thread id is in the record's sealed state).
THREAD_KEY = "thread"
#: The agent of a copied thread's named session. A fork cannot take a name, so ``copy_thread``
#: starts a session under the target thread's name that only holds the name, and forks the
#: source into the session ``copy_session_id`` derives from it: the thread's events are there.
COPY_AGENT = "sessionlog-langgraph:copy"
_COPIES = uuid.UUID("0f6b1d2e-4f53-4a39-8d7e-6c1f3b2a9e11")


# The durable calls of the LangGraph task running now. LangGraph runs each execution of a node in
# a fresh copy of the context, so a node run again (after a crash, or after an `interrupt` in the
# same process) counts its calls from the start and finds the calls its first run recorded.
_TASK_CALLS: ContextVar[Occurrences | None] = ContextVar("sessionlog_langgraph_task_calls", default=None)


def _task_occurrences() -> Occurrences:
    """The calls of the running task, named within it (its ``checkpoint_ns`` holds the task id,
    which a run of the same task from the same checkpoint shares, in a copied thread too)."""
    scope = str(get_config()["configurable"].get("checkpoint_ns", ""))
    occurrences = _TASK_CALLS.get()
    if occurrences is None or occurrences.scope != scope:
        occurrences = Occurrences(scope)
        _TASK_CALLS.set(occurrences)
    return occurrences


_THREAD = "thread:"


def thread_name(thread_id: str) -> str:
    """The name of a LangGraph thread's session, unique within the caller's tenant."""
    return _THREAD + thread_id


def copy_session_id(named: str) -> str:
    """The session a copied thread's events are in, given the id its name points to (a fresh
    id of the caller's tenant, which another tenant can neither guess nor hold)."""
    return str(uuid.uuid5(_COPIES, named))


def _typed(value: tuple[str, bytes]) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode()]


def _untyped(value: list[str]) -> tuple[str, bytes]:
    return value[0], base64.b64decode(value[1])


class ChannelVersion(str):
    """A string channel version, as LangGraph's own savers write them (InMemorySaver, Postgres,
    SQLite: a 32-digit counter, a dot, a random fraction), that also orders against this saver's
    int versions. A thread migrated from another saver holds strings; one this saver started
    holds ints; a checkpoint can hold both (a channel first written after the migration, or an
    int thread continued from a string checkpoint), and LangGraph compares a checkpoint's
    versions with each other (``max``, ``>``), which between ``str`` and ``int`` raises.

    Among strings the order is the strings' own. An int ``n`` sorts as its counter in the same
    32 digits, just before the string of that same text, so a string the counter passed sorts
    after it and one it did not, before; an int never equals a string."""

    __slots__ = ()

    @staticmethod
    def _key(version: object) -> tuple[str, int] | None:
        if isinstance(version, str):
            return str(version), 1
        if isinstance(version, int) and not isinstance(version, bool):
            return f"{version:032}", 0
        return None

    def _compare(self, other: object, test: Callable[[tuple[str, int], tuple[str, int]], bool]) -> bool:
        mine, theirs = self._key(self), self._key(other)
        assert mine is not None
        return NotImplemented if theirs is None else test(mine, theirs)

    def __lt__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a >= b)

    def __eq__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a == b)

    def __ne__(self, other: object) -> bool:
        return self._compare(other, lambda a, b: a != b)

    __hash__ = str.__hash__


def _comparable(checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint with its string versions made ``ChannelVersion`` (equal to what was put)."""
    for versions in [checkpoint.get("channel_versions", {}), *checkpoint.get("versions_seen", {}).values()]:
        for channel, version in versions.items():
            if isinstance(version, str) and not isinstance(version, ChannelVersion):
                versions[channel] = ChannelVersion(version)
    return checkpoint


@dataclass
class _Saved:
    """One checkpoint as the log has it (still serialised)."""

    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    parent_id: str | None


@dataclass
class _Write:
    task_id: str
    channel: str
    value: tuple[str, bytes]
    task_path: str
    idx: int


@dataclass
class ThreadState:
    """A thread folded from its ``FrameworkStateSaved`` events (pure: no I/O).

    Markers withdraw what came before them: ``clear`` the whole thread (its inherited part
    too), ``deleted`` one checkpoint and its writes."""

    checkpoints: dict[str, dict[str, _Saved]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], _Write]] = field(default_factory=dict)

    @staticmethod
    def fold(events: Sequence[HistoryEvent]) -> ThreadState:
        thread = ThreadState()
        for _, _, state in framework_records(events, FRAMEWORK, "LangGraph state"):
            thread.apply(state)
        return thread

    def apply(self, state: dict[str, Any]) -> None:
        kind, ns = state["type"], state.get("ns", "")
        if kind == "checkpoint":
            self.checkpoints.setdefault(ns, {})[state["id"]] = _Saved(
                _untyped(state["checkpoint"]), _untyped(state["metadata"]), state.get("parent")
            )
        elif kind == "write":
            stored = self.writes.setdefault((ns, state["checkpoint_id"]), {})
            inner = (state["task_id"], int(state["idx"]))
            # A special channel (error, interrupt, resume, scheduled) is overwritten; any other
            # write is kept as first written, so a repeated put_writes changes nothing.
            if inner[1] < 0 or inner not in stored:
                stored[inner] = _Write(
                    state["task_id"], state["channel"], _untyped(state["value"]), state.get("task_path", ""), inner[1]
                )
        elif kind == "deleted":
            self.checkpoints.get(ns, {}).pop(state["id"], None)
            self.writes.pop((ns, state["id"]), None)
        elif kind == "clear":
            self.checkpoints.clear()
            self.writes.clear()

    def pending_writes(self, ns: str, checkpoint_id: str) -> list[_Write]:
        stored = self.writes.get((ns, checkpoint_id), {})
        return sorted(stored.values(), key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))


class SessionlogSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer on sessionlog (see the module's documentation).

    Channel versions are ints (1, 2, ...) in the threads it starts; a thread another saver
    wrote (string versions) continues in strings as LangGraph's own savers continue it, so a
    thread migrated from the Postgres or SQLite saver resumes (see ``ChannelVersion``).

    (``builtins.list`` in its annotations: its own ``list`` method shadows the builtin there.)
    """

    def __init__(
        self,
        ingest_url: str = "http://127.0.0.1:8090",
        recovery_url: str = "http://127.0.0.1:8095",
        *,
        token: Credential | None = None,
        writer: str = "langgraph",
        catalogue: str = "langgraph",
        serde: SerializerProtocol | None = None,
        wait_for: float = 30.0,
    ) -> None:
        super().__init__(serde=serde)
        if writer == COPY_AGENT:
            raise ValueError(f"{COPY_AGENT!r} marks a copied thread's name: name the writer otherwise")
        self.writer_name = writer
        #: The catalogue session's name within the caller's tenant.
        self.catalogue_name = f"catalogue:{catalogue}"
        self.wait_for = wait_for
        self._client = AsyncClient(ingest_url, recovery_url, token=token)
        # By session name (a thread's, or the catalogue's).
        self._writers: dict[str, AsyncSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # The session holding each name's events, once known (a copy's is not the named one).
        self._sessions: dict[str, str] = {}
        # Threads waiting for their catalogue record (see ``_catalogue``).
        self._uncatalogued: builtins.list[str] = []
        self._loop = AdapterLoop(self._client, name="sessionlog-saver", what="the LangGraph saver")

    def close(self) -> None:
        """Closes the connections and stops the saver's loop (once; later calls do nothing).
        A call after it raises ``SessionlogError``, as does one still running then."""
        self._loop.close(timeout=self.wait_for)

    def durable_tool(
        self, *, effect: EffectClass, key: Callable[..., str] | None = None, name: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Makes a blocking function a durable tool of the running graph's thread (see
        ``sessionlog.tools``): when LangGraph runs an interrupted node again (after a crash, an
        ``interrupt``, or in a copy of the thread), a call whose result the log holds answers it
        instead of running again. Calls are named within their task: the same tool and
        arguments in another step of the graph are another call."""

        def writer() -> BlockingLoopWriter:
            thread_id = str(get_config()["configurable"]["thread_id"])
            session = self._run(self._tool_writer(thread_id))
            # Each step of the call runs on the saver's loop, where the writer belongs.
            return BlockingLoopWriter(session, _task_occurrences(), lambda step: self._run(step()))

        return durable_tool(writer, effect=effect, key=key, name=name)

    def get_next_version(self, current: int | str | None, channel: None) -> Any:
        """The version after ``current``: an int after an int (1 first), and after a string
        the string LangGraph's own savers would write (the counter plus one in 32 digits, a dot,
        a random fraction), as a ``ChannelVersion`` so it also compares with ints. (``Any``:
        LangGraph types a saver's versions as one of int, float or str.)"""
        if not isinstance(current, str):
            return 1 if current is None else current + 1
        counter = current.partition(".")[0]
        if not counter.isdigit():
            raise ValueError(f"channel version {current!r} does not start with a counter (as LangGraph's savers write)")
        return ChannelVersion(f"{int(counter) + 1:032}.{random.random():016}")

    # -- the two faces over one implementation ------------------------------------------------

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(work)

    async def _await(self, work: Coroutine[Any, Any, T]) -> T:
        return await self._loop.wait(work)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._await(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._run(self._list(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in await self._await(self._list(config, filter, before, limit)):
            yield found

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return self._run(self._put(config, checkpoint, metadata))

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await self._await(self._put(config, checkpoint, metadata))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run(self._put_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._await(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._mark(thread_id, lambda _: [{"type": "clear"}]))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._await(self._mark(thread_id, lambda _: [{"type": "clear"}]))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._delete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._await(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._copy_thread(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._await(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._prune(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._await(self._prune(thread_ids, strategy))

    # -- on the saver's loop --------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _resume(self, session_id: str) -> AsyncSession:
        return await AsyncSession.resume(self._client, session_id, self.writer_name, wait_for=self.wait_for)

    async def _writer(self, name: str, *, create: bool = True) -> AsyncSession | None:
        """The writer of the session ``name`` (a thread's or the catalogue's): taken over
        (resume), or started when ``create``; a thread new to the log is catalogued."""
        if name in self._writers:
            return self._writers[name]
        if create:
            writer = await AsyncSession.open_named(
                self._client, name, agent=self.writer_name, title=f"langgraph {name}", wait_for=self.wait_for
            )
        else:
            sid = await self._client.find(name)
            if sid is None:
                return None
            writer = await self._resume(sid)
        if writer.bundle is not None and writer.bundle.state.get("agent") == COPY_AGENT:
            try:
                writer = await self._resume(copy_session_id(writer.session_id))
            except errors.UnknownSession:
                raise errors.SessionlogError(
                    f"{name!r} names a copy whose fork is not in the log (an interrupted copy_thread?): copy it again"
                ) from None
        elif writer.bundle is None and name.startswith(_THREAD):
            await self._catalogue(name.removeprefix(_THREAD))
        self._sessions[name] = writer.session_id
        self._writers[name] = writer
        return writer

    async def _tool_writer(self, thread_id: str) -> AsyncSession:
        """The writer for a durable tool, taken under the thread's lock: LangGraph saves the
        thread's writes while its nodes run, and two first takeovers would fence each other."""
        name = thread_name(thread_id)
        async with self._lock(name):
            writer = await self._writer(name)
        assert writer is not None
        return writer

    async def _catalogue(self, thread_id: str) -> None:
        """Records ``thread_id`` in the catalogue, taking the catalogue over if another process did.

        Under the catalogue's lock: threads started at once would otherwise each take the
        catalogue over and fence one another. The threads that queued while an append was under
        way go in the next one together, so a thousand new threads make a few appends, not a
        thousand in a row."""
        self._uncatalogued.append(thread_id)
        async with self._lock(self.catalogue_name):
            if thread_id not in self._uncatalogued:
                return  # recorded by another caller's append
            batch = list(self._uncatalogued)
            events = [
                framework_state(FRAMEWORK, THREAD_KEY, json.dumps({"type": "thread", "thread_id": t})) for t in batch
            ]
            for _ in range(3):
                writer = await self._writer(self.catalogue_name)
                assert writer is not None
                try:
                    await writer.append_all(events)
                    self._uncatalogued = [t for t in self._uncatalogued if t not in batch]
                    return
                except errors.Fenced:
                    del self._writers[self.catalogue_name]
        raise errors.SessionlogError("the LangGraph catalogue is being taken over by other processes; try again")

    async def _view(self, name: str) -> SessionView | None:
        """The session holding ``name``'s events, rebuilt (``None`` when there is none)."""
        sid = self._sessions.get(name) or await self._client.find(name)
        if sid is None:
            return None
        try:
            view = await self._client.session(sid)
            if view.state.get("agent") == COPY_AGENT:
                sid = copy_session_id(sid)
                view = await self._client.session(sid)
        except errors.UnknownSession:
            return None
        self._sessions[name] = sid
        return view

    async def _last_seq(self, name: str) -> int | None:
        """The last seq of the session holding ``name``'s events (``None`` when there is none)."""
        writer = self._writers.get(name)
        if writer is not None:
            return writer.ledger.next_seq - 1
        view = await self._view(name)
        if view is None:
            return None
        # A copy reads its source's history through the fork point: wait for that too.
        parent = view.state.get("parent")
        if isinstance(parent, dict):
            await await_projected(
                self._client, str(parent["parent_session_id"]), int(parent["parent_seq"]), self.wait_for
            )
        return int(view.state.get("last_seq", 0))

    async def _load(self, name: str) -> ThreadState | None:
        last = await self._last_seq(name)
        if last is None:
            return None
        sid = self._sessions[name]
        await await_projected(self._client, sid, last, self.wait_for)
        events = [
            e async for e in self._client.events(sid, kinds=["FrameworkStateSaved"], inherited=True, limit=1000)
        ]
        return ThreadState.fold(events)

    def _tuple(self, thread_id: str, ns: str, checkpoint_id: str, thread: ThreadState) -> CheckpointTuple:
        saved = thread.checkpoints[ns][checkpoint_id]
        parent = (
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": saved.parent_id}}
            if saved.parent_id
            else None
        )
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=_comparable(self.serde.loads_typed(saved.checkpoint)),
            metadata=self.serde.loads_typed(saved.metadata),
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=[
                (w.task_id, w.channel, self.serde.loads_typed(w.value)) for w in thread.pending_writes(ns, checkpoint_id)
            ],
        )

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
        name = thread_name(thread_id)
        async with self._lock(name):
            thread = await self._load(name)
        if thread is None or not thread.checkpoints.get(ns):
            return None
        checkpoint_id = get_checkpoint_id(config) or max(thread.checkpoints[ns])
        if checkpoint_id not in thread.checkpoints[ns]:
            return None
        return self._tuple(thread_id, ns, checkpoint_id, thread)

    async def _threads(self) -> builtins.list[str]:
        """Every thread the catalogue records."""
        last = await self._last_seq(self.catalogue_name)
        if last is None:
            return []
        catalogue = self._sessions[self.catalogue_name]
        await await_projected(self._client, catalogue, last, self.wait_for)
        found: builtins.list[str] = []
        async for event in self._client.events(catalogue, kinds=["FrameworkStateSaved"], limit=1000):
            text = text_of((event.data or {}).get("state"))
            if text is not None:
                thread_id = str(json.loads(text)["thread_id"])
                found += [] if thread_id in found else [thread_id]
        return found

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        configurable = config["configurable"] if config else {}
        threads = [str(configurable["thread_id"])] if "thread_id" in configurable else await self._threads()
        wanted_ns = configurable.get("checkpoint_ns")
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found: builtins.list[CheckpointTuple] = []
        for thread_id in threads:
            async with self._lock(thread_name(thread_id)):
                thread = await self._load(thread_name(thread_id))
            for ns, saved in (thread.checkpoints if thread else {}).items():
                if wanted_ns is not None and ns != wanted_ns:
                    continue
                for checkpoint_id in sorted(saved, reverse=True):
                    if (wanted_id and checkpoint_id != wanted_id) or (before_id and checkpoint_id >= before_id):
                        continue
                    assert thread is not None
                    found_tuple = self._tuple(thread_id, ns, checkpoint_id, thread)
                    if filter and any(found_tuple.metadata.get(k) != v for k, v in filter.items()):
                        continue
                    if limit is not None and len(found) >= limit:
                        return found
                    found.append(found_tuple)
        return found

    async def _put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
        state = {
            "type": "checkpoint",
            "ns": ns,
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "checkpoint": _typed(self.serde.dumps_typed(checkpoint)),
            "metadata": _typed(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        }
        async with self._lock(thread_name(thread_id)):
            writer = await self._writer(thread_name(thread_id))
            assert writer is not None
            await writer.append(framework_state(FRAMEWORK, f"checkpoint:{ns}:{checkpoint['id']}", json.dumps(state)))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    async def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = str(configurable["checkpoint_id"])
        events = []
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            state = {
                "type": "write", "ns": ns, "checkpoint_id": checkpoint_id, "task_id": task_id,
                "task_path": task_path, "idx": index, "channel": channel,
                "value": _typed(self.serde.dumps_typed(value)),
            }
            key = f"writes:{ns}:{checkpoint_id}:{task_id}:{index}"
            events.append(framework_state(FRAMEWORK, key, json.dumps(state)))
        async with self._lock(thread_name(thread_id)):
            writer = await self._writer(thread_name(thread_id))
            assert writer is not None
            await writer.append_all(events)

    async def _mark(self, thread_id: str, markers: Any) -> None:
        """Appends the markers ``markers(thread)`` answers for the thread, if it exists."""
        name = thread_name(thread_id)
        async with self._lock(name):
            thread = await self._load(name)
            if thread is None:
                return
            found = markers(thread)
            if not found:
                return
            writer = await self._writer(name, create=False)
            if writer is None:
                return
            await writer.append_all(
                [framework_state(FRAMEWORK, f"{m['type']}:{m.get('ns', '')}:{m.get('id', '')}", json.dumps(m)) for m in found]
            )

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return

        def of_runs(thread: ThreadState) -> builtins.list[dict[str, Any]]:
            return [
                {"type": "deleted", "ns": ns, "id": cid}
                for ns, saved in thread.checkpoints.items()
                for cid, s in saved.items()
                if self.serde.loads_typed(s.metadata).get("run_id") in runs
            ]

        for thread_id in await self._threads():
            await self._mark(thread_id, of_runs)

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")

        def older(thread: ThreadState) -> builtins.list[dict[str, Any]]:
            if strategy == "delete":
                return [{"type": "clear"}] if thread.checkpoints else []
            return [
                {"type": "deleted", "ns": ns, "id": cid}
                for ns, saved in thread.checkpoints.items()
                for cid in sorted(saved)[:-1]
            ]

        for thread_id in thread_ids:
            await self._mark(thread_id, older)

    async def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = thread_name(source_thread_id), thread_name(target_thread_id)
        last = await self._last_seq(source)
        if last is None:
            return
        # A fork takes no name: the target's name goes to a session of its own, which only
        # holds it, and the fork gets the id derived from that session's (see COPY_AGENT).
        named = await self._client.create_or_find(COPY_AGENT, target, f"langgraph {target}")
        copy = copy_session_id(named.session_id)
        if named.opened is None and not await self._interrupted_copy(named.session_id):
            raise errors.SessionlogError(f"thread {target_thread_id!r} exists: copy_thread copies into a new thread")
        # A fork: the target reads the source's history through `last` as its own past, and
        # keeps the lineage (`sessionlog lineage`). Forking needs the operator role.
        try:
            forked = await self._client.fork(self._sessions[source], last, self.writer_name, copy)
        except errors.AlreadyStarted:
            # The copy was free above: the client's retry found its own first attempt's fork.
            forked = {"session_id": copy}
        if forked.get("session_id") != copy:
            # A recovery service older than the fork's `session_id` picks an id of its own.
            raise errors.SessionlogError(
                f"the recovery service forked {source_thread_id!r} into {forked.get('session_id')}, not {copy}: "
                "copy_thread needs a recovery service of this release"
            )
        self._sessions[target] = copy
        await self._catalogue(target_thread_id)

    async def _interrupted_copy(self, named: str) -> bool:
        """Whether the session ``named`` holds a copy's name and its fork is not there (a
        copy_thread that stopped in between): then copying into it goes on."""
        if (await self._client.session(named)).state.get("agent") != COPY_AGENT:
            return False
        try:
            await self._client.session(copy_session_id(named))
        except errors.UnknownSession:
            return True
        return False
