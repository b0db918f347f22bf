"""The ``ray`` strategy on a real three-node Ray cluster: a head in the root network namespace and two worker nodes,
each in its own namespace with its own address (``rollouthub.testing.ray_cluster``).

First the cluster alone (a task pinned on each node reports that node's address), then a Trainer whose six runner
actors spread over the three nodes (checked from the workers' heartbeat telemetry) and call the LLM through the
driver's LLM proxy (given no host: the strategy publishes it on the driver's address), then a store server the
strategy places on a worker node, then a worker node killed mid-run: every rollout ends per its retry config, none is
lost or counted twice, and no actor of the run is left.

Skipped where Ray is missing or network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional

import openai
import psutil
import pytest

pytest.importorskip("ray", reason="the ray tests need the ray extra: pip install 'rollouthub[ray]'")

from rollouthub.algorithm import Algorithm, Baseline
from rollouthub.env_var import API_TOKEN_ENV
from rollouthub.litagent import rollout
from rollouthub.llm_proxy import LLMProxy
from rollouthub.store.base import LightningStore
from rollouthub.testing import MockOpenAIServer, last_user_message
from rollouthub.testing.ray_cluster import RayCluster, ray_cluster, ray_cluster_unavailable_reason
from rollouthub.tracer import OtelTracer
from rollouthub.trainer import Trainer
from rollouthub.types import LLM, EnqueueRolloutRequest, NamedResources, PromptTemplate, RolloutConfig

from .helpers import answers, rollouts_and_workers

if TYPE_CHECKING:  # imported by the tests that use it: the cluster test runs without the strategy
    from rollouthub.execution.ray import RayExecutionStrategy

pytestmark = pytest.mark.timeout(300)

N_RUNNERS = 6
N_ROLLOUTS = 210
ATTEMPT_TIMEOUT = 10.0  # an attempt lost with its node is declared "timeout" after this, then retried
MAX_ATTEMPTS = 3
RESOURCES = {"prompt_template": PromptTemplate(template="task {x}", engine="f-string")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """One head and two worker nodes (2 CPUs each) for the whole module; the node-loss test comes last."""
    reason = ray_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with ray_cluster(n_worker_nodes=2, cpus_per_node=2) as started:
        yield started


@pytest.fixture
def ray_driver(cluster: RayCluster) -> Iterator[Any]:
    """This process connected to the cluster (the strategy uses the connection and leaves it open, so that the test
    can look at the cluster after the run: actors owned by a driver that disconnected would be gone anyway)."""
    import ray

    ray.init(address=cluster.address, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()


def where_am_i() -> Dict[str, Any]:
    """What a task sees of the node it runs on: Ray's node id and IP, and the IPv4 addresses of its network
    namespace (loopback excluded)."""
    import ray

    addresses = sorted(
        a.address
        for entries in psutil.net_if_addrs().values()
        for a in entries
        if a.family.name == "AF_INET" and not a.address.startswith("127.")
    )
    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "addresses": addresses,
    }


@rollout
async def node_agent(task: int, prompt_template: PromptTemplate) -> float:
    """A cheap agent: a short wait (so that every runner gets rollouts), a reward from its task."""
    await asyncio.sleep(0.1)
    return float(len(prompt_template.format(x=task)))


@rollout
async def llm_node_agent(task: int, llm: LLM) -> float:
    """Ask the model behind the driver's LLM proxy (the endpoint it published); fail unless it answers."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0, timeout=30)
    try:
        response = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"task {task}"}]
        )
    finally:
        await client.close()
    assert response.choices[0].message.content == f"echo: task {task}", response
    return 1.0


class ProxyBaseline(Baseline):
    """Baseline whose initial resources also publish the trainer's LLM proxy (started by then) as ``llm``."""

    def get_initial_resources(self) -> Optional[NamedResources]:
        """The prompt template and the proxy."""
        proxy = self.get_llm_proxy()
        assert proxy is not None and proxy.is_running()
        return {**RESOURCES, "llm": proxy.as_resource()}


