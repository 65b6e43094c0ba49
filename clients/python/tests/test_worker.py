"""The worker loop on the real stack: a wake written to the wake topic by hand (as the wake
component writes one) is picked up by a ``Worker`` of the session's agent, whose handler gets
the session taken at the next epoch with its lease held, and the worker lets go of it after; a
worker stops when told to, with or without work."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

import sessionlog
from stackcorner import StackCorner, wait_for


def put_wake(corner: StackCorner, session_id: str, agent: str, epoch: int, reason: str = "lease_expired") -> int:
    """Writes a wake record for ``session_id`` as ``sessionlog_log::Wake`` encodes it: JSON,
    keyed by the session id as text, on the session's partition (Kafka's murmur2 of the key, as
    the events topic places it); its ``caused_at``."""
    caused_at = time.time_ns() // 1000
    wake = {
        "version": 1,
        "session_id": session_id,
        "agent": agent,
        "reason": reason,
        "epoch": epoch,
        "cause_offset": None,
        "caused_at": caused_at,
        "woken_at": caused_at,
    }
    producer = Producer(
        {"bootstrap.servers": corner.env["SESSIONLOG_KAFKA__BOOTSTRAP"], "partitioner": "murmur2_random"}
    )
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    topic = corner.env["SESSIONLOG_KAFKA__TOPIC"] + "-wake"
    producer.produce(topic, key=session_id.encode(), value=json.dumps(wake).encode(), on_delivery=delivered)
    assert producer.flush(30) == 0, "the wake was not delivered within 30 s"
    assert not failures, failures
    return caused_at


def test_a_worker_takes_a_woken_session_runs_the_handler_and_closes_what_it_ended(corner: StackCorner, token: str) -> None:
    agent = f"py-worker-{uuid.uuid4().hex[:8]}"
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    crashed = sessionlog.Session.start(client, agent, "its harness died")
    crashed.user_request("before the crash")
    caused_at = put_wake(corner, crashed.session_id, agent, epoch=1)

    seen: list[tuple[str, int, sessionlog.Wake, dict[str, Any] | None]] = []
    stop = threading.Event()

    def handler(session: sessionlog.Session, wake: sessionlog.Wake) -> sessionlog.TerminalOutcome:
        lease = client.session(session.session_id).lease
        seen.append((session.session_id, session.ledger.epoch, wake, lease))
        session.user_request("after the wake")
        stop.set()
        return "Completed"

    worker = sessionlog.Worker(client, agent=agent, writer="py-worker", wait=2)
    thread = threading.Thread(target=worker.run, args=(handler,), kwargs={"stop": stop}, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the worker did not stop within 60 s of its start"

    assert len(seen) == 1, seen
    session_id, epoch, wake, lease = seen[0]
    assert (session_id, epoch) == (crashed.session_id, 2)
    assert (wake.session_id, wake.agent, wake.reason, wake.epoch, wake.caused_at) == (
        crashed.session_id, agent, "lease_expired", 1, caused_at,
    )
    # The handler ran holding the new epoch's lease.
    assert lease is not None and lease["live"] and lease["epoch"] == 2 and lease["writer"] == "py-tests/py-worker"

    # Closed with the handler's outcome, which released the lease.
    view = client.session(crashed.session_id)
    assert view.status == "completed", view.status
    assert view.state["epoch"] == 2 and view.lease is None
    client.close_client()


def test_a_worker_without_work_polls_again_and_stops_when_told(corner: StackCorner, token: str) -> None:
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    polls: list[float] = []
    worker = sessionlog.Worker(client, agent=f"py-idle-{uuid.uuid4().hex[:8]}", wait=0.5)
    take = worker.take

    def counted() -> tuple[sessionlog.Session, sessionlog.Wake] | None:
        polls.append(time.monotonic())
        return take()

    worker.take = counted  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(lambda s, w: None,), kwargs={"stop": stop}, daemon=True)
    thread.start()
    # A 204 is polled again, not backed off: several polls within a few waits.
    wait_for("three polls", 30, lambda: len(polls) >= 3 or None)
    stop.set()
    thread.join(10)
    assert not thread.is_alive(), "the worker did not stop within 10 s of being told"
    # Each poll waited its 0.5 s on the service: no spinning.
    gaps = [b - a for a, b in zip(polls, polls[1:])]
    assert all(gap >= 0.4 for gap in gaps), gaps
    client.close_client()


def test_a_client_timeout_too_short_for_a_long_poll_is_refused_rather_than_spin(corner: StackCorner, token: str) -> None:
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, timeout=5.0)
    with pytest.raises(sessionlog.errors.InvalidArgument, match="timeout"):
        sessionlog.Worker(client, agent="py-hasty")
    client.close_client()


def test_a_worker_with_a_credential_it_cannot_use_fails_rather_than_spin(corner: StackCorner) -> None:
    reader = corner.token("reader")
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=reader)
    worker = sessionlog.Worker(client, agent="py-forbidden", wait=0.5)
    with pytest.raises(sessionlog.errors.Forbidden):
        worker.run(lambda s, w: None, stop=threading.Event())
    client.close_client()


@pytest.mark.anyio
async def test_an_async_worker_takes_a_woken_session_and_releases_the_lease_it_kept(
    corner: StackCorner, token: str
) -> None:
    agent = f"py-aworker-{uuid.uuid4().hex[:8]}"
    reader = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as client:
        waiting = await sessionlog.AsyncSession.start(client, agent, "woken by steering")
        put_wake(corner, waiting.session_id, agent, epoch=1, reason="steering")
        stop = asyncio.Event()
        seen: list[tuple[str, int, str]] = []

        async def handler(session: sessionlog.AsyncSession, wake: sessionlog.Wake) -> None:
            seen.append((session.session_id, session.ledger.epoch, str(wake.reason)))
            await session.user_request("steered")
            stop.set()
            return None  # not ended: the worker releases the lease

        worker = sessionlog.AsyncWorker(client, agent=agent, wait=2)
        await asyncio.wait_for(worker.run(handler, stop=stop), 60)
        assert seen == [(waiting.session_id, 2, "steering")]
        view = reader.session(waiting.session_id)
        assert view.status == "running" and view.state["epoch"] == 2
        assert view.lease is None, "the lease the handler kept was released"
    reader.close_client()
