"""The ADK session service's contract, on the real services: what ADK's own session tests hold
every ``BaseSessionService`` to (create, get, list and delete; app:, user: and temp: state;
``GetSessionConfig``; partial events; event fields; a stale session object refused), written
here for ``SessionlogSessionService`` so that CI checks it on any machine, and what its SQL
services promise across processes (a new service instance reads what an old one wrote, and a
stale object is refused whichever instance wrote after it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

import sessionlog
from sessionlog.integrations.adk import SessionlogSessionService, catalogue_name, session_name
from stackcorner import StackCorner


def new_service(corner: StackCorner, token: str, writer: str = "adk-tests") -> SessionlogSessionService:
    return SessionlogSessionService(corner.ingest_url, corner.recovery_url, token=token, writer=writer)


@pytest.fixture
def service(corner: StackCorner, token: str) -> Iterator[SessionlogSessionService]:
    service = new_service(corner, token)
    yield service
    service.close()


@pytest.fixture
def app() -> str:
    """An app of the test's own: names are the tenant's, and every test writes to the same one."""
    return f"app-{uuid.uuid4().hex[:8]}"


def delta(**state: object) -> EventActions:
    return EventActions(state_delta=dict(state))


@pytest.mark.anyio
async def test_a_session_is_created_read_listed_and_deleted(service: SessionlogSessionService, app: str) -> None:
    created = await service.create_session(app_name=app, user_id="u1", state={"key": "value"})
    assert (created.app_name, created.user_id, created.state, created.events) == (app, "u1", {"key": "value"}, [])
    assert created.id and created.last_update_time <= time.time()
    assert await service.get_session(app_name=app, user_id="u1", session_id=created.id) == created
    listed = (await service.list_sessions(app_name=app, user_id="u1")).sessions
    assert [(s.id, s.state, s.events) for s in listed] == [(created.id, {"key": "value"}, [])]

    await service.delete_session(app_name=app, user_id="u1", session_id=created.id)
    assert await service.get_session(app_name=app, user_id="u1", session_id=created.id) is None
    assert (await service.list_sessions(app_name=app)).sessions == []
    with pytest.raises(SessionNotFoundError):
        await service.append_event(created, Event(invocation_id="late", author="user"))
    # Deleting what is not there does nothing; the id can be used again, for a new session.
    await service.delete_session(app_name=app, user_id="u1", session_id=created.id)
    again = await service.create_session(app_name=app, user_id="u1", session_id=created.id)
    assert (again.id, again.state, again.events) == (created.id, {}, [])
    assert await service.get_session(app_name=app, user_id="u1", session_id=created.id) == again


@pytest.mark.anyio
async def test_ids_are_the_callers_within_app_and_user(
    service: SessionlogSessionService, app: str, corner: StackCorner, token: str
) -> None:
    mine = await service.create_session(app_name=app, user_id="u1", session_id="s1")
    await service.append_event(mine, Event(invocation_id="inv1", author="user"))
    theirs = await service.create_session(app_name=app, user_id="u2", session_id="s1")
    assert theirs.id == mine.id == "s1"
    got = await service.get_session(app_name=app, user_id="u2", session_id="s1")
    assert got is not None and (got.user_id, got.events) == ("u2", [])
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="u1", session_id="s1")
    # A padded id is its stripped form throughout, and a blank one a fresh id.
    padded = await service.create_session(app_name=app, user_id="u1", session_id="order-42\n", state={"cart": "book"})
    assert padded.id == "order-42"
    assert (await service.get_session(app_name=app, user_id="u1", session_id=" order-42 ")) == padded
    blank = await service.create_session(app_name=app, user_id="u1", session_id="   ")
    assert blank.id.strip() == blank.id != ""
    # The id is a name in the caller's tenant: the session is found by it, as the module says.
    async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as client:
        assert await client.find(session_name(app, "u1", "s1")) is not None
        assert await client.find(session_name(app, "u3", "s1")) is None


@pytest.mark.anyio
async def test_app_user_and_temp_state_have_their_scopes(service: SessionlogSessionService, app: str) -> None:
    s1 = await service.create_session(
        app_name=app, user_id="u1", session_id="s1", state={"app:k1": "v1", "user:k1": "v1", "sk1": "v1"}
    )
    await service.append_event(
        s1,
        Event(invocation_id="inv1", author="user", actions=delta(**{"app:k2": "v2", "user:k2": "v2", "sk2": "v2", "temp:t": "x"})),
    )
    # The temp: key reached the in-memory session, not the stored event.
    assert s1.state["temp:t"] == "x" and "temp:t" not in s1.events[-1].actions.state_delta
    s1b = await service.create_session(app_name=app, user_id="u1", session_id="s1b")
    assert s1b.state == {"app:k1": "v1", "app:k2": "v2", "user:k1": "v1", "user:k2": "v2"}
    s2 = await service.create_session(app_name=app, user_id="u2", session_id="s2")
    assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
    other = await service.create_session(app_name=f"{app}-other", user_id="u1", session_id="s1")
    assert other.state == {}
    got = await service.get_session(app_name=app, user_id="u1", session_id="s1")
    assert got is not None
    assert got.state == {"app:k1": "v1", "app:k2": "v2", "user:k1": "v1", "user:k2": "v2", "sk1": "v1", "sk2": "v2"}
    assert "temp:t" not in got.events[0].actions.state_delta
    assert await service.get_user_state(app_name=app, user_id="u1") == {"k1": "v1", "k2": "v2"}
    assert await service.get_user_state(app_name=app, user_id="u2") == {}
    assert await service.get_user_state(app_name=f"{app}-other", user_id="u1") == {}

    # A dict value replaces the stored one; None is stored, not a deletion; others keep their types.
    s3 = await service.create_session(app_name=app, user_id="u3", state={"profile": {"name": "ada", "role": "admin"}, "flag": False})
    await service.append_event(s3, Event(invocation_id="inv", author="user", actions=delta(profile={"name": "bob"}, **{"user:pref": None})))
    again = await service.get_session(app_name=app, user_id="u3", session_id=s3.id)
    assert again is not None and again.state == {
        "profile": {"name": "bob"}, "flag": False, "user:pref": None, "app:k1": "v1", "app:k2": "v2"
    }


@pytest.mark.anyio
async def test_get_session_config_picks_recent_and_later_events(service: SessionlogSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    base = float(int(time.time()))
    for i in range(1, 6):
        await service.append_event(session, Event(author="user", invocation_id=f"inv{i}", timestamp=base + i))

    async def timestamps(config: GetSessionConfig | None) -> list[float]:
        got = await service.get_session(app_name=app, user_id="u", session_id=session.id, config=config)
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await timestamps(None) == [base + i for i in range(1, 6)]
    assert await timestamps(GetSessionConfig(num_recent_events=0)) == []
    assert await timestamps(GetSessionConfig(num_recent_events=3)) == [base + 3, base + 4, base + 5]
    assert await timestamps(GetSessionConfig(after_timestamp=base + 4)) == [base + 4, base + 5]
    assert await timestamps(GetSessionConfig(after_timestamp=base + 50)) == []
    assert await timestamps(GetSessionConfig(after_timestamp=base + 4, num_recent_events=3)) == [base + 4, base + 5]
    assert await timestamps(GetSessionConfig(after_timestamp=base + 2, num_recent_events=1)) == [base + 5]


@pytest.mark.anyio
async def test_partial_events_are_not_stored(service: SessionlogSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    await service.append_event(session, Event(author="model", partial=True, content=types.Content(parts=[types.Part(text="Hel")])))
    await service.append_event(session, Event(author="model", content=types.Content(parts=[types.Part(text="Hello")])))
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and [e.content.parts[0].text for e in got.events if e.content and e.content.parts] == ["Hello"]
    assert len(session.events) == 1


@pytest.mark.anyio
async def test_every_event_field_round_trips(service: SessionlogSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    picture = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x89PNG\x00\xff", mime_type="image/png")])
    full = Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hello"), types.Part(function_call=types.FunctionCall(id="c1", name="f", args={"x": 1}))]),
        turn_complete=True,
        actions=EventActions(
            artifact_delta={"file": 0},
            transfer_to_agent="agent",
            escalate=True,
            requested_tool_confirmations={"c1": ToolConfirmation(hint="sure?", confirmed=False, payload={"id": "album_1"})},
            state_delta={"k": [1, 2.5, "three", None, {"nested": True}]},
        ),
        long_running_tool_ids={"c1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(
            web_search_queries=["query"], search_entry_point=types.SearchEntryPoint(sdk_blob=b"\x00blob")
        ),
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=1, candidates_token_count=1, total_token_count=2),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom_key": "custom_value"},
        timestamp=1700000000.123456,
        input_transcription=types.Transcription(text="in", finished=True),
        output_transcription=types.Transcription(text="out", finished=True),
    )
    await service.append_event(session, full)
    await service.append_event(session, Event(invocation_id="inv", author="user", content=picture, timestamp=1730613600.0))
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got == session, "the stored session is the in-memory one: every field, the timestamps exactly"
    assert got.events[1].content == picture
    assert got.last_update_time == 1730613600.0


@pytest.mark.anyio
async def test_listing_is_by_app_and_user_oldest_update_first(service: SessionlogSessionService, app: str) -> None:
    for sid in ("a", "b", "c"):
        await service.create_session(app_name=app, user_id="u1", session_id=sid, state={"key": sid})
    await service.create_session(app_name=app, user_id="u2", session_id="d")
    a = await service.get_session(app_name=app, user_id="u1", session_id="a")
    assert a is not None
    await service.append_event(a, Event(invocation_id="later", author="user", timestamp=time.time() + 1))
    mine = (await service.list_sessions(app_name=app, user_id="u1")).sessions
    assert [(s.id, s.state) for s in mine] == [("b", {"key": "b"}), ("c", {"key": "c"}), ("a", {"key": "a"})]
    assert all(s.events == [] for s in mine)
    everyone = (await service.list_sessions(app_name=app)).sessions
    assert sorted((s.user_id, s.id) for s in everyone) == [("u1", "a"), ("u1", "b"), ("u1", "c"), ("u2", "d")]
    assert (await service.list_sessions(app_name=app, user_id="nobody")).sessions == []


@pytest.mark.anyio
async def test_a_stale_session_object_is_refused(service: SessionlogSessionService, app: str) -> None:
    original = await service.create_session(app_name=app, user_id="u")
    await service.append_event(original, Event(invocation_id="inv1", author="user", actions=delta(sk1="v1")))
    latest = await service.get_session(app_name=app, user_id="u", session_id=original.id)
    assert latest is not None
    await service.append_event(latest, Event(invocation_id="inv2", author="user", actions=delta(sk2="v2")))
    with pytest.raises(StaleSessionError):
        await service.append_event(original, Event(invocation_id="inv3", author="user", actions=delta(sk3="v3")))
    final = await service.get_session(app_name=app, user_id="u", session_id=original.id)
    assert final is not None
    assert [e.invocation_id for e in final.events] == ["inv1", "inv2"]
    assert final.state == {"sk1": "v1", "sk2": "v2"}
    # A copy made without a marker is judged by its last update time.
    copy = final.model_copy(deep=True)
    copy._storage_update_marker = None
    copy.last_update_time -= 10
    with pytest.raises(StaleSessionError):
        await service.append_event(copy, Event(invocation_id="inv4", author="user"))


@pytest.mark.anyio
async def test_another_service_instance_reads_what_one_wrote_and_a_stale_writer_is_refused(
    corner: StackCorner, token: str, app: str
) -> None:
    first = new_service(corner, token, writer="adk-first")
    second = new_service(corner, token, writer="adk-second")
    try:
        session = await first.create_session(app_name=app, user_id="u", state={"user:name": "ada"})
        await first.append_event(session, Event(invocation_id="inv1", author="user", actions=delta(sk="v1")))
        read = await second.get_session(app_name=app, user_id="u", session_id=session.id)
        assert read == session, "a new instance reads what the old one wrote, as it wrote it"
        # The second instance writes (it takes the session over: the first is fenced) ...
        await second.append_event(read, Event(invocation_id="inv2", author="user", actions=delta(sk="v2")))
        # ... so the first's copy is stale, though the first was the writer.
        with pytest.raises(StaleSessionError):
            await first.append_event(session, Event(invocation_id="inv3", author="user"))
        # A fresh copy is not: the first takes the session back over and appends.
        fresh = await first.get_session(app_name=app, user_id="u", session_id=session.id)
        assert fresh is not None
        await first.append_event(fresh, Event(invocation_id="inv4", author="user"))
        with pytest.raises(StaleSessionError):
            await second.append_event(read, Event(invocation_id="inv5", author="user"))
    finally:
        first.close()
        second.close()
    third = new_service(corner, token, writer="adk-third")
    try:
        final = await third.get_session(app_name=app, user_id="u", session_id=session.id)
        assert final is not None
        assert [e.invocation_id for e in final.events] == ["inv1", "inv2", "inv4"]
        assert final.state == {"user:name": "ada", "sk": "v2"}
        assert await third.get_user_state(app_name=app, user_id="u") == {"name": "ada"}
    finally:
        third.close()


@pytest.mark.anyio
async def test_app_and_user_deltas_a_writer_stopped_before_are_read_and_written_by_the_next(
    corner: StackCorner, token: str, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = new_service(corner, token, writer="adk-stops")
    session = await first.create_session(app_name=app, user_id="u1", session_id="s1")

    async def unreachable(app_name: str, events: list[object]) -> None:
        raise sessionlog.TransportError("the ingest service did not answer", sent=False)

    # The process stops between the event (in the session's log) and its app:/user: deltas.
    monkeypatch.setattr(first, "_catalogue_append", unreachable)
    with pytest.raises(sessionlog.TransportError):
        await first.append_event(session, Event(invocation_id="inv1", author="user", actions=delta(**{"app:k": "v", "user:u": "w", "sk": 1})))
    first.close()

    second = new_service(corner, token, writer="adk-next")
    try:
        # A reader of the session sees what its log holds, before anyone writes the deltas ...
        read = await second.get_session(app_name=app, user_id="u1", session_id="s1")
        assert read is not None and read.state == {"app:k": "v", "user:u": "w", "sk": 1}
        assert await second.get_user_state(app_name=app, user_id="u1") == {}
        # ... and the session's next writer writes them, once, for every session to read.
        await second.append_event(read, Event(invocation_id="inv2", author="user"))
        other = await second.create_session(app_name=app, user_id="u1", session_id="s2")
        assert other.state == {"app:k": "v", "user:u": "w"}
        assert await second.get_user_state(app_name=app, user_id="u1") == {"u": "w"}
        async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as client:
            catalogue = await client.find(catalogue_name(app))
            assert catalogue is not None
            records = [e async for e in client.events(catalogue, kinds=["FrameworkStateSaved"])]
        assert [(e.data or {}).get("key") for e in records].count("app-state") == 1
    finally:
        second.close()
