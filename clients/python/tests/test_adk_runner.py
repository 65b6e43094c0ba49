"""An ADK agent on ``SessionlogSessionService``: a run's events are the session's, its durable
tool's call and result are in the log, and an agent killed with kill -9 after its
non-idempotent tool took effect resumes in a new process without a second effect (an
unrecorded call waits for an operator first).

Run as a script, this module is the harness the crash test starts and kills:

    python test_adk_runner.py --ingest URL --recovery URL --token T --service URL --tool NAME
        --effect EFFECT --session ID [--hang after-effect|after-record] [--resume]

It prints JSON lines: {"at": POINT}, then {"result": TEXT, "outputs": [...]} or {"error": CLASS}.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import pytest
from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import sessionlog
from counter_service import Counter
from harness_io import arguments, failed, hang_if, say
from processes import Harness
from sessionlog import current_call
from sessionlog.integrations.adk import SessionlogSessionService, session_name
from stackcorner import StackCorner

APP = "adk-crash-tests"
USER = "u1"


class ScriptedLlm(BaseLlm):
    """A model with no network: it calls ``tool`` with ``n=1`` until the conversation holds that
    tool's response, then answers with the response's result."""

    tool: str

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        answers = [
            p.function_response
            for c in llm_request.contents
            for p in c.parts or []
            if p.function_response is not None and p.function_response.name == self.tool
        ]
        if answers:
            text = f"counted: {(answers[-1].response or {}).get('result')}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
        else:
            call = types.FunctionCall(id=f"call-{uuid.uuid4().hex[:8]}", name=self.tool, args={"n": 1})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def agent(service: SessionlogSessionService, tool: str, effect: sessionlog.EffectClass, counter_url: str, hang: str | None) -> LlmAgent:
    async def count(n: int) -> str:
        """Counts once in the counter service."""
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{counter_url}/{tool}/calls/{current_call().idempotency_key}")
        hang_if("after-effect", hang)
        return str(answer.json()["output"])

    count.__name__ = tool

    def recorded(tool_: BaseTool, args: dict[str, Any], context: ToolContext, response: dict[str, Any]) -> None:
        # The durable tool has recorded its result; ADK has not saved the function response yet.
        hang_if("after-record", hang)

    return LlmAgent(
        name="counter",
        model=ScriptedLlm(model="scripted", tool=tool),
        instruction="Count once.",
        tools=[service.durable_tool(effect=effect)(count)],
        after_tool_callback=recorded,
    )


async def run(runner: Runner, session_id: str, text: str) -> tuple[str, list[Any]]:
    """Runs one turn; the agent's last text and every response of the tool in the session."""
    last = ""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        for part in (event.content.parts or []) if event.content else []:
            last = part.text or last
    session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    outputs = [
        (p.function_response.response or {}).get("result")
        for e in session.events
        for p in (e.content.parts or [] if e.content else [])
        if p.function_response is not None
    ]
    return last, outputs


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_agent_run_is_the_sessions_history(corner: StackCorner, token: str, counter: tuple[Counter, str]) -> None:
    service = SessionlogSessionService(corner.ingest_url, corner.recovery_url, token=token, writer="adk-runner")
    try:
        runner = Runner(app_name=APP, agent=agent(service, "adk_plain", "Idempotent", counter[1], None), session_service=service)
        session = await service.create_session(app_name=APP, user_id=USER)
        text, outputs = await run(runner, session.id, "count once")
        assert text == "counted: adk_plain effect #1"
        assert outputs == ["adk_plain effect #1"]
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        assert [e.author for e in stored.events] == ["user", "counter", "counter", "counter"]
        # The tool's call and result are sessionlog events of the session, keyed per session.
        async with sessionlog.AsyncClient(corner.ingest_url, corner.recovery_url, token=token) as client:
            sid = await client.find(session_name(APP, USER, session.id))
            assert sid is not None
            calls = [e async for e in client.events(sid, kinds=["ToolCallRequested", "ToolCallResult"])]
        assert [e.kind for e in calls] == ["ToolCallRequested", "ToolCallResult"]
        assert (calls[0].data or {})["tool"] == "adk_plain" and str(calls[0].idempotency_key).startswith(sid)
        # A second turn reads the first's history from the log: the model sees the response.
        text, outputs = await run(runner, session.id, "once more")
        assert (text, outputs) == ("counted: adk_plain effect #1", ["adk_plain effect #1"])
        assert counter[0].total("adk_plain") == 1
    finally:
        service.close()


def harness(
    corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, effect: str, session: str, *extra: str
) -> Harness:
    return Harness("test_adk_runner.py", corner, token, counter[1], tool, effect, "--session", session, *extra)


def crash(corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, session: str, point: str) -> None:
    """Runs the harness until ``point`` of its first turn, and kills it there with kill -9."""
    first = harness(corner, token, counter, tool, "NonIdempotent", session, "--hang", point)
    assert first.next() == {"at": point}
    first.kill()


def resume(corner: StackCorner, token: str, counter: tuple[Counter, str], tool: str, session: str) -> dict[str, Any]:
    """Runs a new harness process on ``session`` to its end; its last line."""
    again = harness(corner, token, counter, tool, "NonIdempotent", session, "--resume")
    line = again.next()
    again.process.wait(timeout=60)
    return line


def test_a_killed_adk_runner_resumes_without_a_second_side_effect(corner: StackCorner, token: str, counter: tuple[Counter, str]) -> None:
    session = f"crash-{uuid.uuid4().hex[:8]}"
    crash(corner, token, counter, "adk_charge", session, "after-record")
    assert counter[0].total("adk_charge") == 1
    done = resume(corner, token, counter, "adk_charge", session)
    assert done["result"] == "counted: adk_charge effect #1", done
    assert counter[0].total("adk_charge") == 1, "the side effect happened exactly once"


def test_a_killed_adk_runner_whose_call_is_in_doubt_waits_for_an_operator(corner: StackCorner, token: str, counter: tuple[Counter, str]) -> None:
    session = f"doubt-{uuid.uuid4().hex[:8]}"
    crash(corner, token, counter, "adk_refund", session, "after-effect")
    assert counter[0].total("adk_refund") == 1
    stopped = resume(corner, token, counter, "adk_refund", session)
    assert stopped["error"] == "NeedsResolution", stopped
    assert counter[0].total("adk_refund") == 1
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as harness_client:
        sid = harness_client.find(session_name(APP, USER, session))
    assert sid is not None
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=corner.token("operator", "reader")) as c:
        [call_seq] = [int(seq) for seq in c.session(sid).state["pending_calls"]]
        c.resolve(sid, call_seq, succeeded=True, output='"adk_refund effect #1"', reason="the ledger shows one refund")
    done = resume(corner, token, counter, "adk_refund", session)
    assert done["result"] == "counted: adk_refund effect #1", done
    assert counter[0].total("adk_refund") == 1, "the operator's record stood in for a second run"


# -- the harness -----------------------------------------------------------------------------


async def main() -> int:
    parser = arguments(session_required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    service = SessionlogSessionService(args.ingest, args.recovery, token=args.token, writer=f"adk-harness-{uuid.uuid4().hex[:6]}")
    runner = Runner(app_name=APP, agent=agent(service, args.tool, args.effect, args.service, args.hang), session_service=service)
    try:
        if not args.resume:
            await service.create_session(app_name=APP, user_id=USER, session_id=args.session)
        text, outputs = await run(runner, args.session, "go on" if args.resume else "count once")
    except sessionlog.SessionlogError as e:
        return failed(e)
    finally:
        service.close()
    say(result=text, outputs=outputs)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
