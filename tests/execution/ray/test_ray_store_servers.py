"""``store_nodes``: the strategy starts ``rollouthub store`` servers as Ray actors on the nodes it names, over one
PostgreSQL database; a server actor that dies is restarted on its node and its clients (runners and algorithm) go on;
nothing of ours is left after the run."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Dict, Iterator, Tuple

import pytest

import rollouthub as agl
from rollouthub.algorithm import algo
from rollouthub.algorithm.fast import Baseline
from rollouthub.execution.ray import RayExecutionStrategy
from rollouthub.types import RolloutConfig
from rollouthub.utils.server_launcher import pick_free_port
from tests.store.sql_backends import drop_pg_schema, postgres_url

from .helpers import (
    PROMPT,
    all_attempts,
    answers,
    assert_each_succeeded_once,
    enqueue_prompt_tasks,
    rollouts_and_workers,
    wait_all_ended,
)

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)

TOKEN = "ray-store-token"


@agl.rollout
def paced_agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    time.sleep(0.2)  # the agent's own work: rollouts still run when the test kills the store server
    return 1.0


@pytest.fixture
def database() -> Iterator[str]:
    """A PostgreSQL URL on a schema of its own, dropped afterwards."""
    url = postgres_url()
    schema = f"rh_raystore_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in url else "?"
    yield f"{url}{sep}schema={schema}"
    asyncio.run(drop_pg_schema(url, schema))


def server_status_once_restarted(
    ray: Any, name: str, namespace: str, pid: int, timeout: float = 60.0
) -> Tuple[str, int]:
    """``(url, pid)`` of the store server actor ``name`` once it answers from a process other than ``pid``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            url, new_pid = ray.get(ray.get_actor(name, namespace=namespace).status.remote(), timeout=5)
            if new_pid != pid:
                return str(url), int(new_pid)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ValueError):
            pass
        assert time.monotonic() < deadline, f"store server {name} was not restarted"
        time.sleep(0.2)


def assert_none_of_ours(ray: Any, strategy: RayExecutionStrategy, timeout: float = 30.0) -> None:
    """No actor of the strategy's last run is listed any more (runners and store servers)."""
    assert strategy.run_id is not None
    prefix = strategy.actor_prefix(strategy.run_id)
    deadline = time.monotonic() + timeout
    while ours := [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]:
        assert time.monotonic() < deadline, f"still alive after the run: {ours}"
        time.sleep(0.2)


