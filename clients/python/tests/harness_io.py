"""What the harness scripts share: their common arguments, and how they report and hang."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def arguments(session_required: bool) -> argparse.ArgumentParser:
    """The arguments every harness takes: the services, a token, the tool service and tool, the
    effect class, the session (or thread), and where to hang."""
    parser = argparse.ArgumentParser()
    for name in ("--ingest", "--recovery", "--token", "--service", "--tool", "--effect"):
        parser.add_argument(name, required=True)
    parser.add_argument("--session", required=session_required)
    parser.add_argument("--hang")
    return parser


def say(**what: Any) -> None:
    """One JSON line on stdout, flushed: what the test reads."""
    print(json.dumps(what), flush=True)


def failed(error: BaseException, detail: str | None = None) -> int:
    """Says the error that stopped the run (its class, and ``detail`` or its text): the line the
    test reads; the harness's exit status then."""
    say(error=type(error).__name__, detail=str(error) if detail is None else detail)
    return 3


def hang_if(point: str, hang: str | None) -> None:
    """At the point the test asked for: say so and wait to be killed."""
    if point == hang:
        say(at=point)
        while True:  # the test kills this process here
            time.sleep(60)
