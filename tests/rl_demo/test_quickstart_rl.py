"""The RL quickstart as a command: one line without the [train] extra; with it, a short run writes its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_stack import TRAIN_INSTALLED

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "rollouthub.rl_demo.quickstart"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.skipif(TRAIN_INSTALLED, reason="checks the message shown when the [train] extra is absent")
def test_without_the_extra_it_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    database = tmp_path / "rl.db"
    result = subprocess.run(
        [*COMMAND, "--db", str(database)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert "rollouthub[train]" in result.stderr and "Traceback" not in result.stderr
    assert not database.exists()


@pytest.mark.train
@pytest.mark.skipif(not TRAIN_INSTALLED, reason="needs the [train] extra (torch, transformers)")
@pytest.mark.timeout(300)
def test_a_short_run_prints_each_step_and_writes_the_summary(tmp_path: Path) -> None:
    """Two steps cannot reach the target: exit 2, and the summary says what the run did."""
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [*COMMAND, "--db", str(tmp_path / "rl.db"), "--max-steps", "2", "--runners", "2"]
        + ["--checkpoint-every", "1", "--summary-json", str(summary_path)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("step   1  v1 ") for line in lines) and any(
        line.startswith("step   2  v2 ") for line in lines
    )
    assert "did not reach 0.9 within 2 steps" in result.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == 2 and summary["policy_versions"] == 3
    assert summary["initial_eval_reward"] == summary["eval_reward_per_policy_version"]["0"]
    assert summary["final_eval_reward"] == summary["eval_reward_per_policy_version"]["2"]
    assert (Path(summary["checkpoint_dir"]) / "step-00000002" / "state.json").is_file()
    assert summary["seconds"] > 0 and "Checkpoints: " + summary["checkpoint_dir"] in result.stdout
