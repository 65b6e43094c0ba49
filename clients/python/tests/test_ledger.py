"""The ledger's rules, without a server: which seq comes next, what is resent, how durable calls
are named, and how a durable tool treats a call it finds in the log (its own or inherited)."""

from __future__ import annotations

import threading

import pytest

from sessionlog import errors
from sessionlog.ledger import Occurrences, SessionLedger, default_key, identity_of
from sessionlog.models import Appended, EventAck, HistoryEvent, InDoubtCall, ResumeBundle

PARENT = "0190a6e4-0000-7000-8000-000000000001"
CHILD = "0190a6e4-0000-7000-8000-000000000002"
DIGEST = "0123456789abcdef0123456789abcdef"


def ack(seq: int, event_id: str = "e") -> EventAck:
    return EventAck(seq=seq, event_id=event_id, partition=0, offset=seq, duplicate=False)


def history(seq: int, kind: str, data: dict[str, object], key: str | None = None, session: str = "s") -> HistoryEvent:
    return HistoryEvent(session, seq, kind, 0, 1, f"id-{seq}", None, key, data, {})


def requested(seq: int, effect: str, key: str, session: str = "s") -> HistoryEvent:
    return history(seq, "ToolCallRequested", {"tool": "t", "effect": effect}, key=key, session=session)


def result(seq: int, call_seq: int, output: str, session: str = "s") -> HistoryEvent:
    data = {"call_seq": call_seq, "outcome": "Succeeded", "output": {"Plain": output}, "source": "Executed"}
    return history(seq, "ToolCallResult", data, session=session)


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
        requested(2, "NonIdempotent", "done"),
        result(3, 2, "42"),
        requested(4, "Pure", "pure"),
        requested(5, "NonIdempotent", "doubt"),
    ])
    assert ledger.plan_call(ledger.name_call("t", key="new")).kind == "fresh"
    done = ledger.plan_call(ledger.name_call("t", key="done"))
    assert done.kind == "recorded" and done.call is not None and done.call.result is not None
    assert done.call.result.output == "42"
    assert ledger.plan_call(ledger.name_call("t", key="pure")).kind == "settle"
    with pytest.raises(errors.CallInDoubt, match="--call-seq 5"):
        ledger.plan_call(ledger.name_call("t", key="doubt"))
    assert ledger.plan_call(ledger.name_call("other", key="done")).kind == "fresh", "a key names a call of one tool"


def test_a_resumed_ledger_keeps_what_recovery_said_about_a_call_in_doubt() -> None:
    doubt = InDoubtCall(4, "id-4", "t", "Idempotent", "k", "ReissueWithSameKey")
    ledger = SessionLedger.from_bundle(ResumeBundle("s", 3, 6, [doubt], {"last_seq": 5}, {}))
    ledger.learn([requested(4, "Idempotent", "k")])
    plan = ledger.plan_call(ledger.name_call("t", key="k"))
    assert plan.kind == "settle" and plan.call is not None and plan.call.action == "ReissueWithSameKey"


def test_default_keys_name_the_session_and_the_occurrence_and_a_new_run_finds_them_again() -> None:
    ledger = SessionLedger(PARENT, 1, 2)
    first, second = (ledger.plan_call(ledger.name_call("t", digest=DIGEST)) for _ in range(2))
    assert (first.kind, second.kind) == ("fresh", "fresh"), "a second invocation is a second call"
    assert (first.key, second.key) == (default_key(PARENT, DIGEST, 1), default_key(PARENT, DIGEST, 2))
    assert identity_of("t", first.key) == (DIGEST, 1)
    assert identity_of("t", f"t:{DIGEST}") == (DIGEST, 1), "the key of the release before reads as the first call"
    assert identity_of("t", "order-7") is None
    other = SessionLedger(CHILD, 1, 2)
    assert other.plan_call(other.name_call("t", digest=DIGEST)).key != first.key, "another session: another key"
    # A run after a crash counts again from the start and finds the first run's calls.
    rerun = SessionLedger(PARENT, 2, 6)
    rerun.learn([
        requested(2, "NonIdempotent", first.key, session=PARENT),
        result(3, 2, "a", session=PARENT),
        requested(4, "NonIdempotent", second.key, session=PARENT),
    ])
    again = rerun.plan_call(rerun.name_call("t", digest=DIGEST))
    assert again.kind == "recorded" and again.call is not None and again.call.seq == 2
    with pytest.raises(errors.CallInDoubt, match="--call-seq 4"):
        rerun.plan_call(rerun.name_call("t", digest=DIGEST))


