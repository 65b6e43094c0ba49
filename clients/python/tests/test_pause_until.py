"""A pause that says when it lapses (schema v7), as the client reads a session view: the
recovery service answers ``paused_until`` (RFC 3339) while a pause with an end holds, and the
client gives it as an aware ``datetime``; without one it is ``None``. No server: the view's
JSON is what ``GET /v1/sessions/{id}`` answers."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sessionlog.models import SessionView


def view(**extra: Any) -> dict[str, Any]:
    return {"rebuilt": {"state": {"paused": True}}, "status": "paused", "digest": "ab", "lease": None, **extra}


def test_a_pause_with_an_end_reads_as_an_aware_datetime() -> None:
    got = SessionView.from_json(view(paused_until="2026-12-05T09:00:00Z"))
    assert got.paused_until == datetime(2026, 12, 5, 9, 0, 0, tzinfo=timezone.utc)
    assert got.paused_until is not None and got.paused_until.tzinfo is not None, "aware, comparable with now"
    # Sub-seconds and offsets as RFC 3339 writes them.
    got = SessionView.from_json(view(paused_until="2026-12-05T10:00:00.5+01:00"))
    assert got.paused_until == datetime(2026, 12, 5, 9, 0, 0, 500_000, tzinfo=timezone.utc)


def test_without_an_end_it_is_none() -> None:
    assert SessionView.from_json(view()).paused_until is None
    assert SessionView.from_json(view(paused_until=None)).paused_until is None
