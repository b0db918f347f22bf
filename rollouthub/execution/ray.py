"""``RayExecutionStrategy``: the algorithm in the driver, the runners as Ray actors across a cluster.

The runners talk HTTP to a store server exactly as in the client-server strategy (spans go over OTLP/HTTP, never
through Ray's object store): a server the strategy starts around the given store in the driver, an existing
``rollouthub store`` server given by ``store_url``, or store servers the strategy starts as Ray actors on the nodes
named by ``store_nodes`` over one database (``store_backend``). Ray places the runner actors (spread across nodes, or packed in a
placement group), restarts them when they die, and forwards their logs to the driver. See ``docs/ray.md``.

Ray is the ``ray`` extra; it is imported only when the strategy runs.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import threading
import time
import uuid
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from rollouthub.env_var import API_TOKEN_ENV, resolve_api_token
from rollouthub.store.base import LightningStore
from rollouthub.utils.process_lifetime import quiet_interrupted_tasks

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .events import ThreadingEvent
from .ray_actors import RunnerActor, StoreServerActor

__all__ = ["RayExecutionStrategy", "MISSING_RAY_MESSAGE"]

logger = logging.getLogger(__name__)

MISSING_RAY_MESSAGE = "the 'ray' strategy needs the ray extra: pip install 'rollouthub[ray]'"
"""The one-line error when Ray is not installed."""

Placement = Literal["spread", "pack"]

MONITOR_INTERVAL_SECONDS = 1.0
"""How often the driver asks the runner actors how they are."""

STORE_RESTART_HEALTH_DELAYS = (0.1, 0.2, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0, 5.0)
"""The health-probe schedule of the clients of ``store_nodes`` servers (runners and algorithm): after a failed call a
client probes the server for about 15 s before the call fails, long enough for Ray to restart a server actor that
died, so that the calls in flight meanwhile go through once it serves again."""


def _import_ray() -> Any:
    """``import ray``, or an ``ImportError`` with :data:`MISSING_RAY_MESSAGE`."""
    try:
        import ray
    except ImportError:
        raise ImportError(MISSING_RAY_MESSAGE) from None
    return ray


class RayExecutionStrategy(ExecutionStrategy):
    """Run the algorithm in the calling process (the Ray driver) and ``n_runners`` runners as Ray actors.

    Args:
        address: the Ray cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``); ``None`` starts a local one
            (unless Ray is already initialised in this process, in which case that cluster is used).
        n_runners: number of runner actors (worker ids ``0..n-1``).
        num_cpus_per_runner: CPUs reserved by each runner actor.
        num_gpus_per_runner: GPUs reserved by each runner actor.
        resources_per_runner: custom Ray resources reserved by each runner actor.
        placement: ``"spread"`` (Ray's ``SPREAD`` scheduling: runners across nodes) or ``"pack"`` (a ``PACK``
            placement group with one bundle per runner, removed at the end).
        store_url: the URL of an existing ``rollouthub store`` server (e.g. on PostgreSQL); the runners and the
            algorithm use a client to it and the store given to :meth:`execute` is not used. ``None``: the strategy
            serves the given store from the driver, like the client-server strategy (or starts ``store_nodes``).
        store_nodes: IP addresses of Ray nodes on which the strategy starts one store server actor each, serving
            ``store_backend`` on ``store_port``; runner ``i`` uses server ``i % len(store_nodes)``, the algorithm the
            first. Ray restarts a server that dies (``max_restarts``) on its node, where its clients find it again.
            The store given to :meth:`execute` is not used.
        store_backend: the database of the ``store_nodes`` servers: a PostgreSQL URL (several servers share it), or a
            SQLite file on the node (one server only).
        store_port: the port of the ``store_nodes`` servers (fixed, so that a restarted server keeps its address).
        server_host: bind host of that server, and of the LLM proxy when it was given no host (default
            ``"0.0.0.0"``).
        advertise_host: the address runners use to reach the driver's store server and LLM proxy (default: the
            driver's Ray node IP address).
        server_port: port of that server (``None``: a free port).
        max_restarts: how many times Ray restarts a runner actor that died. A runner dead for good is left out
            (a warning); when none is left the run fails with a ``RuntimeError``.
        runtime_env: Ray runtime environment of the runner actors (the strategy adds its environment variables).
        ray_init_kwargs: extra keyword arguments of ``ray.init`` (when the strategy initialises Ray).
        graceful_timeout: seconds the runners get to finish after they are asked to stop, before they are killed.
        namespace: the Ray namespace of the actors (and of the driver, when the strategy initialises Ray).
        start_timeout: seconds to wait for the runners' placement (the per-node log line) and for a placement group.
    """

    alias: str = "ray"

    def __init__(
        self,
        address: Optional[str] = None,
        n_runners: int = 1,
        num_cpus_per_runner: float = 1,
        num_gpus_per_runner: float = 0,
        resources_per_runner: Optional[Dict[str, float]] = None,
        placement: Placement = "spread",
        store_url: Optional[str] = None,
        store_nodes: Optional[Sequence[str]] = None,
        store_backend: Optional[str] = None,
        store_port: int = 4747,
        server_host: Optional[str] = None,
        advertise_host: Optional[str] = None,
        server_port: Optional[int] = None,
        max_restarts: int = 3,
        runtime_env: Optional[Dict[str, Any]] = None,
        ray_init_kwargs: Optional[Dict[str, Any]] = None,
        graceful_timeout: float = 10.0,
        namespace: str = "rollouthub",
        start_timeout: float = 120.0,
    ) -> None:
        if n_runners < 1:
            raise ValueError(f"n_runners must be at least 1, got {n_runners}.")
        if placement not in ("spread", "pack"):
            raise ValueError(f"placement must be 'spread' or 'pack', got {placement!r}.")
        if num_cpus_per_runner < 0 or num_gpus_per_runner < 0:
            raise ValueError("num_cpus_per_runner and num_gpus_per_runner must not be negative.")
        if max_restarts < -1:
            raise ValueError(f"max_restarts must be -1 (unlimited) or more, got {max_restarts}.")
        store_nodes = list(store_nodes or [])
        if store_nodes:
            from rollouthub.store.locations import parse_backend

            if store_url:
                raise ValueError("store_url and store_nodes both name the store; give one.")
            if store_backend is None:
                raise ValueError("store_nodes needs store_backend: the database the store servers open.")
            if len(set(store_nodes)) != len(store_nodes):
                raise ValueError(f"store_nodes names a node twice: {store_nodes}.")
            backend = parse_backend(store_backend, allow_memory=False)
            store_backend = backend.url  # a SQLite path made absolute
            if backend.kind != "postgresql" and len(store_nodes) > 1:
                raise ValueError("several store_nodes need a PostgreSQL store_backend (a SQLite file has one server).")
        elif store_backend is not None:
            raise ValueError("store_backend is the database of the store_nodes servers; give store_nodes too.")
        if not 1 <= store_port <= 65535:
            raise ValueError(f"store_port must be 1-65535, got {store_port}.")
        self.address = address
        self.n_runners = n_runners
        self.num_cpus_per_runner = num_cpus_per_runner
        self.num_gpus_per_runner = num_gpus_per_runner
        self.resources_per_runner = dict(resources_per_runner or {})
        self.placement: Placement = placement
        self.store_url = store_url.rstrip("/") if store_url else None
        self.store_nodes = store_nodes
        self.store_backend = store_backend
        self.store_port = store_port
        self.server_host = server_host or "0.0.0.0"
        self.advertise_host = advertise_host
        self.server_port = server_port
        self.max_restarts = max_restarts
        self.runtime_env = dict(runtime_env or {})
        self.ray_init_kwargs = dict(ray_init_kwargs or {})
        self.graceful_timeout = graceful_timeout
        self.namespace = namespace
        self.start_timeout = start_timeout
        self.run_id: Optional[str] = None
        """The id of the last run; its actors are named ``rollouthub-<run_id>-runner-<i>``."""

    def __repr__(self) -> str:
        if self.store_url:
            store = f"store_url={self.store_url!r}"
        elif self.store_nodes:
            store = f"store_nodes={self.store_nodes!r}, store_port={self.store_port}"
        else:
            store = f"server={self.server_host}:{self.server_port}"
        return (
            f"RayExecutionStrategy(address={self.address!r}, n_runners={self.n_runners}, "
            f"placement={self.placement!r}, {store})"
        )

    def driver_host(self) -> str:
        """The address runners use to reach servers in the driver: ``advertise_host``, or the driver's Ray node IP
        address (Ray must be initialised)."""
        if self.advertise_host:
            return self.advertise_host
        return str(_import_ray().util.get_node_ip_address())

    def remote_runner_hosts(self) -> Optional[Tuple[str, str]]:
        """The LLM proxy (and any server the algorithm starts for the runners) binds ``server_host`` and publishes
        :meth:`driver_host`, like the strategy's store server: runners on other nodes reach it."""
        return self.server_host, self.driver_host()

    def run_store(self, store: LightningStore) -> LightningStore:
        """With ``store_url``, a client to that server (the store the algorithm uses); otherwise ``store`` (with
        ``store_nodes`` the algorithm gets a client to the first server when the run starts)."""
        if self.store_url is None:
            return store
        from rollouthub.store.client import LightningStoreClient

        return LightningStoreClient(self.store_url)

    def actor_prefix(self, run_id: str) -> str:
        """The name prefix of a run's actors (and placement group)."""
        return f"rollouthub-{run_id}"

    # -- execute ------------------------------------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Start the runner actors, run the algorithm here, then stop and remove every actor this run created."""
        ray = _import_ray()
        self.interrupted = None
        started_ray = False
        if not ray.is_initialized():
            _init_keeping_sigterm_handler(ray, address=self.address, namespace=self.namespace, **self.ray_init_kwargs)
            started_ray = True
        run = _Run(self, ray, runner, store)
        error: Optional[BaseException] = None
        try:
            logger.info("Executing with %r (run %s).", self, run.run_id)
            asyncio.run(run.main(algorithm))
        except KeyboardInterrupt as exc:
            logger.warning("KeyboardInterrupt received; stopping the Ray runners...")
            self.interrupted = exc
        except BaseException as exc:
            error = exc
        finally:
            run.remove_everything()
            if started_ray:
                ray.shutdown()
        if error is not None:
            raise error


