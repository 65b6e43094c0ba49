"""The HTTP operations, as values both clients send: one place says what each route takes and
answers, so the sync and async clients differ only in how they wait."""

from __future__ import annotations

import json
import uuid
from urllib.parse import quote
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx

from . import errors
from .models import (
    Appended,
    EventAck,
    EventPage,
    Lease,
    NamedSession,
    Opened,
    ResumeBundle,
    SessionView,
    TerminalOutcome,
)

T = TypeVar("T")
Service = Literal["ingest", "recovery"]


@dataclass(frozen=True)
class Operation(Generic[T]):
    """One request and how to read its answer."""

    service: Service
    method: Literal["GET", "POST", "DELETE"]
    path: str
    decode: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    params: Mapping[str, str] | None = None
    #: Headers of this request only (the writer token): out of ``repr``, never logged.
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    #: Problems this operation answers with a value instead of raising, by code (a lookup's
    #: ``unknown_name`` is ``None``): decided here, so that both clients read them alike.
    answers: Mapping[str, Callable[[dict[str, Any]], T]] | None = None


def _sid(session_id: str) -> str:
    # Checked here so that a typo is a clear error, not a 400 after a round trip (nor, with
    # `../` in it, a request to another route).
    try:
        return str(uuid.UUID(str(session_id)))
    except ValueError:
        shown = repr(session_id) if len(session_id) <= 80 else f"{session_id[:80]!r}... ({len(session_id)} characters)"
        raise errors.InvalidArgument(f"a session id is a UUID, not {shown}") from None


def _segment(value: str) -> str:
    """``value`` as one path segment, whatever it holds: ``/``, ``?``, ``#`` and ``%`` are
    escaped, so it cannot end the path, start a query or name another route, and the service
    reads back exactly ``value``. A segment of only dots is escaped too: an URL library removes
    ``.`` and ``..`` (RFC 3986 5.2.4), which would send the request to the parent's route."""
    if not value:
        raise errors.InvalidArgument("an empty path segment would name another route")
    escaped = quote(value, safe="")
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


def _session_path(session_id: str, *segments: str) -> str:
    """The path of a session's route: ``/v1/sessions/{id}/{segment}...``, every part escaped
    (see ``_segment``). Every route of a session is built here."""
    return "/v1/sessions/" + "/".join(_segment(s) for s in (_sid(session_id), *segments))


