"""A harness killed with kill -9 at each step of a durable tool call, then resumed by a new
process: the side effect happens exactly as the call's effect class allows, and the resumed
harness gets the same result the first run got (or would have)."""

from __future__ import annotations

from typing import Any

import pytest

import sessionlog
from counter_service import Counter
from processes import Harness
from stackcorner import StackCorner


def crash_at(corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, effect: str, point: str) -> str:
    """Runs a harness until it reaches ``point``, kills it there; the session's id."""
    harness = Harness("crash_harness.py", corner, token, counter[1], tool, effect, "--hang", point)
    session = harness.next()["session"]
    assert harness.next() == {"at": point}
    harness.kill()
    return str(session)


def resume(corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, effect: str, session: str) -> dict[str, Any]:
    """Resumes ``session`` in a new harness process and runs it to the end; its last line."""
    harness = Harness("crash_harness.py", corner, token, counter[1], tool, effect, "--session", session)
    line = harness.next()
    if "session" in line:
        line = harness.next()
    harness.process.wait(timeout=60)
    return line


@pytest.mark.parametrize(
    ("tool", "effect", "point", "expected"),
    [
        # Recorded before the kill: the resumed harness gets it from the log and calls nothing.
        ("plain", "NonIdempotent", "after-record", "plain effect #1"),
        # Done, not recorded: recovery asks the service's resolver and records its answer.
        ("counter", "Idempotent", "after-effect", "counter effect #1"),
        # Recorded as requested, never sent: the resolver says so, and the call is reissued with its key.
        ("reissued", "Idempotent", "after-intent", "reissued effect #1"),
    ],
)
def test_a_killed_harness_resumes_without_repeating_the_side_effect(
    corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, effect: str, point: str, expected: str
) -> None:
    session = crash_at(corner, token, counter, tool, effect, point)
    assert counter[0].total(tool) == (0 if point == "after-intent" else 1)
    assert resume(corner, token, counter, tool, effect, session) == {"result": expected}
    assert counter[0].total(tool) == 1, "the side effect happened exactly once"


def test_a_pure_call_in_doubt_runs_again(corner: StackCorner, token: str, counter: tuple[Counter, str]) -> None:
    session = crash_at(corner, token, counter, "pure", "Pure", "after-effect")
    assert resume(corner, token, counter, "pure", "Pure", session) == {"result": "pure effect #2"}
    assert counter[0].total("pure") == 2, "a pure call may run again, and did"


def test_a_non_idempotent_call_in_doubt_waits_for_an_operator(
    corner: StackCorner, token: str, counter: tuple[Counter, str]
) -> None:
    session = crash_at(corner, token, counter, "charge", "NonIdempotent", "after-effect")
    stopped = resume(corner, token, counter, "charge", "NonIdempotent", session)
    assert stopped["error"] == "NeedsResolution"
    assert counter[0].total("charge") == 1
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=corner.token("operator", "reader")) as c:
        [call_seq] = [int(seq) for seq in c.session(session).state["pending_calls"]]
        c.resolve(session, call_seq, succeeded=True, output="charge effect #1", reason="the ledger shows one charge")
    assert resume(corner, token, counter, "charge", "NonIdempotent", session) == {"result": "charge effect #1"}
    assert counter[0].total("charge") == 1, "the operator's record stood in for a second run"
