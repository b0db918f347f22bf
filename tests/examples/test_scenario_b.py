"""Scenario B: a custom ``@algo`` through the Trainer, with both strategies (apo_debug.py: test_apo_debug.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from typing import Any

import pytest

from rollouthub.emitter import find_final_reward
from rollouthub.testing import MockOpenAIServer

from .conftest import EXAMPLES_DIR, load_example

pytestmark = pytest.mark.timeout(180)


@pytest.fixture()
def example() -> Any:
    return load_example("apo_custom_algorithm_trainer")


async def _check_store(store: Any, example: Any) -> None:
    rollouts = list(await store.query_rollouts())
    assert len(rollouts) == 3
    assert {r.status for r in rollouts} == {"succeeded"}
    rewards = [find_final_reward(list(await store.query_spans(r.rollout_id))) for r in rollouts]
    assert sorted(rewards) == [0.5, 0.7, 0.9]
    workers = list(await store.query_workers())
    assert [w.worker_id for w in workers] == ["Worker-0"]
    assert "cpu_usage_pct" in (workers[0].heartbeat_stats or {})


@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_scenario_b(strategy: str, example: Any, mock_llm: MockOpenAIServer, caplog: pytest.LogCaptureFixture) -> None:
    check_scenario_b(example, strategy, mock_llm, caplog)


def check_scenario_b(example: Any, strategy: str, mock_llm: MockOpenAIServer, caplog: pytest.LogCaptureFixture) -> None:
    """Run scenario B with ``strategy`` against ``mock_llm`` (already ``OPENAI_BASE_URL``) and check the search, the
    store and the LLM calls (also run on ``"ray"`` by the ray leg)."""
    with caplog.at_level(logging.INFO, logger="apo_custom_algorithm_trainer"):
        trainer = example.run(strategy)
    assert "Best prompt found: 'You are a knowledgeable AI. {any_question}' with reward 0.9" in caplog.text
    asyncio.run(_check_store(trainer.store, example))
    # Every agent call went to the mock: an answer and a judge call per rollout.
    assert sum(1 for r in mock_llm.requests if r["path"].endswith("/chat/completions")) == 6


def test_scenario_b_script_exits_zero() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "AGL_SERVER_PORT")}
    proc = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES_DIR, "apo_custom_algorithm_trainer.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Best prompt found: 'You are a knowledgeable AI. {any_question}' with reward 0.9" in proc.stderr
