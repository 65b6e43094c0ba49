"""The OpenAI Agents SDK session on the real services: items round-trip through the log,
pop_item and clear_session retract without rewriting it, and an agent killed mid tool call
resumes in a new process without a second side effect."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

import sessionlog
from counter_service import Counter
from processes import Harness
from test_openai_agents_loops import in_threads
from sessionlog.integrations.openai_agents import SessionlogSession
from sessionlog.models import text_of
from stackcorner import StackCorner

USER = {"role": "user", "content": "count the files"}
CALL = {"type": "function_call", "call_id": "call-7", "name": "ls", "arguments": '{"dir":"."}', "id": "call-7"}
OUTPUT = {"type": "function_call_output", "call_id": "call-7", "output": "a.txt b.txt"}
ANSWER = {
    "id": "msg-1", "type": "message", "role": "assistant", "status": "completed",
    "content": [{"type": "output_text", "text": "Two files.", "annotations": [], "logprobs": []}],
}
REASONING = {"type": "reasoning", "id": "rs-1", "summary": [{"type": "summary_text", "text": "ls first"}]}
PICTURE = {
    "type": "message", "role": "user",
    "content": [
        {"type": "input_text", "text": "what is in this picture?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
    ],
}
CITED = {
    "id": "msg-2", "type": "message", "role": "assistant", "status": "incomplete",
    "content": [
        {
            "type": "output_text", "text": "See the docs.",
            "annotations": [{"type": "url_citation", "url": "https://example.com", "title": "Docs", "start_index": 8, "end_index": 12}],
        },
    ],
}


@pytest.fixture
async def client(corner: StackCorner, token: str) -> AsyncIterator[sessionlog.AsyncClient]:
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        yield c


def new_session(client: sessionlog.AsyncClient, name: str | None = None) -> SessionlogSession:
    return SessionlogSession(name or f"chat-{uuid.uuid4().hex[:8]}", client, writer="py-agents", tool_effects={"ls": "Pure"})


@pytest.mark.anyio
async def test_items_round_trip_through_the_log(client: sessionlog.AsyncClient) -> None:
    session = new_session(client)
    assert await session.get_items() == []
    given = [PICTURE, CALL, OUTPUT, REASONING, ANSWER, CITED]
    await session.add_items(given)  # type: ignore[arg-type]
    # Exactly what was given: ids, statuses, content parts, annotations, in order.
    assert await session.get_items() == given
    assert await session.get_items(limit=2) == given[-2:]
    # Another process (a new object) takes the session over and reads the same conversation.
    again = new_session(client, session.session_id)
    assert await again.get_items() == given
    # The log keeps each item as its event (what recovery and the context view read), with the
    # item whole beside it, naming that event; a reasoning item has no event of its own.
    history = [e async for e in client.events(session.writer.session_id)]
    assert [e.kind for e in history] == [
        "SessionStarted",
        "UserRequest", "FrameworkStateSaved",
        "ToolCallRequested", "FrameworkStateSaved",
        "ToolCallResult", "FrameworkStateSaved",
        "ModelResponse",
        "ModelResponse", "FrameworkStateSaved",
        "ModelResponse", "FrameworkStateSaved",
    ]
    for event, beside in zip(history, history[1:]):
        if beside.kind == "FrameworkStateSaved":
            assert beside.causation_id == event.event_id
    data = [e.data or {} for e in history]
    assert text_of(data[1]["content"]) == "what is in this picture?"
    assert (data[3]["tool"], data[3]["effect"], history[3].idempotency_key) == ("ls", "Pure", "call-7")
    assert data[5]["call_seq"] == history[3].seq and text_of(data[5]["output"]) == "a.txt b.txt"
    assert text_of(data[8]["content"]) == "Two files."
    assert text_of(data[10]["content"]) == "See the docs."


@pytest.mark.anyio
async def test_pop_and_clear_retract_without_rewriting_the_log(client: sessionlog.AsyncClient) -> None:
    session = new_session(client)
    await session.add_items([USER, ANSWER])  # type: ignore[list-item]
    popped = await session.pop_item()
    assert popped == ANSWER
    assert await session.get_items() == [USER]
    await session.add_items([{"role": "user", "content": "and the folders?"}])
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    history = [e async for e in client.events(session.writer.session_id)]
    assert [e.kind for e in history].count("EventRetracted") == 3
    kinds = [e.kind for e in history if e.kind != "FrameworkStateSaved"]
    assert kinds[:3] == ["SessionStarted", "UserRequest", "ModelResponse"], "nothing is rewritten"


@pytest.mark.anyio
async def test_an_agent_run_is_the_sessions_history(client: sessionlog.AsyncClient) -> None:
    session = new_session(client)
    runs: list[int] = []

    @function_tool
    @session.durable_tool(effect="Idempotent", key=lambda n: f"square-{n}")
    async def square(n: int) -> int:
        """Squares n."""
        runs.append(n)
        return n * n

    model = ScriptedModel([[function_call("square", {"n": 7}, call_id="call-1")], [assistant_message("49")]])
    agent = Agent(name="math", instructions="Square it.", model=model, tools=[square])
    result = await Runner.run(agent, "square 7", session=session, run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "49" and runs == [7]
    items: list[dict[str, Any]] = [dict(i) for i in await session.get_items()]
    # The durable call's items as the SDK gave them (the model's call id), not the wrapper's.
    assert items[:3] == [
        {"role": "user", "content": "square 7"},
        {"type": "function_call", "call_id": "call-1", "name": "square", "arguments": '{"n":7}', "id": "call-1"},
        {"type": "function_call_output", "call_id": "call-1", "output": "49"},
    ]
    assert items[3]["type"] == "message" and items[3]["content"][0]["text"] == "49"
    # The log has the call once, as its wrapper recorded it (its key), with the items beside.
    history = [e async for e in client.events(session.writer.session_id)]
    requests = [e for e in history if e.kind == "ToolCallRequested"]
    assert [e.idempotency_key for e in requests] == ["square-7"]
    beside = {e.causation_id for e in history if e.kind == "FrameworkStateSaved"}
    recorded = next(e for e in history if e.kind == "ToolCallResult")
    assert {requests[0].event_id, recorded.event_id} <= beside


@pytest.mark.parametrize(
    ("tool", "effect", "point"),
    [
        # Done, not recorded: recovery asks the service's resolver and records its answer.
        ("agent_counter", "Idempotent", "after-effect"),
        # Recorded as requested, never sent: reissued with its key.
        ("agent_reissued", "Idempotent", "after-intent"),
    ],
)
def test_a_killed_agent_resumes_without_a_second_side_effect(
    corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, effect: str, point: str
) -> None:
    name = f"agent-{uuid.uuid4().hex[:8]}"
    first = Harness("agents_harness.py", corner, token, counter[1], tool, effect, "--session", name, "--hang", point)
    assert first.next() == {"at": point}
    first.kill()
    assert counter[0].total(tool) == (0 if point == "after-intent" else 1)
    second = Harness("agents_harness.py", corner, token, counter[1], tool, effect, "--session", name, "--resume")
    done = second.next()
    second.process.wait(timeout=60)
    assert done["result"] == "counted", done
    outputs = [i["output"] for i in done["items"] if i.get("type") == "function_call_output"]
    # Done, recorded by recovery: the resumed run read the call and its result, which stay where
    # they were; the model's new call gets the recorded result. Never sent: the new call is it.
    shown = 2 if point == "after-effect" else 1
    assert outputs == [f"{tool} effect #1"] * shown, "every call in the conversation has the one result"
    assert counter[0].total(tool) == 1, "the side effect happened exactly once"


@pytest.mark.anyio
async def test_parallel_and_failing_durable_tools_keep_the_conversation(client: sessionlog.AsyncClient) -> None:
    session = new_session(client)

    @function_tool
    @session.durable_tool(effect="Pure")
    async def square(n: int) -> int:
        """Squares n; refuses 13."""
        if n == 13:
            raise ValueError("unlucky")
        return n * n

    steps = [
        [
            {"type": "reasoning", "id": "rs-1", "summary": []},
            function_call("square", {"n": 2}, call_id="c1"),
            function_call("square", {"n": 3}, call_id="c2"),
            function_call("square", {"n": 13}, call_id="c3"),
        ],
        [assistant_message("4, 9 and no")],
    ]
    agent = Agent(name="math", instructions="Square them.", model=ScriptedModel(steps), tools=[square])  # type: ignore[arg-type]
    await Runner.run(agent, "square 2, 3, 13", session=session, run_config=RunConfig(tracing_disabled=True))
    items: list[dict[str, Any]] = [dict(i) for i in await session.get_items()]
    types = [i.get("type", i.get("role")) for i in items]
    assert types[:2] == ["user", "reasoning"], "a reasoning item stays before the calls it led to"
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
    calls = {i["call_id"]: i["arguments"] for i in items if i.get("type") == "function_call"}
    assert sorted(outputs[k] for k in calls if calls[k] != '{"n":13}') == ["4", "9"]
    # The conversation keeps what the model was shown (the SDK's message); the log, the error.
    assert [outputs[k] for k in calls if calls[k] == '{"n":13}'] == ["An error occurred while running the tool. Please try again."]
    failed = [e async for e in client.events(session.writer.session_id, kinds=["ToolCallResult"])]
    assert [text_of((e.data or {}).get("output")) for e in failed if (e.data or {}).get("outcome") == "Failed"] == ["ValueError: unlucky"]


@pytest.mark.anyio
async def test_two_processes_opening_a_new_session_the_later_one_writes(client: sessionlog.AsyncClient) -> None:
    name = f"chat-{uuid.uuid4().hex[:8]}"
    first, second = new_session(client, name), new_session(client, name)
    await asyncio.gather(first.open(), second.open())
    earlier, later = sorted([first, second], key=lambda s: s.writer.ledger.epoch)
    assert later.writer.ledger.epoch > earlier.writer.ledger.epoch, "the second to open took it over"
    await later.add_items([USER])  # type: ignore[list-item]
    with pytest.raises(sessionlog.Fenced):
        await earlier.add_items([USER])  # type: ignore[list-item]
    assert await new_session(client, name).get_items() == [USER]


@pytest.mark.anyio
async def test_session_settings_limit_what_is_read_from_the_log(client: sessionlog.AsyncClient) -> None:
    name = f"chat-{uuid.uuid4().hex[:8]}"
    session = SessionlogSession(name, client, writer="py-agents", tool_effects={"ls": "Pure"}, session_settings={"limit": 2})
    await session.add_items([USER, CALL, OUTPUT, ANSWER])  # type: ignore[list-item]
    everything = await session.get_items(limit=-1)
    assert len(everything) == 4
    assert await session.get_items() == everything[-2:] == [OUTPUT, ANSWER]
    assert await session.get_items(limit=3) == everything[-3:]
    assert await session.get_items(limit=100) == everything
    assert await session.get_items(limit=0) == []
    # A run with the session's limit: its output's call is cut off, so the model gets no output.
    model = ScriptedModel([[assistant_message("Still two.")]])
    agent = Agent(name="files", instructions="Count.", model=model)
    await Runner.run(agent, "and now?", session=session, run_config=RunConfig(tracing_disabled=True))
    assert model.last_call is not None
    assert [i.get("content") for i in model.last_call.input] == [ANSWER["content"], "and now?"]


def test_run_sync_and_threads_use_one_session_across_loops(corner: StackCorner, token: str) -> None:
    # No fixture loop: each run_sync makes its own, and each thread below runs its own.
    session = SessionlogSession(
        f"chat-{uuid.uuid4().hex[:8]}", sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token),
        writer="py-agents",
    )
    runs: list[int] = []

    @function_tool
    @session.durable_tool(effect="Pure")
    async def square(n: int) -> int:
        """Squares n."""
        runs.append(n)
        return n * n

    steps = [[function_call("square", {"n": 3}, call_id="c1")], [assistant_message("9")], [assistant_message("Still 9.")]]
    model = ScriptedModel(steps)
    agent = Agent(name="math", instructions="Square it.", model=model, tools=[square])
    config = RunConfig(tracing_disabled=True)
    assert Runner.run_sync(agent, "square 3", session=session, run_config=config).final_output == "9"
    assert Runner.run_sync(agent, "and again?", session=session, run_config=config).final_output == "Still 9."
    assert runs == [3]
    assert model.last_call is not None and len(model.last_call.input) == 5

    def adding(n: int) -> Any:
        async def add() -> None:
            for i in range(3):
                await session.add_items([{"role": "user", "content": f"{n}.{i}"}])

        return add

    assert in_threads(*(adding(n) for n in range(4))) == []
    items = asyncio.run(session.get_items())
    added = sorted(str(i.get("content")) for i in items[6:])
    assert added == sorted(f"{n}.{i}" for n in range(4) for i in range(3)), "every item, once, after the runs"
    session.close()


@pytest.mark.anyio
async def test_a_call_waiting_for_its_output_is_no_call_in_doubt(client: sessionlog.AsyncClient) -> None:
    # The SDK saves a call that waits for approval without its output; another process approves.
    name = f"chat-{uuid.uuid4().hex[:8]}"
    parked = {"type": "function_call", "call_id": "call-9", "name": "rm", "arguments": '{"path":"/tmp/x"}', "status": "completed"}
    session = new_session(client, name)
    await session.add_items([USER, parked])  # type: ignore[list-item]
    assert await session.get_items() == [USER, parked]
    kinds = [e.kind async for e in client.events(session.writer.session_id)]
    assert "ToolCallRequested" not in kinds, "nothing ran: no call for recovery to find in doubt"
    # A new process takes the session over (a call in doubt would stop it here), and adds the output.
    later = new_session(client, name)
    output = {"type": "function_call_output", "call_id": "call-9", "output": "removed"}
    await later.add_items([output])  # type: ignore[list-item]
    assert await later.get_items() == [USER, parked, output]
    history = [e async for e in client.events(session.writer.session_id)]
    request = next(e for e in history if e.kind == "ToolCallRequested")
    record = next(e for e in history if e.event_id == request.causation_id)
    assert record.kind == "FrameworkStateSaved" and record.seq < request.seq, "the request names the item it stands for"
    result = next(e for e in history if e.kind == "ToolCallResult")
    assert (result.data or {})["call_seq"] == request.seq and request.idempotency_key == "call-9"
    # A waiting call popped is withdrawn; an output for it then has no call.
    await later.add_items([{**parked, "call_id": "call-10"}])  # type: ignore[list-item]
    popped = await later.pop_item()
    assert popped is not None and popped.get("call_id") == "call-10"
    with pytest.raises(sessionlog.SessionlogError, match="call-10"):
        await new_session(client, name).add_items([{**output, "call_id": "call-10"}])  # type: ignore[list-item]


@pytest.mark.anyio
async def test_a_call_id_a_provider_reuses_marks_only_its_own_call_durable(client: sessionlog.AsyncClient) -> None:
    # Some providers number calls per response (call_0, call_1, ...): a durable call and a later
    # plain call may share an id, and the plain call's output is its own, written as its result.
    session = new_session(client)

    @session.durable_tool(effect="Pure")
    async def lookup(q: str) -> str:
        return f"found {q}"

    await session.add_items([{"role": "user", "content": "hi"}])
    await lookup(q="x")
    first = [
        {"type": "function_call", "call_id": "call_0", "name": "lookup", "arguments": '{"q":"x"}'},
        {"type": "function_call_output", "call_id": "call_0", "output": "found x"},
    ]
    later = [
        {"type": "function_call", "call_id": "call_0", "name": "send_email", "arguments": '{"to":"a"}'},
        {"type": "function_call_output", "call_id": "call_0", "output": "sent"},
    ]
    await session.add_items(first)  # type: ignore[arg-type]
    await session.add_items(later)  # type: ignore[arg-type]
    # A range read answers from the projection (the event index): wait, with a deadline, for it
    # to hold the plain call's result rather than read it once.
    outputs: list[str | None] = []
    with anyio.move_on_after(15):
        while outputs[-1:] != ["sent"]:
            results = [e async for e in client.events(session.writer.session_id, kinds=["ToolCallResult"])]
            outputs = [text_of((e.data or {}).get("output")) for e in results]
            if outputs[-1:] != ["sent"]:
                await anyio.sleep(0.1)
    assert outputs[-1:] == ["sent"], outputs
    session.close()
    # A new process takes the session over (no call left in doubt) and reads the same items.
    again = new_session(client, session.session_id)
    again.durable_tool(effect="Pure")(lookup)
    try:
        assert await again.get_items() == [{"role": "user", "content": "hi"}, *first, *later]
    finally:
        again.close()


class Address(BaseModel):
    city: str
    floor: int = 0


class Speed(enum.Enum):
    EXPRESS = "express"


@dataclasses.dataclass
class Parcel:
    kilos: float
    sent: dt.date


@pytest.mark.anyio
async def test_a_durable_tool_with_arguments_that_are_not_plain_json_is_claimed(client: sessionlog.AsyncClient) -> None:
    # The wrapper records a model, a dataclass, an enum and a date as the model's JSON has them,
    # so the SDK's items of the call stand beside its records: a new process reads what was saved.
    name, runs = f"chat-{uuid.uuid4().hex[:8]}", []

    def shipper(session: SessionlogSession, model: ScriptedModel) -> Agent[Any]:
        @function_tool
        @session.durable_tool(effect="Idempotent", key=lambda address, *_, **__: f"ship-{address.city}")
        async def ship(address: Address, speed: Speed, parcel: Parcel, when: dt.datetime) -> str:
            """Ships a parcel to an address."""
            runs.append(address.city)
            return f"shipped to {address.city}"

        return Agent(name="shipper", instructions="Ship.", model=model, tools=[ship])

    arguments = {
        "address": {"city": "Oslo"}, "speed": "express",
        "parcel": {"kilos": 2.5, "sent": "2026-12-04"}, "when": "2026-12-24T09:00:00Z",
    }
    model = ScriptedModel([[function_call("ship", arguments, call_id="call_SHIP")], [assistant_message("done")]])
    first = new_session(client, name)
    await Runner.run(shipper(first, model), "ship it", session=first, run_config=RunConfig(tracing_disabled=True))
    saved = await first.get_items()
    first.close()
    again = new_session(client, name)
    shipper(again, ScriptedModel([]))  # its durable tool, as a new process defines it
    try:
        assert await again.get_items() == saved
    finally:
        again.close()
    assert runs == ["Oslo"]


@pytest.mark.anyio
async def test_a_later_call_leaves_a_call_a_crashed_process_left_where_it_was(client: sessionlog.AsyncClient) -> None:
    # A process ran a durable refund and crashed before the SDK saved the turn: the next process
    # reads that call and its output as items. When the model asks for the same refund again,
    # the tool answers the recorded result, and the SDK's new call is kept on its own: the
    # history the SDK read stays as it was.
    name, runs = f"chat-{uuid.uuid4().hex[:8]}", []

    def process() -> tuple[SessionlogSession, Any]:
        session = new_session(client, name)

        @session.durable_tool(effect="Idempotent", key=lambda order: f"refund-{order}")
        async def refund(order: str) -> str:
            runs.append(order)
            return f"refunded {order}"

        return session, refund

    crashed, refund = process()
    await crashed.add_items([{"role": "user", "content": "refund 4711"}])
    await refund(order="4711")
    crashed.close()
    resumed, refund = process()
    try:
        before = await resumed.get_items()
        assert [i.get("type") for i in before[1:]] == ["function_call", "function_call_output"]
        await resumed.add_items([{"role": "assistant", "content": "Refunded."}, {"role": "user", "content": "again"}])
        assert await refund(order="4711") == "refunded 4711"
        later = [
            {"type": "function_call", "call_id": "call_9", "name": "refund", "arguments": '{"order":"4711"}'},
            {"type": "function_call_output", "call_id": "call_9", "output": "refunded 4711"},
        ]
        await resumed.add_items(later)  # type: ignore[arg-type]
        after = await resumed.get_items()
        assert after == [*before, {"role": "assistant", "content": "Refunded."}, {"role": "user", "content": "again"}, *later]
    finally:
        resumed.close()
    assert runs == ["4711"]


@pytest.mark.anyio
async def test_a_popped_output_added_back_is_the_same_history(client: sessionlog.AsyncClient) -> None:
    # As the SDK's SQLiteSession: pop_item then add_items of what it answered gives the items back.
    session = new_session(client)
    try:
        await session.add_items([USER, CALL, OUTPUT])  # type: ignore[list-item]
        original = await session.get_items()
        popped = await session.pop_item()
        assert popped == OUTPUT
        await session.add_items([popped])
        assert await session.get_items() == original
        await session.add_items([ANSWER])  # type: ignore[list-item]
        assert await session.get_items() == [*original, ANSWER]
    finally:
        session.close()
    again = new_session(client, session.session_id)
    try:
        assert await again.get_items() == [*original, ANSWER]
    finally:
        again.close()
