"""Durable tools: a tool call that runs at most as often as its effect class allows, across crashes.

Frameworks re-run work after a crash (LangGraph re-runs an interrupted node from its start; an
agent loop asks its model again). A function wrapped by ``durable_tool`` records the call's
intent in the session's log before it runs and its result after. When the same call comes again:

- its result is recorded: the recorded result is returned, and the function does not run;
- it was requested and its outcome never recorded (the harness died in between, or the function
  raised without saying it failed definitively): it is settled by its effect class as recovery
  settles it: a pure call runs again; an idempotent call runs again with the same key (after a
  crash, when its service's resolver says it never arrived; recovery records the result itself
  when it did); any other call raises ``CallInDoubt`` until an operator records what it did
  (``sessionlog resolve``).

Which invocation is "the same call":

- with ``key=``: the call with that key, which is sent to the service exactly as given (two
  invocations with equal keys are one call);
- by default: the n-th invocation of the tool with equal arguments in the session (a LangGraph
  tool's in its task). A run after a crash counts again from the start, so its n-th invocation
  finds the n-th call the log records, while a new invocation is a new call. Its key is
  ``{session_id}.{digest}.{n}`` (URL-safe): unique per session and call, so a tool's service
  never answers another session's call, or a fork's own, with this one's execution. An
  invocation that raised without a definitive outcome is retried by the next invocation with
  equal arguments, which takes its place rather than being counted as a new call.

A fork (``Client.fork``, LangGraph's ``copy_thread``) inherits its ancestors' calls up to the
fork point: once ``resume`` has taken it over, a re-run there of a call recorded before the fork
point answers the recorded result without running (matched by tool, argument digest and
occurrence, not by the key that names the parent). An inherited call without a result runs as a
call of the fork (an idempotent one under its first key, so that its service dedupes it).

Failures:

- ``raise ToolFailedDefinitively("...")`` (or an exception of a class given in ``definitive=``)
  says the call failed and did nothing a retry would repeat: it is recorded as ``Failed``, the
  caller gets the exception, and the same call answers ``ToolFailed`` from then on (a retry
  with equal arguments is a new call, and runs);
- a ``Pure`` call's exception is recorded the same way: it did nothing, so its failure is all
  there is to know, and an agent's conversation keeps the error its model was shown;
- any other exception of an ``Idempotent`` or ``NonIdempotent`` call (a timeout after the
  service may have acted, a bug in the client) leaves the outcome unknown and records nothing.
  The call is in doubt, and when it comes again a ``NonIdempotent`` call raises ``CallInDoubt``
  (it never runs a second time on a guess) and an ``Idempotent`` one is reissued with its key
  (its service dedupes it, and answers what it did the first time);
- if the result cannot be recorded (the service unreachable past the client's retries), the
  caller gets the error and the result is kept: the next call of any durable tool of the session
  records it first, and the same call then answers it.

Threads and asyncio tasks may share a session: a call is planned by one caller at a time, and a
caller of a call that another runs now waits for it, then answers its recorded result (or finds
it in doubt). Inside the function, ``current_call()`` gives the call's key to send to the service.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import dataclasses
import datetime
import enum
import json
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from .errors import ToolFailed, ToolFailedDefinitively
from .ledger import CallName, Flight, Occurrences, SessionLedger, ToolCall
from .models import EffectClass, EventAck
from .session import AsyncSession, Session, encode_json

P = ParamSpec("P")
R = TypeVar("R")


class BlockingWriter(Protocol):
    """What a blocking durable tool needs of its session's writer: ``Session`` has it, and so
    does a framework adapter that writes on a loop of its own (the LangGraph saver)."""

    @property
    def ledger(self) -> SessionLedger: ...

    @property
    def occurrences(self) -> Occurrences: ...

    def send_unacknowledged(self) -> None: ...

    def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall: ...

    def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck: ...


class AsyncWriter(Protocol):
    """What an ``async def`` durable tool needs of its session's writer: ``AsyncSession`` has it,
    and so does a framework adapter that writes on a loop of its own (the OpenAI Agents session)."""

    @property
    def ledger(self) -> SessionLedger: ...

    @property
    def occurrences(self) -> Occurrences: ...

    async def send_unacknowledged(self) -> None: ...

    async def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall: ...

    async def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck: ...


Writer = BlockingWriter | AsyncWriter | AsyncSession


@dataclass(frozen=True)
class CallInfo:
    """The durable call running now."""

    tool: str
    idempotency_key: str
    #: The seq of the call's request in the session.
    seq: int
    #: True when this run settles a call an earlier run left without a result (a crash, or an
    #: exception that left it in doubt).
    repeat: bool


_CURRENT: ContextVar[CallInfo | None] = ContextVar("sessionlog_durable_call", default=None)


def current_call() -> CallInfo:
    """The durable call running now (its key is what an idempotent service dedupes by)."""
    info = _CURRENT.get()
    if info is None:
        raise RuntimeError("current_call() is only defined inside a durable tool")
    return info


def named_arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by parameter name (``{"n": 7}`` whether ``f(7)`` or ``f(n=7)``), as the
    log records them."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {"args": list(args), "kwargs": kwargs}
    bound.apply_defaults()
    return dict(bound.arguments)


def json_value(value: Any) -> Any:
    """``value`` as a model's JSON holds it, for ``json.dumps(default=...)``: a pydantic model
    dumped in JSON mode, a dataclass as a dict, an enum its value, a date or time in ISO
    format. ``TypeError`` for anything else (a framework's context object)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # fields go through here too
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_or_text(value: Any) -> Any:
    try:
        return json_value(value)
    except TypeError:
        return str(value)


def encode_arguments(arguments: dict[str, Any]) -> str:
    """A durable call's arguments as recorded: as the model's JSON has them (see
    ``json_value``), so the call the model asked for is found by them; what has no JSON form
    as its text."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=_json_or_text)


def argument_digest(tool: str, arguments: dict[str, Any], scope: str | None = None) -> str:
    """The digest naming a call by its tool and arguments (and the part of the session its run
    covers, see ``Occurrences``). Arguments that are not JSON (a framework's context object)
    would give every run another digest, so they need ``key=``."""
    named: list[Any] = [tool, arguments] if scope is None else [tool, arguments, scope]
    try:
        canonical = json.dumps(named, sort_keys=True, separators=(",", ":"), default=json_value)
    except TypeError as e:
        raise TypeError(f"durable tool {tool!r}: its arguments are not all JSON ({e}); pass key= to name its calls") from e
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def decode_output(output: str) -> Any:
    """A recorded output: JSON when this library wrote it, else the text a resolver or an
    operator recorded."""
    try:
        return json.loads(output)
    except ValueError:
        return output


def _recorded(call: ToolCall | None, decode: Callable[[str], Any]) -> Any:
    assert call is not None and call.result is not None
    result = call.result
    if result.output is None:
        raise ToolFailed(call.tool, call.seq, "its recorded output no longer opens (the session was erased)")
    if result.outcome != "Succeeded":
        raise ToolFailed(call.tool, call.seq, result.output)
    return decode(result.output)


def _failure(error: BaseException) -> str:
    """The recorded output of a definitive failure."""
    if isinstance(error, ToolFailedDefinitively):
        return str(error) or type(error).__name__
    return f"{type(error).__name__}: {error}"


def _ends_the_call(error: BaseException, call: ToolCall, definitive: tuple[type[BaseException], ...]) -> bool:
    """Whether ``error`` is the call's outcome, to record as ``Failed``: the tool says so, or the
    call is pure (it did nothing, so its failure is all there is to know). A cancellation is not
    a failure of the call."""
    return isinstance(error, definitive) or (call.effect == "Pure" and isinstance(error, Exception))


#: One step of a durable call that does I/O or runs the tool: called, it answers its value
#: (a blocking writer) or an awaitable of it (an ``AsyncSession``, an ``async def`` tool).
Step = Callable[[], Any]


@dataclass(frozen=True)
class _Wait:
    """A step that waits for another caller's flight to land."""

    flight: Flight


Steps = Generator[Step | _Wait, Any, Any]


def _call(
    target: Writer,
    name: CallName,
    occurrences: Occurrences,
    effect: EffectClass,
    arguments: str,
    run: Step,
    decode: Callable[[str], Any],
    definitive: tuple[type[BaseException], ...],
) -> Steps:
    """One durable call as steps, with no I/O of its own: ``_blocking`` and ``_awaiting`` run
    them, so the blocking and the async tools share one account of what happens when."""
    ledger, tool = target.ledger, name.tool
    # Whether the caller got an outcome it can rely on; if not, the next equal invocation is
    # this one's retry (see ``Occurrences``).
    settled = False
    try:
        while True:
            # A result an outage kept from the log goes there first: then it is recorded.
            yield target.send_unacknowledged
            plan = ledger.plan_call(name)
            if plan.kind == "recorded":
                settled = True
                return _recorded(plan.call, decode)
            assert plan.flight is not None
            if plan.kind != "wait":
                break
            current = _CURRENT.get()
            if current is not None and (current.tool, current.idempotency_key) == (tool, plan.key):
                raise RuntimeError(f"durable tool {tool!r} calls itself as the same call ({plan.key}): it would wait forever")
            yield _Wait(plan.flight)
        with plan.flight:
            call = plan.call
            if call is None:
                call = yield functools.partial(target.tool_call, tool, arguments, effect=effect, idempotency_key=plan.key)
            token = _CURRENT.set(CallInfo(tool, plan.key, call.seq, plan.kind == "settle"))
            try:
                value = yield run
            except BaseException as e:
                if not _ends_the_call(e, call, definitive):
                    ledger.left_in_doubt(call)
                    raise
                yield functools.partial(target.tool_result, call, _failure(e), succeeded=False)
                settled = True
                raise
            finally:
                _CURRENT.reset(token)
            yield functools.partial(target.tool_result, call, encode_json(value))
            settled = True
            return value
    finally:
        if not settled:
            occurrences.leave_open(name)


class _Driver:
    """Where a driver is in a call's steps: the last step's value or error, to send back in."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.value: Any = None
        self.error: BaseException | None = None
        self.result: Any = None

    def next(self) -> Step | _Wait | None:
        """The next step, or ``None`` when the call is done (its value in ``result``)."""
        error, self.error = self.error, None
        try:
            return self.steps.throw(error) if error is not None else self.steps.send(self.value)
        except StopIteration as stop:
            self.result = stop.value
            return None

    @contextmanager
    def step(self) -> Iterator[None]:
        # Every error goes back into the steps (a cancellation too): they decide what it leaves.
        try:
            yield
        except BaseException as e:  # noqa: BLE001 - re-raised by the steps
            self.error = e


def _blocking(steps: Steps) -> Any:
    driver = _Driver(steps)
    while (step := driver.next()) is not None:
        with driver.step():
            driver.value = step.flight.wait() if isinstance(step, _Wait) else step()
    return driver.result


async def _awaiting(steps: Steps) -> Any:
    driver = _Driver(steps)
    while (step := driver.next()) is not None:
        with driver.step():
            driver.value = await (step.flight.wait_async() if isinstance(step, _Wait) else step())
    return driver.result


def durable_tool(
    session: Writer | Callable[[], Writer],
    *,
    effect: EffectClass,
    key: Callable[..., str] | None = None,
    name: str | None = None,
    decode: Callable[[str], Any] = decode_output,
    definitive: tuple[type[BaseException], ...] = (),
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Makes a function a durable tool of ``session`` (or of the session a callable answers, for
    tools defined before their session exists). An ``async def`` needs an ``AsyncSession``.
    Arguments and results are recorded as JSON. ``key`` names a call by its arguments (its key
    is sent as given); ``definitive`` lists exception classes that mean the call failed and did
    nothing, like ``ToolFailedDefinitively``."""
    failures: tuple[type[BaseException], ...] = (ToolFailedDefinitively, *definitive)

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        tool = name or fn.__name__
        asynchronous = inspect.iscoroutinefunction(fn)

        def steps(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Steps:
            target = session() if callable(session) and not isinstance(session, (Session, AsyncSession)) else session
            if asynchronous != inspect.iscoroutinefunction(target.tool_call):
                needs = "an AsyncSession" if asynchronous else "a Session, not an AsyncSession"
                raise TypeError(f"durable tool {tool!r} is {'async' if asynchronous else 'blocking'}: it needs {needs}")
            arguments = named_arguments(fn, args, kwargs)
            counts = target.occurrences
            if key is not None:
                call_name = target.ledger.name_call(tool, key=key(*args, **kwargs))
            else:
                digest = argument_digest(tool, arguments, counts.scope)
                call_name = target.ledger.name_call(tool, digest=digest, occurrences=counts)
            run = functools.partial(fn, *args, **kwargs)
            return _call(target, call_name, counts, effect, encode_arguments(arguments), run, decode, failures)

        if asynchronous:

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await _awaiting(steps(args, kwargs))

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            return _blocking(steps(args, kwargs))

        return cast(Callable[P, R], run)

    return wrap
