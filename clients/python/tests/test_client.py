"""The clients against the real ingest and recovery services."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest

import sessionlog
from sessionlog import errors
from sessionlog.ledger import ToolCall
from sessionlog.session import Event, tool_call, tool_result
from stackcorner import StackCorner, free_port, wait_for


def client(corner: StackCorner, token: str | None, **kwargs: Any) -> sessionlog.Client:
    return sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, **kwargs)


def projected(c: sessionlog.Client, session_id: str, last_seq: int) -> list[sessionlog.HistoryEvent]:
    """The session's history once the projector has applied ``last_seq``."""
    wait_for(
        f"seq {last_seq} of {session_id} in the projection",
        30,
        lambda: c.events_page(session_id, from_seq=last_seq, to_seq=last_seq).events or None,
    )
    return list(c.events(session_id))


def user_event(seq: int, text: str) -> dict[str, Any]:
    return {"seq": seq, "event_id": str(uuid.uuid4()), "kind": "UserRequest", "data": {"content": {"Plain": text}}}


def test_a_resent_append_is_a_duplicate_not_a_second_event(corner: StackCorner, token: str) -> None:
    with client(corner, token) as c:
        opened = c.create("py-client", "resend")
        event = user_event(opened.next_seq, "once")
        # The token the create answered proves the writer (a service that issues none asks for none).
        first = c.append(opened.session_id, opened.epoch, [event], writer_token=opened.writer_token)
        again = c.append(opened.session_id, opened.epoch, [event], writer_token=opened.writer_token)
        assert not first.events[0].duplicate
        assert again.events[0].duplicate
        assert (again.events[0].partition, again.events[0].offset) == (first.events[0].partition, first.events[0].offset)
        history = projected(c, opened.session_id, first.events[0].seq)
        assert [e.kind for e in history] == ["SessionStarted", "UserRequest"]


class LoseFirstAnswer(httpx.BaseTransport):
    """Delivers every request, but loses the answer to the first append (a timeout after the
    service wrote the events): the client's retry must not write them again."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path.endswith("/events") and request.method == "POST" and self.lost == 0:
            response.read()
            self.lost += 1
            raise httpx.ReadTimeout("answer lost", request=request)
        return response


def test_a_lost_answer_is_retried_into_a_duplicate(corner: StackCorner, token: str) -> None:
    transport = LoseFirstAnswer()
    with client(corner, token, transport=transport) as c:
        session = sessionlog.Session.start(c, "py-client", "lost answer")
        ack = session.user_request("exactly once")
        assert transport.lost == 1
        assert ack.duplicate, "the retry found the first write"
        history = projected(c, session.session_id, ack.seq)
        assert [e.kind for e in history].count("UserRequest") == 1


class Outage(httpx.BaseTransport):
    """Refuses every append while ``down``; other requests pass."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.down = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down and request.url.path.endswith("/events"):
            raise httpx.ConnectError("down", request=request)
        return self.inner.handle_request(request)


def test_events_an_outage_left_unanswered_are_sent_again_first(corner: StackCorner, token: str) -> None:
    transport = Outage()
    with client(corner, token, transport=transport, retry_for=0.3) as c:
        session = sessionlog.Session.start(c, "py-client", "outage")
        transport.down = True
        with pytest.raises(errors.TransportError, match="ingest service"):
            session.user_request("during the outage")
        transport.down = False
        ack = session.model_response("m-1", "after it", tokens_in=3, tokens_out=4)
        history = projected(c, session.session_id, ack.seq)
        texts = [(e.kind, sessionlog.models.text_of((e.data or {}).get("content"))) for e in history[1:]]
        assert texts == [("UserRequest", "during the outage"), ("ModelResponse", "after it")]


