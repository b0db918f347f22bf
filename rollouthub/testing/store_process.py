"""``rollouthub store`` in a subprocess on a loopback port, for tests and benchmarks that need the real command.

with StoreProcess("--backend", "memory", "--memory-limit", "64MiB") as store:
    urllib.request.urlopen(store.endpoint + "/v1/agl/health")
    print(store.rss_mib(), store.peak_rss_mib())

with store_process(backend="memory") as url:   # the same, as a context manager that yields the URL
    ...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from rollouthub.utils.server_launcher import pick_free_port

__all__ = ["StoreProcess", "proc_status_kib", "store_is_healthy", "store_process"]


def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``: resident set size, ``VmHWM``: its peak)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def store_is_healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether the store server at ``url`` (``http://host:port``) answers ``GET /v1/agl/health`` with 200."""
    try:
        with urllib.request.urlopen(url + "/v1/agl/health", timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class StoreProcess:
    """Run ``python -m rollouthub.cli store --host 127.0.0.1 --port <port> <args>`` in a temporary working directory.

    The constructor returns once ``GET /v1/agl/health`` answers 200 (``RuntimeError`` with the server's log when the
    process exits or does not become healthy within ``startup_timeout`` seconds, or when a store server already
    answers on ``port``). ``port`` defaults to a free one. The server runs without ``ROLLOUTHUB_API_TOKEN`` from the
    environment (pass ``--api-token`` explicitly). Leaving the ``with`` block stops it (SIGINT, then SIGKILL).
    """

    def __init__(
        self, *args: str, port: Optional[int] = None, startup_timeout: float = 60.0, log_level: str = "WARNING"
    ) -> None:
        self.port = port if port is not None else pick_free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        if store_is_healthy(self.endpoint):
            raise RuntimeError(f"A store server already answers at {self.endpoint}; pick another port.")
        self._workdir = tempfile.TemporaryDirectory(prefix="rollouthub-store-")
        command = [sys.executable, "-m", "rollouthub.cli", "store", "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--log-level", log_level, *args]
        env = {k: v for k, v in os.environ.items() if k != "ROLLOUTHUB_API_TOKEN"}
        env["PYTHONUNBUFFERED"] = "1"
        self.log_path = os.path.join(self._workdir.name, "store.log")
        self._log = open(self.log_path, "wb")  # a file, not a pipe: a chatty server never blocks on a full pipe
        self.process = subprocess.Popen(
            command, cwd=self._workdir.name, env=env, stdout=subprocess.DEVNULL, stderr=self._log
        )
        deadline = time.monotonic() + startup_timeout
        while not store_is_healthy(self.endpoint):
            exited = self.process.poll() is not None
            if exited or time.monotonic() > deadline:
                self.stop()
                log = self.log()[-2000:]
                self.close()
                what = (
                    f"exited early (code {self.process.returncode})"
                    if exited
                    else f"did not become healthy within {startup_timeout:.0f}s"
                )
                raise RuntimeError(f"rollouthub store {' '.join(args)} {what}: {log}")
            time.sleep(0.05)

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

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

    def close(self) -> None:
        """Stop the server and remove its working directory."""
        self.stop()
        self._log.close()
        self._workdir.cleanup()

    def __enter__(self) -> StoreProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def store_process(
    port: Optional[int] = None,
    *,
    backend: str = "memory",
    extra_args: Sequence[str] = (),
    startup_timeout: float = 60.0,
) -> Iterator[str]:
    """Run ``rollouthub store --backend <backend> <extra_args>`` (see :class:`StoreProcess`); yields its URL once it
    is healthy and stops it afterwards."""
    with StoreProcess("--backend", backend, *extra_args, port=port, startup_timeout=startup_timeout) as store:
        yield store.endpoint
