"""The chaos soak (run by `scripts/soak --minutes N`, which brings up a stack of its own).

Starts 2 projectors, 2 ingest instances and the recovery service of the built binary on a topic
and keyspace of their own, a counting tool service, and harnesses (soak_harness.py) that run
sessions with a non-idempotent tool call in every turn. Every 20-40 s it kills one process with
SIGKILL, taking the kinds in a shuffled round so that every kind is killed: a Kafka broker, a
projector, an ingest instance, the recovery service, Cassandra, the registry or a harness; then
starts it again and waits until it is ready. A few records that cannot be decoded are put in the
topic on purpose.

At the end it stops the harnesses, waits until the projectors have caught up and checks:
acknowledged events lost 0, events accepted twice 0, side effects repeated 0, the projection
equal to a clean replay of the log (`sessionlog replay` into a fresh keyspace, then `verify`), and
dead letters exactly the records it injected. It prints the figures as a table and exits 1 when
an invariant fails.

With ``--cluster`` (`scripts/soak --cluster`, on a stack of three Kafka brokers and three
Cassandra nodes) the faults are the cluster's instead, one of each per round: a CQL node killed
with SIGKILL and kept down ``--fault-secs``, a CQL node frozen with SIGSTOP (as a partition
looks to its peers) for as long, and a Kafka broker killed together with a CQL node. During each
fault a session of its own is erased; after the node is back, its data key must read as
destroyed at consistency ALL (every replica, the returned one included), and the projectors'
lag must come back within ``--lag-back-secs``.

With ``--checked`` (`scripts/soak --checked`) the load is the checked-history driver
(tests/checked, Go, built by scripts/soak and named by SESSIONLOG_CHECKED_BIN) instead of the
harnesses: writers taking sessions from each other through both ingest instances and recovery,
readers of the log and of the projection, every operation recorded; the faults are one of each
per round of CHECKED_KINDS (or, with ``--cluster`` too, the cluster's). At the end the driver
checks each session's history with porcupine and prints the result; its exit status is the
soak's (1 when a history is not linearizable).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import sessionlog  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from counter_service import Counter, serve  # noqa: E402
from stackcorner import REPO, StackCorner, sessionlog_bin, wait_for  # noqa: E402

#: The tool the harnesses call (soak_harness.TOOL): every call that reaches it counts.
TOOL = "soak_charge"
#: What the soak kills, one of each per round.
KINDS = ("broker", "projector", "ingest", "recovery", "cassandra", "registry", "harness")
BROKERS = ("kafka", "kafka-2", "kafka-3")
#: What the soak does to a cluster (--cluster), one of each per round.
CLUSTER_KINDS = ("cql_node_killed", "cql_node_frozen", "broker_and_cql_node_killed")
CQL_NODES = ("cassandra", "cassandra-2", "cassandra-3")
#: What a checked run (--checked) does, one of each per round: kills as the soak's, and a broker frozen.
CHECKED_KINDS = ("ingest", "recovery", "projector", "broker", "broker_frozen", "cassandra")
#: How long a checked run keeps a broker frozen (SIGSTOP), in seconds.
FREEZE_SECS = 10.0


@dataclass
class HarnessProcess:
    """One harness: its process, and what it said."""

    name: str
    state: Path
    acks: Path
    command: list[str]
    process: subprocess.Popen[str] | None = None
    said: Tally[str] = field(default_factory=Tally)
    errors: Tally[str] = field(default_factory=Tally)

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, env=env, text=True)
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            said = json.loads(line)
            self.said[said["event"]] += 1
            if "error" in said:
                self.errors[said["error"]] += 1

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)


@dataclass
class Soak:
    """The processes of the soak and the figures it keeps."""

    corner: StackCorner
    harnesses: list[HarnessProcess]
    rng: random.Random
    kills: Tally[str] = field(default_factory=Tally)
    #: Seconds from a kill until the process answered ready again, by kind.
    downtime: dict[str, list[float]] = field(default_factory=dict)
    injected: set[tuple[int, int]] = field(default_factory=set)
    max_lag: int = 0
    lag_polls: int = 0
    harness_exits: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    #: --cluster: how long each fault lasts, and the sessions erased during one, with the fault.
    fault_secs: float = 60.0
    erasure_probes: list[str] = field(default_factory=list)
    erased: list[tuple[str, str]] = field(default_factory=list)
    #: --cluster: seconds from each fault's end until the lag was back where it was before it.
    lag_back: list[float] = field(default_factory=list)
    #: --cluster: erasures run again after a failed attempt during a fault.
    erase_retries: int = 0

    def stack(self, *args: str) -> None:
        """Runs `scripts/stack ARGS` on the soak's own stack (its environment names it)."""
        subprocess.run([str(REPO / "scripts" / "stack"), *args], check=True, stdout=subprocess.DEVNULL)

    def fault(self, kind: str) -> str:
        """Injects one cluster fault of ``kind`` for ``fault_secs``, erasing a session meanwhile,
        then ends it and waits until the lag is back; what it did."""
        started = time.monotonic()
        node = self.rng.choice(CQL_NODES)
        before = self.lag()
        if kind == "cql_node_frozen":
            victims = [node]
            self.stack("freeze", node)
        else:
            victims = [node] if kind == "cql_node_killed" else [self.rng.choice(BROKERS), node]
            for victim in victims:
                self.stack("kill", victim)
        if self.erasure_probes:
            session = self.erasure_probes.pop()
            # Erasing needs the key store's quorum (two of three replicas) and the log. Right after
            # a kill, before gossip marks the node down, a quorum read can time out; an operator
            # runs the (idempotent) erase again, and so does the soak, counting it.
            reason = f"soak: erased while {'+'.join(victims)} down"
            for attempt in range(1, 5):
                try:
                    self.corner.run("erase", session, "--reason", reason)
                    break
                except RuntimeError as e:
                    if attempt == 4:
                        raise
                    self.erase_retries += 1
                    print(f"[soak] erase during {kind} failed (attempt {attempt}), again in 5s: {str(e)[-300:]}", flush=True)
                    # A backoff between an operator's attempts, not a wait for a condition.
                    time.sleep(5)
            self.erased.append((session, kind))
        # The fault's length is what is being injected, not a wait for something to happen.
        time.sleep(self.fault_secs)
        if kind == "cql_node_frozen":
            self.stack("thaw", node)
        else:
            for victim in victims:
                self.stack("start", victim)
        back = time.monotonic()
        settled = max(before or 0, 50)
        def settled_back() -> bool | None:
            lag = self.lag()
            return True if lag is not None and lag <= settled else None

        wait_for(f"the lag back to {settled} after {kind}", 600, settled_back)
        self.lag_back.append(time.monotonic() - back)
        self.kills[kind] += 1
        self.downtime.setdefault(kind, []).append(time.monotonic() - started)
        return "+".join(victims)

    def kill_one(self, kind: str) -> str:
        """Kills one process of ``kind`` with SIGKILL and starts it again; what it killed."""
        started = time.monotonic()
        if kind == "broker":
            victim = self.rng.choice(BROKERS)
            self.stack("kill", victim)
            self.stack("start", victim)
        elif kind in ("cassandra", "registry"):
            victim = kind
            self.stack("kill", victim)
            self.stack("start", victim)
        elif kind == "broker_frozen":
            victim = self.rng.choice(BROKERS)
            self.stack("freeze", victim)
            # The freeze's length is what is being injected, not a wait for something to happen.
            time.sleep(FREEZE_SECS)
            self.stack("thaw", victim)
        elif kind == "harness":
            harness = self.rng.choice(self.harnesses)
            victim = harness.name
            harness.kill()
            harness.start()
        else:
            victim = self.rng.choice([n for n in self.corner.services if n.startswith(kind)])
            self.corner.kill(victim)
            self.corner.start(victim)
            if self.corner.services[victim].url:
                self.corner.wait_ready(victim, 180)
        self.kills[kind] += 1
        self.downtime.setdefault(kind, []).append(time.monotonic() - started)
        return victim

    def inject_dead_letter(self) -> None:
        """Puts a record no decoder accepts into the events topic, and notes where it landed."""
        env = self.corner.env
        producer = Producer({"bootstrap.servers": env["SESSIONLOG_KAFKA__BOOTSTRAP"], "enable.idempotence": True})
        landed: list[tuple[int, int]] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                landed.append((msg.partition(), msg.offset()))

        producer.produce(env["SESSIONLOG_KAFKA__TOPIC"], key=str(uuid.uuid4()).encode(), value=b"\x00soak: not avro", on_delivery=delivered)
        producer.flush(60)
        if not landed:
            raise RuntimeError("an injected record was not acknowledged within 60s")
        self.injected.update(landed)

    def watch_lag(self) -> None:
        """Polls the projectors' lag every few seconds until the soak stops; keeps the maximum."""
        while not self.stopping.wait(5):
            lag = self.lag()
            if lag is not None:
                self.lag_polls += 1
                self.max_lag = max(self.max_lag, lag)

    def lag(self) -> int | None:
        """The projector group's total lag, per `sessionlog status` (None while a server is down)."""
        done = subprocess.run(
            [sessionlog_bin(), "status", "--group", self.corner.group, "--json"],
            env=self.corner.env, capture_output=True, timeout=120, text=True,
        )
        if done.returncode not in (0, 1) or not done.stdout.strip():
            return None
        status = json.loads(done.stdout)
        return sum(int(p["lag"]) for g in status["groups"] for p in g["partitions"])

    def keep_harnesses_running(self) -> None:
        for harness in self.harnesses:
            if harness.process is not None and harness.process.poll() is not None:
                self.harness_exits += 1
                harness.start()


