"""The quickstart's store server process: launching ``rollouthub store``, waiting for it, stopping it.

The server is started in its own process group with a per-launch nonce (``--instance-id``) and the quickstart's pid
(``--parent-pid``): the quickstart sends data only once ``/v1/agl/health`` answers with *its* nonce (another server
on the port is never used), the server stops by itself if the quickstart is killed, and :func:`stop_store` stops the
whole group (SIGTERM, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Optional

from rollouthub.quickstart.session import QuickstartError
from rollouthub.utils.process_lifetime import start_owned, stop_owned

__all__ = ["StoreProcess", "free_port", "launch_store", "stop_store", "wait_for_store"]

STARTUP_TIMEOUT = 60.0
"""Seconds the store server gets to answer its health check."""

_LOG_PREFIX = re.compile(r"^\S+ \[[A-Z]+\] \([^)]*\)\s+")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class StoreProcess:
    """A ``rollouthub store`` started by :func:`launch_store`."""

    process: subprocess.Popen[bytes]
    url: str
    instance_id: str
    log_path: str
    log_offset: int
    """Where the server's output starts in the log file."""

    def error_line(self) -> Optional[str]:
        """The server's last error line in the log (without the log prefix), if any."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return None
        errors = [line for line in text.splitlines() if "[ERROR]" in line or "error:" in line]
        return _LOG_PREFIX.sub("", errors[-1]).strip() if errors else None


def launch_store(backend_url: str, port: int, log_path: str) -> StoreProcess:
    """Start ``rollouthub store`` on the backend (returns immediately; see :func:`wait_for_store`)."""
    instance_id = uuid.uuid4().hex
    with open(log_path, "ab") as log:
        offset = log.tell()
        cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", backend_url]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "INFO"]
        cmd += ["--instance-id", instance_id, "--parent-pid", str(os.getpid())]
        process = start_owned(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return StoreProcess(process, f"http://127.0.0.1:{port}", instance_id, log_path, offset)


def _answering_instance(url: str) -> Optional[str]:
    """The ``instance_id`` the server at ``url`` reports on its health check (``""`` when it reports none)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=1) as response:
            body = json.loads(response.read() or b"{}")
    except (OSError, ValueError):
        return None
    return str(body.get("instance_id") or "") if isinstance(body, dict) else ""


def wait_for_store(store: StoreProcess, timeout: float = STARTUP_TIMEOUT) -> None:
    """Block until the server answers its health check with its own instance id.

    Raises:
        QuickstartError: the server exited (its error line, e.g. the port is in use) or did not answer in time.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.process.poll() is not None:
            reason = store.error_line() or f"it exited with code {store.process.returncode}"
            raise QuickstartError(f"the store server could not start: {reason} (log: {store.log_path})")
        if _answering_instance(store.url) == store.instance_id:
            return
        try:
            store.process.wait(0.1)  # returns early when the server exits
        except subprocess.TimeoutExpired:
            pass
    stop_store(store)
    raise QuickstartError(f"the store server did not answer within {timeout:.0f} s (log: {store.log_path})")


def stop_store(store: StoreProcess) -> Optional[int]:
    """Stop the server and its process group (SIGTERM; SIGKILL after 15 s); returns its exit code."""
    return stop_owned(store.process, timeout=15.0)
