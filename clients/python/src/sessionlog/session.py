"""``Session`` and ``AsyncSession``: one writer of one session, like the Rust ``SessionWriter``.

A session helper numbers its events, resends what an outage left unanswered with the same seqs
and ids, and knows the session's tool calls, so that ``sessionlog.tools.durable_tool`` can tell a
call that already ran from one that never did. ``resume`` takes a session over after a crash:
recovery settles what it can (a recorded result is never run again; an idempotent call is looked
up by its key) and hands over the calls the new harness settles itself. A resumed fork also knows
the calls it inherits from its ancestors up to the fork point.

A writer keeps the token its create, claim or resume answered (``Opened.writer_token``) and sends
it with each append, checkpoint and close (header ``Sessionlog-Writer-Token``); a service that
issues no token gets no header.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import tenacity

from . import errors
from .client import AsyncClient, Client
from .ledger import Occurrences, SessionLedger, ToolCall, new_session_id, now_micros
from .models import EffectClass, EventAck, EventPage, Lease, Opened, ResumeBundle, TerminalOutcome

Event = tuple[str, dict[str, Any], dict[str, Any]]
"""An event to append: its kind, its data, and its envelope fields (``causation_id``,
``idempotency_key``, and ``event_id`` when the caller chooses it)."""

#: Events planned from the seq the first of them will have (see ``Session.append_planned``).
Plan = Callable[[int], Sequence[Event]]


def _plain(text: str) -> dict[str, str]:
    return {"Plain": text}


def user_request(text: str) -> Event:
    """A user's request."""
    return "UserRequest", {"content": _plain(text)}, {}


def model_response(
    model: str,
    text: str,
    *,
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost_micros: int = 0,
    started_at: int | None = None,
    provider: str | None = None,
) -> Event:
    """A model's answer, with what it cost; ``started_at`` (microseconds) defaults to now."""
    data: dict[str, Any] = {
        "model": model,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_micros": cost_micros,
        "started_at": now_micros() if started_at is None else started_at,
        "content": _plain(text),
    }
    if provider is not None:
        data["provider"] = provider
    return "ModelResponse", data, {}


def tool_call(tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None) -> Event:
    """A tool call's request, before it runs: what recovery settles it by if its result is lost."""
    envelope = {} if idempotency_key is None else {"idempotency_key": idempotency_key}
    return "ToolCallRequested", {"tool": tool, "arguments": _plain(arguments), "effect": effect}, envelope


def tool_result(call: ToolCall, output: str, *, succeeded: bool = True) -> Event:
    """The result of ``call``."""
    data = {
        "call_seq": call.seq,
        "outcome": "Succeeded" if succeeded else "Failed",
        "output": _plain(output),
        "source": "Executed",
        "recorded_by": None,
        "note": None,
    }
    return "ToolCallResult", data, {"causation_id": call.event_id, "idempotency_key": call.idempotency_key}


def retraction(seq: int, retracted_by: str) -> Event:
    """Withdraws the session's event ``seq`` from the conversation (schema v4); the log keeps both."""
    return "EventRetracted", {"retracted_seq": seq, "retracted_by": retracted_by}, {}


def _tool_kinds(last_seq: int) -> dict[str, Any]:
    # Inherited: a fork's ancestors' calls up to the fork point come first, each event naming
    # its session.
    return {"kinds": ["ToolCallRequested", "ToolCallResult"], "to_seq": last_seq, "limit": 1000, "inherited": True}


def _projected_first(session_id: str, state: dict[str, Any]) -> list[tuple[str, int]]:
    """The events range reads must hold before a resumed writer learns its calls: its last one,
    and for a fork its parent's at the fork point (on a partition the projector may be behind on).
    Ancestors further up are not waited for: their events reached the log before the parent's."""
    wanted = [(session_id, int(state.get("last_seq", 0)))]
    parent = state.get("parent")
    if isinstance(parent, dict):
        wanted.append((str(parent["parent_session_id"]), int(parent["parent_seq"])))
    return [(sid, seq) for sid, seq in wanted if seq > 0]


def _projection_wait(wait_for: float) -> dict[str, Any]:
    """Polls a read of the last seq until the projector has it: the range read serves the
    projection, and a resumed writer must see every call the log records before it runs one."""
    return {
        "retry": tenacity.retry_if_result(lambda page: not page.events)
        | tenacity.retry_if_exception_type(errors.UnknownSession),
        "wait": tenacity.wait_fixed(0.05),
        "stop": tenacity.stop_after_delay(wait_for),
        "retry_error_callback": _not_ready,
    }


