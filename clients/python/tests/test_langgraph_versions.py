"""LangGraph channel versions without the stack: threads another saver wrote (string versions,
as InMemorySaver, the Postgres and the SQLite savers write them) continue, threads this saver
wrote (int versions) continue as ints, and a checkpoint holding both compares without raising.

The graph tests run the saver's own put, get_tuple and get_next_version over a log kept in
memory (``MemoryLog``); test_langgraph.py resumes such a thread on the real services."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict, cast

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.pregel._utils import get_new_channel_versions
from langgraph.types import Command, interrupt

from sessionlog.integrations.langgraph import SessionlogSaver, ThreadState
from sessionlog.session import AsyncSession, Event

#: A version as InMemorySaver writes it (its 32-digit counter, then a random fraction).
FOREIGN = "00000000000000000000000000000005.0.7916507770116351"


class _MemoryWriter:
    """Stands in for a thread's writer: what the saver appends is applied as a read would fold it."""

    def __init__(self, thread: ThreadState) -> None:
        self.thread = thread

    async def append(self, event: Event) -> None:
        kind, data, _ = event
        assert kind == "FrameworkStateSaved"
        self.thread.apply(json.loads(data["state"]["Plain"]))

    async def append_all(self, events: list[Event]) -> None:
        for event in events:
            await self.append(event)


class MemoryLog(SessionlogSaver):
    """The saver with its log in memory: no service is asked anything."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, ThreadState] = {}

    async def _writer(self, name: str, *, create: bool = True) -> AsyncSession | None:
        return cast(AsyncSession, _MemoryWriter(self.threads.setdefault(name, ThreadState())))

    async def _load(self, name: str) -> ThreadState | None:
        return self.threads.get(name)


@pytest.fixture
def saver() -> Iterator[MemoryLog]:
    made = MemoryLog()
    yield made
    made.close()


class Ticket(TypedDict, total=False):
    steps: Annotated[list[str], operator.add]
    approved: bool
    shipped: str


def build(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def prepare(state: Ticket) -> Ticket:
        return {"steps": ["prepared"]}

    def approve(state: Ticket) -> Ticket:
        return {"steps": ["asked"], "approved": bool(interrupt("ship it?"))}

    def ship(state: Ticket) -> Ticket:
        # `shipped` is first written after the migration: a channel new to the thread.
        return {"steps": ["shipped"], "shipped": "yes" if state["approved"] else "no"}

    return (
        StateGraph(Ticket)
        .add_node("prepare", prepare)
        .add_node("approve", approve)
        .add_node("ship", ship)
        .add_edge(START, "prepare")
        .add_edge("prepare", "approve")
        .add_edge("approve", "ship")
        .add_edge("ship", END)
        .compile(checkpointer=checkpointer)
    )


def migrate(
    source: BaseCheckpointSaver[Any], target: BaseCheckpointSaver[Any], config: RunnableConfig, as_int: str = ""
) -> None:
    """Copies a thread's checkpoints and pending writes, oldest first, as a migration script would;
    the channel ``as_int`` gets int versions (its counter), as this saver wrote them before."""
    for found in reversed(list(source.list(config))):
        first: RunnableConfig = {"configurable": {**found.config["configurable"], "checkpoint_id": None}}
        parent = found.parent_config or first
        checkpoint = found.checkpoint
        for versions in [checkpoint["channel_versions"], *checkpoint["versions_seen"].values()]:
            if as_int in versions:
                versions[as_int] = int(str(versions[as_int]).partition(".")[0])
        target.put(parent, checkpoint, found.metadata, checkpoint["channel_versions"])
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in found.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            target.put_writes(found.config, writes, task_id)


def test_string_versions_continue_as_langgraphs_own_savers_write_them(saver: MemoryLog) -> None:
    after = saver.get_next_version(FOREIGN, None)
    assert isinstance(after, str) and after > FOREIGN
    counter, _, fraction = after.partition(".")
    assert counter == f"{6:032}", "the counter goes on, in the same 32 digits"
    assert 0.0 <= float(fraction) < 1.0
    # InMemorySaver's own answer has the same shape, and both come after FOREIGN alike.
    theirs = InMemorySaver().get_next_version(FOREIGN, None)
    assert theirs.partition(".")[0] == counter


def test_int_versions_stay_ints(saver: MemoryLog) -> None:
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(5, None) == 6


def test_int_and_string_versions_compare_without_raising(saver: MemoryLog) -> None:
    checkpoint = {"channel_versions": {"a": 3, "b": FOREIGN}, "versions_seen": {"n": {"a": 2, "b": FOREIGN}}}
    saver.threads["thread:t"] = ThreadState()
    saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        {"v": 4, "id": "1", "ts": "", "channel_values": {}, **checkpoint},  # type: ignore[typeddict-item]
        {},
        {},
    )
    loaded = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert loaded is not None
    # Any: LangGraph types versions as int | float | str, which do not compare with each other.
    versions: dict[str, Any] = dict(loaded.checkpoint["channel_versions"])
    assert versions == {"a": 3, "b": FOREIGN}, "versions read back as they were put"
    # What LangGraph does with them: the highest, the next after it, what changed since seen.
    highest = max(versions.values())
    assert highest == FOREIGN
    after = saver.get_next_version(highest, None)
    assert after > versions["a"] and after > versions["b"]
    assert 3 < after and not after < 3
    assert get_new_channel_versions(loaded.checkpoint["versions_seen"]["n"], {**versions, "a": 4}) == {"a": 4}
    # An int the counter passed sorts after the string; one it did not, before.
    assert sorted([after, 9, 4, versions["b"]], key=lambda v: v) == [4, versions["b"], after, 9]
    null = type(next(iter(versions.values())))()
    assert all(v > null for v in versions.values())


def test_a_thread_another_saver_wrote_resumes(saver: MemoryLog) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "moved"}}
    theirs = InMemorySaver()
    assert "__interrupt__" in build(theirs).invoke({"steps": []}, config)
    migrate(theirs, saver, config)
    done = build(saver).invoke(Command(resume=True), config)
    assert done == {"steps": ["prepared", "asked", "shipped"], "approved": True, "shipped": "yes"}
    latest = saver.get_tuple(config)
    assert latest is not None
    assert all(isinstance(v, str) for v in latest.checkpoint["channel_versions"].values()), "strings go on as strings"


def test_a_thread_with_int_and_string_versions_resumes(saver: MemoryLog) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "mixed"}}
    theirs = InMemorySaver()
    build(theirs).invoke({"steps": []}, config)
    migrate(theirs, saver, config, as_int="steps")
    latest = saver.get_tuple(config)
    assert latest is not None
    kinds = {type(v) for v in latest.checkpoint["channel_versions"].values()}
    assert int in kinds and any(issubclass(k, str) for k in kinds), "the thread holds both"
    done = build(saver).invoke(Command(resume=False), config)
    assert done["shipped"] == "no" and done["steps"][-1] == "shipped"
