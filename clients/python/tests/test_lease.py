"""Writer leases over HTTP: a ``Session`` holding one renews it while it runs, and its close
releases it; a writer another one took over stops renewing."""

from __future__ import annotations

from typing import Any

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
