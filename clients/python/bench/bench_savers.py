"""Our savers against the ones users would pick instead, side by side in one Python process.

LangGraph: ``SessionlogSaver`` against LangGraph's ``AsyncPostgresSaver``
(langgraph-checkpoint-postgres); the OpenAI Agents SDK: ``SessionlogSession`` against the SDK's
``SQLAlchemySession`` on asyncpg. Both sides run the same scripted turns: a user message, a
model that asks for a tool (fixed answers, no network), the tool's call, the model's answer.
On our side the tool is a durable tool (its intent and result recorded in the session's log,
what a harness of ours does); on theirs a plain function (the savers keep no tool calls).

For each load (1 session, 100 and 1,000 sessions at once by default) the two sides alternate
over several rounds (a warm-up round first, not counted; the side that goes first alternates
too), and each round prints turns per second, per-turn p50 and p99 for both and their ratios.
The summary gives each ratio's median and range (min-max) over the rounds, and the goals:
at 1,000 sessions ours/theirs turns/s >= 1.0, one session's p50 ours/theirs <= 2.

Run it with scripts/bench-savers (it starts what is needed); by hand:

    SESSIONLOG_BIN=target/release/sessionlog SESSIONLOG_BENCH_POSTGRES_URL=postgresql://... \\
      PYTHONPATH=clients/python/src python clients/python/bench/bench_savers.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' StackCorner starts our services

from stackcorner import StackCorner  # noqa: E402

# -- the scripted turn ----------------------------------------------------------------------------


def lookup(order: str) -> str:
    """The tool both sides call once a turn: a fixed answer (no I/O), so the savers are measured."""
    return f"order {order}: shipped"


def _append(left: list[dict[str, str]] | None, right: list[dict[str, str]] | None) -> list[dict[str, str]]:
    return (left or []) + (right or [])


class State(TypedDict):
    """The graph's state: the conversation, appended to by each node."""

    messages: Annotated[list[dict[str, str]], _append]


