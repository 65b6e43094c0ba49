"""What the framework adapters share: a session's writer whose steps run on the adapter's loop.

Each adapter keeps its asyncio objects (its client's connections, its ``AsyncSession`` writers,
their locks) on an event loop of its own, in a thread of its own, whichever loop (if any) its
callers run. A durable tool runs on the caller's side, so the writer it records its calls with
hands each step to the adapter's loop: ``LoopWriter`` for an ``async def`` tool (ADK, the OpenAI
Agents SDK), ``BlockingLoopWriter`` for a blocking one (LangGraph). How a step gets there (and
what a closed adapter answers) is ``AdapterLoop``'s, or the adapter's own (the OpenAI Agents
session starts its loop lazily and survives ``os.fork``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from .. import errors
from ..client import AsyncClient
from ..ledger import Occurrences, SessionLedger, ToolCall
from ..models import EffectClass, EventAck
from ..session import AsyncSession

T = TypeVar("T")


def serve(loop: asyncio.AbstractEventLoop, client: AsyncClient) -> None:
    """An adapter's loop thread: runs the loop until stopped, then closes the client's
    connections and the loop, on the thread they belong to."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        # Stopped (closed, or the adapter collected): what is still running is cancelled, so
        # its callers get an answer.
        while pending := asyncio.all_tasks(loop):
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()


def stop(loop: asyncio.AbstractEventLoop) -> None:
    """Stops ``loop`` from any thread (a closed loop is stopped already)."""
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:
        pass  # closed already


class AdapterLoop:
    """An adapter's event loop, running ``client``'s work in a thread of its own from
    construction until ``close``. ``what`` names the adapter in its errors.

    Work is submitted under the lock ``close`` takes, so no work reaches a stopped loop: work
    submitted after ``close`` is refused at once (``SessionlogError`` naming the close), and
    work already submitted is cancelled by the loop's last turn, its caller told why."""

    def __init__(self, client: AsyncClient, *, name: str, what: str) -> None:
        self._what = what
        self._loop = asyncio.new_event_loop()
        self._submitting = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=serve, args=(self._loop, client), name=name, daemon=True)
        self._thread.start()

    def _submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._submitting:
            if self._closed:
                work.close()  # never awaited: say so to nobody
                raise errors.SessionlogError(f"{self._what} is closed (close() was called): make a new one")
            return asyncio.run_coroutine_threadsafe(work, self._loop)

    def _closed_during_call(self) -> errors.SessionlogError:
        return errors.SessionlogError(f"{self._what} was closed (close() was called) during the call")

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs ``work`` on the loop, the calling thread waiting for its answer."""
        future = self._submit(work)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closed:
                raise self._closed_during_call() from None
            raise

    async def wait(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs ``work`` on the loop, awaited from whichever loop the caller runs."""
        future = self._submit(work)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            caller = asyncio.current_task()
            if self._closed and future.cancelled() and (caller is None or caller.cancelling() == 0):
                # The loop's last turn cancelled the work, not the caller: say why.
                raise self._closed_during_call() from None
            raise

    def close(self, timeout: float) -> None:
        """Stops the loop (cancelling the work still on it) and closes the client's connections,
        waiting up to ``timeout`` seconds for that (once; later calls do nothing)."""
        with self._submitting:
            if self._closed:
                return
            self._closed = True
        stop(self._loop)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)


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
