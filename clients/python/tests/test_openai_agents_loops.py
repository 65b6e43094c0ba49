"""``SessionlogSession`` is loop-agnostic, without the stack: whichever loop or thread calls it
(``Runner.run_sync`` makes a new loop per call; threads each run their own), its work runs on
its own loop, so nothing it keeps belongs to a loop that is gone, and callers on several threads
take turns instead of hanging. Each test that could hang joins its threads under a deadline.

``Recorder`` keeps the items in memory and records the loop each read and write ran on;
test_openai_agents.py runs the same over the real log."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from collections.abc import Iterator

import pytest
from agents import Agent, RunConfig, Runner, TResponseInputItem
from agents.testing import ScriptedModel, assistant_message

import sessionlog
from sessionlog.integrations.openai_agents import SessionlogSession

DEADLINE = 30.0


class Recorder(SessionlogSession):
    """The session with its items in memory, recording the loops its work ran on. A read and a
    write give their loop a turn where the log's would wait for an answer, so concurrent callers
    meet on the session's lock."""

    def __init__(self) -> None:
        super().__init__("loops", sessionlog.AsyncClient(), writer="py-agents")
        self.items: list[TResponseInputItem] = []
        self.loops: set[asyncio.AbstractEventLoop] = set()

    async def _live_items(self) -> list[tuple[int, TResponseInputItem]]:
        self.loops.add(asyncio.get_running_loop())
        await asyncio.sleep(0)  # where a read waits for the log: other callers run meanwhile
        return list(enumerate(self.items, start=1))

    async def _add_items(self, items: list[TResponseInputItem]) -> None:
        async with self._lock:
            self.loops.add(asyncio.get_running_loop())
            await asyncio.sleep(0)  # where a write waits for the log
            self.items += items


@pytest.fixture
def session() -> Iterator[Recorder]:
    made = Recorder()
    yield made
    made.close()


