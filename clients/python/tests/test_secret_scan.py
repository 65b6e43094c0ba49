"""The service's secret scan through the Python client (issue 54, item 4): an AWS-shaped key
and a PEM private key appended are never readable afterwards, the append's answer names each
redaction, and the rest of the session still reads and resumes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import sessionlog
from stackcorner import StackCorner, wait_for

#: An AWS access key id of the real shape (never the documentation's ``...EXAMPLE``).
AWS_KEY = "AKIAP3MQTLW7RD4XBN2V"
#: The body of a private key: in no answer, history or context afterwards.
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKjPy"
PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    f"{PEM_BODY}\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
    "-----END PRIVATE KEY-----\n"
)


def event(seq: int, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "event_id": str(uuid.uuid4()), "kind": kind, "data": data}


def test_a_secret_appended_is_redacted_and_the_answer_says_so(corner: StackCorner, token: str) -> None:
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        opened = c.create("py-secrets", "secret scan")
        sid, seq = opened.session_id, opened.next_seq
        appended = c.append(
            sid,
            opened.epoch,
            [
                event(seq, "ToolCallRequested", {"tool": "shell", "arguments": {"Plain": "CANARY-py-arguments"}, "effect": "Pure"}),
                event(seq + 1, "ToolCallResult", {
                    "call_seq": seq, "outcome": "Succeeded", "output": {"Plain": f"aws_access_key_id={AWS_KEY}"},
                    "source": "Executed", "recorded_by": None, "note": "CANARY-py-note",
                }),
                event(seq + 2, "UserRequest", {"content": {"Plain": PEM}}),
                event(seq + 3, "PlanUpdated", {"plan": {"Plain": "CANARY-py-plan"}}),
            ],
            writer_token=opened.writer_token,
        )
        acks = appended.events
        assert acks[1].secrets == (
            sessionlog.SecretNotice("output", "aws-access-token", "redacted", "secret detected: aws-access-token"),
        )
        assert acks[1].redacted
        assert [(s.field, s.rule, s.action) for s in acks[2].secrets] == [("content", "private-key", "redacted")]
        assert acks[0].secrets == () and acks[3].secrets == () and not acks[3].redacted
        assert appended.next_seq == seq + 4

        last = seq + 3
        wait_for(
            f"seq {last} of {sid} in the projection",
            60,
            lambda: c.events_page(sid, from_seq=last, to_seq=last).events or None,
        )
        history = list(c.events(sid))
        printed = json.dumps([{"data": e.data, "unopened": e.unopened} for e in history])
        assert AWS_KEY not in printed and PEM_BODY not in printed
        assert "redacted: secret detected: aws-access-token" in printed
        assert "redacted: secret detected: private-key" in printed
        for canary in ("CANARY-py-arguments", "CANARY-py-note", "CANARY-py-plan"):
            assert canary in printed

        bundle = c.resume(sid, "py-secrets-2")
        resumed = json.dumps(bundle.context, default=str)
        assert AWS_KEY not in resumed and PEM_BODY not in resumed
        assert bundle.next_seq > last, "the session resumes after what it holds"
