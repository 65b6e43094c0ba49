"""What the framework adapters share: a session's writer whose steps run on the adapter's loop.

Each adapter keeps its asyncio objects (its client's connections, its ``AsyncSession`` writers,
their locks) on an event loop of its own, in a thread of its own, whichever loop (if any) its
callers run. A durable tool runs on the caller's side, so the writer it records its calls with
hands each step to the adapter's loop: ``LoopWriter`` for an ``async def`` tool (ADK, the OpenAI
Agents SDK), ``BlockingLoopWriter`` for a blocking one (LangGraph). How a step gets there (and
what a closed adapter answers) is the adapter's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ..ledger import Occurrences, SessionLedger, ToolCall
from ..models import EffectClass, EventAck
from ..session import AsyncSession

T = TypeVar("T")


class AwaitsOnLoop(Protocol):
    """Runs ``step()`` on the adapter's loop, awaited from whichever loop the caller runs."""

    def __call__(self, step: Callable[[], Coroutine[Any, Any, T]], /) -> Awaitable[T]: ...


class BlocksOnLoop(Protocol):
    """Runs ``step()`` on the adapter's loop, the calling thread waiting for its answer."""

    def __call__(self, step: Callable[[], Coroutine[Any, Any, T]], /) -> T: ...


class _OnLoop:
    """A writer of the adapter's loop and the calls it counts (see ``sessionlog.tools``)."""

    def __init__(self, writer: AsyncSession, occurrences: Occurrences) -> None:
        self._writer, self._occurrences = writer, occurrences

    @property
    def ledger(self) -> SessionLedger:
        return self._writer.ledger

    @property
    def occurrences(self) -> Occurrences:
        return self._occurrences


class LoopWriter(_OnLoop):
    """The writer as an ``async def`` durable tool on the caller's loop uses it (see
    ``sessionlog.tools.AsyncWriter``): each step runs on the adapter's loop. ``recorded`` hears
    of each call's request once the log holds it."""

    def __init__(
        self,
        writer: AsyncSession,
        occurrences: Occurrences,
        on_loop: AwaitsOnLoop,
        *,
        recorded: Callable[[ToolCall], object] | None = None,
    ) -> None:
        super().__init__(writer, occurrences)
        self._on_loop, self._recorded = on_loop, recorded

    async def send_unacknowledged(self) -> None:
        await self._on_loop(self._writer.send_unacknowledged)

    async def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall:
        call = await self._on_loop(
            lambda: self._writer.tool_call(tool, arguments, effect=effect, idempotency_key=idempotency_key)
        )
        if self._recorded is not None:
            self._recorded(call)
        return call

    async def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck:
        return await self._on_loop(lambda: self._writer.tool_result(call, output, succeeded=succeeded))


class BlockingLoopWriter(_OnLoop):
    """The writer as a blocking durable tool uses it (see ``sessionlog.tools.BlockingWriter``):
    each step runs on the adapter's loop while the tool's thread waits."""

    def __init__(self, writer: AsyncSession, occurrences: Occurrences, on_loop: BlocksOnLoop) -> None:
        super().__init__(writer, occurrences)
        self._on_loop = on_loop

    def send_unacknowledged(self) -> None:
        self._on_loop(self._writer.send_unacknowledged)

    def tool_call(
        self, tool: str, arguments: str, *, effect: EffectClass, idempotency_key: str | None = None
    ) -> ToolCall:
        return self._on_loop(
            lambda: self._writer.tool_call(tool, arguments, effect=effect, idempotency_key=idempotency_key)
        )

    def tool_result(self, call: ToolCall, output: str, *, succeeded: bool = True) -> EventAck:
        return self._on_loop(lambda: self._writer.tool_result(call, output, succeeded=succeeded))
