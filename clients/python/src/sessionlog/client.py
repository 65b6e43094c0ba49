"""Clients for the ingest and recovery services: ``Client`` (blocking) and ``AsyncClient``.

Both send the operations of ``_api`` and retry what may succeed on a second try (the services
unreachable, a 503) with the same request, until ``retry_for`` seconds have passed: a retried
append carries the same seqs and event ids, so the service answers it as a duplicate with the
first write's position, never as a second event.

The two clients are twins on purpose: Python cannot share a body between a function that blocks
and one that awaits without generating code (httpx itself keeps two). What they share without
waiting (the routes, decoding, the retry policy) is in ``_api`` and ``_Base``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import tenacity

from . import _api, errors
from .ledger import new_session_id
from .models import (
    Appended,
    EventAck,
    EventPage,
    HistoryEvent,
    Lease,
    NamedSession,
    Opened,
    ResumeBundle,
    SessionView,
    TerminalOutcome,
)

T = TypeVar("T")

#: The backoff's base wait is `multiplier` from tenacity 9.2 (which deprecates `initial`), and
#: `initial` before it: the package accepts any tenacity 9 (google-adk's google-genai holds it below 9.2).
_JITTER_BASE = "multiplier" if "multiplier" in inspect.signature(tenacity.wait_exponential_jitter).parameters else "initial"

#: A writer token (see ``Opened.writer_token``); ``None`` sends no header.
Token = str | None

#: A bearer credential (a JWT or an ``slk_`` API key), or a function that answers the current one
#: (called for every request, so a token can be refreshed).
Credential = str | Callable[[], str]


class _Base:
    def __init__(
        self,
        ingest_url: str = "http://127.0.0.1:8090",
        recovery_url: str = "http://127.0.0.1:8095",
        *,
        token: Credential | None = None,
        retry_for: float = 30.0,
        timeout: float = 30.0,
    ) -> None:
        self._urls = {"ingest": ingest_url.rstrip("/"), "recovery": recovery_url.rstrip("/")}
        self._token = token
        self._retry_for = retry_for
        self._timeout = timeout

    def _request(self, op: _api.Operation[Any]) -> dict[str, Any]:
        headers = {"accept": "application/json", **(op.headers or {})}
        if self._token is not None:
            token = self._token() if callable(self._token) else self._token
            headers["authorization"] = f"Bearer {token}"
        return {
            "method": op.method,
            "url": self._urls[op.service] + op.path,
            "json": op.body,
            "params": op.params,
            "headers": headers,
        }

    def _retry_policy(self) -> dict[str, Any]:
        # tenacity rather than a loop of our own: one policy, blocking and async alike.
        return {
            "retry": tenacity.retry_if_exception(_api.retryable),
            "wait": tenacity.wait_exponential_jitter(max=2.0, **{_JITTER_BASE: 0.05}),
            "stop": tenacity.stop_after_delay(self._retry_for),
            "reraise": True,
        }


class Client(_Base):
    """A blocking client. ``token`` is sent as ``Authorization: Bearer``; ``transport`` lets a
    test put an ``httpx`` transport of its own between the client and the network."""

    def __init__(
        self,
        ingest_url: str = "http://127.0.0.1:8090",
        recovery_url: str = "http://127.0.0.1:8095",
        *,
        token: Credential | None = None,
        retry_for: float = 30.0,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(ingest_url, recovery_url, token=token, retry_for=retry_for, timeout=timeout)
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close_client()

    def close_client(self) -> None:
        """Closes the connections."""
        self._http.close()

    def send(self, op: _api.Operation[T]) -> T:
        """Sends ``op``, retrying what may succeed on another try; its answer, or its error."""
        sent = False  # whether any attempt may have reached the service
        try:
            for attempt in tenacity.Retrying(**self._retry_policy()):
                with attempt:
                    try:
                        return _api.read_answer(op, self._http.request(**self._request(op)))
                    except BaseException as e:
                        sent = sent or not _api.never_sent(e)
                        raise
        except httpx.TransportError as e:
            raise _api.unreachable(op, self._urls, e, sent=sent) from e
        raise AssertionError("unreachable: tenacity reraises the last error")

    def create(
        self, agent: str, title: str | None = None, session_id: str | None = None, *, name: str | None = None
    ) -> Opened:
        """Starts a session (epoch 1, next seq 2). ``name`` (1-512 bytes, no control characters)
        names it within the caller's tenant; a name the tenant has already is refused with
        ``NameTaken``, whose ``session_id`` is the session it points to."""
        return self.send(_api.create(agent, title, session_id, name))

    def find(self, name: str) -> str | None:
        """The id of the session ``name`` points to in the caller's tenant, or ``None``."""
        return self.send(_api.find(name))

    def create_or_find(
        self, agent: str, name: str, title: str | None = None, session_id: str | None = None
    ) -> NamedSession:
        """Starts the session ``name`` in the caller's tenant, or finds the one it points to
        (``opened`` is ``None`` then: take it over with ``claim`` or ``resume``)."""
        return self.send(_api.create_or_find(agent, name, title, session_id))

    def claim(self, session_id: str, writer: str) -> Opened:
        """Takes a session over with the next epoch; its earlier writers are fenced."""
        return self.send(_api.claim(session_id, writer))

    def append(
        self, session_id: str, epoch: int, events: Sequence[Mapping[str, Any]], *, writer_token: str | None = None
    ) -> Appended:
        """Appends events (``{"seq", "event_id", "kind", "data", ...}``) in seq order;
        ``writer_token`` is the one the create, claim or resume answered (sent when given)."""
        return self.send(_api.append(session_id, epoch, events, writer_token))

    def checkpoint(
        self, session_id: str, epoch: int, workspace_revision: str | None = None, *, writer_token: str | None = None
    ) -> EventAck:
        """Records a checkpoint (the service picks its seq and digest)."""
        return self.send(_api.checkpoint(session_id, epoch, workspace_revision, writer_token))

    def close(
        self, session_id: str, epoch: int, outcome: TerminalOutcome, reason: str | None = None, *, writer_token: Token = None
    ) -> EventAck:
        """Ends a session."""
        return self.send(_api.close(session_id, epoch, outcome, reason, writer_token))

    def renew_lease(self, session_id: str, epoch: int, writer: str | None = None, *, writer_token: Token = None) -> Lease:
        """Renews (or takes) the current epoch's writer lease: liveness, not permission to write."""
        return self.send(_api.renew_lease(session_id, epoch, writer, writer_token))

    def release_lease(self, session_id: str, epoch: int, *, writer_token: Token = None) -> None:
        """Releases the current epoch's writer lease (closing the session releases it too)."""
        self.send(_api.release_lease(session_id, epoch, writer_token))

    def resume(self, session_id: str, writer: str, context_tokens: int | None = None) -> ResumeBundle:
        """Takes a session over after a crash: the next epoch, and what to settle first."""
        return self.send(_api.resume(session_id, writer, context_tokens))

    def session(self, session_id: str) -> SessionView:
        """The session rebuilt from the log, to its end (reader role)."""
        return self.send(_api.session(session_id))

    def events_page(self, session_id: str, **range_: Any) -> EventPage:
        """One page of a range read (``from_seq``, ``to_seq``, ``kinds``, ``limit``, ``cursor``, ``inherited``)."""
        return self.send(_api.events(session_id, **range_))

    def events(self, session_id: str, **range_: Any) -> Iterator[HistoryEvent]:
        """Every event of a range, following the pages (the projection's view: see ``events_page``)."""
        cursor: str | None = None
        while True:
            page = self.events_page(session_id, cursor=cursor, **range_)
            yield from page.events
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def fork(self, session_id: str, at_seq: int, agent: str, child_id: str | None = None) -> dict[str, Any]:
        """Starts a session from ``session_id``'s history through ``at_seq`` (operator role);
        ``child_id`` names the new session. Without it the client picks the child's id (a
        UUIDv7), so that a retry after a lost answer (a timeout) finds the child the first attempt
        made instead of making a second: the service refuses it (``already_started``) and the
        client answers that child once its fork point is checked, with its first event as range
        reads give it (without its attestation). A ``child_id`` the caller gave that is already
        a session is refused with ``AlreadyStarted``."""
        child = child_id if child_id is not None else new_session_id()
        try:
            return self.send(_api.fork(session_id, at_seq, agent, child))
        except errors.AlreadyStarted:
            # The id this client chose is taken only by an earlier attempt of this very fork.
            if child_id is not None:
                raise
        deadline = time.monotonic() + max(self._retry_for, 1.0)
        while (first := self.send(_api.first_event(child))) is None:
            if time.monotonic() > deadline:
                raise _api.fork_not_projected(session_id, at_seq, child)
            time.sleep(0.1)
        return _api.made_fork(session_id, at_seq, child, first)

    def resolve(
        self, session_id: str, call_seq: int, *, succeeded: bool, output: str, reason: str, operator: str | None = None
    ) -> dict[str, Any]:
        """Records what an in-doubt call did (operator role)."""
        return self.send(_api.resolve(session_id, call_seq, succeeded, output, reason, operator))

    def decide(
        self, session_id: str, approval_id: str, *, approved: bool, reason: str | None = None, decided_by: str | None = None
    ) -> dict[str, Any]:
        """Approves or denies a pending approval (approver role)."""
        return self.send(_api.decide(session_id, approval_id, approved, reason, decided_by))


