"""Trainer construction and ``dev`` / ``fit`` wiring."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, List

import pytest

from rollouthub.adapter import TracerTraceToTriplet, TraceToMessages
from rollouthub.algorithm import Algorithm, Baseline, algo
from rollouthub.execution import ClientServerExecutionStrategy, SharedMemoryExecutionStrategy
from rollouthub.litagent import rollout
from rollouthub.runner import LitAgentRunner
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.tracer import DummyTracer, OtelTracer, Tracer
from rollouthub.trainer import Trainer
from rollouthub.types import Hook, PromptTemplate


def test_defaults() -> None:
    trainer = Trainer()
    assert isinstance(trainer.tracer, Tracer)
    assert isinstance(trainer.adapter, TracerTraceToTriplet)
    assert isinstance(trainer.strategy, ClientServerExecutionStrategy)
    assert trainer.strategy.n_runners == 1 and trainer.n_runners == 1 and trainer.n_workers == 1
    assert isinstance(trainer.store, InMemoryLightningStore) and trainer.store.capabilities["thread_safe"]
    assert isinstance(trainer.runner, LitAgentRunner) and trainer.runner.tracer is trainer.tracer
    assert trainer.algorithm is None and trainer.llm_proxy is None and trainer.hooks == ()
    assert trainer.worker_id is None and trainer.triplet_exporter is trainer.adapter


def test_strategy_resolution_and_port_forwarding(monkeypatch: pytest.MonkeyPatch) -> None:
    shm = Trainer(strategy="shm", port=1234, n_runners=1, tracer=DummyTracer())
    assert isinstance(shm.strategy, SharedMemoryExecutionStrategy)
    assert not shm.store.capabilities["thread_safe"]  # not a client-server strategy
    cs = Trainer(strategy={"type": "cs", "n_runners": 3}, port=1234, tracer=DummyTracer())
    assert isinstance(cs.strategy, ClientServerExecutionStrategy)
    assert cs.strategy.server_port == 1234 and cs.n_runners == 3
    instance = ClientServerExecutionStrategy(server_port=1)
    assert Trainer(strategy=instance, port=999, tracer=DummyTracer()).strategy.server_port == 999
    monkeypatch.setenv("AGL_SERVER_PORT", "5555")
    assert Trainer(tracer=DummyTracer()).strategy.server_port == 5555  # type: ignore[attr-defined]
    assert Trainer(n_runners=4, tracer=DummyTracer()).strategy.n_runners == 4  # type: ignore[attr-defined]
    shm_dict = Trainer(strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 2}, tracer=DummyTracer())
    assert shm_dict.n_runners == 2


def test_component_specs() -> None:
    tracer = OtelTracer()
    trainer = Trainer(
        tracer=tracer,
        adapter={"agent_match": "agent-x"},
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 0.5},
        max_rollouts=7,
        algorithm=Baseline,
        hooks=Hook(),
    )
    assert isinstance(trainer.adapter, TracerTraceToTriplet)
    assert isinstance(trainer.runner, LitAgentRunner) and trainer.runner.tracer is tracer
    assert trainer.runner._max_rollouts == 7  # injected optional default
    assert isinstance(trainer.algorithm, Baseline)
    assert len(trainer.hooks) == 1
    assert isinstance(Trainer(tracer="rollouthub.tracer.DummyTracer").tracer, DummyTracer)
    assert isinstance(Trainer(tracer=DummyTracer, adapter=TraceToMessages).adapter, TraceToMessages)
    with pytest.raises(ValueError):
        Trainer(tracer={"no_type": 1})
    with pytest.raises(TypeError):
        Trainer(tracer=DummyTracer(), algorithm=lambda: 42)


def test_deprecated_aliases() -> None:
    with pytest.warns(DeprecationWarning):
        trainer = Trainer(n_workers=3, max_tasks=5, tracer=DummyTracer())
    assert trainer.n_runners == 3 and trainer.max_rollouts == 5 and trainer.max_tasks == 5
    with pytest.warns(DeprecationWarning):
        trainer = Trainer(triplet_exporter=TraceToMessages(), tracer=DummyTracer())
    assert isinstance(trainer.adapter, TraceToMessages)
    with pytest.warns(DeprecationWarning):
        Trainer(dev=True, tracer=DummyTracer())


@rollout
def constant_agent(task: Any, prompt_template: PromptTemplate) -> float:
    return float(len(prompt_template.format(x=task)))


def test_dev_requires_fast_algorithm() -> None:
    class Slow(Algorithm):
        def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
            return None

    with pytest.raises(TypeError, match="FastAlgorithm"):
        Trainer(algorithm=Slow(), tracer=DummyTracer()).dev(constant_agent, [1])


def test_fit_shm_with_several_runner_threads_and_sync_algorithm() -> None:
    """n_runners > 1 in shared memory: each thread gets its own runner; a sync @algo runs on the main thread."""
    seen: List[Any] = []

    @algo
    def sync_algorithm(*, store: Any, train_dataset: Any) -> None:
        async def body() -> None:
            await store.add_resources({"p": PromptTemplate(template="{x}!", engine="f-string")})
            ids = [(await store.enqueue_rollout(input=t, mode="train")).rollout_id for t in train_dataset]
            while True:
                done = await store.wait_for_rollouts(rollout_ids=ids, timeout=1.0)
                if len(done) == len(ids):
                    seen.extend(done)
                    return

        # A sync algorithm blocks the loop of its thread by design; it may run its own loop in another thread.
        worker = threading.Thread(target=lambda: asyncio.run(body()))
        worker.start()
        worker.join(60)

    trainer = Trainer(
        algorithm=sync_algorithm,
        tracer=OtelTracer,
        runner={"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.05, "heartbeat_interval": 0},
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 3},
    )
    trainer.fit(constant_agent, ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"])
    assert {r.status for r in seen} == {"succeeded"} and len(seen) == 6

    async def workers() -> List[str]:
        attempts = [a for r in seen for a in await trainer.store.query_attempts(r.rollout_id)]
        return sorted({a.worker_id for a in attempts if a.worker_id})

    assert set(asyncio.run(workers())) <= {"Worker-0", "Worker-1", "Worker-2"}
