"""pytest plugin (``-p upstream_adk``) that runs ADK's own session service contract tests
(tests/unittests/sessions/test_session_service.py with the backend registry of its
``_conformance.py``, the files adk-tests.txt pins) against ``SessionlogSessionService``.

ADK's contract tests take the ``session_service`` fixture that ``_conformance`` defines and
``test_session_service`` imports by name. Before the test module is imported, this plugin
replaces that fixture with one giving ``SessionlogSessionService`` on the real services (one
parameter, ``sessionlog``), each test in a tenant of its own (see ``upstream_stack``), and
registers it as the one backend in ``_conformance.BACKENDS`` (no recorded divergences: what we
leave out is in deselected.tsv, with its reason). The module's other tests exercise ADK's own
backends (its SQL, SQLite and in-memory services, through their internals) and are not part of
the contract: they are not run, and the summary says how many. clients/python/upstream/run runs
it, with ``--noconftest`` (ADK's conftests set up its model clients, which no contract test
uses) and pytest-asyncio in auto mode, as ADK's own pytest settings have it.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sessionlog.integrations.adk import SessionlogSessionService
from upstream_stack import corner, deselect, terminal_summary, token, upstream_corner, upstream_tenant

__all__ = ["upstream_corner", "upstream_tenant"]

SUITE = "adk"
BACKEND = "sessionlog"
CONFORMANCE = "tests.unittests.sessions._conformance"
#: A module ``_conformance`` imports for its Redis backend, which adk-tests.txt does not pin
#: (the Redis backend is not under test here).
FAKE_REDIS = "tests.unittests.integrations.redis._fake_redis"

_not_run: list[str] = []


@pytest.fixture(params=[BACKEND])
async def session_service(upstream_tenant: str) -> AsyncIterator[SessionlogSessionService]:
    """``SessionlogSessionService`` on the run's corner of the stack, in the test's tenant."""
    service = SessionlogSessionService(
        corner().ingest_url, corner().recovery_url, token=token("harness", "reader"), writer="upstream-adk"
    )
    yield service
    service.close()


def _stand_in_for_fake_redis(rootdir: Path) -> None:
    """Registers a stand-in for the fake Redis client when its file is not there: the contract
    tests never construct the Redis backend once ours replaces the registry."""
    if (rootdir / (FAKE_REDIS.replace(".", "/") + ".py")).exists():
        return
    module = types.ModuleType(FAKE_REDIS)

    class FakeRedisAsync:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the Redis backend is not under test in clients/python/upstream/run adk")

    setattr(module, "FakeRedisAsync", FakeRedisAsync)  # noqa: B010
    sys.modules[FAKE_REDIS] = module


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: test_session_service binds `session_service` when it is imported.
    _stand_in_for_fake_redis(Path(str(config.rootpath)))
    conformance = importlib.import_module(CONFORMANCE)
    backend = conformance._Backend(BACKEND, make=None)  # `make` is unused: our fixture makes it
    conformance.BACKENDS[:] = [backend]
    setattr(conformance, "session_service", session_service)  # noqa: B010


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The contract tests are those that take our fixture; the rest test ADK's own backends.
    contract: list[pytest.Item] = []
    others: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        uses_ours = callspec is not None and callspec.params.get("session_service") == BACKEND
        (contract if uses_ours else others).append(item)
    if others:
        config.hook.pytest_deselected(items=others)
    _not_run[:] = [item.nodeid for item in others]
    items[:] = contract
    deselect(SUITE, config, items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _not_run:
        terminalreporter.write_line(
            f"not run: {len(_not_run)} tests of ADK's own backends (they do not take the session_service fixture)"
        )
    terminal_summary(SUITE, terminalreporter)
