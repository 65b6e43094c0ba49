"""Harness scripts run as processes, to be killed with kill -9 and run again."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from stackcorner import StackCorner

HERE = Path(__file__).parent


class Harness:
    """One run of a harness script of this folder, its stdout read line by line."""

    def __init__(
        self, script: str, corner: StackCorner, token: str, service: str, tool: str, effect: str, *extra: str
    ) -> None:
        command = [
            sys.executable, str(HERE / script),
            "--ingest", corner.ingest_url, "--recovery", corner.recovery_url, "--token", token,
            "--service", service, "--tool", tool, "--effect", effect, *extra,
        ]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def next(self, deadline_s: float = 60) -> dict[str, Any]:
        """The next line it prints (fails after the deadline)."""
        try:
            return self.lines.get(timeout=deadline_s)
        except queue.Empty:
            self.process.kill()
            raise AssertionError(f"the harness said nothing for {deadline_s}s (exit {self.process.poll()})") from None

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no handler, no flush, no goodbye
        self.process.wait(timeout=30)
