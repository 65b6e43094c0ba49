"""Durable tools in one process: failures, outages while recording, and keys."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import sessionlog
from sessionlog import durable_tool, errors
from stackcorner import StackCorner
from test_client import Outage


def test_a_result_an_outage_kept_from_the_log_is_not_run_again(corner: StackCorner, token: str) -> None:
    transport = Outage()
    runs: list[int] = []
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token, transport=transport, retry_for=0.3) as c:
        session = sessionlog.Session.start(c, "py-durable", "outage while recording")

        @durable_tool(session, effect="NonIdempotent")
        def charge(cents: int) -> str:
            runs.append(cents)
            transport.down = True  # the result cannot be recorded
            return f"charged {cents}"

        with pytest.raises(errors.TransportError):
            charge(250)
        transport.down = False
        assert charge(250) == "charged 250", "the result it ran to is answered once the log has it"
        assert runs == [250]


def test_a_failed_call_is_recorded_and_answered_as_failed(corner: StackCorner, token: str) -> None:
    runs: list[int] = []
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = sessionlog.Session.start(c, "py-durable", "failure")

        @durable_tool(session, effect="NonIdempotent")
        def refund(order: int) -> str:
            runs.append(order)
            raise ValueError(f"order {order} is not refundable")

        with pytest.raises(ValueError, match="not refundable"):
            refund(7)
        with pytest.raises(errors.ToolFailed, match="not refundable"):
            refund(7)
        assert runs == [7]


def test_arguments_that_are_not_json_need_a_key(corner: StackCorner, token: str) -> None:
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        session = sessionlog.Session.start(c, "py-durable", "keys")

        @durable_tool(session, effect="Pure")
        def describe(thing: Any) -> str:
            return "ok"

        with pytest.raises(TypeError, match="key="):
            describe(httpx.Client)
        keyed = durable_tool(session, effect="Pure", key=lambda thing: "the-client")(lambda thing: "ok")
        assert keyed(httpx.Client) == "ok"