def test_store_server_actor_on_a_named_node(local_ray: Any, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUTHUB_API_TOKEN", TOKEN)
    node = local_ray.util.get_node_ip_address()
    port = pick_free_port("0.0.0.0")
    strategy = RayExecutionStrategy(
        n_runners=2, num_cpus_per_runner=0.5, store_nodes=[node], store_backend=database, store_port=port
    )
    trainer = agl.Trainer(algorithm=Baseline(span_verbosity="none"), strategy=strategy, initial_resources=PROMPT)
    trainer.fit(paced_agent, train_dataset=[{"q": str(i)} for i in range(12)])
    assert_none_of_ours(local_ray, strategy)
    assert not answers(f"http://{node}:{port}")  # the server went with its actor

    from rollouthub.store.sql import SqlLightningStore

    # The database itself: what the servers wrote is there.
    rollouts, workers = asyncio.run(rollouts_and_workers(SqlLightningStore(database)))
    assert len(rollouts) == 12 and {r.status for r in rollouts} == {"succeeded"}
    assert len(asyncio.run(trainer.store.query_rollouts())) == 0  # the trainer's own store is not used
    assert {w.worker_id for w in workers} == {"Worker-0", "Worker-1"}


def test_a_killed_store_server_actor_is_restarted_and_the_run_goes_on(
    local_ray: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUTHUB_API_TOKEN", TOKEN)
    n_rollouts = 30
    node = local_ray.util.get_node_ip_address()
    strategy = RayExecutionStrategy(
        n_runners=2,
        num_cpus_per_runner=0.5,
        store_nodes=[node],
        store_backend=database,
        store_port=pick_free_port("0.0.0.0"),
        max_restarts=2,
    )
    config = RolloutConfig(timeout_seconds=20.0, max_attempts=3, retry_condition=["timeout", "unresponsive"])
    seen: Dict[str, Any] = {}

    @algo
    async def kill_the_store_server(*, store: Any) -> None:
        ids = await enqueue_prompt_tasks(store, n_rollouts, config)
        deadline = time.monotonic() + 60
        while len(await store.wait_for_rollouts(rollout_ids=ids, timeout=0.05)) < 3:  # a client waits < 0.1 s
            assert time.monotonic() < deadline, "no rollout ended before the kill"
            await asyncio.sleep(0.1)
        name = f"{strategy.actor_prefix(strategy.run_id or '')}-store-0"
        actor = local_ray.get_actor(name, namespace=strategy.namespace)
        seen["url"], pid = await asyncio.to_thread(local_ray.get, actor.status.remote())
        local_ray.kill(actor, no_restart=False)  # the process dies; Ray restarts the actor on its node
        seen["restarted"] = await asyncio.to_thread(
            server_status_once_restarted, local_ray, name, strategy.namespace, pid
        )
        seen["pid"] = pid
        await wait_all_ended(store, ids, timeout=180)
        seen["rollouts"] = await store.query_rollouts()
        seen["attempts"] = await all_attempts(store, ids)

    trainer = agl.Trainer(algorithm=kill_the_store_server, strategy=strategy)
    trainer.fit(paced_agent)
    url, new_pid = seen["restarted"]
    assert url == seen["url"] and new_pid != seen["pid"]  # same address, new process
    assert len(seen["rollouts"]) == n_rollouts
    # Every rollout ended per its config (an attempt that timed out meanwhile was retried).
    assert_each_succeeded_once(seen["rollouts"], seen["attempts"], config)
    assert_none_of_ours(local_ray, strategy)


def test_store_nodes_arguments_are_checked() -> None:
    pg = "postgresql://u@h/db"
    with pytest.raises(ValueError, match="store_url and store_nodes both name the store"):
        RayExecutionStrategy(store_url="http://h:1", store_nodes=["10.0.0.1"], store_backend=pg)
    with pytest.raises(ValueError, match="store_nodes needs store_backend"):
        RayExecutionStrategy(store_nodes=["10.0.0.1"])
    with pytest.raises(ValueError, match="store_backend is the database of the store_nodes servers"):
        RayExecutionStrategy(store_backend=pg)
    with pytest.raises(ValueError, match="names a node twice"):
        RayExecutionStrategy(store_nodes=["10.0.0.1", "10.0.0.1"], store_backend=pg)
    with pytest.raises(ValueError, match="need a PostgreSQL store_backend"):
        RayExecutionStrategy(store_nodes=["10.0.0.1", "10.0.0.2"], store_backend="sqlite:////tmp/x.db")
    with pytest.raises(ValueError, match="memory"):
        RayExecutionStrategy(store_nodes=["10.0.0.1"], store_backend="memory")
    with pytest.raises(ValueError, match="store_port must be 1-65535"):
        RayExecutionStrategy(store_nodes=["10.0.0.1"], store_backend=pg, store_port=0)


def test_a_store_node_that_is_not_in_the_cluster_fails_the_run_naming_it(local_ray: Any, database: str) -> None:
    strategy = RayExecutionStrategy(
        n_runners=1, num_cpus_per_runner=0.5, store_nodes=["10.255.255.254"], store_backend=database
    )
    trainer = agl.Trainer(algorithm=Baseline(span_verbosity="none"), strategy=strategy, initial_resources=PROMPT)
    with pytest.raises(RuntimeError, match=r"store_nodes: no live Ray node at 10\.255\.255\.254"):
        trainer.fit(paced_agent, train_dataset=[{"q": "0"}])
