"""The main job ``python -m rollouthub.quickstart``: mock LLM logic, and two real runs (fresh, then reused)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollouthub.quickstart import HINTS, REVIEWS, SEED_TEMPLATE, mock_llm_reply, score_answer


def _ask(model: str, content: str) -> str:
    return mock_llm_reply({"model": model, "messages": [{"role": "user", "content": content}]})


def test_mock_llm_rewards_better_prompts() -> None:
    def average(template: str) -> float:
        scores = [score_answer(_ask("mock-sentiment", template.format(review=r)), label) for r, label, _ in REVIEWS]
        return sum(scores) / len(scores)

    full = SEED_TEMPLATE + " " + " ".join(h.sentence for h in HINTS)
    assert average(SEED_TEMPLATE) < average(SEED_TEMPLATE + " " + HINTS[0].sentence) < average(full) == 1.0
    critique = _ask("mock-critic", f"<template>\n{SEED_TEMPLATE}\n</template>\nexperiments...")
    sentence = re.search(r'"([^"]+)"', critique).group(1)  # type: ignore[union-attr]
    assert sentence in {h.sentence for h in HINTS}
    edited = _ask("mock-editor", f"<template>\n{SEED_TEMPLATE}\n</template>\nCritique:\n{critique}")
    assert edited == f"{SEED_TEMPLATE} {sentence}" and "{review}" in edited
    assert "keep it" in _ask("mock-critic", f"<template>\n{full}\n</template>")


@pytest.mark.timeout(240)
def test_quickstart_runs_offline_and_reuses_the_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_"))}
    cmd = [sys.executable, "-m", "rollouthub.quickstart", "--runners", "2"]
    first = subprocess.run(cmd + ["--rounds", "1", "--fresh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    out = " ".join(first.stdout.split())  # rich wraps long lines
    assert "creating" in out and "Best prompt (score" in out
    assert re.search(r"Dashboard: http://127\.0\.0\.1:\d+/", out)
    assert str(tmp_path / "rollouthub-quickstart.db") in out
    assert (tmp_path / "rollouthub-quickstart.db").exists()
    totals = int(re.search(r"Store totals: (\d+) rollouts", out).group(1))  # type: ignore[union-attr]
    assert totals > 8

    second = subprocess.run(cmd + ["--rounds", "0"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-3000:]
    out2 = " ".join(second.stdout.split())
    assert "reusing" in out2
    totals2 = int(re.search(r"Store totals: (\d+) rollouts", out2).group(1))  # type: ignore[union-attr]
    assert totals2 == totals + 8  # the seed is evaluated on the 8 validation reviews, appended to the old data
