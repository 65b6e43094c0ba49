"""``SessionlogSession``'s ``session_settings`` and ``limit`` without the stack, side by side with the
SDK's own ``SQLiteSession`` (in memory): the same history gives the same answers, and a run
whose limit cuts between a function call and its output hands the model the same input.

``MemoryItems`` keeps the conversation in memory instead of the log, so what is tested is the
session's own limit handling; test_openai_agents.py reads the limits through the real log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, TResponseInputItem
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message

import sessionlog
from sessionlog.integrations.openai_agents import SessionlogSession

HISTORY: list[TResponseInputItem] = [
    {"role": "user", "content": "count the files"},
    {"type": "function_call", "call_id": "call-7", "name": "ls", "arguments": '{"dir":"."}'},
    {"type": "function_call_output", "call_id": "call-7", "output": "a.txt b.txt"},
    {"role": "assistant", "content": "Two files."},
    {"role": "user", "content": "and now?"},
    {"role": "assistant", "content": "Still two."},
]


class MemoryItems(SessionlogSession):
    """The session with its items in memory: the log is not asked."""

    def __init__(self, client: sessionlog.AsyncClient, **settings: Any) -> None:
        super().__init__("memory", client, writer="py-agents", **settings)
        self.items: list[TResponseInputItem] = []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.items += items

    async def _live_items(self) -> list[tuple[int, TResponseInputItem]]:
        return list(enumerate(self.items, start=1))


@pytest.fixture
async def client() -> AsyncIterator[sessionlog.AsyncClient]:
    async with sessionlog.AsyncClient() as c:
        yield c


async def pair(client: sessionlog.AsyncClient, **settings: Any) -> tuple[MemoryItems, SQLiteSession]:
    ours, theirs = MemoryItems(client, **settings), SQLiteSession("theirs", **settings)
    await ours.add_items(list(HISTORY))
    await theirs.add_items(list(HISTORY))
    return ours, theirs


@pytest.mark.anyio
async def test_session_settings_default_to_the_sdks_and_are_taken_as_given(client: sessionlog.AsyncClient) -> None:
    plain = SessionlogSession("s", client, writer="w")
    assert isinstance(plain.session_settings, SessionSettings) and plain.session_settings.limit is None
    assert SessionlogSession("s", client, writer="w", session_settings=SessionSettings(limit=5)).session_settings == (
        SessionSettings(limit=5)
    )
    # The SDK's sessions take a dict too.
    assert SessionlogSession("s", client, writer="w", session_settings={"limit": 3}).session_settings == (
        SessionSettings(limit=3)
    )


@pytest.mark.anyio
@pytest.mark.parametrize("limit", [None, 0, 1, 2, 6, 100, -1])
@pytest.mark.parametrize("default", [None, 3])
async def test_get_items_limits_as_the_sdks_own_session_does(
    client: sessionlog.AsyncClient, limit: int | None, default: int | None
) -> None:
    ours, theirs = await pair(client, session_settings=SessionSettings(limit=default))
    try:
        expected = await theirs.get_items(limit)
        assert await ours.get_items(limit) == expected
        if limit is None and default == 3:
            assert expected == HISTORY[-3:], "the session's default limit applies"
    finally:
        theirs.close()


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["session", "run"])
async def test_a_limit_that_cuts_a_call_from_its_output_drops_the_output(
    client: sessionlog.AsyncClient, where: str
) -> None:
    # The latest four items begin with the output; its call is cut off.
    settings = SessionSettings(limit=4)
    session_settings, run_settings = (settings, None) if where == "session" else (None, settings)
    run_config = RunConfig(session_settings=run_settings, tracing_disabled=True)
    inputs = []
    for session in await pair(client, session_settings=session_settings):
        model = ScriptedModel([[assistant_message("Three now.")]])
        agent = Agent(name="files", instructions="Count.", model=model)
        await Runner.run(agent, "count again", session=session, run_config=run_config)
        assert model.last_call is not None
        inputs.append(model.last_call.input)
        if isinstance(session, SQLiteSession):
            session.close()
    ours, theirs = inputs
    assert ours == theirs
    assert [i.get("content") for i in ours] == ["Two files.", "and now?", "Still two.", "count again"]
