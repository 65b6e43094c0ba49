"""The OpenAI Agents SDK's items as ``SessionlogSession`` keeps them in the log (pure: no I/O):
the records that keep an item whole beside its event or on its own, the claims of durable
tools' requests, the item an event gives when it has no record, and how a recorded call is
matched to the call the model asked for. See ``sessionlog.integrations.openai_agents``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from ..models import HistoryEvent, text_of

#: The model name prefix of items with no event of their own, kept whole in a ``ModelResponse``.
ITEM_MODEL = "openai-agents:item:"
#: The framework and key of the ``FrameworkStateSaved`` event that keeps an item whole beside
#: its event (its ``causation_id`` is that event's id).
FRAMEWORK = "openai-agents"
ITEM_KEY = "item"
#: The key of a ``FrameworkStateSaved`` naming (``causation_id``) a durable tool's request that
#: a function call kept whole before the tool ran stands for; its state is the SDK's call id.
CLAIM_KEY = "claim"


def text_parts(content: Any) -> str:
    """A message's text: its content when a string, else its text parts joined."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def parse_arguments(text: str) -> dict[str, Any]:
    """A call's arguments as a JSON object (empty when they are not one)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def same_call(request: HistoryEvent, tool: str, asked: dict[str, Any]) -> bool:
    """Whether a durable wrapper's recorded request is the call the model asked for: its tool,
    and every argument the model gave (the wrapper also records defaults the model left out)."""
    data = request.data or {}
    recorded = parse_arguments(text_of(data.get("arguments")) or "")
    return data.get("tool") == tool and same_value(recorded, asked)


def same_value(recorded: Any, asked: Any) -> bool:
    """Whether a recorded argument (parsed JSON) is what the model gave: an object has every
    field the model gave (its defaults are recorded too), a list item by item, a date or time
    the same instant however written ("Z" or "+00:00")."""
    if isinstance(asked, dict):
        return isinstance(recorded, dict) and all(k in recorded and same_value(recorded[k], v) for k, v in asked.items())
    if isinstance(asked, list):
        return isinstance(recorded, list) and len(recorded) == len(asked) and all(map(same_value, recorded, asked))
    if isinstance(asked, str) and isinstance(recorded, str) and asked != recorded:
        try:
            return datetime.fromisoformat(recorded) == datetime.fromisoformat(asked)
        except ValueError:
            return False
    return bool(recorded == asked)


def item_record(event: HistoryEvent) -> dict[str, Any] | None:
    """The item an item record keeps whole; ``None`` for another record, or one whose text no
    longer opens (an erased session)."""
    data = event.data or {}
    text = text_of(data.get("state"))
    if event.kind != "FrameworkStateSaved" or data.get("framework") != FRAMEWORK or data.get("key") != ITEM_KEY or text is None:
        return None
    return cast(dict[str, Any], json.loads(text))


def event_of(event: HistoryEvent, item: dict[str, Any]) -> bool:
    """Whether ``event`` is the item's own event (written with it), not a durable tool's record
    the item was saved beside: a tool event of the item's own carries its call id as key."""
    return event.kind not in ("ToolCallRequested", "ToolCallResult") or event.idempotency_key == item.get("call_id")


def claimed_requests(events: list[HistoryEvent]) -> dict[str, str]:
    """The durable requests a call kept whole on its own stands for (see ``CLAIM_KEY``): the
    SDK's call id, by the request's event id."""
    found: dict[str, str] = {}
    for event in events:
        data = event.data or {}
        if event.kind == "FrameworkStateSaved" and data.get("framework") == FRAMEWORK and data.get("key") == CLAIM_KEY:
            text = text_of(data.get("state"))
            if event.causation_id is not None and text is not None:
                found[event.causation_id] = text
    return found


def saved_items(events: list[HistoryEvent]) -> list[tuple[HistoryEvent, dict[str, Any]]]:
    """The items kept whole that no retraction withdrew, in the order they were saved, each
    with its record."""
    retracted = {int((e.data or {}).get("retracted_seq", 0)) for e in events if e.kind == "EventRetracted"}
    by_id = {e.event_id: e for e in events}
    saved: list[tuple[HistoryEvent, dict[str, Any]]] = []
    for event in events:
        item = item_record(event)
        if item is None or event.seq in retracted:
            continue
        beside = by_id.get(event.causation_id or "")
        if beside is not None and event_of(beside, item) and beside.seq in retracted:
            continue
        saved.append((event, item))
    return saved


def whole_items(events: list[HistoryEvent]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The items kept whole: those beside an event, by that event's id, and those on their own (a
    function call with no request yet, a durable call's item that found no record of its
    wrapper), by their own event id. One whose text no longer opens (an erased session) is left
    out: an event gives what the log kept."""
    beside: dict[str, dict[str, Any]] = {}
    alone: dict[str, dict[str, Any]] = {}
    for event in events:
        item = item_record(event)
        if item is None:
            continue
        if event.causation_id is None:
            alone[event.event_id] = item
        else:
            beside[event.causation_id] = item
    return beside, alone


def item_of_event(event: HistoryEvent, calls: dict[int, HistoryEvent], durable: set[str]) -> dict[str, Any] | None:
    """The item an event with no record gives (what the log kept); ``None`` for no item."""
    data = event.data or {}
    if event.kind == "UserRequest":
        return {"role": "user", "content": text_of(data.get("content")) or ""}
    if event.kind == "ModelResponse":
        model = str(data.get("model", ""))
        text = text_of(data.get("content")) or ""
        if model.startswith(ITEM_MODEL):
            return cast(dict[str, Any], json.loads(text))
        return {"role": "assistant", "content": text}
    if event.kind == "ToolCallRequested":
        return {
            "type": "function_call",
            "call_id": event.idempotency_key or f"call-{event.seq}",
            "name": str(data.get("tool", "")),
            "arguments": text_of(data.get("arguments")) or "",
        }
    if event.kind == "ToolCallResult":
        call = calls.get(int(data.get("call_seq", 0)))
        if call is None:
            return None
        output = text_of(data.get("output")) or ""
        if (call.data or {}).get("tool") in durable and data.get("source") == "Executed" and data.get("outcome") == "Succeeded":
            # A durable tool records its value as JSON; the SDK hands a model the text.
            try:
                value = json.loads(output)
            except ValueError:
                value = None
            output = value if isinstance(value, str) else output
        return {"type": "function_call_output", "call_id": call.idempotency_key or f"call-{call.seq}", "output": output}
    return None