def in_threads(*work: object) -> list[BaseException]:
    """Runs each coroutine function in a thread of its own, on a loop of its own, all at once;
    the errors they raised. Fails if any is still running at the deadline (a hang)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(work))

    def run(fn: object) -> None:
        start.wait(timeout=DEADLINE)
        try:
            asyncio.run(fn())  # type: ignore[operator]
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE)
    assert not any(t.is_alive() for t in threads), "a caller hangs"
    return errors


def test_run_sync_works_across_turns(session: Recorder) -> None:
    model = ScriptedModel([[assistant_message("One.")], [assistant_message("Two.")]])
    agent = Agent(name="counter", instructions="Count.", model=model)
    config = RunConfig(tracing_disabled=True)
    # Each run_sync makes a loop and closes it when the run ends.
    assert Runner.run_sync(agent, "first", session=session, run_config=config).final_output == "One."
    assert Runner.run_sync(agent, "second", session=session, run_config=config).final_output == "Two."
    assert model.last_call is not None
    assert [i.get("role") for i in model.last_call.input] == ["user", "assistant", "user"]
    assert len(session.items) == 4
    assert session.loops == {session._loop}, "every read and write ran on the session's own loop"


def test_run_and_run_streamed_work_from_a_new_loop_each_turn(session: Recorder) -> None:
    model = ScriptedModel([[assistant_message("One.")], [assistant_message("Two.")]])
    agent = Agent(name="counter", instructions="Count.", model=model)
    config = RunConfig(tracing_disabled=True)

    async def streamed(text: str) -> object:
        result = Runner.run_streamed(agent, text, session=session, run_config=config)
        async for _ in result.stream_events():
            pass
        return result.final_output

    # asyncio.run makes a loop per turn and closes it after, as a script or a web worker would.
    assert asyncio.run(Runner.run(agent, "first", session=session, run_config=config)).final_output == "One."
    assert asyncio.run(streamed("second")) == "Two."
    assert model.last_call is not None
    assert [i.get("role") for i in model.last_call.input] == ["user", "assistant", "user"]
    assert len(session.items) == 4
    assert session.loops == {session._loop}


def test_callers_on_several_threads_take_turns(session: Recorder) -> None:
    def adding(n: int) -> object:
        async def add() -> None:
            for i in range(5):
                await session.add_items([{"role": "user", "content": f"{n}.{i}"}])
                assert len(await session.get_items()) >= i + 1

        return add

    assert in_threads(*(adding(n) for n in range(6))) == []
    contents = sorted(str(item.get("content")) for item in session.items)
    assert contents == sorted(f"{n}.{i}" for n in range(6) for i in range(5)), "every item, once"
    assert session.loops == {session._loop}


def test_a_closed_session_says_so(session: Recorder) -> None:
    assert asyncio.run(session.get_items()) == []
    session.close()
    session.close()  # a second close does nothing
    with pytest.raises(sessionlog.SessionlogError, match="closed"):
        asyncio.run(session.get_items())


def test_a_session_dropped_unclosed_stops_its_thread() -> None:
    dropped = Recorder()
    assert asyncio.run(dropped.get_items()) == []
    thread = dropped._thread
    assert thread is not None and thread.is_alive()
    del dropped
    gc.collect()
    thread.join(timeout=DEADLINE)
    assert not thread.is_alive(), "one session per request must not leave a thread per request"


class StuckReader:
    """A caller on a thread of its own whose ``get_items`` never finishes on the session's loop
    (its read waits for good), started and in the read: what stops that read is the test's."""

    def __init__(self, session: Recorder) -> None:
        entered = threading.Event()

        async def forever() -> list[tuple[int, TResponseInputItem]]:
            entered.set()
            await asyncio.Event().wait()
            return []

        session._live_items = forever  # type: ignore[method-assign]
        self.outcome: list[BaseException] = []
        self.thread = threading.Thread(target=self._read, args=(session,), daemon=True)
        self.thread.start()
        assert entered.wait(timeout=DEADLINE)

    def _read(self, session: Recorder) -> None:
        try:
            asyncio.run(session.get_items())
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            self.outcome.append(e)

    def error(self) -> sessionlog.SessionlogError:
        """What the caller was told, once it is; fails if it still waits at the deadline."""
        self.thread.join(timeout=DEADLINE)
        assert not self.thread.is_alive(), "the caller hangs"
        assert len(self.outcome) == 1 and isinstance(self.outcome[0], sessionlog.SessionlogError), self.outcome
        return self.outcome[0]


def test_closing_answers_a_caller_still_waiting() -> None:
    # A read that never finishes: close() must end it, not leave its caller waiting for good.
    session = Recorder()
    reader = StuckReader(session)
    session.close()
    assert "closed" in str(reader.error())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
def test_a_session_used_after_fork_says_so_in_the_child(session: Recorder) -> None:
    # The child inherits the session's loop but not the thread that runs it: it must say so,
    # not wait for good (a new session in the child is the way).
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what get_items did, then leave at once
        try:
            asyncio.run(asyncio.wait_for(session.get_items(), DEADLINE))
            outcome = "answered"
        except sessionlog.SessionlogError as e:
            outcome = f"SessionlogError: {e}"
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            outcome = f"{type(e).__name__}: {e}"
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        outcome = answer.read().decode()
    os.waitpid(pid, 0)
    assert outcome.startswith("SessionlogError:") and "fork" in outcome, outcome
    # The parent's session goes on.
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hi"}]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the SystemExit, on purpose
def test_a_caller_waiting_on_a_loop_whose_thread_died_is_told() -> None:
    # The loop's thread ends without answering the work it holds (a callback raised SystemExit):
    # the caller hears so instead of waiting for good.
    session = Recorder()

    def die() -> None:
        raise SystemExit

    reader = StuckReader(session)
    assert session._loop is not None
    session._loop.call_soon_threadsafe(die)
    assert "thread stopped" in str(reader.error())
