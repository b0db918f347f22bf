"""Start ``rollouthub store`` as a subprocess for the CLI tests: unbuffered, without the caller's token or metrics dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def spawn_store(cwd: Path, *args: str, text: bool = False) -> subprocess.Popen[Any]:
    """``python -m rollouthub.cli store ARGS`` in ``cwd`` with piped stdout/stderr (``str`` when ``text``, else bytes)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("ROLLOUTHUB_API_TOKEN", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
    )
