"""benchmarks/rl_gpu_smoke.py and benchmarks/rl_step.py run as commands and report what they promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_stack import TRAIN_ONLY

pytestmark = [*TRAIN_ONLY, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "benchmarks" / script), *args]
    return subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=280)


def test_the_gpu_smoke_without_cuda_says_so_in_one_line_with_its_own_exit_status() -> None:
    import torch

    if torch.cuda.is_available():  # on a CUDA machine the default run is the real smoke test
        result = run("rl_gpu_smoke.py", "--steps", "2")
        assert result.returncode == 0, result.stderr[-2000:]
        return
    result = run("rl_gpu_smoke.py")
    assert result.returncode == 3, result.stderr[-2000:]
    assert (
        result.stdout.count("\n") == 1 and "CUDA is not available" in result.stdout and "--device cpu" in result.stdout
    )


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_gpu_smoke_runs_grpo_steps_on_the_cpu(tmp_path: Path, lora_rank: int) -> None:
    """A full fine-tune, and a LoRA adapter (the served copy is the peft model; new versions load its weights)."""
    figures_path = tmp_path / "smoke.json"
    options = ["--device", "cpu", "--steps", "2", "--runners", "4", "--lora-rank", str(lora_rank)]
    result = run("rl_gpu_smoke.py", *options, "--learning-rate", "1e-3", "--json", str(figures_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads(figures_path.read_text())
    assert figures["device"] == "cpu" and figures["steps"] == 2 and figures["policy_version"] == 2
    assert figures["step_seconds"] > 0 and figures["generation_tokens_per_s"] > 0
    ratios = [ratio for ratio in figures["first_ratio_mean"] if ratio is not None]
    assert ratios and all(abs(ratio - 1) < 1e-5 for ratio in ratios)  # served by the weights being trained
    assert "2 GRPO steps on cpu" in result.stdout


def test_rl_step_splits_the_step_and_measures_the_store_and_proxy(tmp_path: Path) -> None:
    figures_path = tmp_path / "rl_step.json"
    result = run("rl_step.py", "--steps", "2", "--warmup", "1", "--runners", "2", "--json", str(figures_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads(figures_path.read_text())
    assert [row["step"] for row in figures["steps"]] == [1, 2]
    for row in figures["steps"]:
        parts = row["rollouts"] + row["trajectories"] + row["update"] + row["weights"]
        assert parts <= row["total"] + 1e-6 and abs(row["generation"] + row["waiting"] - row["rollouts"]) < 1e-6
        assert row["store_share"] > 0 and row["proxy_share"] > 0 and row["rollouts_per_s"] > 0
    assert "store CPU" in result.stdout.splitlines()[-1]
