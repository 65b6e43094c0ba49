"""Identifiers the client puts in a path stay one path segment (issue 36): an approval id of
``../../<other session>/approvals/x`` once sent an approver's decision to that other session,
as ``httpx`` removes dot segments before sending. Every segment is escaped whole now, so the
service reads back exactly the id it was given and refuses the ones it does not take (422
``invalid_identifier``), and a session id that is not a UUID never leaves the client."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import sessionlog
from sessionlog import errors
from stackcorner import StackCorner
from test_client import projected
from test_promises import approval_request

#: Approval ids that are not one, each written to reach somewhere else if sent unescaped: the
#: victim's approval (dot segments, their escaped slashes), the attacker's own session's
#: approval (a query or a fragment cut off), the parent routes (``.`` and ``..``), and ids the
#: service must refuse whole (a NUL, 10 KB).
BAD_APPROVAL_IDS: dict[str, Callable[[str], str]] = {
    "dot segments": lambda victim: f"../../{victim}/approvals/deploy",
    "one dot segment": lambda victim: f"../{victim}",
    "escaped slashes": lambda victim: f"..%2F..%2F{victim}%2Fapprovals%2Fdeploy",
    "query": lambda victim: f"deploy?x=../../{victim}/approvals/deploy",
    "fragment": lambda victim: "deploy#anything",
    "dot": lambda victim: ".",
    "dot dot": lambda victim: "..",
    "nul": lambda victim: "deploy\x00",
    "10 KB": lambda victim: "d" * 10_240,
}


class Recorder(httpx.BaseTransport):
    """Sends every request on, and remembers each one's method and raw path."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[tuple[str, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.raw_path))
        return self.inner.handle_request(request)


def waiting_session(c: sessionlog.Client, title: str) -> str:
    """A session waiting for the decision on its approval ``deploy``."""
    opened = c.create("py-paths", title)
    c.append(opened.session_id, opened.epoch, [approval_request(opened.next_seq, "deploy")], writer_token=opened.writer_token)
    return opened.session_id


def still_waiting(c: sessionlog.Client, session_id: str) -> None:
    view = c.session(session_id)
    assert view.status == "awaiting_approval" and set(view.state["pending_approvals"]) == {"deploy"}, view.state
    events = projected(c, session_id, int(view.state["last_seq"]))
    assert [e.kind for e in events] == ["SessionStarted", "ApprovalRequested"], "no decision was recorded"


@pytest.fixture(scope="module")
def sessions(corner: StackCorner, token: str) -> Iterator[tuple[str, str]]:
    """The session an approver decides on (``attacker``) and another one (``victim``), both
    waiting for their approval ``deploy``."""
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        yield waiting_session(c, "the approver's"), waiting_session(c, "another")


@pytest.mark.parametrize("make_id", BAD_APPROVAL_IDS.values(), ids=BAD_APPROVAL_IDS.keys())
def test_an_approval_id_reaches_no_other_session_or_route(
    corner: StackCorner, token: str, sessions: tuple[str, str], make_id: Callable[[str], str]
) -> None:
    attacker, victim = sessions
    approval_id = make_id(victim)
    recorder = Recorder()
    approver = corner.token("approver", "reader")
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=approver, transport=recorder) as c:
        with pytest.raises(errors.InvalidIdentifier) as refused:
            c.decide(attacker, approval_id, approved=True, reason="escape me")
    assert (refused.value.status, refused.value.code) == (422, "invalid_identifier")
    # The one request went to the attacker's approvals route, its id one segment.
    [(method, path)] = recorder.sent
    prefix = f"/v1/sessions/{attacker}/approvals/".encode()
    assert method == "POST" and path.startswith(prefix), path[:200]
    segment = path.removeprefix(prefix)
    assert not {b"/", b"?", b"#"} & {bytes([b]) for b in segment} and segment not in (b".", b".."), path[:200]
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        still_waiting(c, victim)
        still_waiting(c, attacker)


def test_a_valid_approval_id_is_still_decided(corner: StackCorner, token: str) -> None:
    """The refusals above are the ids', not the approver's: the same approver decides a real one."""
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        sid = waiting_session(c, "decided")
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=corner.token("approver", "reader")) as c:
        c.decide(sid, "deploy", approved=False, reason="not today")
        assert c.session(sid).status != "awaiting_approval"


BAD_SESSION_IDS = {
    "dot segments": lambda victim: f"../../sessions/{victim}",
    "a UUID then dot segments": lambda victim: f"{victim}/../{victim}",
    "query": lambda victim: f"{victim}?x=1",
    "fragment": lambda victim: f"{victim}#x",
    "escaped slash": lambda victim: f"{victim}%2Fclaim",
    "nul": lambda victim: f"{victim}\x00",
    "10 KB": lambda victim: victim + "0" * 10_240,
    "dot dot": lambda victim: "..",
    "empty": lambda victim: "",
}

#: Every client method that puts a session id in a path.
BY_SESSION_ID: dict[str, Callable[[sessionlog.Client, str], Any]] = {
    "claim": lambda c, sid: c.claim(sid, "py-paths"),
    "append": lambda c, sid: c.append(sid, 1, []),
    "checkpoint": lambda c, sid: c.checkpoint(sid, 1),
    "close": lambda c, sid: c.close(sid, 1, "Completed"),
    "resume": lambda c, sid: c.resume(sid, "py-paths"),
    "session": lambda c, sid: c.session(sid),
    "events": lambda c, sid: c.events_page(sid),
    "fork": lambda c, sid: c.fork(sid, 1, "py-paths"),
    "fork into": lambda c, sid: c.fork(str(uuid.uuid4()), 1, "py-paths", child_id=sid),
    "resolve": lambda c, sid: c.resolve(sid, 2, succeeded=True, output="", reason="r"),
    "decide": lambda c, sid: c.decide(sid, "deploy", approved=True),
}


@pytest.mark.parametrize("call", BY_SESSION_ID.values(), ids=BY_SESSION_ID.keys())
@pytest.mark.parametrize("make_id", BAD_SESSION_IDS.values(), ids=BAD_SESSION_IDS.keys())
def test_a_session_id_that_is_not_a_uuid_is_refused_before_anything_is_sent(
    make_id: Callable[[str], str], call: Callable[[sessionlog.Client, str], Any]
) -> None:
    victim = str(uuid.uuid4())
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500)

    transport = httpx.MockTransport(answer)
    with sessionlog.Client("http://ingest", "http://recovery", transport=transport) as c:
        with pytest.raises(sessionlog.InvalidArgument):
            call(c, make_id(victim))
    assert seen == [], "no request left the client"


def test_each_segment_is_escaped_whole_and_read_back_as_given() -> None:
    """What the services receive, without a server: the path a decision is sent to."""
    seen: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200, json={})

    sid = str(uuid.uuid4())
    with sessionlog.Client("http://ingest", "http://recovery", transport=httpx.MockTransport(answer)) as c:
        for approval_id in ["deploy", "a/b", "a?b", "a#b", "a%2Fb", "..", ".", "...", "a b", "ü", "x\x00"]:
            c.decide(sid, approval_id, approved=True)
        with pytest.raises(sessionlog.InvalidArgument):
            c.decide(sid, "", approved=True)
    prefix = f"/v1/sessions/{sid}/approvals/".encode()
    assert [p.removeprefix(prefix) for p in seen] == [
        b"deploy", b"a%2Fb", b"a%3Fb", b"a%23b", b"a%252Fb", b"%2E%2E", b"%2E", b"...", b"a%20b", b"%C3%BC", b"x%00",
    ]
