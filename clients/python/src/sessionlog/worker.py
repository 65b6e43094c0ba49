"""Workers: run the sessions of an agent that need a harness.

A session whose harness died, or whose wait is over (an approval decided, an operator's result
recorded, a pause run out, steering for a session nobody runs) gets a *wake*. A worker asks the
recovery service for its agent's next one (``GET /v1/work``, a long poll): the service takes the
session for it (the next epoch, as ``Session.resume`` does; earlier writers are fenced) and
answers the resume bundle with the wake. The worker then holds the session's writer lease, hands
the session to the handler, and lets go of it when the handler is done:

- the handler answers an outcome (``"Completed"``, ``"Failed"``, ``"Cancelled"``): the worker
  closes the session with it (which releases the lease);
- it closed the session itself, or released the lease: nothing more to do;
- it answers ``None``: the worker releases the lease (the session stays as the handler left it,
  for a later wake);
- it raises: the error is logged and the lease is left to lapse, as a crashed harness's would,
  so the session is woken again.

``Worker`` runs over a blocking ``Client`` and ``Session``; ``AsyncWorker`` over an
``AsyncClient`` and ``AsyncSession``. Both poll again at once after a poll that found no work,
and back off (up to ``max_backoff`` seconds, with jitter) after a failure; a failure that no
retry mends (a credential without the ``harness`` role, a bad agent name) is raised.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal

from . import _api, errors
from .client import AsyncClient, Client
from .ledger import SessionLedger
from .models import ResumeBundle, TerminalOutcome
from .session import AsyncSession, Session, _ClientT, _projected_first, _tool_kinds, await_projected, wait_projected

log = logging.getLogger("sessionlog.worker")

#: Why a session was woken (``Wake.reason``).
WakeReason = Literal[
    "lease_expired", "approval_decided", "operator_result", "pause_elapsed", "steering", "unpaused"
]

#: The longest wait the recovery service grants a poll, in seconds.
MAX_WAIT = 60.0
#: How much sooner than the client's HTTP timeout a poll's wait ends: the service still takes the
#: session after the wait.
_TIMEOUT_MARGIN = 5.0
#: The shortest poll a worker makes: shorter is a loop that only asks.
_MIN_WAIT = 0.1


@dataclass(frozen=True)
class Wake:
    """Why a session was handed to this worker, as the wake record says."""

    session_id: str
    agent: str
    #: Why it needed a harness.
    reason: WakeReason | str
    #: The session's epoch when the cause happened (the worker took the next one or later).
    epoch: int
    #: When the cause happened (the lease's expiry, the event's time, the pause's end), in
    #: microseconds since the Unix epoch.
    caused_at: int
    #: When the wake was written, in microseconds since the Unix epoch.
    woken_at: int
    #: The offset of the causing event in its partition of the events topic, for reasons an event
    #: causes.
    cause_offset: int | None = None

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Wake:
        offset = doc.get("cause_offset")
        return Wake(
            session_id=str(doc["session_id"]),
            agent=str(doc["agent"]),
            reason=str(doc["reason"]),
            epoch=int(doc["epoch"]),
            caused_at=int(doc["caused_at"]),
            woken_at=int(doc["woken_at"]),
            cause_offset=None if offset is None else int(offset),
        )


@dataclass(frozen=True)
class Work:
    """A session the recovery service took for a worker: the resume bundle and the wake."""

    bundle: ResumeBundle
    wake: Wake

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Work | None:
        """The work in an answer of ``GET /v1/work``; ``None`` for an empty one (204: no work)."""
        if not doc:
            return None
        return Work(ResumeBundle.from_json(doc), Wake.from_json(doc["wake"]))


#: What a blocking worker's handler does with a session: an outcome to close it with, or ``None``.
Handler = Callable[[Session, Wake], TerminalOutcome | None]
#: What an ``AsyncWorker``'s handler does with a session, awaited.
AsyncHandler = Callable[[AsyncSession, Wake], Awaitable[TerminalOutcome | None]]


def work(
    agent: str, wait: float, writer: str | None, context_tokens: int | None, take_id: str | None = None
) -> _api.Operation[Work | None]:
    """``GET /v1/work``: the agent's next session, waiting up to ``wait`` seconds for it. The take
    is named by ``take_id`` (a fresh UUID by default), so a retry of this operation after a lost
    answer (a timeout) is answered the session that take took, not another."""
    if not agent:
        raise errors.InvalidArgument("a worker needs the name of the agent whose sessions it runs")
    params = {"agent": agent, "wait": f"{max(0, round(wait * 1000))}ms", "take_id": take_id or str(uuid.uuid4())}
    if writer:
        params["writer"] = writer
    if context_tokens is not None:
        params["context_tokens"] = str(context_tokens)

    def decode(doc: Any) -> Work | None:
        if not isinstance(doc, dict):
            raise errors.SessionlogError(f"GET /v1/work: expected a JSON object, got {type(doc).__name__}")
        return Work.from_json(doc)

    return _api.Operation("recovery", "GET", "/v1/work", decode, params=params)


def _taken_over(agent: str, session_id: str, refusal: errors.Conflict) -> bool:
    """Whether ingest's refusal of a taken session's lease means another writer took the session
    over at once (logged): the worker lets it go. A refusal because leases are off (``[lease]
    ttl_ms = 0``) is not: the worker runs the session without one."""
    if refusal.code == "leases_off":
        return False
    log.info("agent %s: session %s was taken over at once (%s)", agent, session_id, refusal)
    return True


def _fatal(error: BaseException) -> bool:
    """Whether a failed poll will fail again however long the worker waits: the request or the
    credential is wrong. (A session's conflict, a service down, a bug the service may lose on
    restart are waited out.)"""
    return isinstance(error, (errors.Unauthenticated, errors.Forbidden, errors.BadRequest, errors.Unprocessable))


class _Polling:
    """What both workers share without waiting: the settings, the poll's request, the backoff."""

    def __init__(
        self,
        agent: str,
        *,
        writer: str | None,
        wait: float,
        timeout: float,
        context_tokens: int | None,
        wait_projected_for: float,
        max_backoff: float,
    ) -> None:
        if not agent:
            raise errors.InvalidArgument("a worker needs the name of the agent whose sessions it runs")
        self.agent = agent
        self.writer = writer
        # A poll must end before the client gives up on its answer; a client whose timeout
        # leaves no time for a long poll would poll in a tight loop.
        self.wait = min(wait, MAX_WAIT, timeout - _TIMEOUT_MARGIN)
        if self.wait < _MIN_WAIT:
            raise errors.InvalidArgument(
                f"a worker long-polls for up to `wait` seconds, at least {_MIN_WAIT:g} and at least "
                f"{_TIMEOUT_MARGIN:g} s less than the client's timeout ({timeout:g} s): give the client "
                f"a longer timeout"
            )
        self.context_tokens = context_tokens
        self.wait_projected_for = wait_projected_for
        self.max_backoff = max_backoff
        self._failures = 0

    def poll(self) -> _api.Operation[Work | None]:
        return work(self.agent, self.wait, self.writer, self.context_tokens)

    def succeeded(self) -> None:
        self._failures = 0

    def failed(self, error: BaseException) -> float:
        """Logs a failed poll; how long to wait before the next. Raises a fatal one."""
        if _fatal(error):
            raise error
        self._failures += 1
        delay = min(self.max_backoff, 0.5 * 2.0 ** min(self._failures - 1, 16))
        delay *= random.uniform(0.5, 1.0)
        log.warning("agent %s: polling for work failed (%s); trying again in %.1fs", self.agent, error, delay)
        return delay


