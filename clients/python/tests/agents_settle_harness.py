"""An OpenAI Agents SDK harness for the lost-acknowledgement crash test: an agent looks something
up, then asks for a write that needs approval (a plain function tool that counts in the counter
service on every call: running it twice would show). Each step is a process; the run's state
goes from one to the next as the SDK's JSON checkpoint, in a file.

    python agents_settle_harness.py --ingest URL --recovery URL --token T --service URL --tool NAME
        --effect EFFECT --session NAME --state FILE --step park|approve|resume

- ``park``: runs until the write waits for approval; saves the checkpoint.
- ``approve``: approves, runs the write, and settles its call and output into the session. Like
  a harness that checkpoints before each write, it saves the checkpoint (which now holds the
  pending write) before the append; the append reaches the log, and the process hangs before
  the answer reaches the client, to be killed there (``{"at": "after-append"}``).
- ``resume``: a new process continues from the checkpoint: the SDK reconciles the pending write
  against the session and goes on to the final answer.

Prints JSON lines: {"at": POINT}, then {"result": FINAL_OUTPUT, "items": [...]} or {"error": CLASS}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from agents import Agent, RunConfig, Runner, RunState, StopAtTools, TResponseInputItem, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import sessionlog
from harness_io import arguments, failed, hang_if, say
from sessionlog.integrations.openai_agents import SessionlogSession

PARKED = "call_PARKED"


class AnswerLost(httpx.AsyncBaseTransport):
    """Sends every request; once ``armed``, the next append's answer never comes back: the
    process hangs after the service wrote it, before the client reads it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.armed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.armed and request.method == "POST" and request.url.path.endswith("/events"):
            await response.aread()
            hang_if("after-append", "after-append")
        return response


class CheckpointingSession(SessionlogSession):
    """Saves the run's checkpoint before the settle of the approved call is sent, and arms the
    transport so that its answer is lost."""

    def __init__(self, *args: Any, save: Any, transport: AnswerLost, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.save, self.transport = save, transport

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if any(i.get("type") == "function_call_output" and i.get("call_id") == PARKED for i in items):
            self.save()
            self.transport.armed = True
        await super().add_items(items)


def agent(service: str, tool: str, steps: list[ModelStep]) -> Agent[Any]:
    @function_tool(name_override="look_up")
    def look_up(query: str) -> str:
        return f"schema for {query}"

    @function_tool(name_override=tool, needs_approval=True)
    def write_thing(query: str) -> str:
        return str(httpx.post(f"{service}/{tool}/calls/{PARKED}").json()["output"])

    return Agent(
        name="writer", instructions="Look up, then write.", model=ScriptedModel(steps), tools=[look_up, write_thing],
        tool_use_behavior=StopAtTools(stop_at_tool_names=["finish"]),
    )


async def main() -> int:
    parser = arguments(session_required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--step", choices=["park", "approve", "resume"], required=True)
    args = parser.parse_args()
    state_file = Path(args.state)
    transport = AnswerLost()
    client = sessionlog.AsyncClient(args.ingest, args.recovery, token=args.token, transport=transport)
    config = RunConfig(tracing_disabled=True)
    # Each process has a model of its own: it answers the turns this step asks for.
    if args.step == "park":
        steps = [
            ModelStep(output=[function_call("look_up", {"query": "x"}, call_id="call_LOOKUP")]),
            ModelStep(output=[function_call(args.tool, {"query": "x"}, call_id=PARKED)]),
        ]
    else:
        steps = [ModelStep(output=[assistant_message("done")])]
    writer = agent(args.service, args.tool, steps)
    try:
        if args.step == "park":
            session = SessionlogSession(args.session, client, writer="agents-harness")
            first = await Runner.run(writer, "do the thing", session=session, run_config=config)
            state_file.write_text(json.dumps(first.to_state().to_json()))
            say(at="parked", interruptions=len(first.interruptions))
            return 0
        state = await RunState.from_json(writer, json.loads(state_file.read_text()))
        if args.step == "approve":
            state.approve(state.get_interruptions()[0])
            session = CheckpointingSession(
                args.session, client, writer="agents-harness",
                save=lambda: state_file.write_text(json.dumps(state.to_json())), transport=transport,
            )
        else:
            session = SessionlogSession(args.session, client, writer="agents-harness")
        result = await Runner.run(writer, state, session=session, run_config=config)
    except Exception as e:  # noqa: BLE001 - the test reads what went wrong (the SDK's UserError too)
        return failed(e)
    say(result=result.final_output, items=await session.get_items())
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
