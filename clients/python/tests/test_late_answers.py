"""Requests whose answers come after the client's timeout (the service did the work, the client
never heard): the client's retry must not do it a second time. A worker's take retried blindly
takes another session (the first stays taken by nobody until its lease lapses); a fork without a
child id retried blindly makes a second child."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

import sessionlog
from late_proxy import LateProxy, serve
from stackcorner import StackCorner, wait_for
from test_worker import put_wake


@pytest.fixture
def late_recovery(corner: StackCorner) -> Iterator[LateProxy]:
    """A proxy to the corner's recovery service that holds the first 2xx answer of a take or a
    fork until the client gives up on it."""

    def first_take_or_fork(_method: str, path: str, proxy: LateProxy) -> bool:
        return (path.startswith("/v1/work") or path.endswith("/fork")) and not proxy.held

    proxy = serve(corner.recovery_url, first_take_or_fork)
    yield proxy
    proxy.close()


def woken_sessions(corner: StackCorner, client: sessionlog.Client, agent: str) -> list[str]:
    """Two sessions of ``agent`` whose harnesses died: a wake for each."""
    sessions = [sessionlog.Session.start(client, agent, title) for title in ("first", "second")]
    for session in sessions:
        put_wake(corner, session.session_id, agent, epoch=1)
    return [s.session_id for s in sessions]


def test_a_take_answered_after_the_clients_timeout_is_the_session_the_worker_gets(
    corner: StackCorner, token: str, late_recovery: LateProxy
) -> None:
    agent = f"py-late-take-{uuid.uuid4().hex[:8]}"
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    woken = woken_sessions(corner, client, agent)
    late = sessionlog.Client(corner.ingest_url, late_recovery.url, token=token, timeout=6.0)
    worker = sessionlog.Worker(late, agent=agent, writer="py-late", wait=1)

    session, _wake = wait_for("a take", 90, worker.take)
    try:
        assert len(late_recovery.held) == 1, "the first take's answer was held past the client's timeout"
        lost = json.loads(late_recovery.held[0].body)
        assert session.session_id == lost["wake"]["session_id"], "the worker got the session its timed-out take took"
        assert session.ledger.epoch == lost["epoch"], "at the epoch that take claimed, not taken again"
        other = next(s for s in woken if s != lost["wake"]["session_id"])
        assert client.session(other).state["epoch"] == 1, "the retry took no other session"
    finally:
        session.close("Completed")
        late.close_client()
        client.close_client()


@pytest.mark.anyio
async def test_an_async_workers_take_answered_after_the_clients_timeout_is_the_session_it_gets(
    corner: StackCorner, token: str, late_recovery: LateProxy
) -> None:
    agent = f"py-late-atake-{uuid.uuid4().hex[:8]}"
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    woken = woken_sessions(corner, client, agent)
    async with sessionlog.AsyncClient(corner.ingest_url, late_recovery.url, token=token, timeout=6.0) as late:
        worker = sessionlog.AsyncWorker(late, agent=agent, writer="py-late", wait=1)
        taken = None
        for _ in range(60):  # each poll waits up to 1 s for the wakes
            taken = await worker.take()
            if taken is not None:
                break
        assert taken is not None, "no take within 60 polls"
        session, _wake = taken
        try:
            lost = json.loads(late_recovery.held[0].body)
            assert session.session_id == lost["wake"]["session_id"]
            assert session.ledger.epoch == lost["epoch"]
            other = next(s for s in woken if s != lost["wake"]["session_id"])
            assert client.session(other).state["epoch"] == 1, "the retry took no other session"
        finally:
            await session.close("Completed")
    client.close_client()


def test_a_fork_answered_after_the_clients_timeout_is_made_once(corner: StackCorner, token: str, late_recovery: LateProxy) -> None:
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    operator_token = corner.token("operator", "reader")
    parent = sessionlog.Session.start(client, "py-late-fork", "fork me once")
    asked = parent.user_request("fork me once")
    late = sessionlog.Client(corner.ingest_url, late_recovery.url, token=operator_token, timeout=3.0)

    forked = late.fork(parent.session_id, asked.seq, "py-late-fork")

    assert len(late_recovery.held) == 1, "the first fork's answer was held past the client's timeout"
    lost = json.loads(late_recovery.held[0].body)
    assert forked["session_id"] == lost["session_id"], "the retry answered the child the first attempt made"
    assert forked["event"]["seq"] == 1

    def children() -> list[list[object]] | None:
        answer = httpx.get(
            f"{corner.recovery_url}/v1/sessions/{parent.session_id}/lineage",
            headers={"authorization": f"Bearer {operator_token}"},
        ).json()
        listed: list[list[object]] = answer["children"]
        return listed if any(c[0] == forked["session_id"] for c in listed) else None

    assert wait_for("the projection to list the child", 30, children) == [[forked["session_id"], asked.seq]], "one child"
    late.close_client()
    client.close_client()