class _Worker(Generic[_ClientT]):
    """What both workers share without waiting: how they are made (the polling is ``_Polling``)."""

    def __init__(
        self,
        client: _ClientT,
        *,
        agent: str,
        writer: str | None = None,
        wait: float = 20.0,
        context_tokens: int | None = None,
        wait_projected_for: float = 30.0,
        max_backoff: float = 30.0,
    ) -> None:
        self.client: _ClientT = client
        self._polling = _Polling(
            agent,
            writer=writer,
            wait=wait,
            timeout=client._timeout,
            context_tokens=context_tokens,
            wait_projected_for=wait_projected_for,
            max_backoff=max_backoff,
        )

    @property
    def agent(self) -> str:
        """The agent whose sessions this worker runs."""
        return self._polling.agent


class Worker(_Worker[Client]):
    """Runs the sessions of ``agent`` that need a harness, one at a time, over a blocking ``Client``.

    ``writer`` names the writer the service records for each session it takes (with the
    caller's subject; the agent's name by default). ``wait`` is how long one poll waits for a wake
    (at most 60 s, and 5 s less than the client's timeout). ``context_tokens`` is the budget of
    the bundle's context view. ``wait_projected_for`` bounds the wait for the projection to hold a
    taken session's last event (the session learns its tool calls from it, as ``Session.resume``
    does)."""

    def take(self) -> tuple[Session, Wake] | None:
        """Polls once: the next session taken for this worker, with its writer lease held and its
        tool calls learnt, and its wake; ``None`` when no wake came within the wait (or the
        session was taken over again before its lease was held)."""
        found = self.client.send(self._polling.poll())
        if found is None:
            return None
        bundle = found.bundle
        session = Session(self.client, SessionLedger.from_bundle(bundle), bundle)
        # The lease first: the projection may take a while, and a session nobody holds a lease
        # on looks abandoned.
        try:
            session.hold_lease(self._polling.writer)
        except errors.Conflict as e:
            if _taken_over(self.agent, bundle.session_id, e):
                return None
        try:
            for sid, seq in _projected_first(bundle.session_id, bundle.state):
                wait_projected(self.client, sid, seq, self._polling.wait_projected_for)
            last_seq = int(bundle.state.get("last_seq", 0))
            if last_seq > 0:
                session.ledger.learn(self.client.events(bundle.session_id, **_tool_kinds(last_seq)))
        except BaseException:
            session._stop_lease()  # left to lapse: the session is woken again
            raise
        return session, found.wake

    def run_one(self, handler: Handler) -> bool:
        """Takes one session (waiting up to ``wait`` for it) and runs ``handler`` on it; whether
        there was one. Errors of the poll are raised; the handler's are logged."""
        taken = self.take()
        if taken is None:
            return False
        session, wake = taken
        try:
            outcome = handler(session, wake)
        except Exception:
            log.exception("agent %s: the handler failed on session %s; its lease is left to lapse", self.agent, wake.session_id)
            session._stop_lease()
            return True
        _let_go(session, outcome)
        return True

    def run(self, handler: Handler, *, stop: threading.Event | None = None) -> None:
        """Runs ``handler`` on each session taken, until ``stop`` is set (checked between polls
        and during a backoff: a poll in flight ends within ``wait`` seconds)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                self.run_one(handler)
            except errors.SessionlogError as e:
                stop.wait(self._polling.failed(e))
            else:
                self._polling.succeeded()


class AsyncWorker(_Worker[AsyncClient]):
    """``Worker`` over an ``AsyncClient`` and ``AsyncSession``: the same loop, awaited."""

    async def take(self) -> tuple[AsyncSession, Wake] | None:
        """Polls once: see ``Worker.take``."""
        found = await self.client.send(self._polling.poll())
        if found is None:
            return None
        bundle = found.bundle
        session = AsyncSession(self.client, SessionLedger.from_bundle(bundle), bundle)
        try:
            await session.hold_lease(self._polling.writer)
        except errors.Conflict as e:
            if _taken_over(self.agent, bundle.session_id, e):
                return None
        try:
            for sid, seq in _projected_first(bundle.session_id, bundle.state):
                await await_projected(self.client, sid, seq, self._polling.wait_projected_for)
            last_seq = int(bundle.state.get("last_seq", 0))
            if last_seq > 0:
                events = self.client.events(bundle.session_id, **_tool_kinds(last_seq))
                session.ledger.learn([e async for e in events])
        except BaseException:
            session._stop_lease()
            raise
        return session, found.wake

    async def run_one(self, handler: AsyncHandler) -> bool:
        """Takes one session and runs ``handler`` on it: see ``Worker.run_one``."""
        taken = await self.take()
        if taken is None:
            return False
        session, wake = taken
        try:
            outcome = await handler(session, wake)
        except Exception:
            log.exception("agent %s: the handler failed on session %s; its lease is left to lapse", self.agent, wake.session_id)
            session._stop_lease()
            return True
        await _alet_go(session, outcome)
        return True

    async def run(self, handler: AsyncHandler, *, stop: asyncio.Event | None = None) -> None:
        """Runs ``handler`` on each session taken, until ``stop`` is set: see ``Worker.run``.
        Cancelling the task stops it at once (a session taken by a poll in flight is then left
        without a harness, and woken again)."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await self.run_one(handler)
            except errors.SessionlogError as e:
                delay = self._polling.failed(e)
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except TimeoutError:
                    pass
            else:
                self._polling.succeeded()


def _let_go(session: Session, outcome: TerminalOutcome | None) -> None:
    """Closes the session with ``outcome``, or releases its lease if the handler kept it."""
    try:
        if outcome is not None:
            session.close(outcome)
        elif session._lease_stop is not None:
            session.release_lease()
    except errors.SessionlogError as e:
        _letting_go_failed(session, e)


async def _alet_go(session: AsyncSession, outcome: TerminalOutcome | None) -> None:
    """``_let_go`` for an ``AsyncSession``."""
    try:
        if outcome is not None:
            await session.close(outcome)
        elif session._lease_task is not None:
            await session.release_lease()
    except errors.SessionlogError as e:
        _letting_go_failed(session, e)


def _letting_go_failed(session: Session | AsyncSession, error: errors.SessionlogError) -> None:
    """After a close or a lease release the service refused, or that did not reach it."""
    if isinstance(error, errors.Conflict):
        # Closed by the handler already, or taken over since: not this worker's any more.
        log.info("session %s: %s", session.session_id, error)
        return
    session._stop_lease()
    log.warning("session %s: letting go failed (%s); its lease lapses", session.session_id, error)
