"""What the adapters that keep their state in ``FrameworkStateSaved`` records share: reading
them back (pure: no I/O)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .. import errors
from ..models import HistoryEvent, text_of


def framework_records(events: Iterable[HistoryEvent], framework: str, what: str) -> list[tuple[HistoryEvent, str, Any]]:
    """The records of ``framework`` among ``events``, in order: each with its key and its state,
    parsed. A record whose state does not open (an erased session) raises, naming it ``what``
    (``"LangGraph state"``): an adapter cannot fold a state it cannot read."""
    found: list[tuple[HistoryEvent, str, Any]] = []
    for event in events:
        data = event.data or {}
        if event.kind != "FrameworkStateSaved" or data.get("framework") != framework:
            continue
        text = text_of(data.get("state"))
        if text is None:
            raise errors.SessionlogError(
                f"{what} at seq {event.seq} of {event.session_id} does not open "
                f"({event.unopened or 'no text'}): was the session erased?"
            )
        found.append((event, str(data.get("key")), json.loads(text)))
    return found
