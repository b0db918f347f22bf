"""``RayExecutionStrategy`` on a local Ray cluster: a full ``Trainer.fit``, a runner actor killed mid-run (restarted,
or dead for good once its restarts are used up), an algorithm that raises, and no actor of ours left alive after any
of them."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List

import pytest

import rollouthub as agl
from rollouthub.algorithm import algo
from rollouthub.algorithm.fast import Baseline
from rollouthub.execution.ray import RayExecutionStrategy
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import RolloutConfig

from .helpers import PROMPT, all_attempts, assert_each_succeeded_once, busy_runner, enqueue_prompt_tasks, wait_all_ended

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)


@agl.rollout
def quick_agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    return float(len(prompt_template.format(**task)))


@agl.rollout
def slow_agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    time.sleep(1.0)  # long enough for the test to kill a runner in the middle of one
    return 1.0


class TrainerAwareAgent(agl.LitAgent[Dict[str, Any]]):
    """Reaches its trainer and tracer from inside the runner actor (its copy of the trainer is reattached)."""

    def rollout(self, task: Dict[str, Any], resources: Any, rollout: Any) -> float:
        assert self.trainer.store is None  # the runner's copy of the trainer: the store stayed in the driver
        return 1.0 if self.tracer is self.runner.tracer else 0.0


def actor_names(strategy: RayExecutionStrategy) -> List[str]:
    assert strategy.run_id is not None
    return [f"{strategy.actor_prefix(strategy.run_id)}-runner-{i}" for i in range(strategy.n_runners)]


def node_once_restarted(ray: Any, name: str, namespace: str, timeout: float = 60.0) -> str:
    """The node of the restarted actor ``name``: its calls fail while Ray restarts it, then it answers again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str(ray.get(ray.get_actor(name, namespace=namespace).node_ip.remote(), timeout=5))
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            assert time.monotonic() < deadline, f"actor {name} was not restarted"
            time.sleep(0.2)


def assert_no_actor_alive(ray: Any, strategy: RayExecutionStrategy, timeout: float = 30.0) -> None:
    """Every named runner actor of the last run is gone (``ray.get_actor`` finds only live actors)."""
    deadline = time.monotonic() + timeout
    for name in actor_names(strategy):
        while True:
            try:
                ray.get_actor(name, namespace=strategy.namespace)
            except ValueError:
                break
            assert time.monotonic() < deadline, f"actor {name} still alive after the run"
            time.sleep(0.2)


def test_fit_by_alias_runs_every_rollout_and_reports_nodes(local_ray: Any) -> None:
    n_rollouts = 20
    trainer = agl.Trainer(
        algorithm=Baseline(span_verbosity="none"),
        n_runners=2,
        strategy={"type": "ray", "num_cpus_per_runner": 0.5},
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 0.5},
        initial_resources=PROMPT,
    )
    assert isinstance(trainer.strategy, RayExecutionStrategy) and trainer.strategy.n_runners == 2
    trainer.fit(quick_agent, train_dataset=[{"q": str(i)} for i in range(n_rollouts)])

    async def summary() -> Any:
        rollouts = await trainer.store.query_rollouts()
        workers = await trainer.store.query_workers()
        return rollouts, workers

    rollouts, workers = asyncio.run(summary())
    assert len(rollouts) == n_rollouts and {r.status for r in rollouts} == {"succeeded"}
    node = local_ray.util.get_node_ip_address()
    assert sorted(w.worker_id for w in workers) == ["Worker-0", "Worker-1"]
    for worker in workers:  # worker telemetry: the node of each runner, and its last heartbeat says stopped
        assert worker.heartbeat_stats["node"] == node
        assert worker.heartbeat_stats["runner_state"] == "stopped"
    assert_no_actor_alive(local_ray, trainer.strategy)  # type: ignore[arg-type]
    assert local_ray.is_initialized()  # an existing cluster is left as found


def test_pack_placement_group_is_removed(local_ray: Any) -> None:
    strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, placement="pack")
    trainer = agl.Trainer(algorithm=Baseline(span_verbosity="none"), strategy=strategy, initial_resources=PROMPT)
    trainer.fit(TrainerAwareAgent(), train_dataset=[{"q": str(i)} for i in range(6)])
    rollouts = asyncio.run(trainer.store.query_rollouts())
    assert [r.status for r in rollouts] == ["succeeded"] * 6
    assert_no_actor_alive(local_ray, strategy)
    from ray.util import placement_group_table

    assert strategy.run_id is not None
    ours = [
        pg for pg in placement_group_table().values() if pg["name"] == f"{strategy.actor_prefix(strategy.run_id)}-pg"
    ]
    assert ours and all(pg["state"] == "REMOVED" for pg in ours), ours


