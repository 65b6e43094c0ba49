"""Writer leases over HTTP: a ``Session`` holding one renews it while it runs, and its close
releases it; a writer another one took over stops renewing."""

from __future__ import annotations

import asyncio

from typing import Any

import pytest

import sessionlog
from stackcorner import StackCorner, wait_for


def test_a_session_renews_its_lease_while_it_runs_and_its_close_releases_it(corner: StackCorner, token: str) -> None:
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    session = sessionlog.Session.start(client, "py-lease", "lease")
    lease = session.hold_lease()
    assert (lease.writer, lease.epoch, lease.ttl_ms) == ("py-lease", 1, 1500)
    assert lease.expires_at == lease.renewed_at + 1_500_000

    first = client.session(session.session_id).lease
    assert first is not None and first["live"] and (first["writer"], first["epoch"]) == ("py-lease", 1)

    def renewed() -> dict[str, Any] | None:
        now = client.session(session.session_id).lease
        return now if now is not None and now["renewed_at"] != first["renewed_at"] else None

    again = wait_for("a renewal of the lease", 10, renewed)
    assert again["live"] and again["epoch"] == 1

    session.close()
    assert client.session(session.session_id).lease is None
    client.close_client()


def test_a_writer_taken_over_stops_renewing_and_the_new_writers_lease_stands(corner: StackCorner, token: str) -> None:
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    old = sessionlog.Session.start(client, "py-lease", "taken over")
    old.hold_lease("old")
    new = sessionlog.Session.resume(client, old.session_id, "py-lease-2")
    assert new.hold_lease("new").epoch == 2
    first = client.session(new.session_id).lease
    assert first is not None and first["epoch"] == 2

    # The old writer's next renewal is refused (409 fenced) and it stops; the new one renews.
    def renewed() -> dict[str, Any] | None:
        now = client.session(new.session_id).lease
        return now if now is not None and now["renewed_at"] != first["renewed_at"] else None

    seen = wait_for("the new writer's renewal", 10, renewed)
    assert seen["live"] and seen["epoch"] == 2 and seen["writer"].endswith("new")
    new.release_lease()
    assert client.session(new.session_id).lease is None
    client.close_client()


@pytest.mark.anyio
async def test_an_async_session_renews_its_lease_on_a_task_and_its_close_releases_it(
    corner: StackCorner, token: str
) -> None:
    reader = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as client:
        session = await sessionlog.AsyncSession.start(client, "py-lease-async", "lease")
        lease = await session.hold_lease()
        assert (lease.writer, lease.epoch) == ("py-lease-async", 1)
        first = reader.session(session.session_id).lease
        assert first is not None and first["live"]
        deadline = asyncio.get_running_loop().time() + 10
        while (now := reader.session(session.session_id).lease) is not None and now["renewed_at"] == first["renewed_at"]:
            assert asyncio.get_running_loop().time() < deadline, "no renewal within 10 s"
            await asyncio.sleep(0.1)
        assert now is not None and now["live"]
        await session.close()
        assert reader.session(session.session_id).lease is None
    reader.close_client()
