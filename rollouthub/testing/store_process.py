"""``store_process``: a real ``rollouthub store`` server in a subprocess, for integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

__all__ = ["store_process", "store_is_healthy"]


def store_is_healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether the store server at ``url`` (``http://host:port``) answers ``GET /v1/agl/health`` with 200."""
    try:
        with urllib.request.urlopen(url + "/v1/agl/health", timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextmanager
def store_process(
    port: Optional[int] = None,
    *,
    backend: str = "memory",
    extra_args: Sequence[str] = (),
    startup_timeout: float = 60.0,
) -> Iterator[str]:
    """Run ``rollouthub store --backend <backend>`` on a loopback port; yields its URL once it is healthy.

    Args:
        port: the port to bind (a free one when ``None``).
        backend: ``memory`` or a SQL URL, as for the CLI.
        extra_args: more ``rollouthub store`` flags.
        startup_timeout: seconds to wait for the health check; ``RuntimeError`` after that, or if the server exits
            early (with its stderr), or if a store server already answers on the port.

    The server runs without ``ROLLOUTHUB_API_TOKEN`` and with ``--log-level WARNING``; it gets SIGTERM on exit.
    """
    from rollouthub.utils.server_launcher import pick_free_port

    port = port if port is not None else pick_free_port()
    url = f"http://127.0.0.1:{port}"
    if store_is_healthy(url):
        raise RuntimeError(f"A store server already answers at {url}; pick another port.")
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUTHUB_API_TOKEN"}
    command = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", backend, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "WARNING", *extra_args]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + startup_timeout
        while not store_is_healthy(url):
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"rollouthub store exited early (code {proc.returncode}): {stderr}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rollouthub store did not become healthy within {startup_timeout:.0f}s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a server that ignores SIGTERM
            proc.kill()
            proc.wait(5)
        if proc.stderr is not None:
            proc.stderr.close()
