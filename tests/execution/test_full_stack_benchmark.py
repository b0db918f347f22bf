"""Smoke test of ``benchmarks/full_stack.py``: a tiny workload must finish with every span and reward verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["batch_partial", "single"])
def test_full_stack_smoke(mode: str, tmp_path: Path) -> None:
    out = tmp_path / "result.jsonl"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "full_stack.py"), "--mode", mode, "--total-tasks", "12"]
    cmd += ["--batch-size", "4", "--remaining-tasks", "8", "--concurrency", "4", "--n-runners", "2"]
    cmd += ["--max-rounds", "2", "--sleep-seconds", "0.01", "--json-out", str(out)]
    # The echo reference (CPU per request of a bare app) once, small -- but enough requests for the server's CPU time,
    # counted in 10 ms ticks, to be more than zero even on a fast machine; skipped for the other mode.
    cmd += ["--echo-ops", "600"] if mode == "batch_partial" else ["--no-echo-reference"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["verified_ok"] == 12 and result["lost_rollouts"] == 0 and result["lost_spans"] == 0
    assert result["spans"] >= 12 * 5 and result["server_cpu_s"] > 0
    if mode == "batch_partial":
        assert result["echo_cpu_ms_per_request"] > 0 and "echo requests" in proc.stdout
    else:
        assert result["echo_cpu_ms_per_request"] is None


def test_agent_plan_is_deterministic() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import full_stack
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    a, b = full_stack.plan_for("task-1-generated", 3, 0.05), full_stack.plan_for("task-1-generated", 3, 0.05)
    assert a == b and 1 <= a.rounds <= 3 and 1.0 <= a.final_reward <= 2.0
    assert a.expected_spans == 3 * a.rounds + sum(r is not None for r in a.round_rewards) + 2
