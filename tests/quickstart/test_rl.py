"""``python -m rollouthub.quickstart --rl``: one line without the [train] extra; with it, a short run prints each
step, writes its summary and fails (exit 1, one line) below its target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train_stack import TRAIN_INSTALLED

from .helpers import run_quickstart


@pytest.mark.skipif(TRAIN_INSTALLED, reason="checks the message shown when the [train] extra is absent")
def test_without_the_extra_it_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    result = run_quickstart(tmp_path, "--rl", timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert "rollouthub[train]" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no database, log or checkpoint: nothing started


@pytest.mark.train
@pytest.mark.skipif(not TRAIN_INSTALLED, reason="needs the [train] extra (torch, transformers)")
@pytest.mark.timeout(300)
def test_a_short_run_prints_each_step_writes_the_summary_and_fails_below_the_target(tmp_path: Path) -> None:
    result = run_quickstart(
        tmp_path,
        "--rl",
        "--max-steps",
        "2",
        "--runners",
        "2",
        "--checkpoint-every",
        "1",
        "--summary-json",
        "summary.json",
        timeout=280,
    )
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("step   0  v0   eval ") for line in lines)
    assert any(line.startswith("step   1  v1 ") for line in lines) and any(
        line.startswith("step   2  v2 ") for line in lines
    )
    assert result.stderr.strip().splitlines()[-1] == (
        "rollouthub quickstart: error: the eval reward did not reach 0.9 within 2 steps"
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "rl" and summary["steps"] == 2 and summary["policy_versions"] == 3
    assert summary["initial_eval_reward"] == summary["eval_reward_per_policy_version"]["0"]
    assert summary["final_eval_reward"] == summary["eval_reward_per_policy_version"]["2"]
    assert summary["checkpoint_dir"] == str(tmp_path / "rollouthub-rl-checkpoints" / "seed-0")
    assert (Path(summary["checkpoint_dir"]) / "step-00000002" / "state.json").is_file()
    assert summary["seconds"] > 0 and summary["failure"] and f"Checkpoints: {summary['checkpoint_dir']}" in lines