def test_killed_runner_actor_is_restarted_and_every_rollout_ends_per_its_retry_config(local_ray: Any) -> None:
    n_rollouts = 16
    strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, max_restarts=2)
    config = RolloutConfig(timeout_seconds=5.0, max_attempts=3, retry_condition=["timeout", "unresponsive"])
    seen: Dict[str, Any] = {}

    @algo
    async def kill_one_runner(*, store: Any) -> None:
        ids = await enqueue_prompt_tasks(store, n_rollouts, config)
        # Wait until a runner is executing a rollout, then kill its actor (Ray restarts it: no_restart=False).
        name = actor_names(strategy)[await busy_runner(store, ids)]
        local_ray.kill(local_ray.get_actor(name, namespace=strategy.namespace), no_restart=False)
        seen["restarted_node"] = await asyncio.to_thread(node_once_restarted, local_ray, name, strategy.namespace)
        await wait_all_ended(store, ids, timeout=120)
        seen["rollouts"] = await store.query_rollouts()
        seen["attempts"] = await all_attempts(store, ids)

    trainer = agl.Trainer(
        algorithm=kill_one_runner,
        strategy=strategy,
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 0.5},
        store=InMemoryLightningStore(thread_safe=True),
    )
    trainer.fit(slow_agent)
    assert seen["restarted_node"] == local_ray.util.get_node_ip_address()
    assert len(seen["rollouts"]) == n_rollouts
    # Every rollout ended per its config: retried after the lost attempt, never twice done.
    retried = assert_each_succeeded_once(seen["rollouts"], seen["attempts"], config)
    assert retried > 0, "the killed runner's attempt was not retried"
    assert_no_actor_alive(local_ray, strategy)


def test_algorithm_exception_ends_the_run_and_removes_the_actors(local_ray: Any) -> None:
    strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, graceful_timeout=5.0)

    @algo
    async def broken(*, store: Any) -> None:
        # Both runners are up before the algorithm fails (they answer their actor calls).
        await asyncio.to_thread(
            lambda: [
                local_ray.get(local_ray.get_actor(n, namespace=strategy.namespace).node_ip.remote(), timeout=60)
                for n in actor_names(strategy)
            ]
        )
        raise RuntimeError("algorithm failed on purpose")

    trainer = agl.Trainer(algorithm=broken, strategy=strategy)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="on purpose"):
        trainer.fit(quick_agent)
    assert time.monotonic() - started < 60
    assert_no_actor_alive(local_ray, strategy)


def test_a_runner_dead_for_good_leaves_the_others_to_finish_the_run(
    local_ray: Any, caplog: pytest.LogCaptureFixture
) -> None:
    n_rollouts = 8
    strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, max_restarts=0)
    config = RolloutConfig(timeout_seconds=5.0, max_attempts=3, retry_condition=["timeout", "unresponsive"])
    seen: Dict[str, Any] = {}

    @algo
    async def kill_one_runner_for_good(*, store: Any) -> None:
        ids = await enqueue_prompt_tasks(store, n_rollouts, config)
        seen["victim"] = await busy_runner(store, ids)
        name = actor_names(strategy)[seen["victim"]]
        local_ray.kill(local_ray.get_actor(name, namespace=strategy.namespace), no_restart=False)  # 0 restarts left
        await wait_all_ended(store, ids, timeout=120)
        seen["rollouts"] = await store.query_rollouts()
        seen["attempts"] = await all_attempts(store, ids)

    trainer = agl.Trainer(
        algorithm=kill_one_runner_for_good,
        strategy=strategy,
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 0.5},
        store=InMemoryLightningStore(thread_safe=True),
    )
    with caplog.at_level(logging.WARNING, logger="rollouthub.execution.ray"):
        trainer.fit(slow_agent)
    assert [r.status for r in seen["rollouts"]] == ["succeeded"] * n_rollouts  # the other runner did them all
    victim, node = seen["victim"], local_ray.util.get_node_ip_address()
    assert [a.worker_id for a in seen["attempts"] if a.status == "timeout"] == [f"Worker-{victim}"]  # then retried
    warnings = [r.getMessage() for r in caplog.records if "gone for good" in r.getMessage()]
    assert warnings == [
        f"Ray runner {victim} (node {node}) is gone for good (max_restarts=0 used up); the run goes on with 1 runner(s)."
    ], warnings
    assert_no_actor_alive(local_ray, strategy)


def test_every_runner_dead_for_good_fails_the_run_at_once(local_ray: Any) -> None:
    strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, max_restarts=0)

    @algo
    async def kill_every_runner(*, store: Any) -> None:
        ids = await enqueue_prompt_tasks(store, 4)

        def kill_all() -> None:
            for name in actor_names(strategy):
                actor = local_ray.get_actor(name, namespace=strategy.namespace)
                local_ray.get(actor.node_ip.remote(), timeout=60)  # it runs: then it dies
                local_ray.kill(actor, no_restart=False)

        await asyncio.to_thread(kill_all)
        await store.wait_for_rollouts(rollout_ids=ids, timeout=240)  # nobody is left to run them: the run must end

    trainer = agl.Trainer(algorithm=kill_every_runner, strategy=strategy)
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failed:
        trainer.fit(slow_agent)
    assert time.monotonic() - started < 60
    node = local_ray.util.get_node_ip_address()
    assert str(failed.value) == (
        f"no Ray runner left: every runner is dead (max_restarts=0): runner 0 on {node}, runner 1 on {node}"
    )
    assert_no_actor_alive(local_ray, strategy)
