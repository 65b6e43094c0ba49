"""The session's promises hold whoever writes (issue 35): the fold enforces them, so a harness
that goes through the Python client meets them as typed refusals, and a tool that stands behind
a refused intent never runs.

- a non-idempotent call recorded without a result blocks a harness's claim (``call_in_doubt``),
  and once the recovery service has stopped it for an operator, a claim is refused for that
  (``needs_resolution``); nobody records a new intent for the tool, and its side effect happens
  once in all;
- a writer fenced by another's claim cannot write by learning the new epoch: not with its own
  token (``fenced``), not with none (``writer_token_required``);
- a tool call asked for behind a pending approval, in the same batch or after it, is refused
  (``awaiting_approval``), and a durable tool of such a session does not run its function.

The side effects are counted by the counter service (``counter_service.py``), which takes effect
on every request for the tools named here (none of them is one it dedupes by key).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

import sessionlog
from counter_service import Counter, perform
from sessionlog import durable_tool, errors
from sessionlog.models import EffectClass
from stackcorner import StackCorner
from test_client import projected, user_event


class HarnessCrashed(BaseException):
    """The harness dies here: nothing after this point runs, nothing more is recorded."""


def client(corner: StackCorner, token: str) -> sessionlog.Client:
    return sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)


def operator_client(corner: StackCorner) -> sessionlog.Client:
    return client(corner, corner.token("operator", "reader"))


def history(c: sessionlog.Client, session_id: str) -> list[sessionlog.HistoryEvent]:
    """Every event the session's log holds, read once the projection has its last one (the
    last seq as a rebuild from the log has it)."""
    last_seq = int(c.session(session_id).state["last_seq"])
    events = projected(c, session_id, last_seq)
    assert events and events[-1].seq == last_seq, f"the projection ends at seq {last_seq}"
    return events


def intents(events: list[sessionlog.HistoryEvent], tool: str) -> list[sessionlog.HistoryEvent]:
    return [e for e in events if e.kind == "ToolCallRequested" and (e.data or {}).get("tool") == tool]


def event(seq: int, kind: str, data: dict[str, Any], **envelope: Any) -> dict[str, Any]:
    return {"seq": seq, "event_id": str(uuid.uuid4()), "kind": kind, "data": data, **envelope}


def intent(seq: int, tool: str, effect: EffectClass, key: str) -> dict[str, Any]:
    data = {"tool": tool, "arguments": {"Plain": '{"order":7}'}, "effect": effect}
    return event(seq, "ToolCallRequested", data, idempotency_key=key)


def approval_request(seq: int, approval_id: str) -> dict[str, Any]:
    return event(seq, "ApprovalRequested", {"approval_id": approval_id, "action": {"Plain": "deploy to production"}})


def record_then_run(
    c: sessionlog.Client,
    session_id: str,
    epoch: int,
    writer_token: str | None,
    events: list[dict[str, Any]],
    run: Callable[[], str],
) -> str:
    """What a harness does with a tool call: records the intent (with whatever goes before it in
    the batch), and runs the tool only once the log accepted it."""
    c.append(session_id, epoch, events, writer_token=writer_token)
    return run()


# 1. A non-idempotent call in doubt: no harness takes the session over, nobody runs the tool again.


def test_a_non_idempotent_call_in_doubt_blocks_every_harness_and_takes_effect_once(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_charge"
    with client(corner, token) as c, operator_client(corner) as operator:
        harness = sessionlog.Session.start(c, "py-promises", "a charge in doubt")
        harness.user_request("charge order 7")
        sid = harness.session_id

        @durable_tool(harness, effect="NonIdempotent", name=tool, key=lambda order: f"order-{order}")
        def charge(order: int) -> str:
            output = perform(url, tool)
            raise HarnessCrashed(f"died after {output!r}, before recording it")

        # The intent is in the log, the service took the charge, the result never made it.
        with pytest.raises(HarnessCrashed):
            charge(7)
        assert service.total(tool) == 1
        state = c.session(sid).state
        [call_seq] = [int(seq) for seq in state["pending_calls"]]
        started_epoch = int(state["epoch"])

        # A new harness claiming the session would leave the call in doubt: refused, typed.
        with pytest.raises(errors.CallInDoubtConflict) as in_doubt:
            c.claim(sid, "py-promises-2")
        assert (in_doubt.value.status, in_doubt.value.code) == (409, "call_in_doubt")
        assert in_doubt.value.problem.get("calls") == [call_seq]
        assert int(c.session(sid).state["epoch"]) == started_epoch, "the refused claim took no epoch"

        # The way on is the recovery service: it takes the session over and stops it for an operator.
        with pytest.raises(errors.NeedsResolution):
            sessionlog.Session.resume(c, sid, "py-promises-2")
        stopped = c.session(sid)
        assert stopped.status == "needs_resolution"
        current_epoch = int(stopped.state["epoch"])
        assert current_epoch > started_epoch

        # Now a claim is refused because the session waits for that operator.
        with pytest.raises(errors.NeedsResolution) as waits:
            c.claim(sid, "py-promises-3")
        assert (waits.value.status, waits.value.code) == (409, "needs_resolution")
        assert waits.value.problem.get("calls") == [call_seq]

        # Nobody records a new intent for the tool. (The epoch is the recovery service's now, and
        # no harness holds its writer token: the fence refuses an intent before the gate would.)
        # The crashed writer's own process (the library knows the call is in doubt; it asks the
        # service nothing):
        with pytest.raises(errors.CallInDoubt):
            charge(7)
        # its next call of the tool (a new intent; the service refuses it: a claim superseded it):
        with pytest.raises(errors.Fenced):
            charge(8)
        # and the crashed writer sending a new intent at the epoch it learned, with its token or none:
        next_seq = int(c.session(sid).state["last_seq"]) + 1
        with pytest.raises(errors.Fenced):
            c.append(sid, current_epoch, [intent(next_seq, tool, "NonIdempotent", "order-9")],
                     writer_token=harness.ledger.writer_token)
        with pytest.raises(errors.WriterTokenRequired):
            c.append(sid, current_epoch, [intent(next_seq, tool, "NonIdempotent", "order-9")])
        assert service.total(tool) == 1, "no refused intent ran the tool"

        events = history(c, sid)
        assert [e.seq for e in intents(events, tool)] == [call_seq], "one intent for the tool, the first"
        assert not [e for e in events if e.kind == "ToolCallResult"], "no result is recorded"
        assert [e.kind for e in events].count("ResolutionRequired") == 1

        # The operator records what the call did; a harness resumes, and the call answers the
        # record instead of running.
        operator.resolve(
            sid, call_seq, succeeded=True, output="promise_charge effect #1", reason="one charge at the bank"
        )
        resumed = sessionlog.Session.resume(c, sid, "py-promises-4")
        again = durable_tool(resumed, effect="NonIdempotent", name=tool, key=lambda order: f"order-{order}")(
            lambda order: perform(url, tool)
        )
        assert again(7) == "promise_charge effect #1"
    assert service.total(tool) == 1, "the side effect happened exactly once in all"


# 2. A fenced writer cannot write by learning the epoch.


def test_a_fenced_writer_cannot_write_with_the_epoch_it_learned(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_fenced"
    with client(corner, token) as c:
        first = c.create("py-promises", "fenced writer")
        sid = first.session_id
        second = c.claim(sid, "py-promises-2")
        assert second.epoch == first.epoch + 1
        assert first.writer_token and second.writer_token and first.writer_token != second.writer_token
        seq = second.next_seq
        sent: list[dict[str, Any]] = []

        def fenced_send(epoch: int, events: list[dict[str, Any]], writer_token: str | None) -> None:
            sent.extend(events)
            c.append(sid, epoch, events, writer_token=writer_token)

        # At its own epoch: fenced, as ever.
        with pytest.raises(errors.Fenced):
            fenced_send(first.epoch, [user_event(seq, "old writer, old epoch")], first.writer_token)
        # At the epoch it learned, at the seq that is free, with its own token: fenced.
        with pytest.raises(errors.Fenced) as fenced:
            fenced_send(second.epoch, [user_event(seq, "old writer, new epoch")], first.writer_token)
        assert (fenced.value.status, fenced.value.code) == (409, "fenced")
        # ... or with no token at all: the epoch's writer holds one.
        with pytest.raises(errors.WriterTokenRequired) as tokenless:
            fenced_send(second.epoch, [user_event(seq, "old writer, no token")], None)
        assert (tokenless.value.status, tokenless.value.code) == (409, "writer_token_required")
        # Nor a tool call's intent, so the tool stays still.
        for writer_token in (first.writer_token, None):
            with pytest.raises((errors.Fenced, errors.WriterTokenRequired)):
                record_then_run(
                    c, sid, second.epoch, writer_token,
                    [intent(seq, tool, "NonIdempotent", f"fenced-{writer_token is None}")], lambda: perform(url, tool),
                )
        assert service.total(tool) == 0

        # The current writer goes on at that very seq: the fenced writer took nothing.
        ack = c.append(sid, second.epoch, [user_event(seq, "current writer")], writer_token=second.writer_token)
        assert ack.events[0].seq == seq and not ack.events[0].duplicate
        events = history(c, sid)
    # (A claim shares its seq with the claimant's next event: range reads list the event.)
    written = [e for e in events if e.kind != "WriterClaimed"]
    assert [(e.kind, e.seq) for e in written] == [("SessionStarted", 1), ("UserRequest", seq)]
    assert written[-1].writer_epoch == second.epoch
    assert (written[-1].data or {}).get("content") == {"Plain": "current writer"}
    assert not {e.event_id for e in events} & {e["event_id"] for e in sent}, "nothing the fenced writer sent"


# 3. A tool call behind a pending approval.


def test_a_tool_call_in_the_batch_of_an_approval_request_is_refused_and_not_run(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_batched"
    with client(corner, token) as c:
        opened = c.create("py-promises", "approval and call in one batch")
        sid, seq = opened.session_id, opened.next_seq
        batch = [approval_request(seq, "deploy-1"), intent(seq + 1, tool, "NonIdempotent", "deploy-1-call")]
        with pytest.raises(errors.AwaitingApproval) as refused:
            record_then_run(c, sid, opened.epoch, opened.writer_token, batch, lambda: perform(url, tool))
        assert (refused.value.status, refused.value.code) == (409, "awaiting_approval")
        assert refused.value.problem.get("approvals") == ["deploy-1"]
        assert service.total(tool) == 0, "the tool did not run"
        # The batch is judged whole before anything is sent: neither event is in the session.
        refused_view = c.session(sid)
        assert refused_view.status == "running" and int(refused_view.state["last_seq"]) == seq - 1
        # The writer goes on at the same seq: the approval request alone is taken, and the
        # session waits for its decision with no call pending.
        c.append(sid, opened.epoch, [approval_request(seq, "deploy-1")], writer_token=opened.writer_token)
        view = c.session(sid)
        events = history(c, sid)
    assert view.status == "awaiting_approval"
    assert not view.state.get("pending_calls"), "no call is pending"
    assert [e.kind for e in events] == ["SessionStarted", "ApprovalRequested"]
    assert not {e["event_id"] for e in batch} & {e.event_id for e in events}, "nothing of the refused batch"


def test_a_tool_call_right_after_an_approval_request_is_refused_and_not_run(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_after_approval"
    with client(corner, token) as c:
        opened = c.create("py-promises", "approval, then a call")
        sid, seq = opened.session_id, opened.next_seq
        c.append(sid, opened.epoch, [approval_request(seq, "deploy-2")], writer_token=opened.writer_token)
        for effect in ("Pure", "Idempotent", "NonIdempotent"):
            with pytest.raises(errors.AwaitingApproval) as refused:
                record_then_run(
                    c, sid, opened.epoch, opened.writer_token,
                    [intent(seq + 1, tool, effect, f"deploy-2-{effect}")], lambda: perform(url, tool),
                )
            assert (refused.value.status, refused.value.code) == (409, "awaiting_approval")
        assert service.total(tool) == 0, "the tool did not run"
        events = history(c, sid)
    assert [e.kind for e in events] == ["SessionStarted", "ApprovalRequested"]


# 4. A durable tool of a session waiting for approval.


def test_a_durable_tool_does_not_run_while_its_session_awaits_approval(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_gated"
    runs: list[EffectClass] = []
    with client(corner, token) as c:
        session = sessionlog.Session.start(c, "py-promises", "a durable tool behind an approval")
        session.append(("ApprovalRequested", {"approval_id": "deploy-3", "action": {"Plain": "deploy"}}, {}))

        def tool_of(writer: sessionlog.Session, effect: EffectClass) -> Callable[[int], str]:
            def act(order: int) -> str:
                runs.append(effect)
                return perform(url, tool)

            return durable_tool(writer, effect=effect, name=tool)(act)

        for effect in ("Pure", "Idempotent", "NonIdempotent"):
            with pytest.raises(errors.AwaitingApproval):
                tool_of(session, effect)(7)
        assert runs == [] and service.total(tool) == 0, "the function never ran"
        # The writer is still the session's: what does not wait for anyone is recorded.
        session.user_request("still here")
        assert not intents(history(c, session.session_id), tool)

        # The gate was the approval: once it is decided, a resumed harness runs the tool, once.
        with client(corner, corner.token("approver", "reader")) as approver:
            approver.decide(session.session_id, "deploy-3", approved=False, reason="not today")
        resumed = sessionlog.Session.resume(c, session.session_id, "py-promises-2")
        assert tool_of(resumed, "NonIdempotent")(7) == f"{tool} effect #1"
    assert runs == ["NonIdempotent"] and service.total(tool) == 1


@pytest.mark.anyio
async def test_an_async_durable_tool_does_not_run_while_its_session_awaits_approval(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    service, url = counter
    tool = "promise_gated_async"
    runs: list[int] = []
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = await sessionlog.AsyncSession.start(c, "py-promises", "an async durable tool behind an approval")
        await session.append(("ApprovalRequested", {"approval_id": "deploy-4", "action": {"Plain": "deploy"}}, {}))

        @durable_tool(session, effect="NonIdempotent", name=tool)
        async def act(order: int) -> str:
            runs.append(order)
            return perform(url, tool)

        with pytest.raises(errors.AwaitingApproval):
            await act(7)
        assert (await c.session(session.session_id)).status == "awaiting_approval"
    assert runs == [] and service.total(tool) == 0, "the function never ran"