def _not_ready(state: tenacity.RetryCallState) -> EventPage:
    raise errors.NotReady(
        f"the projection did not reach the session's last event within {state.seconds_since_start:.0f}s "
        "(is `sessionlog project` running for this topic?)"
    )


def wait_projected(client: Client, session_id: str, seq: int, wait_for: float = 30.0) -> None:
    """Waits until range reads (the projection) hold ``session_id``'s event ``seq``."""
    for attempt in tenacity.Retrying(**_projection_wait(wait_for)):
        with attempt:
            page = client.events_page(session_id, from_seq=seq, to_seq=seq)
        if attempt.retry_state.outcome and not attempt.retry_state.outcome.failed:
            attempt.retry_state.set_result(page)


async def await_projected(client: AsyncClient, session_id: str, seq: int, wait_for: float = 30.0) -> None:
    """Waits until range reads (the projection) hold ``session_id``'s event ``seq``."""
    async for attempt in tenacity.AsyncRetrying(**_projection_wait(wait_for)):
        with attempt:
            page = await client.events_page(session_id, from_seq=seq, to_seq=seq)
        if attempt.retry_state.outcome and not attempt.retry_state.outcome.failed:
            attempt.retry_state.set_result(page)


def _opened_ledger(opened: Opened) -> SessionLedger:
    return SessionLedger(opened.session_id, opened.epoch, opened.next_seq, opened.writer_token)


def _our_start(refusal: errors.ProblemError, sid: str, given: str | None) -> bool:
    """Whether a create's refusal found the session this very start made (an attempt whose
    answer was lost, then retried): its fresh id is taken, or its name points to that id. An
    id the caller gave may be another's start."""
    if given is not None:
        return False
    return not isinstance(refusal, errors.NameTaken) or refusal.session_id == sid


def framework_state(framework: str, key: str, state: str) -> Event:
    """A framework's own state, kept sealed in the log (schema v4)."""
    return "FrameworkStateSaved", {"framework": framework, "key": key, "state": _plain(state)}, {}


_ClientT = TypeVar("_ClientT", Client, AsyncClient)


class _Writer(Generic[_ClientT]):
    """What both writers share without waiting: the client, the ledger, the resume bundle."""

    def __init__(self, client: _ClientT, ledger: SessionLedger, bundle: ResumeBundle | None = None) -> None:
        self.client: _ClientT = client
        self.ledger = ledger
        #: The resume bundle, when this writer resumed the session.
        self.bundle = bundle

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.ledger.session_id

    @property
    def occurrences(self) -> Occurrences:
        """How many calls of each durable tool and arguments this writer made (see ``sessionlog.tools``)."""
        return self.ledger.occurrences


