"""A closed adapter says so at once, without the stack: the LangGraph saver, the ADK session
service and the OpenAI Agents session each run their work on a loop of their own, which
``close`` stops. A call after ``close``, blocking or async, raises ``SessionlogError`` naming
the close instead of waiting for a loop that is gone, and a call still waiting when ``close``
comes is answered the same way. Each call runs on a thread of its own, joined under a deadline,
so a hang fails the test instead of stalling the suite.

(test_openai_agents_loops.py closes a session in use too. ``Session`` and ``AsyncSession`` own no loop: after ``close`` the service refuses their writes
with ``SessionEnded``, see test_client.py.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import sessionlog
from sessionlog.integrations.adk import SessionlogSessionService
from sessionlog.integrations.langgraph import SessionlogSaver
from sessionlog.integrations.openai_agents import SessionlogSession

DEADLINE = 30.0
CONFIG: Any = {"configurable": {"thread_id": "closed", "checkpoint_ns": ""}}


def outcome(call: Callable[[], object]) -> BaseException | None:
    """What ``call()`` raised (``None`` if it returned), on a thread of its own; fails if it
    is still running at the deadline (a hang)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=DEADLINE)
    assert not thread.is_alive(), "the call hangs"
    return raised[0] if raised else None


def says_closed(call: Callable[[], object]) -> None:
    error = outcome(call)
    assert isinstance(error, sessionlog.SessionlogError), repr(error)
    assert "close" in str(error), str(error)


def saver() -> SessionlogSaver:
    # Nothing listens there: a call that reached the network would fail, not say "closed".
    return SessionlogSaver("http://127.0.0.1:9", "http://127.0.0.1:9", catalogue="closed")


def test_a_closed_saver_says_so_at_once() -> None:
    closed = saver()
    closed.close()
    closed.close()  # a second close does nothing
    says_closed(lambda: closed.get_tuple(CONFIG))
    says_closed(lambda: closed.put(CONFIG, empty_checkpoint(), {}, {}))
    says_closed(lambda: list(closed.list(None)))
    says_closed(lambda: closed.delete_thread("closed"))
    says_closed(lambda: asyncio.run(closed.aget_tuple(CONFIG)))
    says_closed(lambda: asyncio.run(closed.aput(CONFIG, empty_checkpoint(), {}, {})))


def test_closing_the_saver_answers_a_caller_still_waiting() -> None:
    stuck = saver()
    entered = threading.Event()

    async def forever(config: Any) -> None:
        entered.set()
        await asyncio.Event().wait()

    stuck._get_tuple = forever  # type: ignore[method-assign]
    waiting: list[BaseException | None] = []
    caller = threading.Thread(target=lambda: waiting.append(outcome(lambda: stuck.get_tuple(CONFIG))), daemon=True)
    caller.start()
    assert entered.wait(timeout=DEADLINE)
    stuck.close()
    caller.join(timeout=DEADLINE)
    assert waiting and isinstance(waiting[0], sessionlog.SessionlogError) and "close" in str(waiting[0]), waiting


def service() -> SessionlogSessionService:
    return SessionlogSessionService("http://127.0.0.1:9", "http://127.0.0.1:9")


def test_a_closed_adk_service_says_so_at_once() -> None:
    closed = service()
    closed.close()
    closed.close()
    says_closed(lambda: asyncio.run(closed.get_session(app_name="app", user_id="u", session_id="s")))
    says_closed(lambda: asyncio.run(closed.list_sessions(app_name="app")))


def test_closing_the_adk_service_answers_a_caller_still_waiting() -> None:
    stuck = service()
    entered = threading.Event()

    async def forever(app_name: str, user_id: str | None) -> None:
        entered.set()
        await asyncio.Event().wait()

    stuck._list = forever  # type: ignore[method-assign,assignment]
    waiting: list[BaseException | None] = []

    def call() -> None:
        waiting.append(outcome(lambda: asyncio.run(stuck.list_sessions(app_name="app"))))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert entered.wait(timeout=DEADLINE)
    stuck.close()
    caller.join(timeout=DEADLINE)
    assert waiting and isinstance(waiting[0], sessionlog.SessionlogError) and "close" in str(waiting[0]), waiting


@pytest.mark.parametrize("used", [False, True])
def test_a_closed_openai_agents_session_says_so_at_once(used: bool) -> None:
    closed = SessionlogSession("closed", sessionlog.AsyncClient("http://127.0.0.1:9", "http://127.0.0.1:9"), writer="w")
    if used:
        closed._loop_client()  # its loop started, as the first call starts it
    closed.close()
    says_closed(lambda: asyncio.run(closed.get_items()))
    says_closed(lambda: asyncio.run(closed.add_items([{"role": "user", "content": "hi"}])))
