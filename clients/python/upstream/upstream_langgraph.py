"""pytest plugin (``-p upstream_langgraph``) that runs LangGraph's own tests against
``SessionlogSaver``: it stands in for LangGraph's tests/conftest.py (whose fixtures open
Postgres, Redis and SQLite savers), giving ``sync_checkpointer`` and ``async_checkpointer`` as a
``SessionlogSaver`` on the real services, each test in a tenant of its own (see
``upstream_stack``), and the ``durability`` and ``anyio_backend`` fixtures as LangGraph's
conftest gives them. clients/python/upstream/run runs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sessionlog.integrations.langgraph import SessionlogSaver
from upstream_stack import corner, deselect, terminal_summary, token, upstream_corner, upstream_tenant

__all__ = ["upstream_corner", "upstream_tenant"]

SUITE = "langgraph"


def _saver() -> SessionlogSaver:
    # operator: the saver's copy_thread forks, which takes it.
    return SessionlogSaver(
        corner().ingest_url,
        corner().recovery_url,
        token=token("harness", "reader", "operator"),
        catalogue=f"upstream-{uuid.uuid4().hex[:8]}",
    )


# One parameter, as LangGraph's fixtures have one per backend: test ids read `test_x[sessionlog]`.
@pytest.fixture(params=["sessionlog"])
def sync_checkpointer(upstream_tenant: str) -> Iterator[SessionlogSaver]:
    saver = _saver()
    yield saver
    saver.close()


@pytest.fixture(params=["sessionlog"])
def async_checkpointer(upstream_tenant: str) -> Iterator[SessionlogSaver]:
    # The saver serves both faces from its own loop, so the async fixture is the same saver.
    saver = _saver()
    yield saver
    saver.close()


@pytest.fixture(params=["sync", "async", "exit"])
def durability(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(SUITE, config, items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminal_summary(SUITE, terminalreporter)
