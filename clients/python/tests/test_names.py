"""Session names (issue 36): a name finds a session within the caller's tenant, so two tenants
using the same name get two sessions, and neither can take, find or confirm the other's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

import sessionlog
from sessionlog import errors
from stackcorner import StackCorner, wait_for


@pytest.fixture(scope="module")
def tenants(corner: StackCorner) -> Iterator[tuple[sessionlog.Client, sessionlog.Client]]:
    """Clients of two tenants, each a harness that reads."""
    acme, globex = (
        sessionlog.Client(corner.ingest_url, corner.recovery_url, token=corner.token("harness", "reader", tenant=t))
        for t in ("acme", "globex")
    )
    with acme, globex:
        yield acme, globex


def fresh(prefix: str = "thread") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:8]}"


def test_a_name_finds_its_session_and_is_taken_once(tenants: tuple[sessionlog.Client, sessionlog.Client]) -> None:
    acme, _ = tenants
    name = fresh()
    assert acme.find(name) is None
    opened = acme.create("py-names", "named", name=name)
    assert opened.name == name and opened.epoch == 1
    assert acme.find(name) == opened.session_id
    with pytest.raises(errors.NameTaken) as taken:
        acme.create("py-names", "the same name again", name=name)
    assert (taken.value.status, taken.value.code) == (409, "name_taken")
    assert taken.value.session_id == opened.session_id, "the refusal names the session the name points to"
    again = acme.create_or_find("py-names", name)
    assert not again.created and again.opened is None and again.session_id == opened.session_id


def test_two_tenants_using_one_name_get_two_sessions_and_see_only_their_own(
    tenants: tuple[sessionlog.Client, sessionlog.Client],
) -> None:
    acme, globex = tenants
    name = fresh()
    mine = acme.create_or_find("py-names", name, "acme's")
    assert mine.created
    # globex neither finds acme's session nor is refused the name: it gets a session of its own.
    assert globex.find(name) is None
    theirs = globex.create_or_find("py-names", name, "globex's")
    assert theirs.created and theirs.session_id != mine.session_id
    assert acme.find(name) == mine.session_id and globex.find(name) == theirs.session_id
    # Nor can either reach the other's session by its id.
    with pytest.raises(errors.UnknownSession):
        globex.session(mine.session_id)
    with pytest.raises(errors.UnknownSession):
        acme.claim(theirs.session_id, "py-names")


@pytest.mark.anyio
async def test_the_async_client_names_alike(corner: StackCorner) -> None:
    token = corner.token("harness", "reader", tenant="acme")
    name = fresh()
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as c:
        assert await c.find(name) is None
        made = await c.create_or_find("py-names", name, "async")
        assert made.created and made.opened is not None and made.opened.name == name
        assert await c.find(name) == made.session_id
        found = await c.create_or_find("py-names", name)
        assert (found.created, found.session_id) == (False, made.session_id)
        with pytest.raises(errors.NameTaken):
            await c.create("py-names", name=name)


def test_open_named_starts_then_takes_over(tenants: tuple[sessionlog.Client, sessionlog.Client]) -> None:
    acme, _ = tenants
    name = fresh()
    first = sessionlog.Session.open_named(acme, name, agent="py-names")
    assert first.bundle is None, "started"
    first.user_request("before the takeover")
    second = sessionlog.Session.open_named(acme, name, agent="py-names", writer="py-names-2")
    assert second.bundle is not None and second.session_id == first.session_id
    assert second.ledger.epoch > first.ledger.epoch
    with pytest.raises(errors.Fenced):
        first.user_request("fenced")
    second.user_request("after the takeover")


def test_an_erased_sessions_name_is_free_again(corner: StackCorner, tenants: tuple[sessionlog.Client, sessionlog.Client]) -> None:
    acme, _ = tenants
    name = fresh()
    first = acme.create_or_find("py-names", name, "to be erased")
    operator = corner.token("operator", "reader", tenant="acme")
    erased = httpx.post(
        f"{corner.recovery_url}/v1/sessions/{first.session_id}/erase",
        json={"reason": "the user asked"},
        headers={"authorization": f"Bearer {operator}"},
        timeout=30,
    )
    assert erased.status_code == 200, erased.text
    wait_for("the erased session's name to be free", 30, lambda: acme.find(name) is None or None)
    again = acme.create_or_find("py-names", name, "after the erasure")
    assert again.created and again.session_id != first.session_id
    assert acme.find(name) == again.session_id


class LoseFirstCreate(httpx.BaseTransport):
    """Delivers every request, but loses the answer to the first create (the session is started)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/sessions" and self.lost == 0:
            response.read()
            self.lost += 1
            raise httpx.ReadTimeout("answer lost", request=request)
        return response


