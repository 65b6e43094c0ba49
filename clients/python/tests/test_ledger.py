"""The ledger's rules, without a server: which seq comes next, what is resent, and how a durable
tool treats a call it finds in the log."""

from __future__ import annotations

import pytest

from sessionlog import errors
from sessionlog.ledger import SessionLedger
from sessionlog.models import Appended, EventAck, HistoryEvent


def ack(seq: int, event_id: str = "e") -> EventAck:
    return EventAck(seq=seq, event_id=event_id, partition=0, offset=seq, duplicate=False)


def history(seq: int, kind: str, data: dict[str, object], key: str | None = None) -> HistoryEvent:
    return HistoryEvent("s", seq, kind, 0, 1, f"id-{seq}", None, key, data, {})


def test_unanswered_events_keep_their_seqs_and_ids_until_acknowledged() -> None:
    ledger = SessionLedger("s", 1, 2)
    first = ledger.event("UserRequest", {"content": {"Plain": "a"}})
    second = ledger.event("UserRequest", {"content": {"Plain": "b"}})
    assert [first["seq"], second["seq"]] == [2, 3]
    assert ledger.unacknowledged == [first, second]
    ledger.acknowledged(Appended("s", 4, [ack(2), ack(3)]))
    assert ledger.unacknowledged == [] and ledger.next_seq == 4
    ledger.event("UserRequest", {})
    ledger.failed(errors.Unavailable(503, {"code": "unavailable"}))
    assert len(ledger.unacknowledged) == 1, "an outage keeps the event, to be sent again"
    ledger.failed(errors.InvalidEvent(422, {"code": "invalid_event"}))
    assert ledger.unacknowledged == [] and ledger.next_seq == 4, "a refusal drops it"


def test_a_durable_call_is_fresh_recorded_or_settled_by_its_effect() -> None:
    ledger = SessionLedger("s", 2, 9)
    ledger.learn([
        history(2, "ToolCallRequested", {"tool": "t", "effect": "NonIdempotent"}, key="done"),
        history(3, "ToolCallResult", {"call_seq": 2, "outcome": "Succeeded", "output": {"Plain": "42"}, "source": "Executed"}),
        history(4, "ToolCallRequested", {"tool": "t", "effect": "Pure"}, key="pure"),
        history(5, "ToolCallRequested", {"tool": "t", "effect": "NonIdempotent"}, key="doubt"),
    ])
    assert ledger.plan("t", "new") == ("fresh", None)
    kind, call = ledger.plan("t", "done")
    assert kind == "recorded" and call is not None and call.result is not None and call.result.output == "42"
    assert ledger.plan("t", "pure")[0] == "settle"
    with pytest.raises(errors.CallInDoubt, match="--call-seq 5"):
        ledger.plan("t", "doubt")
    assert ledger.plan("other", "done") == ("fresh", None), "a key names a call of one tool"


def test_a_resumed_ledger_keeps_what_recovery_said_about_a_call_in_doubt() -> None:
    from sessionlog.models import InDoubtCall, ResumeBundle

    doubt = InDoubtCall(4, "id-4", "t", "Idempotent", "k", "ReissueWithSameKey")
    ledger = SessionLedger.from_bundle(ResumeBundle("s", 3, 6, [doubt], {"last_seq": 5}, {}))
    ledger.learn([history(4, "ToolCallRequested", {"tool": "t", "effect": "Idempotent"}, key="k")])
    kind, call = ledger.plan("t", "k")
    assert kind == "settle" and call is not None and call.action == "ReissueWithSameKey"
