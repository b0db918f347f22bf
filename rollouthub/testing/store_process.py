"""``rollouthub store`` in a subprocess on a free port, for tests and benchmarks that need the real command.

with StoreProcess("--backend", "memory", "--memory-limit", "64MiB") as store:
    urllib.request.urlopen(store.endpoint + "/v1/agl/health")
    print(store.rss_mib(), store.peak_rss_mib())
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Optional

from rollouthub.utils.server_launcher import pick_free_port

__all__ = ["StoreProcess", "proc_status_kib"]


def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``: resident set size, ``VmHWM``: its peak)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


class StoreProcess:
    """Run ``python -m rollouthub.cli store --port <free port> <args>`` in a temporary working directory; the
    constructor returns once ``GET /v1/agl/health`` answers 200 (``RuntimeError`` when the process exits or does not
    become healthy within ``startup_timeout`` seconds). Leaving the ``with`` block stops it (SIGINT, then SIGKILL)."""

    def __init__(self, *args: str, startup_timeout: float = 60.0, log_level: str = "WARNING") -> None:
        self.port = pick_free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._workdir = tempfile.TemporaryDirectory(prefix="rollouthub-store-")
        command = [sys.executable, "-m", "rollouthub.cli", "store", "--port", str(self.port), "--log-level", log_level]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.log_path = os.path.join(self._workdir.name, "store.log")
        self._log = open(self.log_path, "wb")  # a file, not a pipe: a chatty server never blocks on a full pipe
        self.process = subprocess.Popen(
            [*command, *args], cwd=self._workdir.name, env=env, stdout=subprocess.DEVNULL, stderr=self._log
        )
        deadline = time.monotonic() + startup_timeout
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"rollouthub store {' '.join(args)} did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/v1/agl/health", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def rss_mib(self) -> float:
        """The server's resident set size in MiB."""
        return proc_status_kib(self.pid, "VmRSS") / 1024

    def peak_rss_mib(self) -> float:
        """The server's peak resident set size since it started (``VmHWM``) in MiB."""
        return proc_status_kib(self.pid, "VmHWM") / 1024

    def stop(self) -> Optional[int]:
        """Stop the server (SIGINT, SIGKILL after 15 s); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def __enter__(self) -> StoreProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self._log.close()
        self._workdir.cleanup()