class Session(_Writer[Client]):
    """One writer of one session, over a blocking ``Client``."""

    def __init__(self, client: Client, ledger: SessionLedger, bundle: ResumeBundle | None = None) -> None:
        super().__init__(client, ledger, bundle)
        # Appends take turns: the ledger numbers events and matches answers in sending order.
        self._turn = threading.RLock()
        # Set to stop the lease renewal thread, while one runs (``hold_lease``).
        self._lease_stop: threading.Event | None = None

    @classmethod
    def start(
        cls,
        client: Client,
        agent: str,
        title: str | None = None,
        session_id: str | None = None,
        *,
        name: str | None = None,
    ) -> Session:
        """Starts a session run by ``agent`` (with a fresh id unless ``session_id`` names one),
        named ``name`` within the caller's tenant when given (``NameTaken`` if the name is)."""
        sid = session_id or new_session_id()
        try:
            opened = client.create(agent, title, sid, name=name)
        except (errors.AlreadyStarted, errors.NameTaken) as e:
            if not _our_start(e, sid, session_id):
                raise
            # A retry found the first attempt's start. Claim to write on.
            opened = client.claim(sid, agent)
        return cls(client, _opened_ledger(opened))

    @classmethod
    def open_named(
        cls,
        client: Client,
        name: str,
        *,
        agent: str,
        writer: str | None = None,
        title: str | None = None,
        wait_for: float = 30.0,
    ) -> Session:
        """The writer of the session ``name`` in the caller's tenant: started by ``agent`` when
        the name is new (``bundle`` is ``None`` then), else taken over as ``writer`` (``agent``
        unless given) like ``resume`` does, so an earlier writer is fenced."""
        named = client.create_or_find(agent, name, title)
        if named.opened is not None:
            return cls(client, _opened_ledger(named.opened))
        return cls.resume(client, named.session_id, writer or agent, wait_for=wait_for)

    @classmethod
    def resume(
        cls, client: Client, session_id: str, writer: str, *, context_tokens: int | None = None, wait_for: float = 30.0
    ) -> Session:
        """Takes ``session_id`` over as ``writer`` (the next epoch; the previous writer is fenced)
        and learns its tool calls, a fork's inherited ones too. Raises ``NeedsResolution`` when a
        call's outcome is unknown and its effect forbids running it again, ``AwaitingApproval``
        while an approval is pending."""
        bundle = client.resume(session_id, writer, context_tokens)
        session = cls(client, SessionLedger.from_bundle(bundle), bundle)
        last_seq = int(bundle.state.get("last_seq", 0))
        for sid, seq in _projected_first(session_id, bundle.state):
            wait_projected(client, sid, seq, wait_for)
        if last_seq > 0:
            session.ledger.learn(client.events(session_id, **_tool_kinds(last_seq)))
        return session

    def wait_projected(self, seq: int, wait_for: float = 30.0) -> None:
        """Waits until range reads (the projection) hold the session's event ``seq``."""
        wait_projected(self.client, self.session_id, seq, wait_for)

    def append(self, event: Event) -> EventAck:
        """Appends ``event``, after any event an outage left unanswered; its position."""
        return self.append_all([event])[-1]

    def append_all(self, events: Sequence[Event]) -> list[EventAck]:
        """Appends ``events`` in order (in requests of at most 128), after the events an outage
        left unanswered; their positions. Appends on one session take turns."""
        with self._turn:
            self._send_unacknowledged()
            self.ledger.queue(events)
            return self._send_unacknowledged()

    def append_planned(self, plan: Plan) -> list[EventAck]:
        """Appends the events ``plan(first_seq)`` answers, ``first_seq`` being the seq the first
        of them gets: for a batch whose events name each other by seq (a tool call and its
        result), sent as one request (up to 128 events) rather than one per dependency.

        Raising means not written when no request of them reached the service (see
        ``TransportError.sent``): they are dropped, not sent again with the next write, so the
        caller's retry is their only copy. Any other failure keeps them, as ``append`` does."""
        with self._turn:
            self._send_unacknowledged()  # the backlog first: the queue holds the plan's alone
            self.ledger.queue(plan(self.ledger.next_seq + len(self.ledger.unacknowledged)))
            planned = len(self.ledger.unacknowledged)
            try:
                return self._send_unacknowledged()
            except errors.TransportError as e:
                self.ledger.never_sent(e, planned)
                raise

    def send_unacknowledged(self) -> None:
        """Sends the events an outage left unanswered (durable tools do before each call)."""
        with self._turn:
            self._send_unacknowledged()

    def _send_unacknowledged(self) -> list[EventAck]:
        acks: list[EventAck] = []
        while self.ledger.unacknowledged:
            try:
                appended = self.client.append(
                    self.session_id, self.ledger.epoch, self.ledger.batch(), writer_token=self.ledger.writer_token
                )
            except errors.ProblemError as e:
                self.ledger.failed(e)
                raise
            self.ledger.acknowledged(appended)
            acks.extend(appended.events)
        return acks

    def user_request(self, text: str) -> EventAck:
        """Appends a user's request."""
        return self.append(user_request(text))

    def model_response(self, model: str, text: str, **usage: Any) -> EventAck:
        """Appends a model's answer (``tokens_in``, ``tokens_out``, ``cost_micros``, ``started_at``, ``provider``)."""
        return self.append(model_response(model, text, **usage))

    def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall:
        """Records a tool call's request before it runs; the call, to record its result with."""
        ack = self.append(tool_call(tool, arguments, effect=effect, idempotency_key=idempotency_key))
        call = self.ledger.call_at(ack.seq)
        assert call is not None, "the ledger learns every acknowledged request"
        return call

    def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck:
        """Records ``call``'s result."""
        return self.append(tool_result(call, output, succeeded=succeeded))

    def checkpoint(self, workspace_revision: str | None = None) -> EventAck:
        """Records a checkpoint (after the events an outage left unanswered): where recovery
        starts reading."""
        with self._turn:
            self._send_unacknowledged()
            ack = self.client.checkpoint(
                self.session_id, self.ledger.epoch, workspace_revision, writer_token=self.ledger.writer_token
            )
            self.ledger.moved_to(ack.seq)
            return ack

    def close(self, outcome: TerminalOutcome = "Completed", reason: str | None = None) -> EventAck:
        """Ends the session (after the events an outage left unanswered); the service releases
        the writer lease with it."""
        with self._turn:
            self._send_unacknowledged()
            ack = self.client.close(
                self.session_id, self.ledger.epoch, outcome, reason, writer_token=self.ledger.writer_token
            )
            self.ledger.moved_to(ack.seq)
            self._stop_lease()
            return ack

    def hold_lease(self, writer: str | None = None) -> Lease:
        """Takes the writer lease of this writer's epoch and renews it every third of its TTL on a
        daemon thread, until ``close``, ``release_lease``, or the service refusing it (409: this
        writer was fenced, or leases are off). A lease says the harness is alive; it lets no one
        write. A process that dies stops renewing, and its lease lapses after the TTL."""
        lease = self.client.renew_lease(
            self.session_id, self.ledger.epoch, writer, writer_token=self.ledger.writer_token
        )
        self._stop_lease()
        stop = self._lease_stop = threading.Event()
        every = lease.ttl_ms / 3000

        def renew() -> None:
            while not stop.wait(every):
                try:
                    # In turn with appends and close: none renews after the close released it.
                    with self._turn:
                        if stop.is_set():
                            return
                        self.client.renew_lease(
                            self.session_id, self.ledger.epoch, writer, writer_token=self.ledger.writer_token
                        )
                except errors.Conflict:
                    return  # fenced (the lease is the new writer's), or leases turned off
                except errors.SessionlogError:
                    continue  # the next tick tries again; two misses leave the lease live

        threading.Thread(target=renew, name=f"sessionlog-lease-{self.session_id}", daemon=True).start()
        return lease

    def release_lease(self) -> None:
        """Stops renewing the writer lease and releases it: for a harness that stops running the
        session without ending it."""
        self._stop_lease()
        self.client.release_lease(self.session_id, self.ledger.epoch, writer_token=self.ledger.writer_token)

    def _stop_lease(self) -> None:
        if self._lease_stop is not None:
            self._lease_stop.set()
            self._lease_stop = None


