"""Durable tools: a tool call that runs at most as often as its effect class allows, across crashes.

Frameworks re-run work after a crash (LangGraph re-runs an interrupted node from its start; an
agent loop asks its model again). A function wrapped by ``durable_tool`` records the call's
intent in the session's log before it runs and its result after. When the same call (the same
tool and key) comes again:

- its result is recorded: the recorded result is returned, and the function does not run;
- it was requested and its outcome never recorded (the harness died in between): it is
  settled by its effect class exactly as recovery settles it: a pure call runs again; an
  idempotent call runs again with the same key when its service never received it (recovery
  asked the service's resolver, and records the result itself when the service did); any other
  call raises ``CallInDoubt`` and the session waits for an operator.

A call's key names it to its service and to the log: two calls with equal keys are the same
call. By default it is a digest of the tool's name and arguments; pass ``key=`` to say which
arguments make a call distinct. Inside the function, ``current_call()`` gives the call's key to
send to the service.

A call that raises is recorded as failed, and the same call answers ``ToolFailed`` from then on
(give a retry its own key). If the result cannot be recorded (the service unreachable past the
client's retries), the caller gets the error and the result is kept: the next call of any
durable tool of the session records it first, and the same call then answers it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from .errors import ToolFailed
from .ledger import SessionLedger, ToolCall
from .models import EffectClass, EventAck
from .session import AsyncSession, Session, encode_json

P = ParamSpec("P")
R = TypeVar("R")


class BlockingWriter(Protocol):
    """What a blocking durable tool needs of its session's writer: ``Session`` has it, and so
    does a framework adapter that writes on a loop of its own (the LangGraph saver)."""

    @property
    def ledger(self) -> SessionLedger: ...

    def send_unacknowledged(self) -> None: ...

    def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall: ...

    def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck: ...


Writer = BlockingWriter | AsyncSession


@dataclass(frozen=True)
class CallInfo:
    """The durable call running now."""

    tool: str
    idempotency_key: str
    #: The seq of the call's request in the session.
    seq: int
    #: True when this run settles a call a crashed run left in doubt.
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


def default_key(tool: str, arguments: dict[str, Any]) -> str:
    """The key of a call named by its tool and arguments. Arguments that are not JSON (a
    framework's context object) would give every run another key, so they need ``key=``."""
    try:
        canonical = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"))
    except TypeError as e:
        raise TypeError(f"durable tool {tool!r}: its arguments are not all JSON ({e}); pass key= to name its calls") from e
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()[:32]}"


def decode_output(output: str) -> Any:
    """A recorded output: JSON when this library wrote it, else the text a resolver or an
    operator recorded."""
    try:
        return json.loads(output)
    except ValueError:
        return output


def _recorded(call: ToolCall, decode: Callable[[str], Any]) -> Any:
    result = call.result
    assert result is not None
    if result.output is None:
        raise ToolFailed(call.tool, call.seq, "its recorded output no longer opens (the session was erased)")
    if result.outcome != "Succeeded":
        raise ToolFailed(call.tool, call.seq, result.output)
    return decode(result.output)


def durable_tool(
    session: Writer | Callable[[], Writer],
    *,
    effect: EffectClass,
    key: Callable[..., str] | None = None,
    name: str | None = None,
    decode: Callable[[str], Any] = decode_output,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Makes a function a durable tool of ``session`` (or of the session a callable answers, for
    tools defined before their session exists). An ``async def`` needs an ``AsyncSession``.
    Arguments and results are recorded as JSON."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        tool = name or fn.__name__

        def plan(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str, str]:
            target = session() if callable(session) and not isinstance(session, (Session, AsyncSession)) else session
            arguments = named_arguments(fn, args, kwargs)
            call_key = key(*args, **kwargs) if key is not None else default_key(tool, arguments)
            return target, call_key, encode_json(arguments)

        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                target, call_key, arguments = plan(args, kwargs)
                if not isinstance(target, AsyncSession):
                    raise TypeError(f"durable tool {tool!r} is async: it needs an AsyncSession")
                # A result an outage kept from the log goes there first: then it is recorded.
                await target.send_unacknowledged()
                kind, call = target.ledger.plan(tool, call_key)
                if kind == "recorded" and call is not None:
                    return _recorded(call, decode)
                if call is None:
                    call = await target.tool_call(tool, arguments, effect=effect, idempotency_key=call_key)
                token = _CURRENT.set(CallInfo(tool, call_key, call.seq, kind == "settle"))
                try:
                    value = await async_fn(*args, **kwargs)
                except Exception as e:
                    await target.tool_result(call, f"{type(e).__name__}: {e}", succeeded=False)
                    raise
                finally:
                    _CURRENT.reset(token)
                await target.tool_result(call, encode_json(value))
                return value

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            target, call_key, arguments = plan(args, kwargs)
            if isinstance(target, AsyncSession):
                raise TypeError(f"durable tool {tool!r} is blocking: it needs a Session, not an AsyncSession")
            target.send_unacknowledged()
            kind, call = target.ledger.plan(tool, call_key)
            if kind == "recorded" and call is not None:
                return _recorded(call, decode)
            if call is None:
                call = target.tool_call(tool, arguments, effect=effect, idempotency_key=call_key)
            token = _CURRENT.set(CallInfo(tool, call_key, call.seq, kind == "settle"))
            try:
                value = fn(*args, **kwargs)
            except Exception as e:
                target.tool_result(call, f"{type(e).__name__}: {e}", succeeded=False)
                raise
            finally:
                _CURRENT.reset(token)
            target.tool_result(call, encode_json(value))
            return value

        return cast(Callable[P, R], run)

    return wrap
