"""A LangGraph harness the crash tests run as a process and kill: a graph whose first node
counts once in the counter service through a durable tool and whose second node waits for a
human approval (`interrupt`). It announces where it is on stdout and hangs at the point it is
told to, so the test can kill -9 it there.

    python graph_harness.py --ingest URL --recovery URL --token T --service URL --tool NAME
        --effect EFFECT --session THREAD [--hang after-intent|after-effect] [--resume | --approve]

Without --resume/--approve it starts the thread; --resume runs it on from its last checkpoint
(LangGraph runs an interrupted node again from its start); --approve answers the approval.
Prints JSON lines: {"at": POINT}, {"waiting": QUESTION}, {"result": STATE} or {"error": CLASS}.
"""

from __future__ import annotations

import sys
from typing import Any, TypedDict

import httpx
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import sessionlog
from harness_io import arguments, failed, hang_if, say
from sessionlog import current_call
from sessionlog.integrations.langgraph import SessionlogSaver


class Ticket(TypedDict, total=False):
    counted: str
    approved: bool


def main() -> int:
    parser = arguments(session_required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--approve", action="store_true")
    args = parser.parse_args()
    # A catalogue of its own: test runs share the key store, and a fixed name would meet its
    # session again under another run's key-encryption key.
    saver = SessionlogSaver(
        args.ingest, args.recovery, token=args.token, writer="graph-harness", catalogue=f"crash-{args.session}"
    )

    @saver.durable_tool(effect=args.effect, name=args.tool, key=lambda n: f"{args.session}-{n}")
    def count(n: int) -> str:
        hang_if("after-intent", args.hang)
        answer = httpx.post(f"{args.service}/{args.tool}/calls/{current_call().idempotency_key}")
        hang_if("after-effect", args.hang)
        return str(answer.json()["output"])

    def count_once(state: Ticket) -> Ticket:
        return {"counted": count(1)}

    def approval(state: Ticket) -> Ticket:
        return {"approved": bool(interrupt({"question": f"ship {state['counted']}?"}))}

    graph = (
        StateGraph(Ticket)
        .add_node("count_once", count_once)
        .add_node("approval", approval)
        .add_edge(START, "count_once")
        .add_edge("count_once", "approval")
        .add_edge("approval", END)
        .compile(checkpointer=saver)
    )
    config: Any = {"configurable": {"thread_id": args.session}}
    # durability="sync": each checkpoint is in the log before the next step runs (LangGraph's
    # default writes them in the background, and a kill -9 can lose the last ones).
    try:
        if args.approve:
            result = graph.invoke(Command(resume=True), config, durability="sync")
        else:
            result = graph.invoke(None if args.resume else {}, config, durability="sync")
    except sessionlog.SessionlogError as e:
        return failed(e)
    if "__interrupt__" in result:
        say(waiting=result["__interrupt__"][0].value["question"])
        hang_if("waiting", args.hang)
    else:
        say(result=result)
    saver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
