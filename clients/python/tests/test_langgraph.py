"""The LangGraph checkpointer on the real services: LangGraph's own conformance suite, every
base and extended capability, and a graph killed mid tool call and while it waits for an
approval, resumed by new processes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from counter_service import Counter
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