def test_errors_are_raised_as_their_code(corner: StackCorner, token: str) -> None:
    with client(corner, token) as c:
        opened = c.create("py-client")
        with pytest.raises(errors.WrongSeq) as wrong:
            c.append(opened.session_id, opened.epoch, [user_event(opened.next_seq + 5, "gap")], writer_token=opened.writer_token)
        assert wrong.value.status == 409 and wrong.value.problem["expected_seq"] == opened.next_seq
        taken = c.claim(opened.session_id, "another-harness")
        assert taken.epoch == opened.epoch + 1
        with pytest.raises(errors.Fenced):
            c.append(opened.session_id, opened.epoch, [user_event(taken.next_seq, "late")], writer_token=opened.writer_token)
        with pytest.raises(errors.UnknownSession):
            c.resume(str(uuid.uuid4()), "nobody")
        with pytest.raises(errors.InvalidEvent):
            invalid = {"seq": taken.next_seq, "kind": "UserRequest", "data": {}}
            c.append(opened.session_id, taken.epoch, [invalid], writer_token=taken.writer_token)
    with client(corner, None) as anonymous, pytest.raises(errors.Unauthenticated):
        anonymous.create("py-client")
    with client(corner, corner.token("reader")) as reader, pytest.raises(errors.Forbidden):
        reader.create("py-client")


def test_an_unreachable_service_is_named(corner: StackCorner, token: str) -> None:
    c = sessionlog.Client(f"http://127.0.0.1:{free_port()}", corner.recovery_url, token=token, retry_for=0.2)
    with c, pytest.raises(errors.TransportError, match="sessionlog ingest"):
        c.create("py-client")


def test_a_session_writes_every_kind_and_ends(corner: StackCorner, token: str) -> None:
    with client(corner, token) as c:
        session = sessionlog.Session.start(c, "py-client", "every kind")
        session.user_request("list the files")
        session.model_response("m-1", "calling ls", tokens_in=10, tokens_out=5, cost_micros=7)
        call = session.tool_call("ls", '{"dir": "."}', effect="Pure")
        session.tool_result(call, "a.txt b.txt")
        checkpoint = session.checkpoint("git:abc")
        assert checkpoint.seq == call.seq + 2
        end = session.close("Completed")
        view = c.session(session.session_id)
        assert view.state["last_seq"] == end.seq and view.status == "completed"
        assert view.state["tokens_in"] == 10 and not view.state["pending_calls"]
        with pytest.raises(errors.SessionEnded):
            session.user_request("after the end")


@pytest.mark.anyio
async def test_the_async_client_resumes_a_session(corner: StackCorner, token: str) -> None:
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        first = await sessionlog.AsyncSession.start(c, "py-async", "async")
        await first.user_request("hello")
        call = await first.tool_call("search", "q", effect="Pure", idempotency_key="search:q")
        resumed = await sessionlog.AsyncSession.resume(c, first.session_id, "py-async-2")
        assert resumed.ledger.epoch == first.ledger.epoch + 1
        assert resumed.bundle is not None
        assert [(d.seq, d.action) for d in resumed.bundle.in_doubt] == [(call.seq, "RunAgain")]
        with pytest.raises(errors.Fenced):
            await first.user_request("the old writer")
        plan = resumed.ledger.plan_call(resumed.ledger.name_call("search", key="search:q"))
        assert plan.kind == "settle" and plan.call is not None and plan.call.seq == call.seq
        assert plan.flight is not None
        with plan.flight:
            await resumed.tool_result(plan.call, "found")
        end = await resumed.close("Completed")
        view = await c.session(first.session_id)
        assert view.state["last_seq"] == end.seq and not view.state["pending_calls"]


def after_an_outage(c: sessionlog.Client, transport: Outage) -> sessionlog.Session:
    """A session whose user request an outage left unanswered (past the client's retries)."""
    session = sessionlog.Session.start(c, "py-client", "after an outage")
    transport.down = True
    with pytest.raises(errors.TransportError):
        session.user_request("during the outage")
    transport.down = False
    return session


def test_a_checkpoint_sends_what_an_outage_left_unanswered_first(corner: StackCorner, token: str) -> None:
    transport = Outage()
    with client(corner, token, transport=transport, retry_for=0.3) as c:
        session = after_an_outage(c, transport)
        checkpoint = session.checkpoint()
        ack = session.model_response("m-1", "after it")
        history = projected(c, session.session_id, ack.seq)
        assert [e.kind for e in history[1:]] == ["UserRequest", "Checkpoint", "ModelResponse"]
        assert checkpoint.seq == history[2].seq


