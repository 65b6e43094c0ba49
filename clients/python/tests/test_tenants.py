"""Two tenants at once (issue 36): the LangGraph saver and the OpenAI Agents SDK session find
their session by a name within the caller's tenant, so two tenants using the same thread or
session id at the same time each get a session of their own, see only their own history, and
learn nothing of the other's. The saver's plain framework keys hold no thread id."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import operator
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from langgraph.graph import END, START, StateGraph

import sessionlog
from sessionlog import errors
from sessionlog.integrations.langgraph import SessionlogSaver, thread_name
from sessionlog.integrations.openai_agents import SessionlogSession, session_name
from sessionlog.models import text_of
from sessionlog.session import await_projected
from stackcorner import StackCorner

TENANTS = ("acme", "globex")


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def token(corner: StackCorner, tenant: str) -> str:
    return corner.token("harness", "reader", tenant=tenant)


@pytest.fixture
def savers(corner: StackCorner) -> Iterator[dict[str, SessionlogSaver]]:
    """A saver per tenant, with the same catalogue name."""
    catalogue = f"tenants-{uuid.uuid4().hex[:8]}"
    made = {t: SessionlogSaver(corner.ingest_url, corner.recovery_url, token=token(corner, t), catalogue=catalogue) for t in TENANTS}
    yield made
    for saver in made.values():
        saver.close()


@pytest.fixture
async def clients(corner: StackCorner) -> AsyncIterator[dict[str, sessionlog.AsyncClient]]:
    made = {t: sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token(corner, t)) for t in TENANTS}
    yield made
    for c in made.values():
        await c.aclose()


def noting(saver: SessionlogSaver, tenant: str) -> Any:
    """A one-node graph that notes who ran it."""

    def note(state: Notes) -> Notes:
        return {"notes": [f"{tenant} was here"]}

    return StateGraph(Notes).add_node("note", note).add_edge(START, "note").add_edge("note", END).compile(checkpointer=saver)


async def history(c: sessionlog.AsyncClient, session_id: str) -> list[sessionlog.HistoryEvent]:
    last = int((await c.session(session_id)).state["last_seq"])
    await await_projected(c, session_id, last)
    return [e async for e in c.events(session_id)]


def readable(value: Any) -> str:
    """``value`` as text, with every base64 string inside it (JSON or not) decoded too."""
    if isinstance(value, str):
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            decoded = ""
        try:
            inner = readable(json.loads(value))
        except ValueError:
            inner = ""
        return " ".join((value, decoded, inner))
    if isinstance(value, dict):
        return " ".join(readable(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(readable(v) for v in value)
    return str(value)


@pytest.mark.anyio
async def test_two_tenants_run_the_same_langgraph_thread_at_once(
    savers: dict[str, SessionlogSaver], clients: dict[str, sessionlog.AsyncClient]
) -> None:
    thread = f"ticket-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    graphs = {t: noting(savers[t], t) for t in TENANTS}
    for _ in range(2):
        await asyncio.gather(*(graphs[t].ainvoke({"notes": []}, config, durability="sync") for t in TENANTS))

    sessions = {t: await clients[t].find(thread_name(thread)) for t in TENANTS}
    assert None not in sessions.values() and sessions["acme"] != sessions["globex"], "a session each"
    for tenant, other in (TENANTS, TENANTS[::-1]):
        state = await graphs[tenant].aget_state(config)
        assert state.values["notes"] == [f"{tenant} was here"] * 2, "its own history, whole"
        # Its catalogue lists its own thread only, with its own checkpoints.
        listed = [c async for c in savers[tenant].alist(None)]
        assert {c.config["configurable"]["thread_id"] for c in listed} == {thread}
        assert all(other not in str(c.checkpoint["channel_values"]) for c in listed)
        # The other tenant's session is not there for it, by id or by name.
        with pytest.raises(errors.UnknownSession):
            await clients[tenant].session(str(sessions[other]))
        events = await history(clients[tenant], str(sessions[tenant]))
        # The saver's states hold typed values base64-encoded: search what they decode to.
        seen = " ".join(readable(e.data) for e in events)
        assert f"{tenant} was here" in seen, "the search sees the saved notes"
        assert f"{other} was here" not in seen, "nothing of the other tenant's"


@pytest.mark.anyio
async def test_the_savers_plain_keys_hold_no_thread_id(
    savers: dict[str, SessionlogSaver], clients: dict[str, sessionlog.AsyncClient]
) -> None:
    """Framework keys are plain in the log (only the state is sealed): neither the thread's
    checkpoints and writes nor the catalogue's record of it carry the thread id in a key."""
    saver, c = savers["acme"], clients["acme"]
    thread = f"customer-jane.doe@example.com-{uuid.uuid4().hex[:8]}"
    await noting(saver, "acme").ainvoke({"notes": []}, {"configurable": {"thread_id": thread}}, durability="sync")
    thread_session = await c.find(thread_name(thread))
    catalogue = await c.find(saver.catalogue_name)
    assert thread_session is not None and catalogue is not None
    saved = [e for sid in (thread_session, catalogue) for e in await history(c, sid) if e.kind == "FrameworkStateSaved"]
    keys = [str((e.data or {})["key"]) for e in saved]
    assert any(k.startswith("checkpoint:") for k in keys) and "thread" in keys, keys
    assert not [k for k in keys if thread in k or "jane" in k], keys
    # The thread id is in the catalogue's state, which is sealed like any text.
    records = [text_of((e.data or {}).get("state")) for e in saved if e.session_id == catalogue]
    assert any(thread in (r or "") for r in records)


