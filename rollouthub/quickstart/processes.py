"""The quickstart's store server process: launching ``rollouthub store``, waiting for it, stopping it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

__all__ = ["free_port", "launch_store", "stop_store", "wait_for_store"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_store(db_path: str, port: int, log_path: str) -> subprocess.Popen[bytes]:
    """Start ``rollouthub store`` on the SQLite file (returns immediately; see :func:`wait_for_store`)."""
    with open(log_path, "ab") as log:
        cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", f"sqlite:///{db_path}"]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def wait_for_store(process: subprocess.Popen[bytes], port: int, log_path: str) -> subprocess.Popen[bytes]:
    """Block until the store answers its health check (``RuntimeError`` if it exits or takes over 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`rollouthub store` exited with code {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("`rollouthub store` did not become healthy within 60 s")


def stop_store(process: subprocess.Popen[bytes]) -> None:
    """Terminate the store server and wait for it (killed after 15 s)."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
