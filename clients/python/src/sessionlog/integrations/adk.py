"""Google's Agent Development Kit (ADK) on sessionlog: ``SessionlogSessionService`` is a
``BaseSessionService`` whose sessions are sessionlog sessions, so an ADK agent's history has the
log's guarantees (acknowledged means durable; a new process on any machine reads what an old one
wrote), and its function tools can be durable (recorded before and after they run, never run
twice once their result is recorded).

Names. An ADK session ``(app_name, user_id, session_id)`` is the sessionlog session named
``adk:{app}/{user}/{session}`` (each part percent-escaped, so the name is unambiguous and holds
no control character) within the caller's tenant: the id the caller chose is kept, two users'
sessions of the same id are two sessions, and two tenants never see each other's. An id is
stripped of surrounding whitespace (as ADK's in-memory and SQLite services do); an id not given
(or blank) is a fresh UUID. A session created again after a delete takes the name with a
generation suffix (``#2``, ``#3``...): a sessionlog name points to one session for good.

Events. Each ADK event is one ``FrameworkStateSaved`` event (framework ``adk``, key ``event``)
whose sealed state is the event's JSON as ADK's SQL services store it (``model_dump_json``,
``None`` fields left out), so every field round-trips: content with its bytes, actions, usage,
grounding, transcriptions, custom metadata, the timestamp to the microsecond. A partial
(streaming) event is not stored, as ADK's services do not store one; ``temp:`` keys are applied
to the in-memory session and trimmed from the stored event. The session's first record (key
``session``) holds its scope of the initial state and its creation time.

State. ``app:`` and ``user:`` keys live in the app's catalogue: one sessionlog session per app
(named ``adk-app:{app}``) whose records are the app's state deltas, its users' state deltas and
the sessions created and deleted in it (for ``list_sessions``). A session reads its app's and
its user's state merged with its own, as ADK's services merge them. The event is written first,
then its ``app:``/``user:`` deltas to the catalogue, naming the event; a writer that stops in
between leaves them owed: readers of the session see them, and its next writer writes them (see
``Owed``; docs/design.md, "Google ADK").

Delete ends and hides: ``delete_session`` appends a ``deleted`` record, closes the session
(``Cancelled``) and unlists it; reads answer ``None`` from then on, and an append to it raises
``SessionNotFoundError``. The log keeps its events: ``sessionlog erase`` destroys their text.

Concurrency. A session's writer is whoever claimed it last (its epoch): a service instance takes
a session over on its first write to it. ADK's stale-session check maps onto the log: a session
object carries the seq of the last ADK record it saw (``_storage_update_marker``), and an append
from an object whose seq is not the session's latest raises ``StaleSessionError``, whichever
process wrote the later one. The check and the append are atomic because the append is refused
(``fenced``) once any other writer claimed the session after this one: the service then takes it
over again, reads the log, and checks again.

Its work runs on an event loop of its own, in a thread of its own, so ADK's ``Runner.run`` (a
new loop per call) and ``Runner.run_async`` both work across turns; ``close`` stops it.

    service = SessionlogSessionService(token=TOKEN)   # roles harness, reader

    @service.durable_tool(effect="NonIdempotent")
    async def refund(order: str) -> str: ...

    agent = LlmAgent(name="support", model=MODEL, tools=[refund])
    runner = Runner(app_name="support", agent=agent, session_service=service)
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.adk.utils.context_utils import find_context_parameter
from pydantic_core import to_jsonable_python

from .. import errors
from ..client import AsyncClient, Credential
from ..ledger import Occurrences, SessionLedger
from ..models import EffectClass, HistoryEvent, SessionView
from ..session import AsyncSession, Event, await_projected, framework_state
from ..tools import durable_tool as _durable_tool
from ._loop import AdapterLoop, LoopWriter
from ._records import framework_records

T = TypeVar("T")

FRAMEWORK = "adk"
#: Keys of an ADK session's records (plain in the log: constants, never text a user chose).
CREATED_KEY = "session"
EVENT_KEY = "event"
DELETED_KEY = "deleted"
#: Keys of an app catalogue's records.
REGISTERED_KEY = "registered"
UNREGISTERED_KEY = "unregistered"
APP_STATE_KEY = "app-state"
USER_STATE_KEY = "user-state"
#: A sessionlog name's limit, in bytes.
NAME_LIMIT = 512
#: Statuses of a session that has ended (it reads as deleted).
_ENDED = {"completed", "failed", "cancelled", "erased"}
#: The reason a deleted session's close records.
DELETE_REASON = "deleted by the ADK session service"
_STALE = (
    "The session has been modified in storage since it was loaded (another writer appended to it"
    " in sessionlog). Please reload the session before appending more events."
)


def _part(value: str) -> str:
    return quote(value, safe="")


def _checked(name: str) -> str:
    if len(name.encode()) > NAME_LIMIT:
        raise ValueError(f"the sessionlog name {name[:60]!r}... is over {NAME_LIMIT} bytes: use shorter app, user and session ids")
    return name


def session_name(app_name: str, user_id: str, session_id: str, generation: int = 1) -> str:
    """The sessionlog name of an ADK session (unique within the caller's tenant); a session
    created again after a delete is the next ``generation``."""
    name = "adk:" + "/".join(_part(p) for p in (app_name, user_id, session_id))
    return _checked(name if generation == 1 else f"{name}#{generation}")


def catalogue_name(app_name: str) -> str:
    """The sessionlog name of an app's catalogue: its ``app:`` and ``user:`` state, and its sessions."""
    return _checked("adk-app:" + _part(app_name))


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as JSON holds it; a value with no JSON form (a callable) as its text, as ADK's
    SQL services store it."""
    safe = to_jsonable_python(state, fallback=str, bytes_mode="base64")
    return safe if isinstance(safe, dict) else {}


@dataclass
class _Scopes:
    """A state delta split by scope, prefixes removed from ``app:`` and ``user:`` keys; ``temp:``
    keys are left out."""

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(delta: dict[str, Any]) -> _Scopes:
        scopes = _Scopes()
        for key, value in delta.items():
            if key.startswith(State.APP_PREFIX):
                scopes.app[key.removeprefix(State.APP_PREFIX)] = value
            elif key.startswith(State.USER_PREFIX):
                scopes.user[key.removeprefix(State.USER_PREFIX)] = value
            elif not key.startswith(State.TEMP_PREFIX):
                scopes.session[key] = value
        return scopes


@dataclass(frozen=True)
class Owed:
    """What an ADK session's record owes its app's catalogue: the record's ``app:`` and ``user:``
    deltas and, for its first record, the session's listing. ``source`` (the record's marker)
    names them in the catalogue, so a writer that takes the session over finds whether they got
    there (the record is written first: a crash in between leaves them owed)."""

    app_name: str
    user_id: str
    source: str
    scopes: _Scopes
    #: The ADK session id to list, for the session's first record.
    listed: str | None = None

    def events(self, session_id: str) -> list[Event]:
        found = []
        if self.listed is not None:
            listing = {"session": session_id, "user": self.user_id, "id": self.listed, "source": self.source}
            found.append(_state_event(REGISTERED_KEY, listing))
        if self.scopes.app:
            found.append(_state_event(APP_STATE_KEY, {"delta": self.scopes.app, "source": self.source}))
        if self.scopes.user:
            delta = {"user": self.user_id, "delta": self.scopes.user, "source": self.source}
            found.append(_state_event(USER_STATE_KEY, delta))
        return found


@dataclass
class StoredSession:
    """An ADK session folded from its records (pure: no I/O)."""

    session_id: str
    #: The seq of its last ADK record: what a session object's marker names.
    revision: int = 0
    created: bool = False
    deleted: bool = False
    state: dict[str, Any] = field(default_factory=dict)
    events: list[AdkEvent] = field(default_factory=list)
    last_update_time: float = 0.0
    #: What its last record owes the app's catalogue, if anything.
    owed: Owed | None = None

    @staticmethod
    def fold(session_id: str, events: Sequence[HistoryEvent]) -> StoredSession:
        stored = StoredSession(session_id)
        app_name = user_id = ""
        for event, key, value in framework_records(events, FRAMEWORK, "ADK record"):
            stored.revision = event.seq
            source = marker_of(session_id, event.seq)
            stored.owed = None
            if key == CREATED_KEY:
                stored.created = True
                app_name, user_id = str(value["app"]), str(value["user"])
                stored.state.update(value["state"])
                stored.last_update_time = float(value["time"])
                scopes = _Scopes(app=value.get("app_state", {}), user=value.get("user_state", {}))
                stored.owed = Owed(app_name, user_id, source, scopes, listed=str(value["id"]))
            elif key == EVENT_KEY:
                adk_event = AdkEvent.model_validate(value)
                stored.events.append(adk_event)
                scopes = _Scopes.of(adk_event.actions.state_delta if adk_event.actions else {})
                stored.state.update(scopes.session)
                stored.last_update_time = adk_event.timestamp
                if scopes.app or scopes.user:
                    stored.owed = Owed(app_name, user_id, source, scopes)
            elif key == DELETED_KEY:
                stored.deleted = True
        return stored

    @property
    def marker(self) -> str:
        """The revision marker a session object carries (see the module's documentation)."""
        return marker_of(self.session_id, self.revision)


def marker_of(session_id: str, revision: int) -> str:
    """The marker of a sessionlog session at its ADK record ``revision``."""
    return f"{session_id}@{revision}"


@dataclass
class Catalogue:
    """An app's catalogue folded from its records (pure: no I/O)."""

    app_state: dict[str, Any] = field(default_factory=dict)
    user_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Listed sessions: the sessionlog session id, by (user, ADK session id).
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The session records whose deltas and listings are here (see ``Owed``).
    sources: set[str] = field(default_factory=set)

    @staticmethod
    def fold(events: Sequence[HistoryEvent]) -> Catalogue:
        catalogue = Catalogue()
        for _, key, value in framework_records(events, FRAMEWORK, "ADK record"):
            if "source" in value:
                catalogue.sources.add(str(value["source"]))
            if key == APP_STATE_KEY:
                catalogue.app_state.update(value["delta"])
            elif key == USER_STATE_KEY:
                catalogue.user_states.setdefault(str(value["user"]), {}).update(value["delta"])
            elif key == REGISTERED_KEY:
                catalogue.sessions[str(value["session"])] = (str(value["user"]), str(value["id"]))
            elif key == UNREGISTERED_KEY:
                catalogue.sessions.pop(str(value["session"]), None)
        return catalogue

    def with_owed(self, owed: Owed | None) -> Catalogue:
        """The catalogue as a reader of the session that owes ``owed`` sees it: with its deltas
        when they are not here yet (its writer stopped before writing them; the session's next
        writer does)."""
        if owed is None or owed.source in self.sources:
            return self
        users = copy.deepcopy(self.user_states)
        users.setdefault(owed.user_id, {}).update(owed.scopes.user)
        return Catalogue({**self.app_state, **owed.scopes.app}, users, self.sessions, self.sources | {owed.source})

    def merged(self, user_id: str, session_state: dict[str, Any]) -> dict[str, Any]:
        """A session's state as ADK reads it: its own, the app's and its user's, prefixed."""
        state: dict[str, Any] = copy.deepcopy(session_state)  # a copy the caller may change
        state.update({State.APP_PREFIX + k: v for k, v in self.app_state.items()})
        state.update({State.USER_PREFIX + k: v for k, v in self.user_states.get(user_id, {}).items()})
        return state


def _state_event(key: str, value: dict[str, Any]) -> Event:
    return framework_state(FRAMEWORK, key, json.dumps(value))


def _stored_event(event: AdkEvent) -> str:
    """The event as stored: its JSON without ``None`` fields, its state delta made JSON."""
    if event.actions and event.actions.state_delta:
        actions = event.actions.model_copy(update={"state_delta": _json_safe(event.actions.state_delta)})
        event = event.model_copy(update={"actions": actions})
    return event.model_dump_json(exclude_none=True)


def _filtered(events: list[AdkEvent], config: GetSessionConfig | None) -> list[AdkEvent]:
    """The events ``config`` asks for, in log order: those at or after ``after_timestamp``, the
    latest ``num_recent_events`` of them."""
    if config is None:
        return events
    if config.after_timestamp is not None:
        events = [e for e in events if e.timestamp >= config.after_timestamp]
    if config.num_recent_events is not None:
        events = events[max(0, len(events) - config.num_recent_events) :] if config.num_recent_events > 0 else []
    return events


class SessionlogSessionService(BaseSessionService):
    """An ADK session service on sessionlog (see the module's documentation).

    ``writer`` names this service's writer of the sessions it takes over; ``agent`` is the
    agent sessions are started for (the app name when not given), which the wake component hands
    them to. The credential needs the roles harness and reader.
    """

    def __init__(
        self,
        ingest_url: str = "http://127.0.0.1:8090",
        recovery_url: str = "http://127.0.0.1:8095",
        *,
        token: Credential | None = None,
        writer: str = "adk",
        agent: str | None = None,
        wait_for: float = 30.0,
    ) -> None:
        self.writer_name = writer
        self.agent = agent
        self.wait_for = wait_for
        self._client = AsyncClient(ingest_url, recovery_url, token=token)
        # By sessionlog session id (a catalogue's too): used on the service's loop only.
        self._writers: dict[str, AsyncSession] = {}
        # The seq of the last ADK record each held session has, and its last update time.
        self._revisions: dict[str, int] = {}
        self._updated: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Durable tool calls of each session, counted across this service's takeovers of it.
        self._occurrences: dict[str, Occurrences] = {}
        # What a held session's last record owes its app's catalogue, until written.
        self._owed: dict[str, Owed] = {}
        self._loop = AdapterLoop(self._client, name="sessionlog-adk", what="the ADK session service")

    def close(self) -> None:
        """Closes the connections and stops the service's loop (once; later calls do nothing).
        A call after it raises ``SessionlogError``, as does one still running then."""
        self._loop.close(timeout=self.wait_for)

    async def _on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs ``work`` on the service's loop, awaited from the caller's."""
        return await self._loop.wait(work)

    # -- BaseSessionService ------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        return await self._on_loop(self._create(app_name, user_id, state or {}, session_id))

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        return await self._on_loop(self._get(app_name, user_id, session_id.strip(), config))

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self._on_loop(self._list(app_name, user_id))

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._on_loop(self._delete(app_name, user_id, session_id.strip()))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        catalogue = await self._on_loop(self._catalogue(app_name))
        return dict(catalogue.user_states.get(user_id, {}))

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        # temp: keys reach the in-memory session (later agents of this invocation read them),
        # never the log.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        marker = await self._on_loop(self._append(session, event))
        session.last_update_time = event.timestamp
        session._storage_update_marker = marker
        return self._commit_event_to_session(session, event)

    def durable_tool(
        self, *, effect: EffectClass, key: Callable[..., str] | None = None, name: str | None = None
    ) -> Callable[[Callable[..., Any]], FunctionTool]:
        """Makes a function an ADK ``FunctionTool`` whose calls are durable in the session the
        agent runs in (see ``sessionlog.tools``): its request is recorded before it runs and its
        result after; run again (a runner resumed after a crash, the model asking again), a call
        whose result is recorded answers it and does not run, and an unrecorded ``NonIdempotent``
        call raises ``CallInDoubt`` until an operator records what it did. Calls are the n-th
        call of the tool with equal arguments since this service took the session over (a
        process that takes over after a crash counts from the start), or named by ``key``."""

        def wrap(fn: Callable[..., Any]) -> FunctionTool:
            return FunctionTool(_DurableFunction(self, fn, effect=effect, key=key, name=name).function())

        return wrap

    # -- on the service's loop ---------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _agent(self, app_name: str) -> str:
        return self.agent or app_name

    async def _read(self, session_id: str, view: SessionView | None = None) -> list[HistoryEvent]:
        """The session's framework records through its last event in the log (``view``: the
        session rebuilt, when the caller has it)."""
        view = view or await self._client.session(session_id)
        last = int(view.state.get("last_seq", 0))
        if last < 1:
            return []
        await await_projected(self._client, session_id, last, self.wait_for)
        return [
            e
            async for e in self._client.events(session_id, kinds=["FrameworkStateSaved"], to_seq=last, limit=1000)
        ]

    async def _walk(self, app_name: str, user_id: str, session_id: str) -> tuple[StoredSession | None, int]:
        """The live generation of an ADK session, folded (``None`` when there is none), and the
        generation a new session of that id would take."""
        generation = 1
        while True:
            sid = await self._client.find(session_name(app_name, user_id, session_id, generation))
            if sid is None:
                return None, generation
            try:
                view = await self._client.session(sid)
            except errors.UnknownSession:
                # Named, not started yet (a create between its two steps): the create finishes it.
                return StoredSession(sid), generation
            if view.status not in _ENDED:
                stored = StoredSession.fold(sid, await self._read(sid, view))
                if not stored.deleted:
                    return stored, generation
            generation += 1

    async def _catalogue(self, app_name: str) -> Catalogue:
        sid = await self._client.find(catalogue_name(app_name))
        if sid is None:
            return Catalogue()
        try:
            return Catalogue.fold(await self._read(sid))
        except errors.UnknownSession:
            return Catalogue()

    async def _catalogue_append(self, app_name: str, events: list[Event]) -> None:
        """Appends ``events`` to the app's catalogue, taking it over if another process wrote
        since (its appends are fenced then)."""
        if not events:
            return
        name = catalogue_name(app_name)
        async with self._lock(name):
            for _ in range(5):
                writer = self._writers.get(name)
                if writer is None:
                    writer = await AsyncSession.open_named(
                        self._client, name, agent=self._agent(app_name), writer=self.writer_name,
                        title=f"ADK app {app_name}", wait_for=self.wait_for,
                    )
                    self._writers[name] = writer
                try:
                    await writer.append_all(events)
                    return
                except errors.Fenced:
                    del self._writers[name]
        raise errors.SessionlogError(f"the ADK catalogue of app {app_name!r} is being taken over by other processes; try again")

    async def _take_over(self, session_id: str) -> AsyncSession:
        """This service's writer of ``session_id``: held, or taken over (the next epoch), its
        revision read from the log after the claim. ``SessionNotFoundError`` for a session
        deleted or ended."""
        writer = self._writers.get(session_id)
        if writer is not None:
            return writer
        try:
            writer = await AsyncSession.resume(self._client, session_id, self.writer_name, wait_for=self.wait_for)
        except errors.SessionEnded:
            raise SessionNotFoundError(f"Session {session_id} was deleted.") from None
        stored = StoredSession.fold(session_id, await self._read(session_id))
        if stored.deleted:
            raise SessionNotFoundError(f"Session {session_id} was deleted.")
        self._writers[session_id] = writer
        self._revisions[session_id] = stored.revision
        self._updated[session_id] = stored.last_update_time
        if stored.owed is not None and session_id not in self._owed:
            # A writer before this one may have stopped between the record and its catalogue
            # records: they are written now, unless the catalogue has them.
            if stored.owed.source not in (await self._catalogue(stored.owed.app_name)).sources:
                self._owed[session_id] = stored.owed
        await self._pay(session_id)
        return writer

    async def _pay(self, session_id: str) -> None:
        """Writes what the session's last record owes its app's catalogue, if anything (see
        ``Owed``): kept until written, so a failure here is made good by the next write."""
        owed = self._owed.get(session_id)
        if owed is not None:
            await self._catalogue_append(owed.app_name, owed.events(session_id))
            self._owed.pop(session_id, None)

    def _drop(self, session_id: str) -> None:
        # What it owes stays: the next writer of the session, this one's or another's, pays it.
        self._writers.pop(session_id, None)
        self._revisions.pop(session_id, None)
        self._updated.pop(session_id, None)

    async def _create(self, app_name: str, user_id: str, state: dict[str, Any], session_id: str | None) -> AdkSession:
        given = (session_id or "").strip() or str(uuid.uuid4())
        scopes = _Scopes.of(_json_safe(state))
        for _ in range(5):
            live, generation = await self._walk(app_name, user_id, given)
            if live is not None and live.created:
                raise AlreadyExistsError(f"Session with id {given} already exists.")
            named = await self._client.create_or_find(
                self._agent(app_name), session_name(app_name, user_id, given, generation), f"ADK {app_name} {given}"
            )
            sid = named.session_id
            if named.opened is not None:
                opened = named.opened
                writer = AsyncSession(self._client, SessionLedger(sid, opened.epoch, opened.next_seq, opened.writer_token))
                self._writers[sid] = writer
            else:
                # Taken since the walk, or by a create that stopped before its first record (this
                # one's, whose answer was lost): taken over, it tells which.
                async with self._lock(sid):
                    self._drop(sid)
                    try:
                        writer = await self._take_over(sid)
                    except SessionNotFoundError:
                        continue  # deleted meanwhile: the next generation
                    if self._revisions[sid] > 0:
                        raise AlreadyExistsError(f"Session with id {given} already exists.")
            created_at = time.time()
            record = {
                "app": app_name, "user": user_id, "id": given, "state": scopes.session, "time": created_at,
                "app_state": scopes.app, "user_state": scopes.user,
            }
            async with self._lock(sid):
                try:
                    ack = await writer.append(_state_event(CREATED_KEY, record))
                except errors.Fenced:
                    # Another create of the same id took the session over: it is theirs.
                    self._drop(sid)
                    raise AlreadyExistsError(f"Session with id {given} already exists.") from None
                self._revisions[sid], self._updated[sid] = ack.seq, created_at
                self._owed[sid] = Owed(app_name, user_id, marker_of(sid, ack.seq), scopes, listed=given)
                await self._pay(sid)
            stored = StoredSession(sid, ack.seq, created=True, state=scopes.session, last_update_time=created_at)
            return self._session(app_name, user_id, given, stored, await self._catalogue(app_name), [])
        raise errors.SessionlogError(f"ADK session {given!r} is being created and deleted by other processes; try again")

    def _session(self, app_name: str, user_id: str, session_id: str, stored: StoredSession, catalogue: Catalogue, events: list[AdkEvent]) -> AdkSession:
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=catalogue.merged(user_id, stored.state),
            events=events,
            last_update_time=stored.last_update_time,
        )
        session._storage_update_marker = stored.marker
        return session

    async def _get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> AdkSession | None:
        stored, _ = await self._walk(app_name, user_id, session_id)
        if stored is None or not stored.created:
            return None
        catalogue = (await self._catalogue(app_name)).with_owed(stored.owed)
        return self._session(app_name, user_id, session_id, stored, catalogue, _filtered(stored.events, config))

    async def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        catalogue = await self._catalogue(app_name)
        found: list[AdkSession] = []
        for sid, (user, given) in catalogue.sessions.items():
            if user_id is not None and user != user_id:
                continue
            try:
                view = await self._client.session(sid)
                if view.status in _ENDED:
                    continue
                stored = StoredSession.fold(sid, await self._read(sid, view))
            except errors.UnknownSession:
                continue
            if stored.created and not stored.deleted:
                found.append(self._session(app_name, user, given, stored, catalogue.with_owed(stored.owed), []))
        # Oldest first, as BaseSessionService documents: the last is the most recently active.
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        stored, _ = await self._walk(app_name, user_id, session_id)
        if stored is None:
            return
        sid = stored.session_id
        async with self._lock(sid):
            for _ in range(5):
                try:
                    writer = await self._take_over(sid)
                except SessionNotFoundError:
                    break  # deleted by another process meanwhile
                try:
                    await writer.append(_state_event(DELETED_KEY, {"time": time.time()}))
                    await writer.close("Cancelled", DELETE_REASON)
                    break
                except errors.Fenced:
                    self._drop(sid)
                except errors.SessionEnded:
                    break
            self._drop(sid)
        await self._catalogue_append(app_name, [_state_event(UNREGISTERED_KEY, {"session": sid})])

    async def _append(self, session: AdkSession, event: AdkEvent) -> str:
        """Appends ``event`` to the session ``session`` is a copy of, if that copy is the latest
        (see the module's documentation); the marker of the session after it."""
        stored, _ = await self._walk(session.app_name, session.user_id, session.id)
        if stored is None or not stored.created:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        sid = stored.session_id
        payload = _stored_event(event)
        async with self._lock(sid):
            await self._pay(sid)  # what an earlier append of this service left owed
            for _ in range(5):
                writer = await self._take_over(sid)
                self._check_fresh(session, sid)
                try:
                    ack = await writer.append(framework_state(FRAMEWORK, EVENT_KEY, payload))
                except errors.Fenced:
                    self._drop(sid)  # another process claimed it since: take it over, check again
                    continue
                except errors.SessionEnded:
                    self._drop(sid)
                    raise SessionNotFoundError(f"Session {session.id} was deleted.") from None
                self._revisions[sid], self._updated[sid] = ack.seq, event.timestamp
                break
            else:
                raise errors.SessionlogError(f"ADK session {session.id!r} is being taken over by other processes; try again")
            scopes = _Scopes.of(_json_safe(event.actions.state_delta if event.actions else {}))
            if scopes.app or scopes.user:
                self._owed[sid] = Owed(session.app_name, session.user_id, marker_of(sid, ack.seq), scopes)
                await self._pay(sid)
        return marker_of(sid, ack.seq)

    def _check_fresh(self, session: AdkSession, sid: str) -> None:
        """Raises ``StaleSessionError`` when ``session`` is not a copy of the held session's
        latest revision: its marker names another, or (a session object made without one) its
        last update time is older than the log's."""
        marker = session._storage_update_marker
        if marker is not None:
            if marker != marker_of(sid, self._revisions[sid]):
                raise StaleSessionError(_STALE)
        elif self._updated[sid] > session.last_update_time:
            raise StaleSessionError(_STALE)

    async def _tool_writer(self, session: AdkSession) -> tuple[AsyncSession, Occurrences]:
        """The writer a durable tool records its calls with, for the session the agent runs in."""
        stored, _ = await self._walk(session.app_name, session.user_id, session.id)
        if stored is None or not stored.created:
            raise SessionNotFoundError(f"Session {session.id} not found: a durable tool runs in a session of this service.")
        sid = stored.session_id
        async with self._lock(sid):
            writer = await self._take_over(sid)
        return writer, self._occurrences.setdefault(sid, Occurrences())


def _context_parameter(signature: inspect.Signature, fn: Callable[..., Any]) -> str | None:
    """The parameter ADK passes the tool context in, as ``FunctionTool`` finds it: annotated
    with a context type, or named ``tool_context``."""
    found = find_context_parameter(fn)
    if found is not None:
        return found
    return "tool_context" if "tool_context" in signature.parameters else None


class _DurableFunction:
    """A function made durable for ADK: ``function()`` is what ``FunctionTool`` wraps. ADK sees
    the function's own signature (with a ``tool_context`` parameter added if it has none), so
    the model is offered the same declaration; the tool context is never recorded."""

    def __init__(
        self,
        service: SessionlogSessionService,
        fn: Callable[..., Any],
        *,
        effect: EffectClass,
        key: Callable[..., str] | None,
        name: str | None,
    ) -> None:
        self.service, self.fn, self.effect, self.key = service, fn, effect, key
        self.tool = name or fn.__name__
        self.signature = inspect.signature(fn)
        self.context = _context_parameter(self.signature, fn)
        # The parameters the model gives: what is recorded, and what names a call.
        self.arguments = self.signature.replace(
            parameters=[p for n, p in self.signature.parameters.items() if n != self.context]
        )

    def function(self) -> Callable[..., Awaitable[Any]]:
        durable = self

        async def run(**given: Any) -> Any:
            context = given.pop(durable.context or "tool_context")
            writer, occurrences = await durable.service._on_loop(durable.service._tool_writer(context.session))

            async def invoke(**arguments: Any) -> Any:
                if durable.context is not None:
                    arguments[durable.context] = context
                if inspect.iscoroutinefunction(durable.fn):
                    return await durable.fn(**arguments)
                return await asyncio.to_thread(durable.fn, **arguments)

            setattr(invoke, "__signature__", durable.arguments)  # noqa: B010 - what the call records
            # Each step of the call runs on the service's loop, where the writer belongs.
            on_loop = LoopWriter(writer, occurrences, lambda step: durable.service._on_loop(step()))
            call = _durable_tool(on_loop, effect=durable.effect, key=durable.key, name=durable.tool)(invoke)
            return await call(**given)

        run.__name__ = self.tool
        run.__qualname__ = self.tool
        run.__doc__ = self.fn.__doc__
        run.__module__ = self.fn.__module__
        parameters = list(self.signature.parameters.values())
        annotations = dict(getattr(self.fn, "__annotations__", {}))
        if self.context is None:
            parameters.append(inspect.Parameter("tool_context", inspect.Parameter.KEYWORD_ONLY, annotation=ToolContext))
            annotations["tool_context"] = ToolContext
        setattr(run, "__signature__", self.signature.replace(parameters=parameters))  # noqa: B010
        run.__annotations__ = annotations
        # Type hints written as strings resolve in the function's own module.
        setattr(run, "__wrapped__", self.fn)  # noqa: B010
        return run
