"""What both upstream plugins share: one private corner of the stack for the run (the Python
tests' ``StackCorner``: its own topic and keyspace, the built binary's projector, ingest and
recovery), and for each test a tenant of its own, so that the session ids and thread ids the
frameworks' tests hard-code ("test", "session_1", "1") name a fresh session in every test.

A tenant, not a prefix on the id: the SDK records ``session.session_id`` in the run state it
hands back and checks it on resume, so the id must stay the one the test chose.
"""

from __future__ import annotations

import fcntl
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The Python tests' helpers (stackcorner.py) live beside the package's tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from stackcorner import StackCorner  # noqa: E402

_corner: StackCorner | None = None
_test_tenant: str | None = None
_tokens: dict[str, str] = {}
_minting = threading.Lock()


def corner() -> StackCorner:
    """The run's corner of the stack (started by the ``upstream_corner`` fixture)."""
    if _corner is None:
        raise RuntimeError("no stack corner: the upstream plugin's session fixture did not run")
    return _corner


def tenant() -> str:
    """The running test's tenant."""
    if _test_tenant is None:
        raise RuntimeError("a session was made outside a test (no tenant for it)")
    return _test_tenant


def token(*roles: str) -> str:
    """A token of the running test's tenant with ``roles``, minted on first use (most tests of
    settings and helpers make no session and mint none)."""
    key = f"{tenant()} {' '.join(roles)}"
    with _minting:
        if key not in _tokens:
            _tokens[key] = corner().token(*roles, subject="upstream-suite", tenant=tenant())
        return _tokens[key]


@pytest.fixture(scope="session", autouse=True)
def upstream_corner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackCorner]:
    global _corner
    # One corner at a time on this machine: a corner picks free ports and binds them a moment
    # later, so pytest-xdist's workers starting theirs at once would pick the same port.
    with open(Path(tempfile.gettempdir()) / "sessionlog-upstream-corner.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _corner = StackCorner.create(tmp_path_factory.mktemp("stack"), resolvers={})
    yield _corner
    _corner.stop()
    _corner = None


@pytest.fixture(autouse=True)
def upstream_tenant(request: pytest.FixtureRequest) -> Iterator[str]:
    """A tenant named after nothing the test chose: unique in this run and across runs."""
    global _test_tenant
    _test_tenant = f"upstream-{uuid.uuid4().hex[:16]}"
    yield _test_tenant
    _test_tenant = None
    _tokens.clear()


#: The deselection list: a suite, a test id (a prefix: ``file.py::test`` takes every
#: parametrisation), and the reason, separated by tabs.
DESELECTED = Path(__file__).with_name("deselected.tsv")


@dataclass(frozen=True)
class Deselection:
    suite: str
    test: str
    reason: str


def deselections(suite: str) -> list[Deselection]:
    """The deselection list's entries for ``suite``."""
    found: list[Deselection] = []
    for number, line in enumerate(DESELECTED.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise ValueError(f"{DESELECTED}:{number}: expected suite, test and reason separated by tabs")
        if fields[0] == suite:
            found.append(Deselection(*(f.strip() for f in fields)))
    return found


def deselect(suite: str, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Takes the listed tests out of the run; an entry that matches no collected test fails the
    run (a renamed test would otherwise run unnoticed, or the list rot)."""
    entries = deselections(suite)
    used: set[Deselection] = set()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        hit = next((e for e in entries if _matches(item.nodeid, e.test)), None)
        if hit is None:
            kept.append(item)
        else:
            used.add(hit)
            dropped.append(item)
    # Checked only when whole files were collected (call this before -k and -m filter).
    files = {item.nodeid.partition("::")[0] for item in items}
    unused = [e.test for e in entries if e not in used and e.test.partition("::")[0] in files]
    if unused and all("::" not in arg for arg in config.args) and items:
        # A failing item, not an error: pytest-xdist's workers cannot report an error's text.
        kept.append(StaleDeselections.from_parent(items[0].session, name=DESELECTED.name, tests=unused))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


class StaleDeselections(pytest.Item):
    """Fails, naming the entries of the deselection list that no collected test matched."""

    def __init__(self, *, tests: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tests = tests

    def runtest(self) -> None:
        raise AssertionError(f"{DESELECTED.name} lists tests that were not collected: {self.tests}")

    def reportinfo(self) -> tuple[Path, int, str]:
        return DESELECTED, 0, f"{DESELECTED.name}: stale entries"


def terminal_summary(suite: str, reporter: pytest.TerminalReporter) -> None:
    """Names the deselected tests and why, under pytest's summary. (From the list, not from what
    was collected: under pytest-xdist, the process that reports collects nothing.)"""
    for entry in deselections(suite):
        reporter.write_line(f"deselected: {entry.test}: {entry.reason}")


def _matches(nodeid: str, test: str) -> bool:
    # "tests/x.py::test_a" takes test_a and test_a[...], not test_ab.
    return nodeid == test or nodeid.startswith(test + "[") or nodeid.startswith(test + "::")