def test_a_refused_event_does_not_take_the_backlog_with_it(corner: StackCorner, token: str) -> None:
    transport = Outage()
    with client(corner, token, transport=transport, retry_for=0.3) as c:
        session = after_an_outage(c, transport)
        with pytest.raises(errors.InvalidEvent):
            session.append(("UserRequest", {}, {}))  # no content: refused
        ack = session.model_response("m-1", "after it")
        history = projected(c, session.session_id, ack.seq)
        assert [e.kind for e in history[1:]] == ["UserRequest", "ModelResponse"]


def test_a_planned_append_that_never_reached_the_service_is_not_written_later(corner: StackCorner, token: str) -> None:
    # Refused connections: no request was sent, so raising means not written, and the caller's
    # retry is the only copy. (A single append keeps its events to send again, as above.)
    transport = Outage()
    with client(corner, token, transport=transport, retry_for=0.3) as c:
        session = sessionlog.Session.start(c, "py-client", "refused")
        transport.down = True
        with pytest.raises(errors.TransportError) as refused:
            session.append_planned(lambda _: [("UserRequest", {"content": {"Plain": "refund 4711"}}, {})])
        assert not refused.value.sent
        transport.down = False
        ack = session.append_planned(lambda _: [("UserRequest", {"content": {"Plain": "refund 4711"}}, {})])[0]
        history = projected(c, session.session_id, ack.seq)
        assert [e.kind for e in history[1:]] == ["UserRequest"]


@pytest.mark.anyio
async def test_concurrent_appends_take_turns(corner: StackCorner, token: str) -> None:
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = await sessionlog.AsyncSession.start(c, "py-client", "concurrent")
        calls = await asyncio.gather(
            *(session.tool_call(f"tool-{i}", str(i), effect="Pure", idempotency_key=f"k{i}") for i in range(6))
        )
        assert [call.tool for call in calls] == [f"tool-{i}" for i in range(6)]
        assert len({call.seq for call in calls}) == 6
        results = await asyncio.gather(*(session.tool_result(call, call.tool) for call in calls))
        assert len({r.seq for r in results}) == 6
        for call in calls:
            recorded = session.ledger.call_at(call.seq)
            assert recorded is not None and recorded.result is not None and recorded.result.output == call.tool


def test_a_twin_sends_as_its_original_and_leaves_a_shared_transport_open() -> None:
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        return httpx.Response(404, json={"code": "unknown_name", "detail": "no such name"})

    class Closing(httpx.MockTransport):
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    transport = Closing(answer)
    original = sessionlog.AsyncClient("http://ingest.test", "http://recovery.test", token=lambda: "t-1", transport=transport)

    async def use() -> None:
        twin = original.twin()
        # On a loop of its own, as an adapter's loop thread would use it.
        await asyncio.gather(*(c.find("a") for c in (original, twin)))
        await twin.aclose()
        assert not transport.closed, "the transport is the original's to close"
        assert await original.find("b") is None
        await original.aclose()
        assert transport.closed

    asyncio.run(use())
    assert len(seen) == 3 and {url.split("/")[2] for url, _ in seen} == {"ingest.test"}
    assert {auth for _, auth in seen} == {"Bearer t-1"}


def test_a_planned_append_sends_a_call_and_its_result_as_one_request(corner: StackCorner, token: str) -> None:
    sent: list[int] = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/events"):
                sent.append(len(json.loads(request.content)["events"]))
            return super().handle_request(request)

    with client(corner, token, transport=Counting()) as c:
        session = sessionlog.Session.start(c, "py-client", "planned")
        request_id = str(uuid.uuid4())

        def plan(first_seq: int) -> list[Event]:
            # The result names its call by the seq and id chosen here, before either is sent.
            kind, data, envelope = tool_call("ls", "{}", effect="Pure", idempotency_key="ls-1")
            call = ToolCall(first_seq, request_id, "ls", "Pure", "ls-1")
            return [(kind, data, {**envelope, "event_id": request_id}), tool_result(call, "a.txt")]

        acks = session.append_planned(plan)
        assert sent == [2], "one request"
        assert acks[0].event_id == request_id and acks[1].seq == acks[0].seq + 1
        history = projected(c, session.session_id, acks[1].seq)
        assert history[-1].causation_id == request_id and (history[-1].data or {})["call_seq"] == acks[0].seq
        assert not c.session(session.session_id).state["pending_calls"], "the result settled its call"
