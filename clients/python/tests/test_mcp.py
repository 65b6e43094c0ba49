"""`sessionlog mcp` through the official Python MCP client (`mcp`), over Streamable HTTP with a
reader token narrowed to the session: it lists the tools and calls every one, reads the context
view and a left-out turn as resources, and a token for another session gets nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import mcp
import pytest
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from mcp.client.streamable_http import streamable_http_client
from pydantic import Field

import sessionlog
from sessionlog.session import model_response, user_request
from stackcorner import StackCorner

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def mcp_url(corner: StackCorner) -> Iterator[str]:
    """A `sessionlog mcp` server on the run's corner (no --session: each token names its own)."""
    yield corner.serve("mcp") + "/mcp"


@pytest.fixture(scope="module")
def conversation(corner: StackCorner, token: str) -> str:
    """A session of ten turns, a tool call with its result and a summary of seqs 2..=5."""
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token)
    session = sessionlog.Session.start(client, "py-mcp", "mcp test")
    for n in range(2, 12):
        session.append(user_request(f"question {n} about tides") if n % 2 == 0 else model_response("m", f"answer {n} about tides"))
    call = session.tool_call("tides", '{"port": "Bergen"}', effect="Idempotent", idempotency_key="tides-bergen")
    session.tool_result(call, "high water at 14:02")
    summary = session.append(("ContextSummarized", {"first_seq": 2, "last_seq": 5, "summarized_by": "m", "summary": {"Plain": "the early questions"}}, {}))
    session.wait_projected(summary.seq)
    return session.session_id


@pytest.fixture(scope="module")
def mcp_recovery_url(corner: StackCorner, mcp_url: str) -> str:
    """A recovery service whose resume bundles name the MCP server, with a reader token signed
    by the key the corner's services trust (``[recovery.mcp]``)."""
    settings = {
        "SESSIONLOG_RECOVERY__MCP__URL": mcp_url,
        "SESSIONLOG_RECOVERY__MCP__TOKEN_KEY_FILE": str(corner.workdir / "auth" / "signing-key.pem"),
    }
    return corner.serve("serve-recovery", "recovery-mcp", env=settings)


@pytest.fixture
def resumed(corner: StackCorner, token: str, mcp_recovery_url: str, conversation: str) -> sessionlog.McpAccess:
    """What a harness resuming the conversation is handed for its model: the bundle's MCP access."""
    client = sessionlog.Client(corner.ingest_url, mcp_recovery_url, token=token)
    session = sessionlog.Session.resume(client, conversation, "py-mcp-harness")
    assert session.bundle is not None and session.bundle.mcp is not None, "the bundle names no MCP server"
    return session.bundle.mcp


def text(result: mcp.types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, mcp.types.TextContent)
    return json.loads(block.text)


async def test_a_narrowed_reader_calls_every_tool_and_reads_the_left_out_turns(
    corner: StackCorner, mcp_url: str, conversation: str
) -> None:
    token = corner.token("reader", session=conversation)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with streamable_http_client(mcp_url, http_client=http) as streams:
            read_stream, write_stream = streams[0], streams[1]
            async with mcp.ClientSession(read_stream, write_stream) as client:
                info = await client.initialize()
                assert info.server_info.name == "sessionlog-mcp"
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"history_read", "history_search", "summary_expand", "call_lookup", "lineage"}

                read = text(await client.call_tool("history_read", {"from_seq": 2, "to_seq": 4}))
                assert read["seqs"] == [2, 3, 4]
                assert read["events"][0]["event"]["UserRequest"]["content"]["Plain"] == "question 2 about tides"

                found = text(await client.call_tool("history_search", {"query": "ANSWER 7"}))
                assert [(h["seq"], h["kind"]) for h in found["hits"]] == [(7, "ModelResponse")]
                assert "answer 7 about tides" in found["hits"][0]["snippet"]

                expanded = text(await client.call_tool("summary_expand", {"seq": 14}))
                assert expanded["summary"] == "the early questions"
                assert expanded["covered"]["seqs"] == [2, 3, 4, 5]

                call = text(await client.call_tool("call_lookup", {"idempotency_key": "tides-bergen"}))
                assert (call["request_seq"], call["result_seq"]) == (12, 13)
                assert call["result"]["event"]["ToolCallResult"]["output"]["Plain"] == "high water at 14:02"

                lineage = text(await client.call_tool("lineage", {}))
                assert lineage["session_id"] == conversation and lineage["ancestors"] == []

                refused = await client.call_tool("history_read", {"limit": 0})
                assert refused.is_error

                resources = {r.uri: r for r in (await client.list_resources()).resources}
                context_uri = f"sessionlog://sessions/{conversation}/context"
                assert context_uri in {str(uri) for uri in resources}
                turn = await client.read_resource(f"sessionlog://sessions/{conversation}/events/3")
                content = turn.contents[0]
                assert isinstance(content, mcp.types.TextResourceContents)
                assert json.loads(content.text)["events"][0]["event"]["ModelResponse"]["content"]["Plain"] == "answer 3 about tides"