def read_acks(harnesses: list[HarnessProcess]) -> list[dict[str, Any]]:
    acks: list[dict[str, Any]] = []
    for harness in harnesses:
        if harness.acks.exists():
            for line in harness.acks.read_text().splitlines():
                if line.strip():
                    acks.append(json.loads(line))
    return acks


def dead_letter_origins(corner: StackCorner) -> set[tuple[int, int]]:
    """The (partition, offset) of the record behind each dead letter, per `sessionlog dlq list`."""
    listing = json.loads(corner.run("dlq", "list", "--limit", "1000000", "--json"))
    return {(int(d["origin"]["partition"]), int(d["origin"]["offset"])) for d in listing["dead_letters"]}


def check(soak: Soak, counter: Counter, token: str) -> list[tuple[str, int | str, bool]]:
    """The invariants, each with its figure and whether it holds."""
    corner = soak.corner
    acks = read_acks(soak.harnesses)
    client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, retry_for=120.0)
    by_session: dict[str, dict[int, str]] = {}
    sessions = sorted({a["session"] for a in acks})
    print(f"[soak] reading back {len(sessions)} sessions for {len(acks)} acknowledged events", flush=True)
    for n, sid in enumerate(sessions, 1):
        by_session[sid] = {e.seq: e.event_id for e in client.events(sid)}
        if n % 200 == 0:
            print(f"[soak]   {n}/{len(sessions)} sessions read back", flush=True)
    lost = sum(1 for a in acks if by_session[a["session"]].get(a["seq"]) != a["event_id"])
    twice = sum(len(events) - len(set(events.values())) for events in by_session.values())
    repeated = sum(n - 1 for (tool, _), n in counter.effects.items() if tool == TOOL and n > 1)

    replica = f"{corner.env['SESSIONLOG_CQL__KEYSPACE']}_replay"
    print(f"[soak] replaying the log into {replica} and comparing it with the projection", flush=True)
    corner.run("replay", "--keyspace", replica)
    verify = subprocess.run(
        [sessionlog_bin(), "verify", "--left", corner.env["SESSIONLOG_CQL__KEYSPACE"], "--right", replica],
        env=corner.env, capture_output=True, text=True, timeout=600,
    )
    origins = dead_letter_origins(corner)
    erasures: list[tuple[str, int | str, bool]] = []
    if soak.erased:
        # Read at ALL: every replica answers, the one that was down (or frozen) during the erasure
        # too, and the newest write wins: a destroyed key reads destroyed only if no replica
        # brings the old one back.
        everywhere = dict(corner.env, SESSIONLOG_CQL__CONSISTENCY__KEYS="all")
        destroyed = 0
        for session, _ in soak.erased:
            done = subprocess.run(
                [sessionlog_bin(), "--json", "erase", session, "--status"],
                env=everywhere, capture_output=True, text=True, timeout=120,
            )
            if done.returncode == 0 and json.loads(done.stdout).get("data_key") == "destroyed":
                destroyed += 1
        erasures.append(("keys erased during a fault, destroyed at ALL after", f"{destroyed} / {len(soak.erased)}",
                         destroyed == len(soak.erased)))
    return [*erasures,
        ("acknowledged events", len(acks), True),
        ("acknowledged events lost", lost, lost == 0),
        ("events accepted twice", twice, twice == 0),
        ("side effects", sum(n for (tool, _), n in counter.effects.items() if tool == TOOL), True),
        ("side effects repeated", repeated, repeated == 0),
        ("projection = clean replay (verify)", "equal" if verify.returncode == 0 else verify.stdout[-300:], verify.returncode == 0),
        ("dead letters / injected", f"{len(origins)} / {len(soak.injected)}", origins == soak.injected),
    ]