class CountingUpstream:
    """The model behind the proxy: echoes the last user message and counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Dict[str, Any]) -> str:
        self.calls += 1
        return f"echo: {last_user_message(request)}"


class KillANodeMidRun(Algorithm):
    """Once every runner has reported its node, enqueue ``count`` rollouts whose lost attempts are retried
    (``timeout`` after :data:`ATTEMPT_TIMEOUT`, up to :data:`MAX_ATTEMPTS` attempts); once a third of them has
    finished, note where each worker runs and call ``kill``; return when every rollout has finished."""

    def __init__(self, count: int, kill: Callable[[], None]) -> None:
        self.count = count
        self.kill: Optional[Callable[[], None]] = kill
        self.nodes_at_kill: Dict[str, Optional[str]] = {}
        self.killed_after: Optional[int] = None

    def __getstate__(self) -> Dict[str, Any]:
        """The kill switch stays in the driver (copies of the algorithm never need it)."""
        state = self.__dict__.copy()
        state["kill"] = None
        return state

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:  # type: ignore[override]
        """Enqueue, kill a node at a third, wait for the rest."""
        store: LightningStore = self.get_store()
        await store.add_resources(RESOURCES)
        config = RolloutConfig(
            timeout_seconds=ATTEMPT_TIMEOUT, max_attempts=MAX_ATTEMPTS, retry_condition=["timeout", "unresponsive"]
        )
        requests = [EnqueueRolloutRequest(input=i, mode="train", config=config) for i in range(self.count)]
        deadline = time.monotonic() + 200
        # Every runner reports its node before the work starts, so that the lost node has runners to lose.
        while len([w for w in await store.query_workers() if (w.heartbeat_stats or {}).get("node")]) < N_RUNNERS:
            if time.monotonic() > deadline:
                raise TimeoutError("not every runner reported its node")
            await asyncio.sleep(0.2)
        ids = [r.rollout_id for r in await store.enqueue_many_rollouts(requests)]
        while True:
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0.5)
            if self.killed_after is None and len(done) >= self.count // 3:
                workers = await store.query_workers()
                self.nodes_at_kill = {w.worker_id: (w.heartbeat_stats or {}).get("node") for w in workers}
                assert self.kill is not None
                await asyncio.to_thread(self.kill)
                self.killed_after = len(done)
            if len(done) == len(ids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(done)} of {len(ids)} rollouts finished")


def make_trainer(
    cluster: RayCluster, algorithm: Algorithm, llm_proxy: Optional[LLMProxy] = None, **strategy_options: Any
) -> Trainer:
    """Six runner actors spread over the cluster (half a CPU each: they still fit when a node is lost), the store
    served by the driver on the head's non-loopback address unless ``strategy_options`` place store servers (and
    the LLM proxy, when given one without a host)."""
    from rollouthub.execution.ray import RayExecutionStrategy

    strategy = RayExecutionStrategy(
        address=cluster.address,
        n_runners=N_RUNNERS,
        num_cpus_per_runner=0.5,
        placement="spread",
        server_host=cluster.head_ip,
        advertise_host=cluster.head_ip,
        graceful_timeout=10.0,
        **strategy_options,
    )
    return Trainer(
        algorithm=algorithm,
        strategy=strategy,
        n_runners=N_RUNNERS,
        tracer=OtelTracer(),
        runner={"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.05, "heartbeat_interval": 1.0},
        initial_resources=RESOURCES,
        llm_proxy=llm_proxy,
        progress=False,
    )


def actors_of(ray: Any, strategy: RayExecutionStrategy) -> List[str]:
    """The live (or restarting) named actors of the strategy's last run, in any namespace."""
    prefix = strategy.actor_prefix(str(strategy.run_id))
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]


def test_cluster_nodes_are_real_and_each_worker_node_has_its_own_namespace(cluster: RayCluster) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ips = [node.ip for node in cluster.nodes]
    assert [node.name for node in cluster.nodes] == ["head", "worker-1", "worker-2"]
    assert len(set(ips)) == 3 and not any(ip.startswith("127.") for ip in ips)
    assert cluster.nodes[0].host is None and all(node.host is not None for node in cluster.nodes[1:])
    ray.init(address=cluster.address, logging_level="WARNING")
    try:
        assert sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]) == sorted(ips)
        where = ray.remote(num_cpus=0.1)(where_am_i)
        pinned = [NodeAffinitySchedulingStrategy(node.node_id, soft=False) for node in cluster.nodes]
        reports = ray.get([where.options(scheduling_strategy=s).remote() for s in pinned], timeout=120)
    finally:
        ray.shutdown()
    assert [r["node_id"] for r in reports] == [node.node_id for node in cluster.nodes]
    assert [r["ip"] for r in reports] == ips
    # A worker node's processes live in its namespace: the node's address is the only one they have.
    assert [r["addresses"] for r in reports[1:]] == [[ip] for ip in ips[1:]]