async def test_a_token_for_another_session_or_none_gets_nothing(corner: StackCorner, mcp_url: str, conversation: str) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    none = httpx.post(mcp_url, json=initialize, headers=headers)
    assert none.status_code == 401
    assert "resource_metadata=" in none.headers["www-authenticate"]
    other = corner.token("reader", session="0190c6e2-5b7a-7c3e-9f00-1a2b3c4d5e6f")
    answer = httpx.post(mcp_url, json=initialize, headers={**headers, "Authorization": f"Bearer {other}"})
    assert answer.status_code == 404, answer.text
    tenant = corner.token("reader", session=conversation, tenant="another-tenant")
    answer = httpx.post(mcp_url, json=initialize, headers={**headers, "Authorization": f"Bearer {tenant}"})
    assert answer.status_code == 404, answer.text


async def test_an_agent_fetches_a_turn_its_view_left_out_into_its_next_model_call(
    mcp_url: str, resumed: sessionlog.McpAccess
) -> None:
    """The example wiring of docs/harnesses.md: on resume, an OpenAI Agents SDK agent given the
    MCP server the bundle names, with its token (a scripted model, no network), asks for seq 3,
    which the summary stands in for; the turn's text is in the input of its next model call."""
    from agents import Agent, RunConfig, Runner
    from agents.mcp import MCPServerStreamableHttp
    from agents.testing import ScriptedModel, assistant_message, function_call

    assert resumed.url == mcp_url and resumed.token is not None
    url, token = resumed.url, resumed.token
    model = ScriptedModel(
        [
            [function_call("history_read", {"from_seq": 3, "to_seq": 3}, call_id="call-fetch-3")],
            [assistant_message("The answer was about tides.")],
        ]
    )
    history = MCPServerStreamableHttp(
        params={"url": url, "headers": {"Authorization": f"Bearer {token}"}}, client_session_timeout_seconds=30
    )
    async with history:
        agent = Agent(name="coder", instructions="Fetch what you need.", model=model, mcp_servers=[history])
        result = await Runner.run(agent, "What did you answer at seq 3?", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "The answer was about tides."
    model.assert_complete()
    fetched = json.dumps(model.calls[1].input, default=str)
    assert "answer 3 about tides" in fetched, fetched
    assert "answer 3 about tides" not in json.dumps(model.calls[0].input, default=str)


async def mcp_tools(client: mcp.ClientSession) -> list[StructuredTool]:
    """The MCP server's tools as LangChain tools (what langchain-mcp-adapters does, which needs mcp<2):
    each call goes to the server, and a tool error is a message the model reads."""

    def bind(tool: mcp.types.Tool) -> StructuredTool:
        async def call(**arguments: Any) -> str:
            result = await client.call_tool(tool.name, arguments)
            answer = "\n".join(block.text for block in result.content if isinstance(block, mcp.types.TextContent))
            if result.is_error:
                raise ToolException(answer)
            return answer

        return StructuredTool(
            name=tool.name, description=tool.description or "", args_schema=tool.input_schema, coroutine=call, handle_tool_error=True
        )

    return [bind(tool) for tool in (await client.list_tools()).tools]


class ScriptedChatModel(BaseChatModel):
    """Answers each call with the next scripted message and keeps the messages each call was given."""

    script: list[AIMessage]
    calls: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, *, tool_choice: str | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script[len(self.calls) - 1])])


async def test_a_langgraph_agent_fetches_a_turn_its_view_left_out_into_its_next_model_call(
    mcp_url: str, resumed: sessionlog.McpAccess
) -> None:
    """The example wiring of docs/harnesses.md: on resume, a LangGraph agent (a model node and a
    ToolNode) whose tools are those of the MCP server the bundle names, with its token and a
    scripted model, asks for seq 3, which the summary stands in for; the turn's text is in the
    input of its next model call."""
    assert resumed.url == mcp_url and resumed.token is not None
    url, token = resumed.url, resumed.token
    model = ScriptedChatModel(
        script=[
            AIMessage(content="", tool_calls=[tool_call(name="history_read", args={"from_seq": 3, "to_seq": 3}, id="call-fetch-3")]),
            AIMessage(content="The answer was about tides."),
        ]
    )
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with mcp.ClientSession(read, write) as client:
                await client.initialize()
                tools = await mcp_tools(client)
                assert {tool.name for tool in tools} == {"history_read", "history_search", "summary_expand", "call_lookup", "lineage"}
                bound = model.bind_tools(tools)

                async def think(state: MessagesState) -> MessagesState:
                    return {"messages": [await bound.ainvoke(state["messages"])]}

                graph = (
                    StateGraph(MessagesState)
                    .add_node("model", think)
                    .add_node("tools", ToolNode(tools))
                    .add_edge(START, "model")
                    .add_conditional_edges("model", tools_condition)
                    .add_edge("tools", "model")
                    .compile()
                )
                result = await graph.ainvoke({"messages": [HumanMessage("What did you answer at seq 3?")]})
    assert result["messages"][-1].content == "The answer was about tides."
    assert len(model.calls) == 2
    seen = [" ".join(str(message.content) for message in call) for call in model.calls]
    assert "answer 3 about tides" not in seen[0]
    assert "answer 3 about tides" in seen[1], seen[1]