def build_graph(checkpointer: Any, tool: Callable[[str], str]) -> Any:
    """model -> tool -> model -> end: the scripted model asks for ``tool`` when the last message
    is the user's, and answers when it is the tool's. The tool node is blocking (our durable
    tools for LangGraph are), so LangGraph runs it on its executor on both sides."""
    from langgraph.graph import END, START, StateGraph

    async def model(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if last["role"] == "user":
            return {"messages": [{"role": "assistant", "tool": "lookup", "order": last["content"]}]}
        return {"messages": [{"role": "assistant", "content": f"done: {last['content']}"}]}

    def call_tool(state: State) -> dict[str, Any]:
        return {"messages": [{"role": "tool", "content": tool(state["messages"][-1]["order"])}]}

    def route(state: State) -> str:
        return "tool" if state["messages"][-1].get("tool") else END

    return (
        StateGraph(State)
        .add_node("model", model)
        .add_node("tool", call_tool)
        .add_edge(START, "model")
        .add_conditional_edges("model", route, ["tool", END])
        .add_edge("tool", "model")
        .compile(checkpointer=checkpointer)
    )


# -- the sides ------------------------------------------------------------------------------------

#: One side of a framework: ``setup`` makes what the round needs and returns the turn function
#: (session index, turn number -> awaitable) and a closer.
TurnFn = Callable[[int, int], Awaitable[None]]


@dataclass
class Side:
    name: str
    setup: Callable[[str], Awaitable[tuple[TurnFn, Callable[[], Awaitable[None]]]]]


def langgraph_ours(corner: StackCorner, token: str) -> Side:
    async def setup(tag: str) -> tuple[TurnFn, Callable[[], Awaitable[None]]]:
        from sessionlog.integrations.langgraph import SessionlogSaver

        saver = SessionlogSaver(corner.ingest_url, corner.recovery_url, token=token, writer="bench", catalogue=f"bench-{tag}")
        tool = saver.durable_tool(effect="Idempotent")(lookup)
        graph = build_graph(saver, tool)

        async def turn(session: int, n: int) -> None:
            config = {"configurable": {"thread_id": f"{tag}-{session}"}}
            out = await graph.ainvoke({"messages": [{"role": "user", "content": f"{session}-{n}"}]}, config, durability="sync")
            assert out["messages"][-1]["content"].startswith("done"), out

        async def close() -> None:
            await asyncio.to_thread(saver.close)

        return turn, close

    return Side("sessionlog", setup)


def langgraph_theirs(postgres_url: str, pool_size: int) -> Side:
    async def setup(tag: str) -> tuple[TurnFn, Callable[[], Awaitable[None]]]:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        # The settings LangGraph's documentation gives for a pool (autocommit, dict rows, no
        # prepared statements), with a fixed size so the pool does not grow during a round.
        pool = AsyncConnectionPool(
            postgres_url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        )
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        graph = build_graph(saver, lookup)

        async def turn(session: int, n: int) -> None:
            config = {"configurable": {"thread_id": f"{tag}-{session}"}}
            out = await graph.ainvoke({"messages": [{"role": "user", "content": f"{session}-{n}"}]}, config, durability="sync")
            assert out["messages"][-1]["content"].startswith("done"), out

        return turn, pool.close

    return Side("postgres", setup)


def _agent_turn_parts(n: int, session: int) -> tuple[Any, str]:
    from agents.testing import ScriptedModel, assistant_message, function_call

    model = ScriptedModel(
        [[function_call("lookup", {"order": f"{session}-{n}"}, call_id=f"call-{uuid.uuid4().hex[:12]}")], [assistant_message("done")]]
    )
    return model, f"where is order {session}-{n}?"


async def _run_agent(model: Any, tool: Any, message: str, session: Any) -> None:
    from agents import Agent, RunConfig, Runner

    agent = Agent(name="support", instructions="Look the order up.", model=model, tools=[tool])
    result = await Runner.run(agent, message, session=session, run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done", result.final_output


def agents_ours(corner: StackCorner, token: str) -> Side:
    async def setup(tag: str) -> tuple[TurnFn, Callable[[], Awaitable[None]]]:
        from agents import function_tool

        import sessionlog
        from sessionlog.integrations.openai_agents import SessionlogSession

        client = sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token)
        sessions: dict[int, tuple[Any, Any]] = {}

        def session_of(i: int) -> tuple[Any, Any]:
            if i not in sessions:
                session = SessionlogSession(f"{tag}-{i}", client, writer="bench", model="scripted")

                @function_tool(name_override="lookup")
                @session.durable_tool(effect="Idempotent", name="lookup")  # type: ignore[untyped-decorator]
                async def tool(order: str) -> str:
                    """Looks an order up."""
                    return lookup(order)

                sessions[i] = (session, tool)
            return sessions[i]

        async def turn(i: int, n: int) -> None:
            session, tool = session_of(i)
            model, message = _agent_turn_parts(n, i)
            await _run_agent(model, tool, message, session)

        async def close() -> None:
            await client.aclose()

        return turn, close

    return Side("sessionlog", setup)


def agents_theirs(postgres_url: str, pool_size: int) -> Side:
    async def setup(tag: str) -> tuple[TurnFn, Callable[[], Awaitable[None]]]:
        from agents import function_tool
        from agents.extensions.memory import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        url = postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1)
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)
        # Tables made once (create_tables on every session would check the catalogue each time).
        first = SQLAlchemySession(f"{tag}-setup", engine=engine, create_tables=True)
        await first.get_items()
        sessions: dict[int, Any] = {}

        @function_tool(name_override="lookup")
        async def tool(order: str) -> str:
            """Looks an order up."""
            return lookup(order)

        async def turn(i: int, n: int) -> None:
            session = sessions.setdefault(i, SQLAlchemySession(f"{tag}-{i}", engine=engine))
            model, message = _agent_turn_parts(n, i)
            await _run_agent(model, tool, message, session)

        return turn, engine.dispose

    return Side("postgres", setup)


# -- measuring ------------------------------------------------------------------------------------


@dataclass
class Result:
    turns: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.turns / self.seconds

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(side: Side, sessions: int, turns: int, deadline_s: float) -> Result:
    """``sessions`` sessions at once, each ``turns`` turns one after another; every turn timed."""
    tag = f"b{uuid.uuid4().hex[:10]}"
    turn, close = await side.setup(tag)
    latencies: list[float] = []

    async def one(i: int) -> None:
        for n in range(turns):
            started = time.perf_counter()
            await turn(i, n)
            latencies.append(time.perf_counter() - started)

    try:
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(sessions))), deadline_s)
        seconds = time.perf_counter() - started
    finally:
        await close()
    return Result(len(latencies), seconds, latencies)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