def test_a_named_start_whose_answer_was_lost_writes_on(corner: StackCorner) -> None:
    token = corner.token("harness", "reader", tenant="acme")
    transport = LoseFirstCreate()
    name = fresh()
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, transport=transport) as c:
        session = sessionlog.Session.start(c, "py-names", name=name)
        assert transport.lost == 1
        assert c.find(name) == session.session_id, "the retry took the same session, not a second one"
        session.user_request("written after the lost answer")
        # create_or_find's retry finds the name taken by the session it started itself.
        other = fresh()
        transport.lost = 0
        found = c.create_or_find("py-names", other)
        assert transport.lost == 1 and not found.created and c.find(other) == found.session_id


@pytest.mark.parametrize("odd", ["../x", "x/../../y", "x?name=y", "x#y", "x%2Fy", "x&name=y", " x", "xü"])
def test_a_name_is_sent_whole(tenants: tuple[sessionlog.Client, sessionlog.Client], odd: str) -> None:
    """A name travels in the query and the body: whatever it holds, it names one session and
    finds only that one (a name made of another name and a query finds neither)."""
    acme, _ = tenants
    plain = fresh()
    plain_id = acme.create("py-names", name=plain).session_id
    name = odd.replace("x", plain).replace("y", plain)
    assert acme.find(name) is None
    made = acme.create("py-names", name=name)
    assert made.name == name and made.session_id != plain_id
    assert acme.find(name) == made.session_id and acme.find(plain) == plain_id


@pytest.mark.parametrize("bad", ["", "nul\x00", "line\nbreak", "n" * 513, "ü" * 257], ids=["empty", "nul", "newline", "513 bytes", "514 bytes of ü"])
def test_a_name_the_service_does_not_take_is_refused(tenants: tuple[sessionlog.Client, sessionlog.Client], bad: str) -> None:
    acme, _ = tenants
    with pytest.raises(errors.Unprocessable) as refused:
        acme.create("py-names", name=bad)
    assert refused.value.status == 422
    # A lookup of such a name finds nothing, whether the service says so or refuses it.
    try:
        assert acme.find(bad) is None
    except errors.ProblemError as e:
        assert 400 <= e.status < 500, e


def test_a_name_of_512_bytes_is_taken(tenants: tuple[sessionlog.Client, sessionlog.Client]) -> None:
    acme, _ = tenants
    name = fresh("long")
    name += "-" * (512 - len(name))
    assert len(name.encode()) == 512
    assert acme.create("py-names", name=name).name == name


def test_the_name_routes_as_the_contract_has_them_without_a_server() -> None:
    """What the client sends and how it reads the answers, against a fake service: a name
    travels whole in the query and the body, ``unknown_name`` is no session, ``name_taken``
    is the session the name points to, and ``create_or_find`` leaves the id to the service."""
    holder = str(uuid.uuid4())
    seen: list[tuple[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            name = request.url.params["name"]
            seen.append(("find", name))
            if name.startswith("free"):
                return httpx.Response(404, json={"code": "unknown_name", "detail": "no such name"})
            return httpx.Response(200, json={"session_id": holder, "name": name})
        body = json.loads(request.content)
        seen.append(("create", body["name"]))
        # The service picks the id: so it finishes a create of the name that died half-way.
        assert "session_id" not in body
        if body["name"] == "taken":
            return httpx.Response(409, json={"code": "name_taken", "detail": "taken", "session_id": holder})
        if body["name"] == "taken, says nothing more":
            return httpx.Response(409, json={"code": "name_taken", "detail": "taken"})
        ack = {"seq": 1, "event_id": "e", "partition": 0, "offset": 0}
        opened = {"session_id": str(uuid.uuid4()), "epoch": 1, "next_seq": 2, "event": ack, "name": body["name"]}
        return httpx.Response(201, json=opened)

    odd = "x&name=y?z#w/../%2F"
    with sessionlog.Client("http://ingest", "http://recovery", transport=httpx.MockTransport(answer)) as c:
        assert c.find("free" + odd) is None
        assert c.find(odd) == holder
        taken = c.create_or_find("py-names", "taken")
        assert (taken.session_id, taken.opened, taken.created) == (holder, None, False)
        made = c.create_or_find("py-names", odd)
        assert made.created and made.opened is not None and made.opened.name == odd and made.session_id != holder
        with pytest.raises(errors.NameTaken):
            c.create_or_find("py-names", "taken, says nothing more")
        with pytest.raises(errors.NameTaken) as refused:
            c.create("py-names", name="taken")  # sends no id either: none was given
        assert refused.value.session_id == holder
    assert seen == [
        ("find", "free" + odd), ("find", odd), ("create", "taken"), ("create", odd),
        ("create", "taken, says nothing more"), ("create", "taken"),
    ]
