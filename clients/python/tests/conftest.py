"""Fixtures: one corner of the real stack for the whole run, and the tool service."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from counter_service import Counter, serve  # noqa: E402
from stackcorner import StackCorner  # noqa: E402

#: Tools the counter service dedupes by key (the others take effect on every call).
IDEMPOTENT_TOOLS = {"counter", "reissued", "agent_counter", "agent_reissued", "graph_counter", "fork_counter", "retried"}


@pytest.fixture(scope="session")
def counter() -> Iterator[tuple[Counter, str]]:
    service = Counter(IDEMPOTENT_TOOLS)
    server, url = serve(service)
    yield service, url
    server.shutdown()


@pytest.fixture(scope="session")
def corner(tmp_path_factory: pytest.TempPathFactory, counter: tuple[Counter, str]) -> Iterator[StackCorner]:
    _, url = counter
    # Recovery asks the service what became of an idempotent call by its key; the `reissued`
    # tools have a resolver too, and the crash tests kill their harness before the call reaches
    # the service. Each test module counts on tools of its own.
    resolvers = {tool: f"{url}/{tool}/calls" for tool in IDEMPOTENT_TOOLS}
    corner = StackCorner.create(tmp_path_factory.mktemp("stack"), resolvers)
    yield corner
    corner.stop()


@pytest.fixture(scope="session")
def token(corner: StackCorner) -> str:
    """A token for a harness that also reads history (resume needs both)."""
    return corner.token("harness", "reader")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Prints the LangGraph conformance suite's result under pytest's own summary line."""
    from test_langgraph import SUMMARY

    for line in SUMMARY:
        terminalreporter.write_line(line)
