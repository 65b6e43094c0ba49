"""pytest plugin (``-p upstream_agents``) that runs the OpenAI Agents SDK's own session tests
against ``SessionlogSession``: the SDK's in-repo sessions, ``SQLiteSession`` (tests/memory) and
the tests' in-memory ``SimpleListSession`` (tests/deferred_session_writes), are replaced by
``SessionlogSession`` on the real services before the test modules import them, each test in a
tenant of its own (see ``upstream_stack``). clients/python/upstream/run runs it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import agents
import pytest
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings

from sessionlog.client import AsyncClient
from sessionlog.integrations.openai_agents import SessionlogSession
from upstream_stack import corner, deselect, terminal_summary, token, upstream_corner, upstream_tenant

__all__ = ["upstream_corner", "upstream_tenant"]

SUITE = "openai-agents"


class UpstreamSession(SessionlogSession):
    """``SessionlogSession`` behind the constructors the SDK's tests call: ``SQLiteSession(id,
    db_path, sessions_table, messages_table, session_settings=...)`` and
    ``SimpleListSession(id="test")``. The database path and table names have no counterpart:
    the running test's tenant is the session's namespace. ``close`` is the one method of
    ``SQLiteSession`` the tests call that is not in the ``Session`` protocol."""

    def __init__(
        self,
        session_id: str = "test",
        db_path: str | Path | None = None,
        sessions_table: str | None = None,
        messages_table: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        *,
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        if history:
            # SimpleListSession(history=...) seeds items without awaiting; no selected test does.
            raise TypeError("UpstreamSession takes no seed history: add_items it")
        client = AsyncClient(corner().ingest_url, corner().recovery_url, token=token("harness", "reader"))
        super().__init__(session_id, client, writer="upstream-agents", session_settings=session_settings)

    def close(self) -> None:
        # The adapter's own close (its loop and connections), where the adapter has one.
        closing = getattr(super(), "close", None)
        if callable(closing):
            closing()


#: The classes replaced, to check that no test module kept one.
_REPLACED: list[type] = []


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: the test modules bind these names when they are imported.
    # The SDK's tests/ package, from the run's rootdir (the sdist's folder).
    simple_session = importlib.import_module("tests.utils.simple_session")
    _REPLACED[:] = [agents.SQLiteSession, simple_session.SimpleListSession]
    # setattr: the names are typed as the classes they had.
    setattr(agents, "SQLiteSession", UpstreamSession)  # noqa: B010
    setattr(simple_session, "SimpleListSession", UpstreamSession)  # noqa: B010


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test module (or the helpers it imported) holding a replaced class, or a subclass of one,
    # would test the SDK's session, not ours, and pass for the wrong reason.
    modules = {item.module for item in items if isinstance(item, pytest.Function) and item.module is not None}
    modules |= {sys.modules[name] for name in list(sys.modules) if name.startswith("tests.deferred_session_writes.")}
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, type) and any(issubclass(value, old) for old in _REPLACED):
                raise pytest.UsageError(f"{module.__name__}.{name} is the SDK's own session class: the substitution missed it")
    deselect(SUITE, config, items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminal_summary(SUITE, terminalreporter)
