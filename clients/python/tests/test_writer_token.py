"""The writer token and the gates' refusals, without a server (the services issue tokens from
this release on): a writer keeps the token its create, claim or resume answered and sends it
with every append, checkpoint and close, and sends no header when it was given none. A fake
transport stands in for the services and records what each request carried."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import sessionlog
from sessionlog import errors
from sessionlog.ledger import SessionLedger
from sessionlog.models import Opened, ResumeBundle

SID = "0190a6e4-0000-7000-8000-00000000abcd"
HEADER = "sessionlog-writer-token"


class FakeServices:
    """Answers the routes a writer uses; ``token`` is what create, claim and resume answer."""

    def __init__(self, token: str | None, *, started: bool = False) -> None:
        self.token = token
        self.started = started
        self.seen: list[tuple[str, str | None]] = []
        self.next_seq = 2

    def __call__(self, request: httpx.Request) -> httpx.Response:
        route = request.url.path.rsplit("/", 1)[-1]
        self.seen.append((route, request.headers.get(HEADER)))
        token = {"writer_token": self.token} if self.token else {}
        if route == "sessions" and self.started:
            return httpx.Response(409, json={"code": "already_started", "detail": "exists"})
        if route in ("sessions", "claim"):
            return httpx.Response(200, json={"session_id": SID, "epoch": 1, "next_seq": 2, "event": self.ack(1), **token})
        if route == "resume":
            state = {"session_id": SID, "last_seq": 0}
            return httpx.Response(200, json={"epoch": 2, "next_seq": 2, "state": state, **token})
        if route == "events":
            events = json.loads(request.content)["events"]
            acks = [self.ack(e["seq"]) for e in events]
            self.next_seq = events[-1]["seq"] + 1
            return httpx.Response(200, json={"session_id": SID, "next_seq": self.next_seq, "events": acks})
        self.next_seq += 1  # a checkpoint or a close: the service places it
        return httpx.Response(200, json=self.ack(self.next_seq - 1))

    @staticmethod
    def ack(seq: int) -> dict[str, Any]:
        return {"seq": seq, "event_id": f"e-{seq}", "partition": 0, "offset": seq}


def writes(services: FakeServices) -> list[tuple[str, str | None]]:
    return [seen for seen in services.seen if seen[0] in ("events", "checkpoint", "close")]


def blocking_client(services: FakeServices) -> sessionlog.Client:
    return sessionlog.Client("http://ingest", "http://recovery", transport=httpx.MockTransport(services))


@pytest.mark.parametrize("started", [False, True], ids=["created", "claimed"])
def test_a_started_writer_sends_the_token_it_was_given(started: bool) -> None:
    services = FakeServices("tok-1", started=started)
    with blocking_client(services) as c:
        session = sessionlog.Session.start(c, "agent", session_id=None)
        session.user_request("hello")
        session.checkpoint()
        session.close()
    assert writes(services) == [("events", "tok-1"), ("checkpoint", "tok-1"), ("close", "tok-1")]
    assert services.seen[0][1] is None, "the create itself carries none"


def test_a_writer_given_no_token_sends_no_header() -> None:
    services = FakeServices(None)
    with blocking_client(services) as c:
        session = sessionlog.Session.start(c, "agent")
        session.user_request("hello")
        session.close()
    assert writes(services) == [("events", None), ("close", None)]


@pytest.mark.anyio
async def test_a_resumed_async_writer_sends_the_token_of_its_resume() -> None:
    services = FakeServices("tok-resumed", started=True)
    transport = httpx.MockTransport(services)
    async with sessionlog.AsyncClient("http://ingest", "http://recovery", transport=transport) as c:
        session = await sessionlog.AsyncSession.resume(c, SID, "writer-2")
        await session.user_request("after the crash")
        await session.checkpoint()
        await session.close()
    assert writes(services) == [("events", "tok-resumed"), ("checkpoint", "tok-resumed"), ("close", "tok-resumed")]


def test_a_writer_token_is_kept_from_the_answer_and_never_shown() -> None:
    opened = Opened.from_json({
        "session_id": "s", "epoch": 2, "next_seq": 3, "writer_token": "secret-token",
        "event": {"seq": 2, "event_id": "e", "partition": 0, "offset": 1},
    })
    assert opened.writer_token == "secret-token" and "secret-token" not in repr(opened)
    bundle = ResumeBundle.from_json({
        "epoch": 3, "next_seq": 4, "state": {"session_id": "s", "last_seq": 3}, "writer_token": "other-token",
    })
    assert SessionLedger.from_bundle(bundle).writer_token == "other-token" and "other-token" not in repr(bundle)
    older = ResumeBundle.from_json({"epoch": 3, "next_seq": 4, "state": {"session_id": "s", "last_seq": 3}})
    assert older.writer_token is None, "a service that issues no token"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("writer_token_required", errors.WriterTokenRequired),
        ("paused", errors.Paused),
        ("call_in_doubt", errors.CallInDoubtConflict),
        ("awaiting_approval", errors.AwaitingApproval),
        ("needs_resolution", errors.NeedsResolution),
    ],
)
def test_the_gate_refusals_have_classes_of_their_own(code: str, cls: type[errors.ProblemError]) -> None:
    error = errors.problem_error(409, {"code": code, "detail": "refused"})
    assert type(error) is cls and isinstance(error, errors.Conflict) and error.code == code
    assert isinstance(errors.problem_error(409, {"code": "paused"}), errors.SessionPaused), "paused is a pause"