@pytest.mark.anyio
async def test_two_tenants_use_the_same_agents_session_at_once(clients: dict[str, sessionlog.AsyncClient]) -> None:
    name = f"chat-{uuid.uuid4().hex[:8]}"
    runs: list[tuple[str, int]] = []

    def session_of(tenant: str) -> SessionlogSession:
        return SessionlogSession(name, clients[tenant], writer="py-tenants")

    async def run(tenant: str) -> SessionlogSession:
        session = session_of(tenant)

        @function_tool
        @session.durable_tool(effect="Idempotent", key=lambda n: f"square-{n}")
        async def square(n: int) -> int:
            """Squares n."""
            runs.append((tenant, n))
            return n * n

        model = ScriptedModel([[function_call("square", {"n": 7}, call_id="call-1")], [assistant_message(f"49 for {tenant}")]])
        agent = Agent(name="math", instructions="Square it.", model=model, tools=[square])
        await Runner.run(agent, f"{tenant} asks", session=session, run_config=RunConfig(tracing_disabled=True))
        return session

    opened = dict(zip(TENANTS, await asyncio.gather(*(run(t) for t in TENANTS)), strict=True))
    # Each tenant started a session of its own (neither found, nor took over, the other's), and
    # each ran its tool: the other's recorded call under the same key did not answer it.
    assert all(s.writer.bundle is None for s in opened.values())
    assert opened["acme"].writer.session_id != opened["globex"].writer.session_id
    assert sorted(runs) == [("acme", 7), ("globex", 7)]
    for tenant, other in (TENANTS, TENANTS[::-1]):
        # A new process of the tenant reads its own conversation back.
        items = await session_of(tenant).get_items()
        assert items[:3] == [
            {"role": "user", "content": f"{tenant} asks"},
            {"type": "function_call", "call_id": "call-1", "name": "square", "arguments": '{"n":7}', "id": "call-1"},
            {"type": "function_call_output", "call_id": "call-1", "output": "49"},
        ]
        answer: dict[str, Any] = dict(items[3])  # the model's message, whole
        assert (len(items), answer["role"], answer["content"][0]["text"]) == (4, "assistant", f"49 for {tenant}")
        assert await clients[tenant].find(session_name(name)) == opened[tenant].writer.session_id
        with pytest.raises(errors.UnknownSession):
            await clients[tenant].session(opened[other].writer.session_id)
