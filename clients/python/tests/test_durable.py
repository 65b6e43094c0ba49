"""Durable tools in one process: failures and what they leave in doubt, outages while
recording, keys unique per session and call, forks, and callers in several threads or tasks.
The counter service counts each side effect."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import sessionlog
from counter_service import Counter, perform
from sessionlog import current_call, durable_tool, errors
from stackcorner import StackCorner, wait_for
from test_client import Outage, projected


def test_a_result_an_outage_kept_from_the_log_is_not_run_again(corner: StackCorner, token: str) -> None:
    transport = Outage()
    runs: list[int] = []
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, transport=transport, retry_for=0.3) as c:
        session = sessionlog.Session.start(c, "py-durable", "outage while recording")

        @durable_tool(session, effect="NonIdempotent")
        def charge(cents: int) -> str:
            runs.append(cents)
            transport.down = True  # the result cannot be recorded
            return f"charged {cents}"

        with pytest.raises(errors.TransportError):
            charge(250)
        transport.down = False
        assert charge(250) == "charged 250", "the result it ran to is answered once the log has it"
        assert runs == [250]


def test_a_definitive_failure_is_recorded_and_answered_as_failed(corner: StackCorner, token: str) -> None:
    runs: list[int] = []
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = sessionlog.Session.start(c, "py-durable", "failure")

        @durable_tool(session, effect="NonIdempotent")
        def refund(order: int) -> str:
            runs.append(order)
            raise sessionlog.ToolFailedDefinitively(f"order {order} is not refundable")

        @durable_tool(session, effect="NonIdempotent", definitive=(LookupError,))
        def cancel(order: int) -> str:
            runs.append(order)
            raise LookupError(f"no order {order}")

        with pytest.raises(sessionlog.ToolFailedDefinitively):
            refund(7)
        with pytest.raises(LookupError):
            cancel(8)
        # A new writer (a new process) takes over and runs the same calls: answered as failed.
        resumed = sessionlog.Session.resume(c, session.session_id, "py-durable-2")
        for tool, fn, order, why in (("refund", refund, 7, "order 7 is not refundable"), ("cancel", cancel, 8, "no order 8")):
            again = durable_tool(resumed, effect="NonIdempotent", name=tool)(fn)
            with pytest.raises(errors.ToolFailed, match=why):
                again(order)
        assert runs == [7, 8]


def test_a_pure_call_that_raised_is_recorded_as_failed_and_its_retry_runs(corner: StackCorner, token: str) -> None:
    runs: list[int] = []
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = sessionlog.Session.start(c, "py-durable", "pure failure")

        def parse(n: int) -> int:
            runs.append(n)
            if len(runs) == 1:
                raise ValueError("not yet")
            return n

        with pytest.raises(ValueError):
            durable_tool(session, effect="Pure")(parse)(3)
        assert durable_tool(session, effect="Pure")(parse)(3) == 3, "a retry is a new call: it runs"
        # A new run meets the two calls again in order: the failure, then the value.
        resumed = sessionlog.Session.resume(c, session.session_id, "py-durable-2")
        again = durable_tool(resumed, effect="Pure")(parse)
        with pytest.raises(errors.ToolFailed, match="ValueError: not yet"):
            again(3)
        assert again(3) == 3 and runs == [3, 3]


def client(corner: StackCorner, token: str) -> sessionlog.Client:
    return sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)


@pytest.fixture
def session(corner: StackCorner, token: str) -> Iterator[sessionlog.Session]:
    """A session just started, its client open for the test."""
    with client(corner, token) as c:
        yield sessionlog.Session.start(c, "py-durable", "durable tools")


def counting(session: sessionlog.Session, url: str, tool: str, effect: Any, **options: Any) -> Callable[[int], str]:
    """A durable tool of ``session`` that takes effect once in the counter service per run."""
    return durable_tool(session, effect=effect, name=tool, **options)(lambda order: perform(url, tool))


def test_an_exception_after_the_service_acted_leaves_a_non_idempotent_call_in_doubt(
    corner: StackCorner, token: str, session: sessionlog.Session, counter: tuple[Counter, str]
) -> None:
    service, url = counter

    @durable_tool(session, effect="NonIdempotent", name="timed_out")
    def charge(order: int) -> str:
        perform(url, "timed_out")
        raise TimeoutError("the service took the charge, its answer came too late")

    with pytest.raises(TimeoutError):
        charge(250)
    # A retry in the same process: the charge may have happened, so it is not made again.
    with pytest.raises(errors.CallInDoubt):
        charge(250)
    assert service.total("timed_out") == 1
    # Nor by a new process: recovery stops until an operator records what the call did.
    with pytest.raises(errors.NeedsResolution):
        sessionlog.Session.resume(session.client, session.session_id, "py-durable-2")
    with client(corner, corner.token("operator", "reader")) as operator:
        [call_seq] = [int(seq) for seq in operator.session(session.session_id).state["pending_calls"]]
        operator.resolve(session.session_id, call_seq, succeeded=True, output="charged", reason="seen at the bank")
    with client(corner, token) as c:
        resumed = sessionlog.Session.resume(c, session.session_id, "py-durable-3")
        assert counting(resumed, url, "timed_out", "NonIdempotent")(250) == "charged", "the operator's record stands"
    assert service.total("timed_out") == 1


def test_an_idempotent_call_that_raised_is_reissued_with_its_key(
    session: sessionlog.Session, counter: tuple[Counter, str]
) -> None:
    calls: list[sessionlog.CallInfo] = []

    @durable_tool(session, effect="Idempotent", name="retried")  # the service dedupes it by key
    def count(n: int) -> str:
        calls.append(current_call())
        output = perform(counter[1], "retried")
        if len(calls) == 1:
            raise httpx.ReadTimeout("the answer was lost")
        return output

    with pytest.raises(httpx.ReadTimeout):
        count(1)
    assert count(1) == "retried effect #1", "the retry is the same call: the service answered it once"
    assert [(info.seq, info.idempotency_key, info.repeat) for info in calls] == [
        (calls[0].seq, calls[0].idempotency_key, False),
        (calls[0].seq, calls[0].idempotency_key, True),
    ]
    history = projected(session.client, session.session_id, session.ledger.next_seq - 1)
    assert [e.kind for e in history].count("ToolCallRequested") == 1
    assert counter[0].total("retried") == 1


def test_another_sessions_call_or_a_forks_own_is_not_answered_with_this_ones_execution(
    corner: StackCorner, session: sessionlog.Session, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool, parent, c = "fork_counter", session, session.client  # the service dedupes fork_counter by key
    with client(corner, corner.token("operator", "reader")) as operator:
        before = parent.user_request("count five").seq
        assert counting(parent, url, tool, "Idempotent")(5) == f"{tool} effect #1"
        other = sessionlog.Session.start(c, "py-durable", "another session")
        counting(other, url, tool, "Idempotent")(5)
        # A fork from before the parent's call makes the call itself, under its own key.
        child_id = str(operator.fork(parent.session_id, before, "py-durable-fork")["session_id"])
        child = sessionlog.Session.resume(c, child_id, "py-durable-fork")
        counting(child, url, tool, "Idempotent")(5)
    keys = service.keys(tool)
    assert service.total(tool) == 3 and len(keys) == 3, "three sessions' calls, three effects"
    assert {key.split(".")[0] for key in keys} == {parent.session_id, other.session_id, child_id}


def test_a_resumed_fork_answers_the_calls_it_inherits_from_the_parents_record(
    corner: StackCorner, session: sessionlog.Session, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool, parent, c = "inherited", session, session.client  # the service takes effect on every request
    with client(corner, corner.token("operator", "reader")) as operator:
        charged = counting(parent, url, tool, "NonIdempotent")(7)
        fork_point = parent.ledger.next_seq - 1
        child_id = str(operator.fork(parent.session_id, fork_point, "py-durable-fork")["session_id"])
        child = sessionlog.Session.resume(c, child_id, "py-durable-fork")
        again = counting(child, url, tool, "NonIdempotent")
        assert again(7) == charged, "the call recorded before the fork point is answered, not run"
        assert service.total(tool) == 1
        # The fork's next call with the same arguments is a call of its own.
        again(7)
    assert service.total(tool) == 2
    assert {key.split(".")[0] for key in service.keys(tool)} == {parent.session_id, child_id}


def test_two_threads_making_the_same_call_record_one_intent_and_one_effect(
    session: sessionlog.Session, counter: tuple[Counter, str]
) -> None:
    answers: list[object] = []

    @durable_tool(session, effect="NonIdempotent", name="threaded", key=lambda order: f"order-{order}")
    def charge(order: int) -> str:
        # Held open until the other caller has planned the call: it must wait for this one
        # (without a lock it would have run the call itself, or found it in doubt).
        probe = lambda: answers or session.ledger.waiters("threaded", "order-7") or None  # noqa: E731
        wait_for("the other caller to wait or end", 20, probe)
        return perform(counter[1], "threaded")

    def caller() -> None:
        try:
            answers.append(charge(7))
        except Exception as e:  # noqa: BLE001 - an answer the test checks
            answers.append(e)

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == ["threaded effect #1"] * 2
    history = projected(session.client, session.session_id, session.ledger.next_seq - 1)
    assert [e.kind for e in history].count("ToolCallRequested") == 1
    assert counter[0].total("threaded") == 1


@pytest.mark.anyio
async def test_two_tasks_making_the_same_call_record_one_intent_and_one_effect(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "tasked"  # the service takes effect on every request
    answers: list[object] = []

    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = await sessionlog.AsyncSession.start(c, "py-durable", "two tasks")

        @durable_tool(session, effect="NonIdempotent", name=tool, key=lambda order: f"order-{order}")
        async def charge(order: int) -> str:
            # As with threads: held open until the other task waits for it, or has ended.
            probe = lambda: answers or session.ledger.waiters(tool, "order-7") or None  # noqa: E731
            await asyncio.to_thread(wait_for, "the other task to wait or end", 20, probe)
            async with httpx.AsyncClient() as http:
                answer = await http.post(f"{url}/{tool}/calls/{current_call().idempotency_key}")
            return str(answer.json()["output"])

        async def caller() -> None:
            try:
                answers.append(await charge(7))
            except Exception as e:  # noqa: BLE001 - an answer the test checks
                answers.append(e)

        await asyncio.gather(caller(), caller())
        assert answers == [f"{tool} effect #1"] * 2
        await session.wait_projected(session.ledger.next_seq - 1)
        kinds = [e.kind async for e in c.events(session.session_id)]
        assert kinds.count("ToolCallRequested") == 1
    assert service.total(tool) == 1


def test_arguments_that_are_not_json_need_a_key(corner: StackCorner, token: str) -> None:
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = sessionlog.Session.start(c, "py-durable", "keys")

        @durable_tool(session, effect="Pure")
        def describe(thing: Any) -> str:
            return "ok"

        with pytest.raises(TypeError, match="key="):
            describe(httpx.Client)
        keyed = durable_tool(session, effect="Pure", key=lambda thing: "the-client")(lambda thing: "ok")
        assert keyed(httpx.Client) == "ok"
