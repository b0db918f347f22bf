"""``Baseline`` waits on the store's wake-ups: trivial rollouts are harvested as they finish, not once per poll."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline
from rollouthub.algorithm.utils import rollout_wait_step
from rollouthub.runner import LitAgentRunner
from rollouthub.store import InMemoryLightningStore
from rollouthub.store.client import LightningStoreClient
from rollouthub.testing import store_process
from rollouthub.tracer import OtelTracer
from rollouthub.types import PromptTemplate

from .helpers import simulated_runner

pytestmark = pytest.mark.timeout(120)

N_ROLLOUTS = 14  # the repro: 14 trivial rollouts took 17.5 s with 5 s polls
PROMPT: Any = {"prompt_template": PromptTemplate(template="{q}", engine="f-string")}


def _baseline(store: Any) -> Baseline:
    baseline = Baseline(span_verbosity="none")  # the default polling interval
    baseline.set_store(store)
    baseline.set_initial_resources(PROMPT)
    return baseline


async def test_trivial_rollouts_all_finish_within_one_polling_interval() -> None:
    store = InMemoryLightningStore()
    baseline = _baseline(store)
    stop = asyncio.Event()
    runner = asyncio.create_task(simulated_runner(store, lambda task, res: 1.0, stop))
    started = time.monotonic()
    # Polling, each rollout waited at least one interval (and the queue check another): the run would time out.
    await asyncio.wait_for(baseline.run(train_dataset=list(range(N_ROLLOUTS))), timeout=baseline.polling_interval)
    elapsed = time.monotonic() - started
    stop.set()
    assert await runner == N_ROLLOUTS
    assert elapsed < baseline.polling_interval
    assert [r.status for r in await store.query_rollouts()] == ["succeeded"] * N_ROLLOUTS


def test_trainer_dev_with_baseline_is_not_paced_by_the_polling_interval() -> None:
    @agl.rollout
    def agent(task: Any, prompt_template: agl.PromptTemplate) -> float:
        return 1.0

    baseline = Baseline(span_verbosity="none")
    trainer = agl.Trainer(
        algorithm=baseline,
        n_runners=2,
        strategy={"type": "shm", "main_thread": "algorithm"},
        tracer=agl.OtelTracer(),
        initial_resources=PROMPT,
        progress=False,
    )
    started = time.monotonic()
    trainer.fit(agent, train_dataset=[{"q": str(i)} for i in range(N_ROLLOUTS)])
    elapsed = time.monotonic() - started
    statuses = [r.status for r in asyncio.run(trainer.store.query_rollouts())]
    assert statuses == ["succeeded"] * N_ROLLOUTS
    assert elapsed < baseline.polling_interval, f"{N_ROLLOUTS} trivial rollouts took {elapsed:.1f}s"


async def test_through_a_store_server_the_waits_are_long_polls() -> None:
    class OneAgent(agl.LitAgent[Any]):
        def training_rollout(self, task: Any, resources: Any, rollout: Any) -> float:
            return 1.0

    with store_process() as url:
        algorithm_client = LightningStoreClient(url)
        runner_client = LightningStoreClient(url)
        baseline = _baseline(algorithm_client)
        assert rollout_wait_step(algorithm_client, baseline.polling_interval) == 0.1  # the client's cap
        runner = LitAgentRunner(OtelTracer(), max_rollouts=6, heartbeat_interval=0)
        try:
            with runner.run_context(agent=OneAgent(), store=runner_client, worker_id=0):
                serve = asyncio.create_task(runner.iter())
                started = time.monotonic()
                await asyncio.wait_for(baseline.run(train_dataset=list(range(6))), timeout=baseline.polling_interval)
                elapsed = time.monotonic() - started
                await asyncio.wait_for(serve, timeout=30)
        finally:
            await algorithm_client.close()
            await runner_client.close()
    assert elapsed < baseline.polling_interval


def test_wait_step_in_process_is_the_interval() -> None:
    assert rollout_wait_step(InMemoryLightningStore(), 5.0) == 5.0


def test_polling_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="polling_interval must be a positive number of seconds, got 0"):
        Baseline(polling_interval=0)