def _init_keeping_sigterm_handler(ray: Any, **kwargs: Any) -> None:
    """``ray.init(**kwargs)``, keeping this process's SIGTERM handler: ``ray.init`` installs its own (which exits),
    and the caller's (e.g. the Trainer's, which makes SIGTERM an interruption) must decide what SIGTERM does."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    ray.init(**kwargs)
    if in_main_thread and previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
        signal.signal(signal.SIGTERM, previous)


class _Run:
    """The state of one :meth:`RayExecutionStrategy.execute`: actors, placement group, server, monitor."""

    def __init__(self, strategy: RayExecutionStrategy, ray: Any, runner: RunnerBundle, store: LightningStore) -> None:
        self.strategy = strategy
        self.ray = ray
        self.runner = runner
        self.store = store
        self.run_id = uuid.uuid4().hex[:8]
        strategy.run_id = self.run_id
        self.prefix = strategy.actor_prefix(self.run_id)
        self.actors: List[Any] = []
        self.store_servers: List[Any] = []  # the store server actors (``store_nodes``)
        self.followed: set[int] = set()  # worker ids of the runners not known to have ended
        self.lost: set[int] = set()  # worker ids of the runners dead for good (their restarts used up)
        self.nodes: Dict[int, str] = {}  # the last known node of each runner
        self.failure: Optional[RuntimeError] = None  # set when no runner is left: the run fails with it
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.algorithm_task: Optional[asyncio.Future[None]] = None
        self.placement_group: Optional[Any] = None
        self.stopping = threading.Event()
        self.event = ThreadingEvent()
        self.monitor: Optional[threading.Thread] = None

    # -- the driver side ----------------------------------------------------------------------------------------------

    async def main(self, algorithm: AlgorithmBundle) -> None:
        """Serve the store (unless ``store_url``; on the ``store_nodes``), start the runners, run the algorithm, stop
        the runners."""
        self.loop = asyncio.get_running_loop()
        quiet_interrupted_tasks(self.loop)
        strategy = self.strategy
        server: Optional[Any] = None
        client: Optional[Any] = None
        token = resolve_api_token()
        try:
            if strategy.store_url is not None or strategy.store_nodes:
                from rollouthub.store.client import LightningStoreClient

                if strategy.store_url is not None:
                    urls = [strategy.store_url]
                else:
                    urls = await asyncio.to_thread(self.start_store_servers, token)
                client = LightningStoreClient(urls[0], **self.client_options())
                algorithm_store: LightningStore = client
            else:
                from rollouthub.store.server import LightningStoreServer
                from rollouthub.utils.server_launcher import pick_free_port

                port = strategy.server_port or pick_free_port(strategy.server_host)
                server = LightningStoreServer(self.store, host=strategy.server_host, port=port, api_token=token)
                await server.start()
                urls = [f"http://{_url_host(strategy.driver_host())}:{port}"]
                algorithm_store = server
            await asyncio.to_thread(self.start_runners, urls, token)
            if self.failure is not None:  # every runner was lost before the algorithm started
                raise self.failure
            self.algorithm_task = asyncio.ensure_future(algorithm(algorithm_store, self.event))
            try:
                await self.algorithm_task
            except asyncio.CancelledError:
                if self.failure is None:
                    raise
                raise self.failure from None  # cancelled by the monitor: no runner is left
            # The runners finish their last store calls while the server still answers.
            await asyncio.to_thread(self.stop_runners)
        except (asyncio.CancelledError, KeyboardInterrupt):
            logger.warning("Algorithm side interrupted; stopping the Ray runners.")
            self.event.set()
            await asyncio.to_thread(self.stop_runners)
            raise
        except BaseException as exc:
            if exc is not self.failure:  # the monitor logged that one
                logger.exception("Algorithm side failed; stopping the Ray runners.")
            self.event.set()
            await asyncio.to_thread(self.stop_runners)
            raise
        finally:
            if server is not None:
                try:
                    await server.stop()
                except Exception:
                    logger.exception("Error while stopping the store server.")
            if client is not None:
                await client.close()

    def client_options(self) -> Dict[str, Any]:
        """Keyword arguments of the run's store clients: with ``store_nodes``, a health-probe schedule that outlasts
        the restart of a server actor."""
        if self.strategy.store_nodes:
            return {"health_retry_delays": STORE_RESTART_HEALTH_DELAYS}
        return {}

    def _runtime_env(self, token: Optional[str]) -> Dict[str, Any]:
        """The runtime environment of the run's actors: the strategy's, plus the API token."""
        env_vars = dict(self.strategy.runtime_env.get("env_vars") or {})
        if token:
            env_vars[API_TOKEN_ENV] = token
        return {**self.strategy.runtime_env, "env_vars": env_vars}

    def start_store_servers(self, token: Optional[str]) -> List[str]:
        """One store server actor on each of the ``store_nodes`` (node affinity, not soft); their URLs once they
        serve."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, strategy = self.ray, self.strategy
        alive = {node["NodeManagerAddress"]: node["NodeID"] for node in ray.nodes() if node.get("Alive")}
        for ip in strategy.store_nodes:
            if ip not in alive:
                raise RuntimeError(f"store_nodes: no live Ray node at {ip} (live nodes: {', '.join(sorted(alive))}).")
        remote_class = ray.remote(StoreServerActor)
        log_level = logging.getLogger().getEffectiveLevel()
        for k, ip in enumerate(strategy.store_nodes):
            actor = remote_class.options(
                name=f"{self.prefix}-store-{k}",
                namespace=strategy.namespace,
                max_restarts=strategy.max_restarts,
                max_task_retries=0,
                max_concurrency=2,
                num_cpus=0,  # the server's CPU is not reserved: runners are placed as if it were not there
                runtime_env=self._runtime_env(token),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=alive[ip], soft=False),
            ).remote(strategy.store_backend, strategy.store_port, log_level)
            self.store_servers.append(actor)
        statuses = ray.get([actor.status.remote() for actor in self.store_servers], timeout=strategy.start_timeout)
        urls = [url for url, _ in statuses]
        logger.info("Started %d store server actor(s) %s-store-*: %s", len(urls), self.prefix, ", ".join(urls))
        return urls

    def start_runners(self, store_urls: List[str], token: Optional[str]) -> None:
        """Create the placement group (``pack``) and one named runner actor per worker id (runner ``i`` uses
        ``store_urls[i % len(store_urls)]``); start the monitor."""
        ray, strategy = self.ray, self.strategy
        resources: Dict[str, float] = {}
        if strategy.num_cpus_per_runner:
            resources["CPU"] = float(strategy.num_cpus_per_runner)
        if strategy.num_gpus_per_runner:
            resources["GPU"] = float(strategy.num_gpus_per_runner)
        resources.update(strategy.resources_per_runner)
        if strategy.placement == "pack":
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            if not any(resources.values()):
                raise ValueError("placement='pack' needs each runner to reserve some resource (CPU, GPU or custom).")
            self.placement_group = ray.util.placement_group(
                [resources] * strategy.n_runners, strategy="PACK", name=f"{self.prefix}-pg"
            )
            ray.get(self.placement_group.ready(), timeout=strategy.start_timeout)
        runtime_env = self._runtime_env(token)
        remote_class = ray.remote(RunnerActor)
        log_level = logging.getLogger().getEffectiveLevel()
        for i in range(strategy.n_runners):
            options: Dict[str, Any] = dict(
                name=f"{self.prefix}-runner-{i}",
                namespace=strategy.namespace,
                max_restarts=strategy.max_restarts,
                max_task_retries=0,
                max_concurrency=4,  # stop() and wait() while the runner thread runs
                num_cpus=strategy.num_cpus_per_runner,
                num_gpus=strategy.num_gpus_per_runner,
                runtime_env=runtime_env,
            )
            if strategy.resources_per_runner:
                options["resources"] = strategy.resources_per_runner
            if self.placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=i
                )
            else:
                options["scheduling_strategy"] = "SPREAD"
            actor = remote_class.options(**options).remote(
                self.runner, i, store_urls[i % len(store_urls)], log_level, self.client_options()
            )
            self.actors.append(actor)
            self.followed.add(i)
        logger.info(
            "Started %d Ray runner actor(s) %s-runner-* using the store at %s.",
            len(self.actors),
            self.prefix,
            ", ".join(store_urls),
        )
        self.monitor = threading.Thread(target=self._monitor, name=f"{self.prefix}-monitor", daemon=True)
        self.monitor.start()

    def _log_placement(self) -> None:
        """One INFO line: how many runners run on each node (waits up to ``start_timeout`` for their placement)."""
        refs = [actor.node_ip.remote() for actor in self.actors]
        worker_of = {ref: i for i, ref in enumerate(refs)}
        ready: List[Any] = []
        pending = refs
        deadline = time.monotonic() + self.strategy.start_timeout
        while pending and time.monotonic() < deadline and not self.stopping.is_set():
            done, pending = self.ray.wait(pending, num_returns=len(pending), timeout=MONITOR_INTERVAL_SECONDS)
            ready += done
        if pending and self.stopping.is_set():
            return
        counts: Dict[str, int] = collections.Counter()
        for ref in ready:
            try:
                node = self.ray.get(ref)
            except Exception:  # died before answering: the monitor reports it
                counts["(died)"] += 1
            else:
                counts[node] += 1
                self.nodes.setdefault(worker_of[ref], node)
        per_node = ", ".join(f"{node}: {n}" for node, n in sorted(counts.items()))
        if pending:
            logger.warning(
                "%d of %d Ray runner(s) not started after %.0fs (waiting for resources?); started per node: %s",
                len(pending),
                len(refs),
                self.strategy.start_timeout,
                per_node or "none",
            )
        else:
            logger.info("Ray runners per node: %s", per_node)

    def _poll(self, timeout: float) -> Dict[int, Any]:
        """Each followed runner's status: ``(ended, error, node)``, or the exception of a dead or restarting
        actor."""
        refs = {self.actors[i].status.remote(): i for i in self.followed}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        statuses: Dict[int, Any] = {}
        for ref in ready:
            try:
                statuses[refs[ref]] = self.ray.get(ref)
            except Exception as exc:  # RayActorError / ActorUnavailableError: dead, or being restarted by Ray
                statuses[refs[ref]] = exc
        return statuses

    def _named_actors(self) -> set[str]:
        """The names of the live or restarting actors in the strategy's namespace (Ray no longer lists an actor that
        is dead for good, e.g. once its restarts are used up)."""
        try:
            listed = self.ray.util.list_named_actors(all_namespaces=True)
        except Exception:  # the cluster cannot say now: count every runner as alive, ask again at the next poll
            logger.debug("Could not list the named Ray actors.", exc_info=True)
            return {f"{self.prefix}-runner-{i}" for i in range(len(self.actors))}
        return {a["name"] for a in listed if a["namespace"] == self.strategy.namespace}

    def _lose(self, i: int) -> None:
        """Runner ``i`` is dead for good: warn and go on with the others, or fail the run when none is left."""
        self.followed.discard(i)
        self.lost.add(i)
        restarts = self.strategy.max_restarts
        if self.followed:
            logger.warning(
                "Ray runner %d (node %s) is gone for good (max_restarts=%d used up); the run goes on with %d runner(s).",
                i,
                self.nodes.get(i, "unknown"),
                restarts,
                len(self.followed),
            )
            return
        lost = ", ".join(f"runner {j} on {self.nodes.get(j, 'an unknown node')}" for j in sorted(self.lost))
        self.failure = RuntimeError(f"no Ray runner left: every runner is dead (max_restarts={restarts}): {lost}")
        logger.error("%s; stopping the run.", self.failure)
        self.event.set()
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._cancel_algorithm)

    def _cancel_algorithm(self) -> None:
        """In the driver's event loop: cancel the algorithm (``main`` then raises :attr:`failure`)."""
        if self.algorithm_task is not None:
            self.algorithm_task.cancel()

    def _monitor(self) -> None:
        """Log the placement, then follow the runners: report deaths and restarts, go on without a runner dead for
        good (fail the run when none is left); a runner that failed stops all."""
        self._log_placement()
        down: set[int] = set()
        servers_down: set[int] = set()
        while not self.stopping.wait(MONITOR_INTERVAL_SECONDS) and self.followed:
            self._watch_store_servers(servers_down)
            statuses = self._poll(MONITOR_INTERVAL_SECONDS * 2)
            failing = any(isinstance(status, BaseException) for status in statuses.values())
            named = self._named_actors() if failing else set()
            for i, status in statuses.items():
                if self.stopping.is_set():
                    return
                if isinstance(status, BaseException):
                    if f"{self.prefix}-runner-{i}" not in named:  # dead for good
                        self._lose(i)
                    elif i not in down:
                        down.add(i)
                        logger.warning(
                            "Ray runner %d (node %s) is down (Ray restarts it up to max_restarts): %s",
                            i,
                            self.nodes.get(i, "unknown"),
                            status,
                        )
                    continue
                ended, error, self.nodes[i] = status
                if i in down:
                    down.discard(i)
                    logger.warning("Ray runner %d is running again (node %s).", i, self.nodes[i])
                if not ended:
                    continue
                self.followed.discard(i)
                if error is not None:
                    logger.error("Ray runner %d failed; signalling the others to stop.", i)
                    self.event.set()
                    for actor in self.actors:
                        actor.stop.remote()

    def _watch_store_servers(self, down: set[int]) -> None:
        """Log a store server actor that is down (Ray restarts it on its node) and when it serves again."""
        if not self.store_servers:
            return
        refs = {actor.status.remote(): k for k, actor in enumerate(self.store_servers)}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=MONITOR_INTERVAL_SECONDS)
        for ref in ready:
            k = refs[ref]
            try:
                url, pid = self.ray.get(ref)
            except Exception as exc:  # dead, or being restarted by Ray
                if k not in down:
                    down.add(k)
                    logger.warning(
                        "Store server %d (node %s) is down (Ray restarts it): %s", k, self.strategy.store_nodes[k], exc
                    )
                continue
            if k in down:
                down.discard(k)
                logger.warning("Store server %d serves again at %s (process %d).", k, url, pid)

    def stop_runners(self) -> None:
        """Ask every runner to stop and wait up to ``graceful_timeout`` for them to end."""
        if not self.actors:
            return
        self.stopping.set()
        for actor in self.actors:
            actor.stop.remote()
        if self.monitor is not None:
            self.monitor.join(timeout=MONITOR_INTERVAL_SECONDS * 4)
        deadline = time.monotonic() + self.strategy.graceful_timeout
        self.followed = set(range(len(self.actors)))
        while self.followed and time.monotonic() < deadline:
            for i, status in self._poll(max(0.1, deadline - time.monotonic())).items():
                if isinstance(status, BaseException) or status[0]:  # dead actors have nothing left to finish
                    self.followed.discard(i)
            if self.followed:
                time.sleep(0.1)
        if self.followed:
            logger.warning(
                "%d Ray runner(s) still running %.1fs after the stop signal; killing them.",
                len(self.followed),
                self.strategy.graceful_timeout,
            )

    def remove_everything(self) -> None:
        """Kill every actor of the run and remove its placement group (idempotent; errors are logged)."""
        self.stopping.set()
        self.event.set()
        self._kill_actors(self.actors, "a Ray runner actor")
        if self.monitor is not None:
            self.monitor.join(timeout=5.0)
        if self.store_servers:  # after the runners: they may still be finishing their last calls
            try:
                self.ray.get([actor.stop.remote() for actor in self.store_servers], timeout=10.0)
            except Exception:
                logger.debug("Could not stop a store server actor gracefully.", exc_info=True)
        self._kill_actors(self.store_servers, "a store server actor")
        if self.placement_group is not None:
            try:
                self.ray.util.remove_placement_group(self.placement_group)
            except Exception:
                logger.warning("Could not remove the placement group %s-pg.", self.prefix, exc_info=True)
            self.placement_group = None

    def _kill_actors(self, actors: List[Any], what: str) -> None:
        """Kill each of ``actors`` for good (no restart) and empty the list; a failure is logged naming ``what``."""
        for actor in actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:
                logger.debug("Could not kill %s.", what, exc_info=True)
        actors.clear()


def _url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
