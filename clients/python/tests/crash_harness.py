"""A harness the crash tests run as a process and kill: it starts (or resumes) a session and runs
one durable tool call against the counter service, announcing on stdout where it is, and hangs
at the point it is told to so that the test can kill -9 it there.

    python crash_harness.py --ingest URL --recovery URL --token T --service URL --tool NAME
        --effect Pure|Idempotent|NonIdempotent [--session ID] [--hang POINT]

POINT is `after-intent` (the request is recorded, the service not called), `after-effect` (the
service did it, the result is not recorded) or `after-record` (the result is recorded). Prints
one JSON object per line: {"session": ID}, {"at": POINT}, {"result": ...} or {"error": CLASS}.
"""

from __future__ import annotations

import sys

import httpx

import sessionlog
from harness_io import arguments, failed, hang_if, say
from sessionlog import current_call, durable_tool


def main() -> int:
    parser = arguments(session_required=False)
    args = parser.parse_args()
    client = sessionlog.Client(args.ingest, args.recovery, token=args.token)
    try:
        if args.session:
            session = sessionlog.Session.resume(client, args.session, "py-crash-harness-2")
        else:
            session = sessionlog.Session.start(client, "py-crash-harness", "count once")
            session.user_request("count once")
    except sessionlog.ProblemError as e:
        return failed(e, e.detail)
    say(session=session.session_id)

    @durable_tool(session, effect=args.effect, name=args.tool, key=lambda n: f"{session.session_id}-{n}")
    def count(n: int) -> str:
        hang_if("after-intent", args.hang)
        key = current_call().idempotency_key
        output = str(httpx.post(f"{args.service}/{args.tool}/calls/{key}").json()["output"])
        hang_if("after-effect", args.hang)
        return output

    try:
        result = count(1)
    except sessionlog.SessionlogError as e:
        return failed(e)
    hang_if("after-record", args.hang)
    say(result=result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
