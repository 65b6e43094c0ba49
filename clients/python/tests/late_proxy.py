"""A proxy in front of a service whose answers can come too late: it passes each request on, and
for the requests ``hold`` picks, keeps a 2xx answer from the client until the client gives up on it
(its read timeout closes the connection). The service did the work; the client never heard. What
was held is kept in ``held``, to compare with what the client's retry got."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Held:
    """An answer the proxy kept from its client: the request and what the service answered."""

    request: str
    status: int
    body: bytes


@dataclass
class LateProxy:
    """The proxy's address, what it forwarded and what it held; ``close`` stops it."""

    url: str
    server: ThreadingHTTPServer
    forwarded: list[str] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(upstream: str, hold: Callable[[str, str, LateProxy], bool]) -> LateProxy:
    """Serves the proxy to ``upstream`` on a free port of 127.0.0.1. ``hold(method, path, proxy)``
    says whether to keep the request's answer from the client, when it is a 2xx with a body."""
    proxy: LateProxy

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
            keep = hold(self.command, self.path, proxy)
            proxy.forwarded.append(f"{self.command} {self.path}")
            answer = httpx.request(self.command, upstream + self.path, headers=headers, content=body, timeout=120)
            if keep and answer.is_success and answer.status_code != 204:
                proxy.held.append(Held(f"{self.command} {self.path}", answer.status_code, answer.content))
                self.close_connection = True
                # Until the client closes the connection (its timeout), or a minute at most.
                self.connection.settimeout(60)
                try:
                    while self.connection.recv(4096):
                        pass
                except (TimeoutError, socket.timeout, OSError):
                    pass
                return
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(name, value)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = do_DELETE = _forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    proxy = LateProxy(f"http://127.0.0.1:{server.server_address[1]}", server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proxy
