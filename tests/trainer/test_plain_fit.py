"""A plain ``Trainer.fit`` (default tracer, strategy and store) is quiet: no notices about optional packages nobody
asked for, no AgentOps console output or log file, and its runners are reported stopped at the end.

Runs in both CI legs: without the ``[agentops]`` extra the default tracer falls back to native tracing (its notices
are debug lines); with it (the agentops leg) AgentOps runs local and must say nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollouthub.testing import MockOpenAIServer

pytestmark = pytest.mark.timeout(180)

CHILD = Path(__file__).with_name("_plain_fit_child.py")
NOISE = ("agentops", "litellm", "langchain", "warning", "session replay", "error")


def test_plain_fit_prints_no_notices_and_reports_runners_stopped(tmp_path: Path) -> None:
    n_runners, n_rollouts = 2, 6
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTOPS_")}  # AgentOps' own defaults
    with MockOpenAIServer("four") as llm:
        proc = subprocess.run(
            [sys.executable, str(CHILD), llm.base_url, str(n_runners), str(n_rollouts)],
            capture_output=True,
            text=True,
            timeout=150,
            env=env,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    noisy = [line for line in proc.stderr.splitlines() if any(word in line.lower() for word in NOISE)]
    assert noisy == [], "\n".join(noisy)
    assert not (tmp_path / "agentops.log").exists()  # no file written where the user runs the script
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["statuses"] == ["succeeded"] * n_rollouts
    assert sorted(result["workers"]) == [f"Worker-{i}" for i in range(n_runners)]
    for stats in result["workers"].values():
        assert stats["runner_state"] == "stopped"
        assert stats["heartbeat_interval"] == 10.0
