"""A private corner of the real stack for the Python tests: its own topic, keyspace, consumer
group, signing key and KEK, with `sessionlog project`, `ingest` and `serve-recovery` running as
processes of the built binary. The stack itself comes from `scripts/stack up` (scripts/test
starts it and exports `.stack/stack.env`)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def wait_for(what: str, deadline_s: float, probe: Callable[[], T | None]) -> T:
    """Polls ``probe`` until it answers something, or fails naming ``what`` after the deadline."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            value = probe()
            if value is not None:
                return value
        except Exception as e:  # noqa: BLE001 - a probe failing is the same as not yet
            last = e
        time.sleep(0.05)
    raise TimeoutError(f"waited {deadline_s:.0f}s for {what}" + (f" (last error: {last})" if last else ""))


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sessionlog_bin() -> str:
    """The built `sessionlog` binary (scripts/test builds it)."""
    explicit = os.environ.get("SESSIONLOG_BIN")
    if explicit:
        return explicit
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    path = target / "debug" / "sessionlog"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `cargo build -p sessionlog-cli` (scripts/test does)")
    return str(path)


def stack_env() -> dict[str, str]:
    """The stack's addresses: from the environment, else from `.stack/stack.env`."""
    env = dict(os.environ)
    if "SESSIONLOG_KAFKA__BOOTSTRAP" not in env:
        stack_file = Path(env.get("SESSIONLOG_STACK_DIR", REPO / ".stack")) / "stack.env"
        if not stack_file.exists():
            raise FileNotFoundError(f"{stack_file} is missing: bring the stack up with `scripts/stack up`")
        for line in stack_file.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                name, value = line.split("=", 1)
                env[name] = value
    return env


@dataclass
class Service:
    """One process of the built binary: how it was started, so that it can be started again."""

    args: tuple[str, ...]
    log: Path
    #: The base URL of an HTTP service, "" for the others.
    url: str
    process: subprocess.Popen[bytes]
    #: Settings it was started with beyond the corner's.
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class StackCorner:
    """The services of one test run, and credentials for them."""

    workdir: Path
    env: dict[str, str]
    ingest_url: str = ""
    recovery_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: By name (``projector-1``, ``ingest-2``, ``recovery``): what ``kill`` and ``start`` act on.
    services: dict[str, Service] = field(default_factory=dict)
    #: Every ingest instance's base URL, in order.
    ingest_urls: list[str] = field(default_factory=list)
    #: The projectors' consumer group.
    group: str = ""

    @staticmethod
    def create(workdir: Path, resolvers: dict[str, str], projectors: int = 1, ingests: int = 1) -> StackCorner:
        """Initialises a topic and keyspace of its own and starts ``projectors`` projectors,
        ``ingests`` ingest instances and a recovery service on them."""
        tag = f"py_{uuid.uuid4().hex[:8]}"
        env = stack_env()
        env.update(
            SESSIONLOG_CONFIG="/dev/null",
            SESSIONLOG_KAFKA__TOPIC=f"session-events-t-{tag}",
            SESSIONLOG_KAFKA__DEAD_LETTER_TOPIC=f"session-events-t-{tag}-dlq",
            SESSIONLOG_KAFKA__PARTITIONS="3",
            SESSIONLOG_CQL__KEYSPACE=f"t_{tag}",
            SESSIONLOG_AUTH_DIR=str(workdir / "auth"),
            SESSIONLOG_AUTH__JWKS_FILE=str(workdir / "auth" / "jwks.json"),
            SESSIONLOG_RECOVERY__SIGNING_KEY_FILE=str(workdir / "auth" / "recovery-key.pem"),
            SESSIONLOG_PRIVACY__KEK_FILE=str(workdir / "kek.key"),
            # Short enough for a test to watch a writer lease renewed.
            SESSIONLOG_LEASE__TTL_MS="1500",
        )
        for tool, url in resolvers.items():
            env[f"SESSIONLOG_RECOVERY__RESOLVERS__{tool.upper()}"] = url
        corner = StackCorner(workdir, env)
        corner.run("token", "init")
        corner.run("keys", "init", "--out", str(workdir / "kek.key"))
        corner.run("init")
        corner.group = f"sessionlog-t-{tag}"
        for n in range(1, projectors + 1):
            corner.keep(f"projector-{n}", corner.spawn("project", "--group", corner.group, "--listen", "", log_name=f"projector-{n}"), "")
        corner.ingest_urls = [corner.serve("ingest", f"ingest-{n}") for n in range(1, ingests + 1)]
        corner.ingest_url = corner.ingest_urls[0]
        corner.recovery_url = corner.serve("serve-recovery", "recovery")
        return corner

    def run(self, *args: str) -> str:
        """Runs `sessionlog ARGS` to completion; its stdout."""
        done = subprocess.run([sessionlog_bin(), *args], env=self.env, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"sessionlog {' '.join(args)} failed: {done.stderr.decode()[-2000:]}")
        return done.stdout.decode()

    def spawn(self, *args: str, log_name: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{log_name or args[0]}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen([sessionlog_bin(), *args], env={**self.env, **(env or {})}, stdout=log, stderr=log)
        self.processes.append(process)
        return process

    def keep(self, name: str, process: subprocess.Popen[bytes], url: str, env: dict[str, str] | None = None) -> None:
        """Remembers ``process`` as the service ``name``."""
        assert isinstance(process.args, list)
        self.services[name] = Service(tuple(str(a) for a in process.args[1:]), self.workdir / f"{name}.log", url, process, env or {})

    def serve(self, command: str, name: str | None = None, base: str | None = None, env: dict[str, str] | None = None) -> str:
        """Starts an HTTP service (on ``base``, else a free port, with ``env`` added to the
        corner's settings) and waits until it is ready; its base URL."""
        name = name or command
        base = base or f"http://127.0.0.1:{free_port()}"
        process = self.spawn(command, "--listen", base.removeprefix("http://"), log_name=name, env=env)
        self.keep(name, process, base, env)
        self.wait_ready(name, 60)
        return base

    def wait_ready(self, name: str, deadline_s: float) -> None:
        """Waits until the HTTP service ``name`` answers ready (fails if its process exits)."""
        service = self.services[name]

        def ready() -> bool | None:
            if service.process.poll() is not None:
                raise RuntimeError(f"sessionlog {service.args[0]} exited: see {service.log}")
            return httpx.get(f"{service.url}/health/ready", timeout=2).status_code == 200 or None

        wait_for(f"sessionlog {service.args[0]} ({name}) to be ready", deadline_s, ready)

    def kill(self, name: str) -> None:
        """Kills the service ``name`` with SIGKILL: no handler runs, nothing is flushed."""
        process = self.services[name].process
        process.kill()
        process.wait(timeout=30)

    def start(self, name: str) -> None:
        """Starts the service ``name`` again as it was started (an HTTP service on the same port)."""
        service = self.services[name]
        service.process = self.spawn(*service.args, log_name=name, env=service.env)

    def token(self, *roles: str, subject: str = "py-tests", session: str | None = None, tenant: str | None = None) -> str:
        """A token for ``subject`` with ``roles``, of ``tenant`` (the services' ``default``
        unless given)."""
        args = ["token", "mint", "--subject", subject, "--ttl-secs", "3600"]
        for role in roles:
            args += ["--role", role]
        if session:
            args += ["--session", session]
        if tenant:
            args += ["--tenant", tenant]
        return self.run(*args).strip()

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(timeout=10)
