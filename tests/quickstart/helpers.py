"""Running ``python -m rollouthub.quickstart`` as a user does: a subprocess in a fresh directory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]


def quickstart_env(**extra: str) -> Dict[str, str]:
    """The environment of a quickstart subprocess: no OpenAI/AGL settings of the caller, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_", "ROLLOUTHUB_API_TOKEN"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_quickstart(cwd: Path, *args: str, timeout: float = 200, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the quickstart to its end."""
    cmd = [sys.executable, "-m", "rollouthub.quickstart", *args]
    return subprocess.run(cmd, cwd=cwd, env=quickstart_env(**env), capture_output=True, text=True, timeout=timeout)


class Running:
    """A quickstart subprocess whose output is collected line by line while it runs."""

    def __init__(self, cwd: Path, *args: str, new_session: bool = False) -> None:
        """Start it; with ``new_session`` in a process group of its own (as a terminal's foreground job)."""
        cmd = [sys.executable, "-m", "rollouthub.quickstart", *args]
        self.process = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=quickstart_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=new_session,
        )
        self.stdout: List[str] = []
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.stdout.append(line)

    def line_with(self, text: str) -> Optional[str]:
        """The first output line containing ``text`` so far."""
        return next((line for line in list(self.stdout) if text in line), None)

    def finish(self, timeout: float = 60) -> int:
        """Wait for the exit; returns the exit code (stderr in :attr:`stderr`)."""
        assert self.process.stderr is not None
        try:
            self.stderr = self.process.stderr.read() if self.process.wait(timeout) is not None else ""
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self._reader.join(10)
        return self.process.returncode


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds (``AssertionError`` after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
