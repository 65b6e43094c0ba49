"""The LangGraph checkpointer on the real services: LangGraph's own conformance suite, every
base and extended capability, a graph killed mid tool call and while it waits for an
approval, resumed by new processes, and a thread copied while a node waits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from counter_service import Counter, perform
from test_langgraph_versions import build, migrate
from processes import Harness
from sessionlog.integrations.langgraph import SessionlogSaver
from stackcorner import StackCorner

#: The conformance suite's result, printed at the end of the run (conftest.py).
SUMMARY: list[str] = []


@pytest.mark.anyio
async def test_the_saver_passes_langgraphs_conformance_suite(corner: StackCorner) -> None:
    # copy_thread forks, which takes the operator role.
    token = corner.token("harness", "reader", "operator")

    @checkpointer_test(name="SessionlogSaver")
    async def saver() -> AsyncIterator[SessionlogSaver]:
        made = SessionlogSaver(corner.ingest_url, corner.recovery_url, token=token, catalogue=f"conformance-{uuid.uuid4()}")
        yield made
        made.close()

    report = await validate(saver, progress=ProgressCallbacks.quiet())
    counts = {name: (r.tests_passed, r.tests_passed + r.tests_failed) for name, r in sorted(report.results.items())}
    SUMMARY.append(
        f"LangGraph conformance: {report.conformance_level()} ("
        + ", ".join(f"{name} {ok}/{of}" for name, (ok, of) in counts.items())
        + ")"
    )
    failed = {name: result.failures for name, result in report.results.items() if result.passed is not True}
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}, "every capability was detected"
    assert report.conformance_level() == "FULL" and not failed, failed


def test_a_killed_graph_resumes_without_a_second_side_effect_and_survives_a_kill_while_waiting(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    tool, effect = "graph_counter", "Idempotent"
    thread = f"ticket-{uuid.uuid4().hex[:8]}"

    def run(*extra: str) -> Harness:
        return Harness("graph_harness.py", corner, token, counter[1], tool, effect, "--session", thread, *extra)

    # Killed after the side effect, before its result is recorded: recovery asks the resolver.
    first = run("--hang", "after-effect")
    assert first.next() == {"at": "after-effect"}
    first.kill()
    assert counter[0].total(tool) == 1
    # A new process runs the thread on: LangGraph runs the node again, the tool answers from the
    # log, and the graph stops at the approval. Killed there, while it waits.
    second = run("--resume", "--hang", "waiting")
    assert second.next() == {"waiting": f"ship {tool} effect #1?"}
    assert second.next() == {"at": "waiting"}
    second.kill()
    # A third process answers the approval; the graph ends, having counted once.
    third = run("--approve")
    assert third.next() == {"result": {"counted": f"{tool} effect #1", "approved": True}}
    third.process.wait(timeout=60)
    assert counter[0].total(tool) == 1, "the side effect happened exactly once"


class Order(TypedDict, total=False):
    charged: str
    approved: bool


def test_a_node_run_again_in_a_copied_thread_or_after_an_interrupt_answers_its_recorded_call(
    corner: StackCorner, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "graph_charge"  # the service takes effect on every request
    # copy_thread forks, which takes the operator role.
    saver = SessionlogSaver(
        corner.ingest_url, corner.recovery_url, token=corner.token("harness", "reader", "operator"),
        catalogue=f"copy-{uuid.uuid4()}",
    )

    @saver.durable_tool(effect="NonIdempotent", name=tool)
    def charge(order: int) -> str:
        return perform(url, tool)

    def charge_then_ask(state: Order) -> Order:
        # LangGraph runs this node again from its start once the interrupt is answered.
        charged = charge(7)
        return {"charged": charged, "approved": bool(interrupt({"question": f"ship after {charged}?"}))}

    graph = (
        StateGraph(Order)
        .add_node("charge_then_ask", charge_then_ask)
        .add_edge(START, "charge_then_ask")
        .add_edge("charge_then_ask", END)
        .compile(checkpointer=saver)
    )

    def config(thread: str) -> Any:
        return {"configurable": {"thread_id": thread}}

    source, copy = f"order-{uuid.uuid4().hex[:8]}", f"order-copy-{uuid.uuid4().hex[:8]}"
    assert "__interrupt__" in graph.invoke({}, config(source), durability="sync")
    assert service.total(tool) == 1
    saver.copy_thread(source, copy)
    done = {"charged": f"{tool} effect #1", "approved": True}
    # The copy inherits the charge recorded before its fork point; the source answers its own.
    assert graph.invoke(Command(resume=True), config(copy), durability="sync") == done
    assert graph.invoke(Command(resume=True), config(source), durability="sync") == done
    saver.close()
    assert service.total(tool) == 1, "charged once, across the copy and the run again in this process"


def test_a_thread_another_saver_wrote_resumes_in_a_new_process(corner: StackCorner, token: str) -> None:
    thread = f"moved-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    theirs = InMemorySaver()
    assert "__interrupt__" in build(theirs).invoke({"steps": []}, config)

    def saver() -> SessionlogSaver:
        return SessionlogSaver(corner.ingest_url, corner.recovery_url, token=token, catalogue=f"moved-{thread}")

    first = saver()
    migrate(theirs, first, config)
    first.close()
    # Another saver (as another process would) finds the moved thread and runs it on.
    second = saver()
    done = build(second).invoke(Command(resume=True), config, durability="sync")
    assert done == {"steps": ["prepared", "asked", "shipped"], "approved": True, "shipped": "yes"}
    latest = second.get_tuple(config)
    assert latest is not None and latest.metadata["step"] > 2
    assert all(isinstance(v, str) for v in latest.checkpoint["channel_versions"].values()), "strings go on as strings"
    second.close()


@pytest.mark.anyio
async def test_threads_one_saver_starts_at_once_are_all_catalogued(corner: StackCorner, token: str) -> None:
    # New threads at once (a server's requests) each catalogue themselves: the catalogue's first
    # takeover is one, not one per thread fencing the others (a LostClaim before the fix).
    tag = uuid.uuid4().hex[:8]
    saver = SessionlogSaver(corner.ingest_url, corner.recovery_url, token=token, catalogue=f"at-once-{tag}")
    threads = {f"at-once-{tag}-{n}" for n in range(8)}
    await asyncio.gather(
        *(saver.aput({"configurable": {"thread_id": t, "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}) for t in threads)
    )
    listed = {found.config["configurable"]["thread_id"] async for found in saver.alist(None)}
    assert listed == threads
    saver.close()
