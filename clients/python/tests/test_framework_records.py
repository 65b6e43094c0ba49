"""The LangGraph saver and the ADK service fold their ``FrameworkStateSaved`` records through one
reader (``sessionlog.integrations._records``), without the stack: each folds its own framework's
records, in order, passes over other frameworks' and other kinds, and a record whose state no
longer opens (an erased session) stops the fold with an error naming the adapter, the seq and
the session."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest

from sessionlog import SessionlogError
from sessionlog.integrations.adk import APP_STATE_KEY, REGISTERED_KEY, UNREGISTERED_KEY, USER_STATE_KEY, Catalogue
from sessionlog.integrations.langgraph import ThreadState
from sessionlog.models import HistoryEvent

SESSION = str(uuid.uuid4())


def record(seq: int, framework: str, key: str, state: dict[str, Any] | None) -> HistoryEvent:
    """A ``FrameworkStateSaved`` as a range read gives it; ``state=None``: its text did not open."""
    sealed: Any = {"Plain": json.dumps(state)} if state is not None else None
    return HistoryEvent(
        session_id=SESSION,
        seq=seq,
        kind="FrameworkStateSaved",
        occurred_at=seq,
        writer_epoch=1,
        event_id=str(uuid.uuid4()),
        causation_id=None,
        idempotency_key=None,
        data={"framework": framework, "key": key, "state": sealed},
        unopened={} if state is not None else {"state": "erased"},
    )


def user_request(seq: int) -> HistoryEvent:
    return HistoryEvent(SESSION, seq, "UserRequest", seq, 1, str(uuid.uuid4()), None, None, {"content": {"Plain": "hi"}}, {})


def typed(value: object) -> list[str]:
    return ["json", base64.b64encode(json.dumps(value).encode()).decode()]


def checkpoint(checkpoint_id: str) -> dict[str, Any]:
    return {"type": "checkpoint", "ns": "", "id": checkpoint_id, "checkpoint": typed({}), "metadata": typed({})}


def test_the_langgraph_saver_folds_its_own_records_in_order() -> None:
    thread = ThreadState.fold([
        record(2, "langgraph", "checkpoint::1", checkpoint("1")),
        user_request(3),
        record(4, "adk", "checkpoint::9", checkpoint("9")),  # another framework's: not the thread's
        record(5, "langgraph", "checkpoint::2", checkpoint("2")),
        record(6, "langgraph", "deleted::1", {"type": "deleted", "ns": "", "id": "1"}),
    ])
    assert list(thread.checkpoints[""]) == ["2"], "checkpoint 1 was deleted after it, 9 is ADK's"


def test_the_adk_catalogue_folds_its_own_records_in_order() -> None:
    catalogue = Catalogue.fold([
        record(2, "adk", APP_STATE_KEY, {"delta": {"theme": "dark"}, "source": "s@2"}),
        record(3, "langgraph", APP_STATE_KEY, {"delta": {"theme": "light"}}),  # not ADK's
        record(4, "adk", USER_STATE_KEY, {"user": "u1", "delta": {"name": "Ann"}, "source": "s@3"}),
        user_request(5),
        record(6, "adk", REGISTERED_KEY, {"session": "a", "user": "u1", "id": "one", "source": "a@2"}),
        record(7, "adk", REGISTERED_KEY, {"session": "b", "user": "u1", "id": "two", "source": "b@2"}),
        record(8, "adk", UNREGISTERED_KEY, {"session": "a"}),
    ])
    assert catalogue.app_state == {"theme": "dark"}
    assert catalogue.user_states == {"u1": {"name": "Ann"}}
    assert catalogue.sessions == {"b": ("u1", "two")}
    assert catalogue.sources == {"s@2", "s@3", "a@2", "b@2"}


def test_a_langgraph_state_that_does_not_open_stops_the_fold() -> None:
    events = [record(2, "langgraph", "checkpoint::1", checkpoint("1")), record(3, "langgraph", "checkpoint::2", None)]
    with pytest.raises(SessionlogError, match=rf"^LangGraph state at seq 3 of {SESSION} does not open \(.*erased.*\)"):
        ThreadState.fold(events)


def test_an_adk_record_that_does_not_open_stops_the_fold() -> None:
    events = [record(2, "adk", APP_STATE_KEY, None), record(3, "adk", APP_STATE_KEY, {"delta": {"x": 1}})]
    with pytest.raises(SessionlogError, match=rf"^ADK record at seq 2 of {SESSION} does not open \(.*erased.*\)"):
        Catalogue.fold(events)


def test_another_frameworks_record_that_does_not_open_is_passed_over() -> None:
    assert Catalogue.fold([record(2, "langgraph", APP_STATE_KEY, None)]) == Catalogue()
    assert ThreadState.fold([record(2, "adk", "checkpoint::1", None)]) == ThreadState()