def test_cluster_is_torn_down_when_the_body_fails() -> None:
    """Every process of every node, the namespaces and the temp dir are gone after a body that raised."""
    reason = ray_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with pytest.raises(RuntimeError, match="body failed"):
        with ray_cluster(n_worker_nodes=1, cpus_per_node=1) as small:
            pids = [pid for i in range(len(small.nodes)) for pid in small.node_pids(i)]
            namespace = small.nodes[1].host
            temp_dir = Path(small.temp_dir)
            assert len(pids) > 4 and temp_dir.is_dir() and namespace is not None  # ray start, raylet, agents...
            raise RuntimeError("body failed")
    assert [pid for pid in pids if psutil.pid_exists(pid)] == []
    assert not temp_dir.exists()
    assert namespace.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_trainer_runners_spread_over_all_nodes_and_reach_the_llm_proxy(
    cluster: RayCluster, ray_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_TOKEN_ENV, uuid.uuid4().hex)  # the store server requires it: it must reach the actors
    upstream = CountingUpstream()
    with MockOpenAIServer(reply=upstream) as mock:  # on the head's loopback: only the proxy (in the driver) calls it
        model = {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/m", "api_base": mock.base_url}}
        proxy = LLMProxy(model_list=[model], launch_mode="thread")  # no host: the strategy decides
        algorithm = ProxyBaseline(polling_interval=1.0, max_queue_length=12, span_verbosity="none")
        trainer = make_trainer(cluster, algorithm, llm_proxy=proxy)
        trainer.fit(llm_node_agent, list(range(N_ROLLOUTS)))
    assert upstream.calls == N_ROLLOUTS  # one answered call per rollout, from runners on every node (below)
    assert proxy.endpoint.startswith(f"http://{cluster.head_ip}:"), proxy.endpoint
    strategy = trainer.strategy
    assert type(strategy).__name__ == "RayExecutionStrategy" and strategy.run_id is not None
    assert actors_of(ray_driver, strategy) == []

    async def outcome() -> Dict[str, Any]:
        rollouts = await trainer.store.query_rollouts()
        attempts = [a for r in rollouts for a in await trainer.store.query_attempts(r.rollout_id)]
        workers = await trainer.store.query_workers()
        resources = await trainer.store.get_latest_resources()
        return {"rollouts": rollouts, "attempts": attempts, "workers": workers, "resources": resources}

    result = asyncio.run(outcome())
    published = result["resources"].resources["llm"]
    assert published.endpoint == proxy.endpoint and cluster.head_ip in published.endpoint  # what the runners used
    assert len(result["rollouts"]) == N_ROLLOUTS
    assert {r.status for r in result["rollouts"]} == {"succeeded"}
    assert len(result["attempts"]) == N_ROLLOUTS
    nodes = {w.worker_id: (w.heartbeat_stats or {}).get("node") for w in result["workers"]}
    assert len(nodes) == N_RUNNERS, nodes
    assert set(nodes.values()) == {node.ip for node in cluster.nodes}, nodes  # runners ran on all three nodes
    assert {a.worker_id for a in result["attempts"]} <= set(nodes)
    # Runners on every node (worker nodes included) did rollouts, each one an answered call through the proxy.
    assert {nodes[a.worker_id] for a in result["attempts"]} == {node.ip for node in cluster.nodes}


def test_the_store_server_runs_on_a_named_worker_node(
    cluster: RayCluster, ray_driver: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``store_nodes`` names the second worker node: the strategy starts the store server there (a SQLite file: the
    nodes share the file system, only the network is per namespace); runners on all three nodes reach it at that
    node's address; after the run the server and every actor are gone and the database holds every rollout."""
    from rollouthub.store.sql import SqlLightningStore

    monkeypatch.setenv(API_TOKEN_ENV, uuid.uuid4().hex)  # the store server requires it: it must reach the actors
    store_node, database = cluster.nodes[2], tmp_path / "store.db"
    algorithm = Baseline(polling_interval=1.0, max_queue_length=12, span_verbosity="none")
    trainer = make_trainer(
        cluster, algorithm, store_nodes=[store_node.ip], store_backend=f"sqlite:///{database}", store_port=4747
    )
    trainer.fit(node_agent, list(range(60)))
    strategy = trainer.strategy
    assert type(strategy).__name__ == "RayExecutionStrategy" and strategy.run_id is not None
    assert actors_of(ray_driver, strategy) == []  # the store server actor included
    assert not answers(f"http://{store_node.ip}:4747")  # the server went with its actor
    assert len(asyncio.run(trainer.store.query_rollouts())) == 0  # the trainer's own store is not used
    rollouts, workers = asyncio.run(rollouts_and_workers(SqlLightningStore(f"sqlite:///{database}")))
    assert len(rollouts) == 60 and {r.status for r in rollouts} == {"succeeded"}
    nodes = {w.worker_id: (w.heartbeat_stats or {}).get("node") for w in workers}
    assert set(nodes.values()) == {node.ip for node in cluster.nodes}, nodes  # runners on all three nodes


def test_a_worker_node_lost_mid_run(cluster: RayCluster, ray_driver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_TOKEN_ENV, uuid.uuid4().hex)
    lost = cluster.nodes[1]
    algorithm = KillANodeMidRun(N_ROLLOUTS, kill=lambda: cluster.kill_node(1))
    trainer = make_trainer(cluster, algorithm)
    started = time.monotonic()
    trainer.fit(node_agent, list(range(N_ROLLOUTS)))
    elapsed = time.monotonic() - started
    strategy = trainer.strategy
    assert type(strategy).__name__ == "RayExecutionStrategy" and strategy.run_id is not None
    assert algorithm.killed_after is not None and algorithm.killed_after < N_ROLLOUTS
    assert not cluster.node_running(1)
    alive = sorted(n["NodeManagerAddress"] for n in ray_driver.nodes() if n["Alive"])
    assert alive == sorted(node.ip for node in cluster.nodes if node is not lost)
    assert actors_of(ray_driver, strategy) == []  # none of the run's actors is left, restarted ones included

    async def outcome() -> Dict[str, Any]:
        rollouts = await trainer.store.query_rollouts()
        attempts = {r.rollout_id: list(await trainer.store.query_attempts(r.rollout_id)) for r in rollouts}
        workers = await trainer.store.query_workers()
        return {"rollouts": rollouts, "attempts": attempts, "workers": workers}

    result = asyncio.run(outcome())
    rollouts, attempts = result["rollouts"], result["attempts"]
    assert len(rollouts) == N_ROLLOUTS  # none lost
    for r in rollouts:  # each ends per its retry config, and a success is counted once
        statuses = [a.status for a in sorted(attempts[r.rollout_id], key=lambda a: a.sequence_id)]
        assert r.status in ("succeeded", "failed"), (r.rollout_id, r.status, statuses)
        assert all(s in ("timeout", "unresponsive") for s in statuses[:-1]), (r.rollout_id, statuses)
        if r.status == "succeeded":
            assert statuses[-1] == "succeeded" and statuses.count("succeeded") == 1, (r.rollout_id, statuses)
        else:
            assert len(statuses) == MAX_ATTEMPTS or statuses[-1] == "failed", (r.rollout_id, statuses)
    lost_attempts = [a for v in attempts.values() for a in v if a.status in ("timeout", "unresponsive")]
    assert lost_attempts, "the killed node's runners had no attempt in flight: the retry path was not exercised"
    # The runners that were on the lost node were restarted by Ray on the live ones (their last heartbeats say so).
    victims = [w for w, node in algorithm.nodes_at_kill.items() if node == lost.ip]
    assert victims, algorithm.nodes_at_kill
    final_nodes = {w.worker_id: (w.heartbeat_stats or {}).get("node") for w in result["workers"]}
    live_ips = {node.ip for node in cluster.nodes if node is not lost}
    assert {final_nodes[w] for w in victims} <= live_ips, (final_nodes, victims, f"run took {elapsed:.1f}s")
