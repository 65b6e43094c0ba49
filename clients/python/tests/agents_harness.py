"""An OpenAI Agents SDK harness the crash tests run as a process and kill: an agent with a
scripted model (no network) calls one durable function tool that counts in the counter service.
It announces where it is on stdout and hangs at the point it is told to, so the test can kill -9
it there; run again with --resume, it goes on from the session's log.

    python agents_harness.py --ingest URL --recovery URL --token T --service URL --tool NAME
        --effect EFFECT --session NAME [--hang after-intent|after-effect] [--resume]

Prints JSON lines: {"at": POINT}, then {"result": FINAL_OUTPUT, "items": [...]} or {"error": CLASS}.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import httpx
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

import sessionlog
from harness_io import arguments, failed, hang_if, say
from sessionlog import current_call
from sessionlog.integrations.openai_agents import SessionlogSession


async def main() -> int:
    parser = arguments(session_required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    client = sessionlog.AsyncClient(args.ingest, args.recovery, token=args.token)
    session = SessionlogSession(args.session, client, writer="agents-harness", model="scripted")

    @function_tool(name_override=args.tool)
    @session.durable_tool(effect=args.effect, name=args.tool, key=lambda n: f"{args.session}-{n}")
    async def count(n: int) -> str:
        """Counts once in the counter service."""
        hang_if("after-intent", args.hang)
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{args.service}/{args.tool}/calls/{current_call().idempotency_key}")
        hang_if("after-effect", args.hang)
        return str(answer.json()["output"])

    # Like a real model asked again after a crash, the script calls the tool with a new call id.
    model = ScriptedModel(
        [[function_call(args.tool, {"n": 1}, call_id=f"call-{uuid.uuid4().hex[:8]}")], [assistant_message("counted")]]
    )
    agent = Agent(name="counter", instructions="Count once.", model=model, tools=[count])
    try:
        result = await Runner.run(
            agent, [] if args.resume else "count once", session=session, run_config=RunConfig(tracing_disabled=True)
        )
    except sessionlog.SessionlogError as e:
        return failed(e)
    say(result=result.final_output, items=await session.get_items())
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