def table(rows: list[tuple[str, str]]) -> str:
    """A Markdown table of two columns (what the README quotes)."""
    width = max(len(k) for k, _ in rows)
    head = f"| {'figure'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|"
    return "\n".join([head, *(f"| {k.ljust(width)} | {v} |" for k, v in rows)])


def run(
    args: argparse.Namespace, rng: random.Random, corner: StackCorner, service_url: str,
    harnesses: list[HarnessProcess], counter: Counter,
) -> tuple[Soak, list[tuple[str, int | str, bool]]]:
    """Runs the load and the kills for ``args.minutes``, then checks the invariants."""
    token = corner.token("harness", "reader", subject="soak")
    for n in range(args.harnesses):
        name = f"harness-{n + 1}"
        command = [
            sys.executable, str(HERE / "soak_harness.py"), "--ingest", corner.ingest_urls[n % len(corner.ingest_urls)],
            "--recovery", corner.recovery_url, "--token", token, "--service", service_url, "--name", name,
            "--state", str(args.workdir / f"{name}.session"), "--acks", str(args.workdir / f"{name}.acks"),
        ]
        harnesses.append(HarnessProcess(name, args.workdir / f"{name}.session", args.workdir / f"{name}.acks", command))
    soak = Soak(corner, harnesses, rng, fault_secs=args.fault_secs)
    kinds = CLUSTER_KINDS if args.cluster else KINDS
    if args.cluster:
        # A session to erase during each fault: written and closed now, its texts sealed under
        # its own data key.
        client = sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, retry_for=120.0)
        for n in range(len(CLUSTER_KINDS) * max(1, int(args.minutes))):
            probe = sessionlog.Session.start(client, "soak-erasure", f"erasure probe {n}")
            probe.user_request(f"a secret the erasure must destroy ({n})")
            probe.close("Completed")
            soak.erasure_probes.append(probe.session_id)
    for harness in harnesses:
        harness.start()
    watcher = threading.Thread(target=soak.watch_lag, daemon=True)
    watcher.start()

    started = time.monotonic()
    end = started + args.minutes * 60
    injections = sorted(started + (end - started) * f for f in (0.2, 0.5, 0.8))
    bag: list[str] = []
    spacing = (10, 20) if args.cluster else (20, 40)
    next_kill = started + rng.uniform(*spacing)
    # A cluster soak runs each of its faults at least once, however long they take.
    def faults_left() -> bool:
        return args.cluster and sum(soak.kills[k] for k in CLUSTER_KINDS) < len(CLUSTER_KINDS)

    while time.monotonic() < end or faults_left():
        soak.keep_harnesses_running()
        now = time.monotonic()
        if injections and now >= injections[0]:
            injections.pop(0)
            soak.inject_dead_letter()
            print(f"[soak] {now - started:6.0f}s injected an undecodable record", flush=True)
        if now >= next_kill:
            if not bag:
                bag = list(kinds)
                rng.shuffle(bag)
            kind = bag.pop()
            victim = soak.fault(kind) if args.cluster else soak.kill_one(kind)
            events = len(read_acks(harnesses))
            lag_back = f", lag back {soak.lag_back[-1]:.1f}s after" if args.cluster else ""
            print(f"[soak] {now - started:6.0f}s {kind}: {victim}, back after "
                  f"{soak.downtime[kind][-1]:.1f}s{lag_back}; {events} events acknowledged so far", flush=True)
            next_kill = time.monotonic() + rng.uniform(*spacing)
        # Cadence of the control loop, not a wait for anything to happen.
        time.sleep(0.5)
    for harness in harnesses:
        harness.kill()
    soak.stopping.set()

    print("[soak] load stopped; waiting for the projectors to catch up", flush=True)
    lag_zero: Callable[[], bool | None] = lambda: soak.lag() == 0 or None
    wait_for("the projectors to catch up (lag 0)", 300, lag_zero)
    return soak, check(soak, counter, corner.token("reader", subject="soak-check"))


