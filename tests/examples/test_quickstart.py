"""The main job ``python -m rollouthub.quickstart``: mock LLM logic, and two real runs (fresh, then reused)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Tuple

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


def _run(tmp_path: Path, *args: str, env: Dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rollouthub.quickstart", "--runners", "2", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)


async def _prompts_by_rollout(db: Path) -> Tuple[Dict[str, Tuple[str, str, str]], int]:
    """For every rollout: (resources id, the template it resolves to now, the prompt its LLM call sent); and the
    number of resources snapshots."""
    from rollouthub.store.sql import SqlLightningStore

    store = SqlLightningStore(f"sqlite:///{db}")
    try:
        result: Dict[str, Tuple[str, str, str]] = {}
        for rollout in await store.query_rollouts():
            assert rollout.resources_id is not None
            resources = await store.get_resources_by_id(rollout.resources_id)
            assert resources is not None
            template = resources.resources["prompt_template"].template  # type: ignore[union-attr]
            spans = await store.query_spans(rollout.rollout_id, "latest")
            [sent] = [
                s.attributes["gen_ai.prompt.0.content"] for s in spans if "gen_ai.prompt.0.content" in s.attributes
            ]
            result[rollout.rollout_id] = (rollout.resources_id, template, sent)
        return result, (await store.query_resources()).total
    finally:
        await store.close()


@pytest.mark.timeout(300)
def test_quickstart_twice_appends_and_never_rewrites_history(tmp_path: Path) -> None:
    """Issue 18 (points 1, 2, 3, 8): an exported OPENAI_BASE_URL is not used without --llm-endpoint; the last lines
    print only what works after the run; a second run on the same database appends new prompt resources and every
    first-run rollout still resolves to the prompt it ran with; the progress bar ends complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # exported by the user, unreachable: must not be used
    db = tmp_path / "rollouthub-quickstart.db"
    first = _run(tmp_path, "--rounds", "1", "--fresh", env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    out = " ".join(first.stdout.split())  # rich wraps long lines
    assert "creating" in out and "Best prompt (score" in out and "LLM: built-in mock" in out
    assert str(db) in out and db.exists()
    totals = int(re.search(r"Store totals: (\d+) rollouts", out).group(1))  # type: ignore[union-attr]
    assert totals > 8
    # Only links that still work once the quickstart has exited: no URL of the stopped server.
    tail = out[out.index("Store totals") :]
    assert "Dashboard:" not in tail
    assert f"Browse it later: rollouthub store --backend sqlite:///{db} then open http://127.0.0.1:4747/" in tail
    # The progress bar ends complete: N/N rollouts.
    bars = re.findall(r"rollouts [━╸╺ ]+ (\d+)/(\d+)", first.stdout)
    assert bars and bars[-1][0] == bars[-1][1] == str(totals), bars[-3:]

    before, resources_before = asyncio.run(_prompts_by_rollout(db))
    assert len(before) == totals
    for resources_id, template, sent in before.values():
        assert resources_id.startswith("apo-") and sent.startswith(template.split("{review}")[0])

    second = _run(tmp_path, "--rounds", "1", env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    out2 = " ".join(second.stdout.split())
    assert "reusing" in out2
    totals2 = int(re.search(r"Store totals: (\d+) rollouts", out2).group(1))  # type: ignore[union-attr]
    assert totals2 == 2 * totals  # the same deterministic run, appended
    after, resources_after = asyncio.run(_prompts_by_rollout(db))
    assert resources_after == 2 * resources_before
    for rollout_id, (resources_id, template, sent) in before.items():
        assert after[rollout_id] == (resources_id, template, sent), rollout_id  # history is not rewritten
    second_run = {rid: v for rid, v in after.items() if rid not in before}
    assert {v[0] for v in second_run.values()}.isdisjoint({v[0] for v in before.values()})


@pytest.mark.timeout(60)
def test_llm_endpoint_is_checked_first_with_one_line(tmp_path: Path) -> None:
    """Issue 18 (point 1): a requested endpoint that cannot work fails at once with one line, before any work."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_"))}
    cases = [
        (["--llm-endpoint"], {}, "--llm-endpoint without a URL needs OPENAI_BASE_URL"),
        (["--llm-endpoint", "http://127.0.0.1:9/v1"], {}, "needs an API key: set OPENAI_API_KEY"),
        (["--llm-endpoint"], {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}, "cannot reach"),
    ]
    for args, extra, message in cases:
        started = time.monotonic()
        result = _run(tmp_path, *args, env={**env, **extra})
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().count("\n") == 0 and message in result.stderr, result.stderr
        assert time.monotonic() - started < 15
    assert not (tmp_path / "rollouthub-quickstart.db").exists()


def test_llm_endpoint_check_accepts_a_live_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollouthub.quickstart import EndpointError, check_llm_endpoint
    from rollouthub.testing import MockOpenAIServer

    with MockOpenAIServer() as llm:
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        assert check_llm_endpoint(llm.base_url) == (llm.base_url, "k")
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        assert check_llm_endpoint("$OPENAI_BASE_URL")[0] == llm.base_url
    with pytest.raises(EndpointError, match="not an http"):
        check_llm_endpoint("ftp://x")