async def run(args: argparse.Namespace) -> int:
    postgres_url = os.environ.get("SESSIONLOG_BENCH_POSTGRES_URL")
    if not postgres_url:
        print("SESSIONLOG_BENCH_POSTGRES_URL is not set: run `scripts/postgres up` and source its postgres.env", file=sys.stderr)
        return 2
    workdir = Path(os.environ.get("SESSIONLOG_BENCH_DIR", "/tmp")) / f"bench-savers-{uuid.uuid4().hex[:8]}"
    workdir.mkdir(parents=True)
    corner = StackCorner.create(workdir, {})
    try:
        token = corner.token("harness", "reader")
        frameworks = {
            "langgraph": (langgraph_ours(corner, token), langgraph_theirs(postgres_url, args.pool)),
            "agents": (agents_ours(corner, token), agents_theirs(postgres_url, args.pool)),
        }
        print(f"services: {corner.ingest_url} (ingest), {corner.recovery_url} (recovery), logs in {workdir}")
        print(f"postgres pools: {args.pool} connections a side; loads: {args.sessions}; rounds: {args.rounds} + 1 warm-up")
        for framework in args.frameworks:
            ours, theirs = frameworks[framework]
            for sessions in args.sessions:
                turns = args.turns.get(sessions, max(1, 30 // sessions))
                rate_ratios: list[float] = []
                p50_ratios: list[float] = []
                p99_ratios: list[float] = []
                print(f"\n== {framework}: {sessions} session(s) at once, {turns} turn(s) each ==")
                print(f"{'round':>6} {'side':>10} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'seconds':>8}")
                for round_no in range(args.rounds + 1):
                    order = (ours, theirs) if round_no % 2 == 0 else (theirs, ours)
                    results: dict[str, Result] = {}
                    for side in order:
                        result = await measure(side, sessions, turns, args.deadline)
                        results[side.name] = result
                        label = "warm-up" if round_no == 0 else str(round_no)
                        print(
                            f"{label:>6} {side.name:>10} {result.rate:9.1f} {ms(result.quantile(0.5))} "
                            f"{ms(result.quantile(0.99))} {result.seconds:8.2f}",
                            flush=True,
                        )
                    if round_no == 0:
                        continue
                    a, b = results["sessionlog"], results["postgres"]
                    rate_ratios.append(a.rate / b.rate)
                    p50_ratios.append(a.quantile(0.5) / b.quantile(0.5))
                    p99_ratios.append(a.quantile(0.99) / b.quantile(0.99))
                    print(
                        f"{'':>6} {'ratio':>10} {rate_ratios[-1]:9.3f} {p50_ratios[-1]:8.3f} {p99_ratios[-1]:8.3f}  (sessionlog / postgres)"
                    )
                if not rate_ratios:
                    continue
                print(
                    f"summary {framework} {sessions}: turns/s ratio {spread(rate_ratios)}; "
                    f"p50 ratio {spread(p50_ratios)}; p99 ratio {spread(p99_ratios)}"
                )
                if sessions == 1000:
                    met = statistics.median(rate_ratios) >= 1.0
                    print(f"goal {framework}: at 1,000 sessions turns/s ratio >= 1.0: {'met' if met else 'MISSED'}")
                if sessions == 1:
                    met = statistics.median(p50_ratios) <= 2.0
                    print(f"goal {framework}: one session's p50 ratio <= 2: {'met' if met else 'MISSED'}")
        print("\n(one process; our LangGraph saver runs its calls on a loop thread of its own; the machine's cores are shared with the servers)")
        return 0
    finally:
        corner.stop()


def parse_turns(text: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in filter(None, text.split(",")):
        sessions, _, turns = part.partition(":")
        out[int(sessions)] = int(turns)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds after the warm-up (default 3)")
    parser.add_argument(
        "--sessions", type=lambda s: [int(x) for x in s.split(",")], default=[1, 100, 1000], help="loads, e.g. 1,100,1000"
    )
    parser.add_argument(
        "--turns", type=parse_turns, default=parse_turns("1:30,100:3,1000:2"),
        help="turns per session for each load, e.g. 1:30,100:3,1000:2 (the default)",
    )
    parser.add_argument(
        "--frameworks", type=lambda s: s.split(","), default=["langgraph", "agents"], help="langgraph,agents (both by default)"
    )
    parser.add_argument("--pool", type=int, default=20, help="connections in each Postgres side's pool (default 20)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds one side of one round may take (default 600)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