def run_checked(args: argparse.Namespace, rng: random.Random, seed: int) -> int:
    """The checked-history run: the driver's load under one of each fault per round; the
    driver's verdict."""
    corner = StackCorner.create(args.workdir, {}, projectors=2, ingests=2)
    soak = Soak(corner, [], rng, fault_secs=args.fault_secs)
    kinds = CLUSTER_KINDS if args.cluster else CHECKED_KINDS
    driver: subprocess.Popen[bytes] | None = None
    try:
        token = corner.token("harness", "reader", subject="checked")
        driver = subprocess.Popen([
            os.environ["SESSIONLOG_CHECKED_BIN"], "--ingest", ",".join(corner.ingest_urls),
            "--recovery", corner.recovery_url, "--token", token, "--out", str(args.workdir / "checked"),
            # The soak stops it (SIGTERM) once its faults are done; this only bounds a lost soak.
            "--seconds", str(args.minutes * 60 + 1800), "--seed", str(seed),
            # A third writer per session through the Rust library (SessionWriter), on the
            # corner's topic, keyspace and keys: the driver's environment is the corner's.
            "--library", os.environ["SESSIONLOG_CHECKED_WRITER"],
        ], env=corner.env)
        started = time.monotonic()
        end = started + args.minutes * 60
        bag: list[str] = []
        next_fault = started + rng.uniform(10, 20)
        while time.monotonic() < end or sum(soak.kills[k] for k in kinds) < len(kinds):
            if driver.poll() is not None:
                raise RuntimeError(f"the checked-history driver exited early ({driver.returncode})")
            now = time.monotonic()
            if now >= next_fault:
                if not bag:
                    bag = list(kinds)
                    rng.shuffle(bag)
                kind = bag.pop()
                victim = soak.fault(kind) if args.cluster else soak.kill_one(kind)
                print(f"[soak] {now - started:6.0f}s {kind}: {victim}, back after {soak.downtime[kind][-1]:.1f}s", flush=True)
                next_fault = time.monotonic() + rng.uniform(10, 20)
            # Cadence of the control loop, not a wait for anything to happen.
            time.sleep(0.5)
        faults = ", ".join(f"{k} {soak.kills[k]}" for k in kinds)
        print(f"[soak] faults injected: {sum(soak.kills.values())} ({faults}) in {time.monotonic() - started:.0f}s; "
              "stopping the load and checking", flush=True)
        driver.send_signal(signal.SIGTERM)
        return driver.wait(timeout=3600)
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        corner.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--harnesses", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--cluster", action="store_true", help="the cluster's faults (three CQL nodes)")
    parser.add_argument("--checked", action="store_true",
                        help="the checked-history driver's load, each session's history checked by porcupine")
    parser.add_argument("--fault-secs", type=float, default=60, help="--cluster: how long each fault lasts")
    parser.add_argument("--lag-back-secs", type=float, default=120,
                        help="--cluster: the lag must be back within this after each fault")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    args.workdir.mkdir(parents=True, exist_ok=True)
    shape = f", cluster faults of {args.fault_secs:g}s" if args.cluster else ""
    load = "the checked-history driver" if args.checked else f"{args.harnesses} harnesses"
    print(f"[soak] seed {seed}, {args.minutes:g} min, {load}{shape}, work dir {args.workdir}", flush=True)

    # A TERM (Ctrl-C, a CI timeout) still stops every process this soak started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.checked:
        return run_checked(args, rng, seed)
    counter = Counter(idempotent=set())
    server, service_url = serve(counter)
    corner = StackCorner.create(args.workdir, {TOOL: f"{service_url}/{TOOL}/calls"}, projectors=2, ingests=2)
    harnesses: list[HarnessProcess] = []
    try:
        soak, results = run(args, rng, corner, service_url, harnesses, counter)
    finally:
        for harness in harnesses:
            harness.kill()
        corner.stop()
        server.shutdown()

    kills = ", ".join(f"{k} {soak.kills[k]}" for k in (CLUSTER_KINDS if args.cluster else KINDS))
    back = ", ".join(f"{k} {max(v):.0f}s" for k, v in sorted(soak.downtime.items()))
    said = Tally[str]()
    errors = Tally[str]()
    for harness in harnesses:
        said.update(harness.said)
        errors.update(harness.errors)
    rows = [
        ("minutes", f"{args.minutes:g} (seed {seed})"),
        ("sessions ended", str(said["ended"])),
        ("faults" if args.cluster else "kills", f"{sum(soak.kills.values())}: {kills}"),
        # Projectors and harnesses serve no readiness check: theirs is the time to start again.
        ("longest time back (projector, harness: restarted)", back or "-"),
        ("harness resumes (recoveries)", str(said["resumed"])),
        ("sessions left needing an operator", str(said["abandoned"])),
        ("harness retries after an error", f"{said['retry']} ({', '.join(f'{k} {v}' for k, v in errors.most_common()) or '-'})"),
        ("max projector lag (events)", f"{soak.max_lag} over {soak.lag_polls} polls"),
    ]
    if args.cluster:
        slowest = max(soak.lag_back, default=0.0)
        results.append((f"lag back after a fault (max, goal {args.lag_back_secs:g}s)", f"{slowest:.1f}s",
                        bool(soak.lag_back) and slowest <= args.lag_back_secs))
        rows.append(("erasures run again during a fault", str(soak.erase_retries)))
    rows += [(name, f"{figure} {'ok' if ok else 'FAILED'}" if name not in ("acknowledged events", "side effects") else str(figure)) for name, figure, ok in results]
    print(table(rows))
    return 0 if all(ok for _, _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
