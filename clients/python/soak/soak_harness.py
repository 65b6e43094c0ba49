"""A harness of the soak (scripts/soak): runs sessions of a few turns each, every turn a user
request, a model response and a durable tool call on the counting service, forever, until the
soak kills it. Run again, it resumes its session where the log says it is.

The tool is declared idempotent, with a resolver: after a crash, recovery asks the service
whether an in-doubt call arrived, and only a call that never did runs again. The service counts
every call that reaches it, so a call run twice shows as a repeated side effect. (A
non-idempotent call in doubt waits for an operator's `sessionlog resolve`, which a soak has no
one to give.)

    python soak_harness.py --ingest URL --recovery URL --token T --service URL --name NAME
        --state FILE --acks FILE [--turns N]

FILE `--state` holds the session it is running (so that a restart resumes it); `--acks` gets one
JSON line per acknowledged event ({"session", "seq", "event_id"}), written and flushed after the
acknowledgement: what the soak checks the log against at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import IO

import httpx

import sessionlog
from sessionlog import current_call, durable_tool
from sessionlog.models import EventAck

#: The tool: the service counts every call that reaches it (no dedupe by key).
TOOL = "soak_charge"


def record(acks: IO[str], session: str, ack: EventAck) -> None:
    """Notes an acknowledged event, durably (the soak may kill this process next)."""
    acks.write(json.dumps({"session": session, "seq": ack.seq, "event_id": ack.event_id}) + "\n")
    acks.flush()
    os.fsync(acks.fileno())


def save_state(path: Path, session: str | None) -> None:
    """Writes the session this harness runs, atomically."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(session or "")
    os.replace(scratch, path)


def run_session(args: argparse.Namespace, client: sessionlog.Client, acks: IO[str], state: Path) -> None:
    """Runs (or resumes) one session to its end."""
    running = state.read_text().strip() if state.exists() else ""
    if running:
        try:
            session = sessionlog.Session.resume(client, running, f"{args.name}-{os.getpid()}")
        except sessionlog.errors.SessionEnded:
            # Killed after its end was recorded and before it noted so: the next session.
            save_state(state, None)
            return
        history = list(client.events(running))
        say("resumed", session=running)
    else:
        session = sessionlog.Session.start(client, f"soak-{args.name}", "soak")
        save_state(state, session.session_id)
        history = []
    sid = session.session_id

    # Where the log says this session is: the turns whose request it holds, and whether the last
    # one got its model response.
    requests = [e for e in history if e.kind == "UserRequest"]
    answered = sum(1 for e in history if e.kind == "ModelResponse")

    @durable_tool(session, effect="Idempotent", name=TOOL, key=lambda turn: f"{sid}-t{turn}")
    def charge(turn: int) -> str:
        key = current_call().idempotency_key
        return str(httpx.post(f"{args.service}/{TOOL}/calls/{key}", timeout=10).json()["output"])

    for turn in range(max(len(requests) - 1, 0), args.turns):
        if turn >= len(requests):
            record(acks, sid, session.user_request(f"{args.name} turn {turn}"))
        if turn >= answered:
            ack = session.model_response("soak-model", f"charging for turn {turn}", tokens_in=40, tokens_out=12)
            record(acks, sid, ack)
            answered = turn + 1
        charge(turn)
        if turn % 3 == 2:
            record(acks, sid, session.checkpoint())
    record(acks, sid, session.close())
    save_state(state, None)
    say("ended", session=sid)


def say(what: str, **fields: str) -> None:
    print(json.dumps({"event": what, **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--ingest", "--recovery", "--token", "--service", "--name", "--state", "--acks"):
        parser.add_argument(name, required=True)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    client = sessionlog.Client(args.ingest, args.recovery, token=args.token, retry_for=60.0)
    state = Path(args.state)
    with open(args.acks, "a") as acks:
        while True:
            try:
                run_session(args, client, acks, state)
            except sessionlog.errors.NeedsResolution:
                # Nothing this harness may do brings the session on: leave it, say so, go on.
                say("abandoned", session=state.read_text().strip())
                save_state(state, None)
            except Exception as e:  # noqa: BLE001 - whatever a killed server causes, go on
                # A server the soak killed and has not brought back yet: try the session again
                # (the soak counts these by kind).
                say("retry", error=type(e).__name__)
                time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
