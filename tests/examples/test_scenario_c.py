"""Scenario C: built-in APO end to end with a stubbed optimiser, with both strategies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .conftest import load_example

pytestmark = pytest.mark.timeout(180)


async def _check_store(store: Any, apo: Any) -> None:
    resources = {r.resources_id for r in await store.query_resources()}
    assert {apo.resources_id_of(v) for v in ("v0", "v1", "v2")} <= resources
    rollouts = list(await store.query_rollouts())
    assert rollouts and all(r.status in ("succeeded", "failed", "cancelled") for r in rollouts)
    assert {r.status for r in rollouts} == {"succeeded"}


@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_scenario_c(strategy: str) -> None:
    check_scenario_c(load_example("apo_builtin"), strategy)


def check_scenario_c(example: Any, strategy: str) -> None:
    """Run scenario C with ``strategy`` and check APO's search and the store (also run on ``"ray"`` by the ray leg)."""
    trainer, apo, stub = example.run(strategy)
    # The seed scores 0.2 on the full validation set.
    assert apo.history[0][0] == "initial" and apo.history[0][1] == "v0"
    assert apo.history[0][2] == pytest.approx(0.2)
    assert "STRICT" in apo.get_best_prompt().template
    rounds, width, branch = 2, 2, 2
    assert stub.count(example.GRADIENT_MODEL) == width * branch * rounds
    assert stub.count(example.EDIT_MODEL) == width * branch * rounds
    # At least one candidate contained the keyword and scored 1.0 during selection.
    assert any(phase == "select" and score == pytest.approx(1.0) for phase, _, score in apo.history)
    asyncio.run(_check_store(trainer.store, apo))
