"""How ``Worker`` and ``AsyncWorker`` treat a refused lease and a failed letting go, without the
stack (the services are an ``httpx.MockTransport``): both workers share one account of it.

- the lease of a taken session refused because leases are off (``leases_off``): the worker runs
  the session without one; refused for any other conflict (the session was taken over at once):
  the worker lets the session go and logs it;
- the close after the handler refused as a conflict (closed already, taken over since): logged,
  nothing more; failing otherwise: the lease renewal stops (the lease lapses) and a warning says so.

test_worker.py runs the workers on the real stack."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import httpx
import pytest

import sessionlog
from sessionlog.models import TerminalOutcome

AGENT = "py-lets-go"
SID = str(uuid.uuid4())


class FakeServices:
    """Answers a poll with one session to run, its lease with ``lease`` (a problem code, or
    ``None``: granted) and its close with ``close`` (a status and a problem code, or ``None``)."""

    def __init__(self, lease: str | None, close: tuple[int, str] | None = None) -> None:
        self.lease, self.close = lease, close
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append(f"{request.method} {path.removeprefix(f'/v1/sessions/{SID}')}")
        if path == "/v1/work":
            state = {"session_id": SID, "last_seq": 0, "status": "running"}
            wake = {"session_id": SID, "agent": AGENT, "reason": "lease_expired", "epoch": 1, "caused_at": 1, "woken_at": 2}
            return httpx.Response(200, json={"epoch": 2, "next_seq": 2, "state": state, "wake": wake})
        if path.endswith("/lease") and request.method == "POST":
            if self.lease is not None:
                return problem(409, self.lease)
            lease = {"session_id": SID, "writer": AGENT, "epoch": 2, "renewed_at": 1, "expires_at": 2, "ttl_ms": 60_000}
            return httpx.Response(200, json=lease)
        if path.endswith("/close"):
            if self.close is not None:
                return problem(*self.close)
            return httpx.Response(200, json={"seq": 2, "event_id": str(uuid.uuid4()), "partition": 0, "offset": 1})
        return problem(404, "unexpected")


def problem(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "detail": f"the fake answers {code}"})


def run_one(services: FakeServices, outcome: TerminalOutcome | None, asynchronous: bool) -> list[sessionlog.Session | sessionlog.AsyncSession]:
    """Polls once with ``Worker`` or ``AsyncWorker`` and runs the session taken, if the worker
    keeps it; the sessions its handler got."""
    handled: list[sessionlog.Session | sessionlog.AsyncSession] = []
    if asynchronous:

        async def run() -> None:
            async with sessionlog.AsyncClient("http://ingest", "http://recovery", transport=httpx.MockTransport(services)) as c:

                async def handler(session: sessionlog.AsyncSession, wake: object) -> TerminalOutcome | None:
                    handled.append(session)
                    return outcome

                await sessionlog.AsyncWorker(c, agent=AGENT).run_one(handler)

        asyncio.run(run())
    else:
        with sessionlog.Client("http://ingest", "http://recovery", transport=httpx.MockTransport(services)) as c:

            def handler(session: sessionlog.Session, wake: object) -> TerminalOutcome | None:
                handled.append(session)
                return outcome

            sessionlog.Worker(c, agent=AGENT).run_one(handler)
    return handled


def lease_held(session: sessionlog.Session | sessionlog.AsyncSession) -> bool:
    """Whether the session still renews its lease."""
    if isinstance(session, sessionlog.Session):
        return session._lease_stop is not None
    return session._lease_task is not None


both = pytest.mark.parametrize("asynchronous", [False, True], ids=["Worker", "AsyncWorker"])


@both
def test_a_session_whose_lease_is_off_is_run_without_one(asynchronous: bool) -> None:
    services = FakeServices(lease="leases_off")
    [session] = run_one(services, "Completed", asynchronous)
    assert session.session_id == SID and not lease_held(session)
    assert services.seen == ["GET /v1/work", "POST /lease", "POST /close"]


@both
def test_a_session_taken_over_at_once_is_let_go(asynchronous: bool, caplog: pytest.LogCaptureFixture) -> None:
    services = FakeServices(lease="fenced")
    with caplog.at_level(logging.INFO, logger="sessionlog.worker"):
        assert run_one(services, "Completed", asynchronous) == [], "the handler never got it"
    assert services.seen == ["GET /v1/work", "POST /lease"]
    assert f"agent {AGENT}: session {SID} was taken over at once" in caplog.text


@both
def test_a_close_refused_as_a_conflict_is_logged(asynchronous: bool, caplog: pytest.LogCaptureFixture) -> None:
    services = FakeServices(lease=None, close=(409, "session_ended"))
    with caplog.at_level(logging.INFO, logger="sessionlog.worker"):
        [session] = run_one(services, "Completed", asynchronous)
    [record] = [r for r in caplog.records if SID in r.getMessage()]
    assert record.levelno == logging.INFO and "session_ended" in record.getMessage()
    assert "letting go failed" not in caplog.text
    # The worker leaves the renewal to meet the conflict itself; this fake would not answer it.
    session._stop_lease()


@both
def test_a_close_that_fails_otherwise_leaves_the_lease_to_lapse(asynchronous: bool, caplog: pytest.LogCaptureFixture) -> None:
    services = FakeServices(lease=None, close=(422, "unprocessable"))
    with caplog.at_level(logging.INFO, logger="sessionlog.worker"):
        [session] = run_one(services, "Completed", asynchronous)
    assert not lease_held(session), "the renewal stopped"
    [record] = [r for r in caplog.records if SID in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert f"session {SID}: letting go failed" in record.getMessage() and "its lease lapses" in record.getMessage()
    assert services.seen == ["GET /v1/work", "POST /lease", "POST /close"]
