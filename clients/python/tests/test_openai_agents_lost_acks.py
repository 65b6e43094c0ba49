"""A write whose acknowledgement was lost, on the real services: the SDK's deferred-writes
reconciliation (openai-agents 0.24.0, ``resume_pending_session_write``) compares the
fingerprints of the items it meant to write with the tail ``get_items`` answers, and must find
its own items there, so that it neither writes them again nor runs the approved tool again.

The answer is lost at the HTTP layer: the append reaches the ingest service, which writes it, and
the client never hears back (every retry too, until it gives up); or the harness is killed in
that moment and a new process resumes from the SDK's checkpoint."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, RunConfig, Runner, RunState, StopAtTools, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import sessionlog
from counter_service import Counter
from processes import Harness
from sessionlog.integrations.openai_agents import SessionlogSession
from stackcorner import StackCorner


class LosingAnswers(httpx.AsyncBaseTransport):
    """Sends every request; while ``losing``, the answer to an append of the session's items is
    dropped after the service wrote it, as a cut connection would. (A durable tool's own
    appends hold no whole items: they are answered.)"""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.losing = False
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        items = request.method == "POST" and request.url.path.endswith("/events") and b"FrameworkStateSaved" in request.content
        if self.losing and items:
            await response.aread()
            await response.aclose()
            self.lost += 1
            raise httpx.ReadError("the connection closed before the answer", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelStep(output=[function_call("look_up", {"query": "x"}, call_id="call_LOOKUP")]),
            ModelStep(output=[function_call("write_thing", {"query": "x"}, call_id="call_PARKED")]),
            ModelStep(output=[assistant_message("done")]),
        ]
    )


def agent(runs: list[str], model: ScriptedModel, durable: SessionlogSession | None) -> Agent[Any]:
    """Looks something up, then asks for a write that needs approval (a durable tool of
    ``durable`` when given), then is done."""

    @function_tool(name_override="look_up")
    def look_up(query: str) -> str:
        return f"schema for {query}"

    async def write(query: str) -> str:
        runs.append(query)
        return f"wrote:{query}"

    if durable is not None:
        write = durable.durable_tool(effect="NonIdempotent", key=lambda query: f"write-{query}", name="write_thing")(write)
    write_thing = function_tool(write, name_override="write_thing", needs_approval=True)
    return Agent(
        name="writer", instructions="Look up, then write.", model=model, tools=[look_up, write_thing],
        tool_use_behavior=StopAtTools(stop_at_tool_names=["finish"]),
    )


CONFIG = RunConfig(tracing_disabled=True)


def session_over(corner: StackCorner, token: str, name: str) -> tuple[SessionlogSession, LosingAnswers]:
    """A session whose appends' answers can be lost (its transport: one per session, as the
    session's loop owns its connections)."""
    transport = LosingAnswers()
    # A short retry deadline: the lost answers outlast it, so add_items fails as in an outage.
    client = sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token, retry_for=1.0, transport=transport)
    return SessionlogSession(name, client, writer="py-agents", wait_for=30.0), transport