def test_a_fork_answers_inherited_results_by_identity_and_runs_the_rest_as_its_own() -> None:
    parent_key = default_key(PARENT, DIGEST, 1)
    child = SessionLedger(CHILD, 2, 5)
    child.learn([
        # The parent's seqs 2-5 (through the fork point), then the child's own, numbered from 1 again.
        requested(2, "NonIdempotent", parent_key, session=PARENT),
        result(3, 2, "charged", session=PARENT),
        history(4, "ToolCallRequested", {"tool": "u", "effect": "Idempotent"}, key="reissue-me", session=PARENT),
        requested(2, "Pure", "own-call", session=CHILD),
    ])
    inherited = child.plan_call(child.name_call("t", digest=DIGEST))
    assert inherited.kind == "recorded" and inherited.call is not None
    assert inherited.call.inherited_from == PARENT and inherited.call.result is not None
    assert inherited.call.result.output == "charged"
    assert child.plan_call(child.name_call("t", digest=DIGEST)).key == default_key(CHILD, DIGEST, 2)
    # Inherited without a result: the fork cannot record one in its parent, so it runs it as
    # its own call, under the same key (its service dedupes it).
    pending = child.plan_call(child.name_call("u", key="reissue-me"))
    assert (pending.kind, pending.key, pending.call) == ("fresh", "reissue-me", None)
    own = child.call_at(2)
    assert own is not None and own.tool == "t" and own.inherited_from is None, "seq 2 of the child is its own"


def test_an_invocation_that_raised_leaves_its_occurrence_to_its_retry() -> None:
    ledger, runs = SessionLedger(PARENT, 1, 2), Occurrences()
    first = ledger.name_call("t", digest=DIGEST, occurrences=runs)
    runs.leave_open(first)
    assert ledger.name_call("t", digest=DIGEST, occurrences=runs) == first, "the retry is the same call"
    assert ledger.name_call("t", digest=DIGEST, occurrences=runs).occurrence == 2
    assert Occurrences().next("t", DIGEST) == 1, "another run counts from the start"


def test_a_call_in_flight_is_waited_for_and_then_answered() -> None:
    ledger = SessionLedger("s", 1, 2)
    name = ledger.name_call("t", key="k")
    running = ledger.plan_call(name)
    assert running.kind == "fresh" and running.flight is not None
    waiting = ledger.plan_call(name)
    assert waiting.kind == "wait" and waiting.flight is running.flight and waiting.key == "k"
    answered: list[str] = []

    def second_caller() -> None:
        assert waiting.flight is not None and waiting.flight.wait(30), "the flight lands"
        plan = ledger.plan_call(name)
        assert plan.call is not None and plan.call.result is not None
        answered.append(f"{plan.kind}:{plan.call.result.output}")

    thread = threading.Thread(target=second_caller)
    thread.start()
    with running.flight:
        assert running.flight.wait(0.01) is False, "it has not landed while its caller runs it"
        ledger.learn([requested(2, "NonIdempotent", "k"), result(3, 2, "done")])
    thread.join(30)
    assert answered == ["recorded:done"]
    assert ledger.waiters("t", "k") == 0


def test_an_event_keeps_the_id_its_writer_chose_and_a_reused_key_finds_the_latest_call() -> None:
    ledger = SessionLedger("s", 1, 2)
    # Chosen before sending, so other events of the batch can name it (a whole item names its event).
    chosen = ledger.event("ToolCallRequested", {"tool": "t", "effect": "Pure"}, idempotency_key="k", event_id="chosen")
    assert chosen["event_id"] == "chosen" and ledger.unacknowledged[0]["event_id"] == "chosen"
    ledger.acknowledged(Appended("s", 3, [ack(2, "chosen")]))
    ledger.learn([requested(5, "Pure", "k")])
    # The SDK reuses a call id across turns; an output names the latest call with it.
    found = ledger.call_with_key("k")
    assert found is not None and found.seq == 5
