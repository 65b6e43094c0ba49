"""A small tool service for the crash tests: it counts the side effects of each call, dedupes
the calls of idempotent tools by key, and answers recovery's resolver
(`GET /{tool}/calls/{key}`: 200 with the outcome when the call ran, 404 when it never arrived)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from sessionlog import current_call


class Counter:
    """Side effects by (tool, key); tools in ``idempotent`` take effect once per key."""

    def __init__(self, idempotent: set[str]) -> None:
        self.idempotent = idempotent
        self.effects: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def perform(self, tool: str, key: str) -> str:
        with self.lock:
            done = self.effects.get((tool, key), 0)
            if tool not in self.idempotent or done == 0:
                done += 1
                self.effects[(tool, key)] = done
            return f"{tool} effect #{done}"

    def total(self, tool: str) -> int:
        with self.lock:
            return sum(n for (t, _), n in self.effects.items() if t == tool)

    def keys(self, tool: str) -> set[str]:
        """The keys ``tool`` was called with."""
        with self.lock:
            return {k for t, k in self.effects if t == tool}


def perform(url: str, tool: str) -> str:
    """Has the service at ``url`` take effect for the durable call running now, by its key; the
    service's output."""
    return str(httpx.post(f"{url}/{tool}/calls/{current_call().idempotency_key}").json()["output"])


def serve(counter: Counter) -> tuple[ThreadingHTTPServer, str]:
    """Serves ``counter`` on a free port of 127.0.0.1; the server and its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _parts(self) -> tuple[str, str] | None:
            parts = self.path.strip("/").split("/")
            return (parts[0], parts[2]) if len(parts) == 3 and parts[1] == "calls" else None

        def _answer(self, status: int, body: dict[str, Any] | None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - the http.server interface
            parts = self._parts()
            if parts is None:
                return self._answer(404, None)
            self._answer(200, {"output": counter.perform(*parts)})

        def do_GET(self) -> None:  # noqa: N802
            parts = self._parts()
            done = counter.effects.get(parts, 0) if parts else 0
            if parts is None or done == 0:
                return self._answer(404, None)
            self._answer(200, {"outcome": "succeeded", "output": f"{parts[0]} effect #{done}"})

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