class AsyncClient(_Base):
    """The asyncio twin of ``Client``: the same operations, awaited."""

    def __init__(
        self,
        ingest_url: str = "http://127.0.0.1:8090",
        recovery_url: str = "http://127.0.0.1:8095",
        *,
        token: Credential | None = None,
        retry_for: float = 30.0,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(ingest_url, recovery_url, token=token, retry_for=retry_for, timeout=timeout)
        self._transport = transport
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)
        # A twin's transport is its original's (see ``twin``).
        self._borrowed = False

    def twin(self) -> AsyncClient:
        """A client of the same services, with the same credential and policy, and connections
        of its own: connections belong to the event loop they were opened on, so code running on
        another loop (a framework adapter's own) takes a twin. A transport given to this client is
        shared, and stays open when the twin is closed (it is this client's to close)."""
        twin = AsyncClient(
            self._urls["ingest"],
            self._urls["recovery"],
            token=self._token,
            retry_for=self._retry_for,
            timeout=self._timeout,
            transport=self._transport,
        )
        twin._borrowed = self._transport is not None
        return twin

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections (a twin leaves a transport it shares open)."""
        if not self._borrowed:
            await self._http.aclose()

    async def send(self, op: _api.Operation[T]) -> T:
        """Sends ``op``, retrying what may succeed on another try; its answer, or its error."""
        sent = False  # whether any attempt may have reached the service
        try:
            async for attempt in tenacity.AsyncRetrying(**self._retry_policy()):
                with attempt:
                    try:
                        return _api.read_answer(op, await self._http.request(**self._request(op)))
                    except BaseException as e:
                        sent = sent or not _api.never_sent(e)
                        raise
        except httpx.TransportError as e:
            raise _api.unreachable(op, self._urls, e, sent=sent) from e
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def create(
        self, agent: str, title: str | None = None, session_id: str | None = None, *, name: str | None = None
    ) -> Opened:
        """Starts a session (epoch 1, next seq 2), named ``name`` when given: see ``Client.create``."""
        return await self.send(_api.create(agent, title, session_id, name))

    async def find(self, name: str) -> str | None:
        """The id of the session ``name`` points to in the caller's tenant, or ``None``."""
        return await self.send(_api.find(name))

    async def create_or_find(
        self, agent: str, name: str, title: str | None = None, session_id: str | None = None
    ) -> NamedSession:
        """Starts the session ``name``, or finds the one it points to: see ``Client.create_or_find``."""
        return await self.send(_api.create_or_find(agent, name, title, session_id))

    async def claim(self, session_id: str, writer: str) -> Opened:
        """Takes a session over with the next epoch; its earlier writers are fenced."""
        return await self.send(_api.claim(session_id, writer))

    async def append(
        self, session_id: str, epoch: int, events: Sequence[Mapping[str, Any]], *, writer_token: str | None = None
    ) -> Appended:
        """Appends events in seq order (see ``Client.append``)."""
        return await self.send(_api.append(session_id, epoch, events, writer_token))

    async def checkpoint(
        self, session_id: str, epoch: int, workspace_revision: str | None = None, *, writer_token: str | None = None
    ) -> EventAck:
        """Records a checkpoint."""
        return await self.send(_api.checkpoint(session_id, epoch, workspace_revision, writer_token))

    async def close(
        self, session_id: str, epoch: int, outcome: TerminalOutcome, reason: str | None = None, *, writer_token: Token = None
    ) -> EventAck:
        """Ends a session."""
        return await self.send(_api.close(session_id, epoch, outcome, reason, writer_token))

    async def renew_lease(
        self, session_id: str, epoch: int, writer: str | None = None, *, writer_token: Token = None
    ) -> Lease:
        """Renews (or takes) the current epoch's writer lease: liveness, not permission to write."""
        return await self.send(_api.renew_lease(session_id, epoch, writer, writer_token))

    async def release_lease(self, session_id: str, epoch: int, *, writer_token: Token = None) -> None:
        """Releases the current epoch's writer lease (closing the session releases it too)."""
        await self.send(_api.release_lease(session_id, epoch, writer_token))

    async def resume(self, session_id: str, writer: str, context_tokens: int | None = None) -> ResumeBundle:
        """Takes a session over after a crash."""
        return await self.send(_api.resume(session_id, writer, context_tokens))

    async def session(self, session_id: str) -> SessionView:
        """The session rebuilt from the log, to its end (reader role)."""
        return await self.send(_api.session(session_id))

    async def events_page(self, session_id: str, **range_: Any) -> EventPage:
        """One page of a range read."""
        return await self.send(_api.events(session_id, **range_))

    async def events(self, session_id: str, **range_: Any) -> AsyncIterator[HistoryEvent]:
        """Every event of a range, following the pages."""
        cursor: str | None = None
        while True:
            page = await self.events_page(session_id, cursor=cursor, **range_)
            for event in page.events:
                yield event
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def fork(self, session_id: str, at_seq: int, agent: str, child_id: str | None = None) -> dict[str, Any]:
        """Starts a session from ``session_id``'s history through ``at_seq``: see ``Client.fork``
        (without ``child_id``, a retry after a lost answer finds the child the first attempt made)."""
        child = child_id if child_id is not None else new_session_id()
        try:
            return await self.send(_api.fork(session_id, at_seq, agent, child))
        except errors.AlreadyStarted:
            if child_id is not None:
                raise
        deadline = time.monotonic() + max(self._retry_for, 1.0)
        while (first := await self.send(_api.first_event(child))) is None:
            if time.monotonic() > deadline:
                raise _api.fork_not_projected(session_id, at_seq, child)
            await asyncio.sleep(0.1)
        return _api.made_fork(session_id, at_seq, child, first)

    async def resolve(
        self, session_id: str, call_seq: int, *, succeeded: bool, output: str, reason: str, operator: str | None = None
    ) -> dict[str, Any]:
        """Records what an in-doubt call did (operator role)."""
        return await self.send(_api.resolve(session_id, call_seq, succeeded, output, reason, operator))

    async def decide(
        self, session_id: str, approval_id: str, *, approved: bool, reason: str | None = None, decided_by: str | None = None
    ) -> dict[str, Any]:
        """Approves or denies a pending approval (approver role)."""
        return await self.send(_api.decide(session_id, approval_id, approved, reason, decided_by))