class AsyncSession(_Writer[AsyncClient]):
    """One writer of one session, over an ``AsyncClient``: ``Session``'s methods, awaited."""

    def __init__(self, client: AsyncClient, ledger: SessionLedger, bundle: ResumeBundle | None = None) -> None:
        super().__init__(client, ledger, bundle)
        # Appends take turns: the ledger numbers events and matches answers in sending order.
        self._turn = asyncio.Lock()
        # The lease renewal task, while one runs (``hold_lease``).
        self._lease_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        client: AsyncClient,
        agent: str,
        title: str | None = None,
        session_id: str | None = None,
        *,
        name: str | None = None,
    ) -> AsyncSession:
        """Starts a session run by ``agent``: see ``Session.start``."""
        sid = session_id or new_session_id()
        try:
            opened = await client.create(agent, title, sid, name=name)
        except (errors.AlreadyStarted, errors.NameTaken) as e:
            if not _our_start(e, sid, session_id):
                raise
            opened = await client.claim(sid, agent)
        return cls(client, _opened_ledger(opened))

    @classmethod
    async def open_named(
        cls,
        client: AsyncClient,
        name: str,
        *,
        agent: str,
        writer: str | None = None,
        title: str | None = None,
        wait_for: float = 30.0,
    ) -> AsyncSession:
        """The writer of the session ``name``, started or taken over: see ``Session.open_named``."""
        named = await client.create_or_find(agent, name, title)
        if named.opened is not None:
            return cls(client, _opened_ledger(named.opened))
        return await cls.resume(client, named.session_id, writer or agent, wait_for=wait_for)

    @classmethod
    async def resume(
        cls,
        client: AsyncClient,
        session_id: str,
        writer: str,
        *,
        context_tokens: int | None = None,
        wait_for: float = 30.0,
    ) -> AsyncSession:
        """Takes ``session_id`` over as ``writer``: see ``Session.resume``."""
        bundle = await client.resume(session_id, writer, context_tokens)
        session = cls(client, SessionLedger.from_bundle(bundle), bundle)
        last_seq = int(bundle.state.get("last_seq", 0))
        for sid, seq in _projected_first(session_id, bundle.state):
            await await_projected(client, sid, seq, wait_for)
        if last_seq > 0:
            session.ledger.learn([e async for e in client.events(session_id, **_tool_kinds(last_seq))])
        return session

    async def wait_projected(self, seq: int, wait_for: float = 30.0) -> None:
        """Waits until range reads (the projection) hold the session's event ``seq``."""
        await await_projected(self.client, self.session_id, seq, wait_for)

    async def append(self, event: Event) -> EventAck:
        """Appends ``event``, after any event an outage left unanswered; its position."""
        return (await self.append_all([event]))[-1]

    async def append_all(self, events: Sequence[Event]) -> list[EventAck]:
        """Appends ``events`` in order: see ``Session.append_all``."""
        async with self._turn:
            await self._send_unacknowledged()
            self.ledger.queue(events)
            return await self._send_unacknowledged()

    async def append_planned(self, plan: Plan) -> list[EventAck]:
        """Appends the events ``plan(first_seq)`` answers: see ``Session.append_planned``."""
        async with self._turn:
            await self._send_unacknowledged()  # the backlog first: the queue holds the plan's alone
            self.ledger.queue(plan(self.ledger.next_seq + len(self.ledger.unacknowledged)))
            planned = len(self.ledger.unacknowledged)
            try:
                return await self._send_unacknowledged()
            except errors.TransportError as e:
                self.ledger.never_sent(e, planned)
                raise

    async def send_unacknowledged(self) -> None:
        """Sends the events an outage left unanswered (durable tools do before each call)."""
        async with self._turn:
            await self._send_unacknowledged()

    async def _send_unacknowledged(self) -> list[EventAck]:
        acks: list[EventAck] = []
        while self.ledger.unacknowledged:
            try:
                appended = await self.client.append(
                    self.session_id, self.ledger.epoch, self.ledger.batch(), writer_token=self.ledger.writer_token
                )
            except errors.ProblemError as e:
                self.ledger.failed(e)
                raise
            self.ledger.acknowledged(appended)
            acks.extend(appended.events)
        return acks

    async def user_request(self, text: str) -> EventAck:
        """Appends a user's request."""
        return await self.append(user_request(text))

    async def model_response(self, model: str, text: str, **usage: Any) -> EventAck:
        """Appends a model's answer."""
        return await self.append(model_response(model, text, **usage))

    async def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall:
        """Records a tool call's request before it runs."""
        ack = await self.append(tool_call(tool, arguments, effect=effect, idempotency_key=idempotency_key))
        call = self.ledger.call_at(ack.seq)
        assert call is not None, "the ledger learns every acknowledged request"
        return call

    async def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck:
        """Records ``call``'s result."""
        return await self.append(tool_result(call, output, succeeded=succeeded))

    async def checkpoint(self, workspace_revision: str | None = None) -> EventAck:
        """Records a checkpoint: see ``Session.checkpoint``."""
        async with self._turn:
            await self._send_unacknowledged()
            ack = await self.client.checkpoint(
                self.session_id, self.ledger.epoch, workspace_revision, writer_token=self.ledger.writer_token
            )
            self.ledger.moved_to(ack.seq)
            return ack

    async def close(self, outcome: TerminalOutcome = "Completed", reason: str | None = None) -> EventAck:
        """Ends the session: see ``Session.close``."""
        async with self._turn:
            await self._send_unacknowledged()
            ack = await self.client.close(
                self.session_id, self.ledger.epoch, outcome, reason, writer_token=self.ledger.writer_token
            )
            self.ledger.moved_to(ack.seq)
            self._stop_lease()
            return ack

    async def hold_lease(self, writer: str | None = None) -> Lease:
        """Takes the writer lease and renews it on a task of the running loop: see
        ``Session.hold_lease``."""
        lease = await self.client.renew_lease(
            self.session_id, self.ledger.epoch, writer, writer_token=self.ledger.writer_token
        )
        self._stop_lease()
        every = lease.ttl_ms / 3000

        async def renew() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    # In turn with appends and close (which cancels this task holding the turn).
                    async with self._turn:
                        await self.client.renew_lease(
                            self.session_id, self.ledger.epoch, writer, writer_token=self.ledger.writer_token
                        )
                except errors.Conflict:
                    return  # fenced (the lease is the new writer's), ended, or leases turned off
                except errors.SessionlogError:
                    continue  # the next tick tries again; two misses leave the lease live

        self._lease_task = asyncio.get_running_loop().create_task(renew(), name=f"sessionlog-lease-{self.session_id}")
        return lease

    async def release_lease(self) -> None:
        """Stops renewing the writer lease and releases it: see ``Session.release_lease``."""
        self._stop_lease()
        await self.client.release_lease(self.session_id, self.ledger.epoch, writer_token=self.ledger.writer_token)

    def _stop_lease(self) -> None:
        if self._lease_task is not None:
            self._lease_task.cancel()
            self._lease_task = None


def encode_json(value: Any) -> str:
    """A durable tool's default encoding of arguments and results."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


Encoder = Callable[[Any], str]
