"""Helpers of the drop-in compatibility tests: a real ``rollouthub store`` process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import requests

from rollouthub.utils.server_launcher import pick_free_port


def store_is_healthy(url: str) -> bool:
    """Whether ``url`` (``http://host:port``) answers ``GET /v1/agl/health`` with 200."""
    try:
        return requests.get(url + "/v1/agl/health", timeout=1).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def store_process(port: Optional[int] = None, timeout: float = 60.0) -> Iterator[str]:
    """Run ``rollouthub store --backend memory`` on a loopback port; yields its URL once healthy."""
    port = port if port is not None else pick_free_port()
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUTHUB_API_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--backend", "memory", "--host", "127.0.0.1"]
        + ["--port", str(port), "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not store_is_healthy(url):
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"rollouthub store exited early: {stderr}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rollouthub store did not become healthy within {timeout:.0f}s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a server that ignores SIGTERM
            proc.kill()
            proc.wait(5)