def _opt(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


#: The header a session's writer proves itself with on appends, checkpoints and close.
WRITER_TOKEN_HEADER = "Sessionlog-Writer-Token"


def _writer(token: str | None) -> dict[str, str] | None:
    # No header without a token: a service that issues none does not ask for one.
    return {WRITER_TOKEN_HEADER: token} if token else None


def create(agent: str, title: str | None, session_id: str | None, name: str | None = None) -> Operation[Opened]:
    body = _opt(agent=agent, title=title, session_id=_sid(session_id) if session_id is not None else None, name=name)
    return Operation("ingest", "POST", "/v1/sessions", Opened.from_json, body)


def find(name: str) -> Operation[str | None]:
    """The id of the session ``name`` points to in the caller's tenant; ``None`` when none
    does (another tenant's names are not there for the caller either). The name travels in
    the query, which ``httpx`` escapes whole."""

    def session_id(doc: Any) -> str | None:
        return _sid(str(_as_dict(doc)["session_id"]))

    return Operation(
        "ingest", "GET", "/v1/sessions", session_id, params={"name": name}, answers={"unknown_name": lambda _: None}
    )


def create_or_find(agent: str, name: str, title: str | None, session_id: str | None) -> Operation[NamedSession]:
    """Starts the session ``name`` in the caller's tenant, or answers the one it points to.

    No session id is sent unless given, so the service picks one and keeps to it: a retry
    after an answer that got lost finds the name taken by the session the first attempt
    started (``opened=None``, like any taken name: the caller takes it over), and a create of
    the name that died between taking the name and starting its session is finished by this
    one."""

    def created(doc: Any) -> NamedSession:
        opened = Opened.from_json(_as_dict(doc))
        return NamedSession(opened.session_id, name, opened)

    def taken(problem: dict[str, Any]) -> NamedSession:
        found = problem.get("session_id")
        if not found:
            raise errors.problem_error(409, problem)
        return NamedSession(_sid(str(found)), name)

    op = create(agent, title, session_id, name)
    return Operation(op.service, op.method, op.path, created, op.body, answers={"name_taken": taken})


def claim(session_id: str, writer: str) -> Operation[Opened]:
    return Operation("ingest", "POST", _session_path(session_id, "claim"), Opened.from_json, {"writer": writer})


def append(
    session_id: str, epoch: int, events: Sequence[Mapping[str, Any]], writer_token: str | None = None
) -> Operation[Appended]:
    body = {"epoch": epoch, "events": list(events)}
    path = _session_path(session_id, "events")
    return Operation("ingest", "POST", path, Appended.from_json, body, headers=_writer(writer_token))


def checkpoint(
    session_id: str, epoch: int, workspace_revision: str | None, writer_token: str | None = None
) -> Operation[EventAck]:
    body = _opt(epoch=epoch, workspace_revision=workspace_revision)
    path = _session_path(session_id, "checkpoint")
    return Operation("ingest", "POST", path, EventAck.from_json, body, headers=_writer(writer_token))


def close(
    session_id: str, epoch: int, outcome: TerminalOutcome, reason: str | None, writer_token: str | None = None
) -> Operation[EventAck]:
    body = _opt(epoch=epoch, outcome=outcome, reason=reason)
    path = _session_path(session_id, "close")
    return Operation("ingest", "POST", path, EventAck.from_json, body, headers=_writer(writer_token))


def renew_lease(session_id: str, epoch: int, writer: str | None, writer_token: str | None = None) -> Operation[Lease]:
    body = _opt(epoch=epoch, writer=writer)
    path = _session_path(session_id, "lease")
    return Operation("ingest", "POST", path, Lease.from_json, body, headers=_writer(writer_token))


def release_lease(session_id: str, epoch: int, writer_token: str | None = None) -> Operation[None]:
    path = _session_path(session_id, "lease")
    return Operation(
        "ingest", "DELETE", path, lambda _: None, params={"epoch": str(epoch)}, headers=_writer(writer_token)
    )


def resume(session_id: str, writer: str, context_tokens: int | None) -> Operation[ResumeBundle]:
    body = _opt(writer=writer, context_tokens=context_tokens)
    return Operation("recovery", "POST", _session_path(session_id, "resume"), ResumeBundle.from_json, body)


def session(session_id: str) -> Operation[SessionView]:
    return Operation("recovery", "GET", _session_path(session_id), SessionView.from_json)


def events(
    session_id: str,
    *,
    from_seq: int | None = None,
    to_seq: int | None = None,
    kinds: Sequence[str] = (),
    limit: int | None = None,
    cursor: str | None = None,
    inherited: bool = False,
) -> Operation[EventPage]:
    params = _opt(
        from_seq=from_seq,
        to_seq=to_seq,
        kinds=",".join(kinds) if kinds else None,
        limit=limit,
        cursor=cursor,
        inherited="true" if inherited else None,
    )
    return Operation(
        "recovery",
        "GET",
        _session_path(session_id, "events"),
        EventPage.from_json,
        params={k: str(v) for k, v in params.items()},
    )


def fork(session_id: str, at_seq: int, agent: str, child_id: str | None) -> Operation[dict[str, Any]]:
    body = _opt(at_seq=at_seq, agent=agent, session_id=_sid(child_id) if child_id is not None else None)
    return Operation("recovery", "POST", _session_path(session_id, "fork"), _as_dict, body)


def first_event(session_id: str) -> Operation[dict[str, Any] | None]:
    """A session's first event as range reads give it (with ``log_partition`` and
    ``log_offset``); ``None`` while the projection does not hold it."""

    def first(doc: Any) -> dict[str, Any] | None:
        events = _as_dict(doc).get("events") or []
        return _as_dict(events[0]) if events else None

    path = _session_path(session_id, "events")
    return Operation(
        "recovery", "GET", path, first, params={"to_seq": "1"}, answers={"unknown_session": lambda _: None}
    )


#: The members of an event's envelope that a range read's event carries too.
_ENVELOPE = ("event_id", "session_id", "seq", "writer_epoch", "occurred_at", "causation_id", "idempotency_key", "event")


def made_fork(parent: str, at_seq: int, child: str, first: dict[str, Any]) -> dict[str, Any]:
    """The answer of a fork whose answer was lost, from its child's first event (``first_event``)
    once its fork point is checked: as the fork answers, without the event's attestation."""
    point = ((first.get("event") or {}).get("SessionForked") or {}).get("fork_point") or {}
    if str(point.get("parent_session_id")) != _sid(parent) or point.get("parent_seq") != at_seq:
        raise errors.SessionlogError(
            f"fork: session {child}, which this client chose for the fork of {parent} at seq {at_seq}, is not that fork"
        )
    return {
        "session_id": child,
        "partition": int(first["log_partition"]),
        "offset": int(first["log_offset"]),
        "event": {k: first.get(k) for k in _ENVELOPE},
    }


def fork_not_projected(parent: str, at_seq: int, child: str) -> errors.NotReady:
    """The error for a fork a retry found made whose first event range reads do not hold in time."""
    return errors.NotReady(
        f"fork: the fork of {parent} at seq {at_seq} was made (session {child}: a retry found it) but range "
        "reads do not hold its first event yet (is `sessionlog project` running for this topic?)"
    )


def resolve(
    session_id: str, call_seq: int, succeeded: bool, output: str, reason: str, operator: str | None
) -> Operation[dict[str, Any]]:
    body = _opt(call_seq=call_seq, succeeded=succeeded, output=output, reason=reason, operator=operator)
    return Operation("recovery", "POST", _session_path(session_id, "resolutions"), _as_dict, body)


def decide(
    session_id: str, approval_id: str, approved: bool, reason: str | None, decided_by: str | None
) -> Operation[dict[str, Any]]:
    body = _opt(approved=approved, reason=reason, decided_by=decided_by)
    path = _session_path(session_id, "approvals", approval_id)
    return Operation("recovery", "POST", path, _as_dict, body)


def _as_dict(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise errors.SessionlogError(f"expected a JSON object, got {type(doc).__name__}")
    return doc


def read_answer(op: Operation[T], response: httpx.Response) -> T:
    """The decoded answer, or the problem's exception."""
    try:
        doc = response.json() if response.content else {}
    except json.JSONDecodeError:
        doc = None
    if response.is_success:
        if doc is None:
            raise errors.SessionlogError(f"{op.method} {op.path}: the answer is not JSON")
        return op.decode(doc)
    problem = doc if isinstance(doc, dict) else {"detail": response.text[:200]}
    answer = (op.answers or {}).get(str(problem.get("code", "")))
    if answer is not None:
        return answer(problem)
    raise errors.problem_error(response.status_code, problem)


def retryable(error: BaseException) -> bool:
    """Whether sending the same request again may succeed and cannot do anything twice.

    An append repeats its events' seqs and ids (a duplicate is answered with the first write's
    position), a create names its session id, a claim or a resume only takes a newer epoch. The
    rest are safe to repeat but not silent about it: a repeated checkpoint records a second one,
    a close whose first attempt landed answers ``SessionEnded``, a resolution or a decision
    ``NotInDoubt`` or ``NoSuchApproval``."""
    if isinstance(error, errors.ProblemError):
        return error.retryable
    return isinstance(error, httpx.TransportError)


def never_sent(error: BaseException) -> bool:
    """Whether a failed attempt certainly sent nothing: no connection was made (refused, a
    name that does not resolve, a connect or pool timeout). Any other failure may have come
    after the service read the request."""
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def unreachable(
    op: Operation[Any], urls: Mapping[str, str], error: httpx.TransportError, *, sent: bool = True
) -> errors.TransportError:
    """The error for a service that did not answer until the retry deadline; ``sent`` whether
    any attempt may have reached it."""
    return errors.TransportError(
        f"{op.method} {op.path}: the {op.service} service at {urls[op.service]} did not answer "
        f"({type(error).__name__}: {error}); is `sessionlog {'ingest' if op.service == 'ingest' else 'serve-recovery'}` running there?",
        sent=sent,
    )