@pytest.mark.parametrize("tool", ["plain", "durable"])
@pytest.mark.parametrize("resumed_by", ["same-session", "new-session"])
@pytest.mark.anyio
async def test_a_settle_whose_answer_was_lost_reconciles_without_running_the_tool_again(
    corner: StackCorner, token: str, resumed_by: str, tool: str
) -> None:
    name = f"lost-{uuid.uuid4().hex[:8]}"
    runs: list[str] = []
    model = script()
    session, transport = session_over(corner, token, name)
    writer = agent(runs, model, session if tool == "durable" else None)
    first = await Runner.run(writer, "do the thing", session=session, run_config=CONFIG)
    assert len(first.interruptions) == 1
    state = await RunState.from_json(writer, json.loads(json.dumps(first.to_state().to_json())))
    state.approve(state.get_interruptions()[0])

    # The approved tool runs; the settle of its call and output reaches the log, its answer not.
    transport.losing = True
    with pytest.raises(sessionlog.SessionlogError):
        await Runner.run(writer, state, session=session, run_config=CONFIG)
    transport.losing = False
    assert runs == ["x"] and transport.lost > 0
    pending = state.to_json()
    assert pending.get("pending_session_write") is not None, "the SDK kept the write to reconcile"

    # Resumed from the checkpoint (as JSON): by the same session object, whose unanswered events
    # go again first, or by a new one (a new process), which reads what landed.
    if resumed_by == "new-session":
        session.close()
        session, _ = session_over(corner, token, name)
        writer = agent(runs, model, session if tool == "durable" else None)
    resumed = await RunState.from_json(writer, json.loads(json.dumps(pending)))
    result = await Runner.run(writer, resumed, session=session, run_config=CONFIG)
    assert result.final_output == "done"
    assert runs == ["x"], "the approved tool ran once"
    assert "pending_session_write" not in result.to_state().to_json()

    items = await session.get_items()
    parked = [i.get("type") for i in items if i.get("call_id") == "call_PARKED"]
    assert parked == ["function_call", "function_call_output"], "the settled batch is there once"
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as reader:
        log = [e async for e in reader.events(session.writer.session_id)]
    key = "write-x" if tool == "durable" else "call_PARKED"
    requested = [e for e in log if e.kind == "ToolCallRequested" and e.idempotency_key == key]
    assert len(requested) == 1, "written once: the retry was answered as a duplicate"
    assert [i.get("type") for i in items].count("function_call_output") == 2, "look_up's and write_thing's, once each"
    session.close()


def test_a_harness_killed_before_its_settle_was_answered_resumes_without_repeating_the_tool(
    corner: StackCorner, token: str, counter: tuple[Counter, str], tmp_path: Path
) -> None:
    name, tool, state = f"settle-{uuid.uuid4().hex[:8]}", "agent_settle", tmp_path / "run-state.json"

    def step(which: str) -> Harness:
        # A tool that takes effect on every call (not deduped): running it again would count.
        return Harness(
            "agents_settle_harness.py", corner, token, counter[1], tool, "NonIdempotent",
            "--session", name, "--state", str(state), "--step", which,
        )

    parking = step("park")
    assert parking.next() == {"at": "parked", "interruptions": 1}
    assert parking.process.wait(timeout=60) == 0
    approving = step("approve")
    assert approving.next() == {"at": "after-append"}
    approving.kill()
    assert counter[0].total(tool) == 1, "the approved tool ran before the settle"
    assert "pending_session_write" in json.loads(state.read_text()), "the checkpoint holds the write in doubt"

    resuming = step("resume")
    done = resuming.next()
    assert resuming.process.wait(timeout=60) == 0, done
    assert done["result"] == "done", done
    assert counter[0].total(tool) == 1, "the tool did not run again"
    parked = [i.get("type") for i in done["items"] if i.get("call_id") == "call_PARKED"]
    assert parked == ["function_call", "function_call_output"], "the settled call and output, once"


class Refusing(httpx.AsyncBaseTransport):
    """While ``refusing``, appends never reach the service: the connection is refused, so no
    request was sent."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.refusing = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.refusing and request.method == "POST" and request.url.path.endswith("/events"):
            raise httpx.ConnectError("connection refused", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.anyio
async def test_a_write_that_never_reached_the_service_is_not_written_later(corner: StackCorner, token: str) -> None:
    # The SDK's promise: add_items raised, so nothing was written; a user who runs the turn again
    # must not find their message twice.
    transport = Refusing()
    client = sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token, retry_for=1.0, transport=transport)
    session = SessionlogSession(f"refused-{uuid.uuid4().hex[:8]}", client, writer="py-agents")
    model = ScriptedModel([[assistant_message("hi")], [assistant_message("refunded")]])
    agent = Agent(name="support", instructions="Help.", model=model)
    try:
        await Runner.run(agent, "first", session=session, run_config=CONFIG)
        transport.refusing = True
        with pytest.raises(sessionlog.SessionlogError):
            await Runner.run(agent, "refund order 4711", session=session, run_config=CONFIG)
        transport.refusing = False
        await Runner.run(agent, "refund order 4711", session=session, run_config=CONFIG)  # the user retries
        contents = [i.get("content") for i in await session.get_items() if i.get("role") == "user"]
        assert contents == ["first", "refund order 4711"]
    finally:
        session.close()
