"""Full-stack load generator: a store server, runner processes and an algorithm driving them.

The script starts ``rollouthub store --backend <memory|sqlite:///...>`` as a subprocess (or uses ``--store-url``),
then runs a :class:`~rollouthub.trainer.Trainer` with the client-server strategy on an *unmanaged*
:class:`~rollouthub.store.client.LightningStoreClient` (``{"type": "cs", "managed_store": False}``): ``--n-runners``
runner processes execute a synthetic agent while the algorithm enqueues and verifies rollouts in one of three
modes:

* ``batch`` -- publish resources, enqueue ``--batch-size`` rollouts, wait for the whole batch, repeat;
* ``batch_partial`` -- keep up to ``--remaining-tasks`` rollouts active, refilling by batches;
* ``single`` -- ``--total-tasks`` coroutines (at most ``--concurrency`` at once), one rollout each.

The agent is deterministic per task (seeded by the task name) so that the verifier knows exactly how many spans
each rollout must have: per round an ``agent<i>`` span with two children ``round<i>_1``/``round<i>_2`` (random
flattened attributes, each sleeping up to ``--sleep-seconds``), a reward in [0, 1] with probability 0.5, then a
``final`` span and a final reward in [1, 2]. One child of a random round carries ``task=<task>``.

Waiting uses ``wait_for_rollouts(timeout=--poll-timeout)`` long-polls (0.1 s, the HTTP client's cap) at most every
``--poll-interval`` seconds, on the oldest ``--wait-window`` unfinished rollouts (the queue is FIFO, so they finish
first), instead of the reference's 5-second polls of every active rollout: throughput then reflects the stack rather
than the polling period, and the driver's own polling stays cheap for the server.

Report: rollouts/s, spans/s, queue-wait and attempt-duration percentiles, server CPU time per span and peak RSS
(from ``/proc``), CPU per rollout by process kind -- store server (``/proc/<pid>/stat``), runner processes
(``getrusage(RUSAGE_CHILDREN)`` once they are joined: their start-up included), algorithm/trainer main process
(``RUSAGE_SELF``) and the runtime side (runners + algorithm) -- with each runner's start-up CPU (its CPU seconds
when its first rollout begins, median over runners), health-probe latency p95, and the verification result (lost rollouts / spans). Unless
``--no-echo-reference``, the CPU time per request of a bare Starlette JSON echo app served the same way is measured
first (``http_micro.measure_echo``) and the server CPU per span is also given in those "echo requests": that figure
compares across machines of different speed, which milliseconds do not. Examples::

    python benchmarks/full_stack.py --mode batch_partial
    python benchmarks/full_stack.py --mode batch --backend sqlite:///./bench.db --runs 3
    python benchmarks/full_stack.py --mode single --json-out results.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

logger = logging.getLogger("benchmarks.full_stack")

TASK_KEY = "task"

# ---------------------------------------------------------------------------------------------------------------------
# The synthetic agent
# ---------------------------------------------------------------------------------------------------------------------


def _random_attributes(rng: random.Random, prefix: str = "", depth: int = 0, max_depth: int = 3) -> Dict[str, str]:
    """Flattened random attributes: nesting depth 1-3, breadth 2-6, keys 3-20 chars, values 5-300 chars."""
    attrs: Dict[str, str] = {}
    for _ in range(rng.randint(2, 6)):
        key = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 20)))
        full = f"{prefix}.{key}" if prefix else key
        if depth + 1 < max_depth and rng.random() < 0.3:
            attrs.update(_random_attributes(rng, full, depth + 1, max_depth))
        else:
            length = rng.randint(5, 300)
            attrs[full] = rng.randbytes((length + 1) // 2).hex()[:length]
    return attrs


@dataclass
class AgentPlan:
    """What the agent does for one task (a pure function of the task name)."""

    rounds: int
    task_round: int
    round_rewards: List[Optional[float]]
    final_reward: float
    sleeps: List[float]

    @property
    def expected_spans(self) -> int:
        """Three spans per round, one per emitted reward, the ``final`` span and the final reward."""
        return 3 * self.rounds + sum(r is not None for r in self.round_rewards) + 2


def plan_for(task: str, max_rounds: int, sleep_seconds: float) -> AgentPlan:
    """The deterministic plan of ``task``."""
    rng = random.Random(task)
    rounds = rng.randint(1, max_rounds)
    return AgentPlan(
        rounds=rounds,
        task_round=rng.randrange(rounds),
        round_rewards=[rng.random() if rng.random() < 0.5 else None for _ in range(rounds)],
        final_reward=1.0 + rng.random(),
        sleeps=[rng.uniform(0, sleep_seconds) for _ in range(2 * rounds)],
    )


_STARTUP_RECORDED = False


def _record_startup_cpu(startup_dir: str) -> None:
    """Once per runner process: write this process's CPU seconds so far (its start-up, up to its first rollout) to
    ``<startup_dir>/<pid>``."""
    global _STARTUP_RECORDED
    if _STARTUP_RECORDED:
        return
    _STARTUP_RECORDED = True
    with open(os.path.join(startup_dir, str(os.getpid())), "w") as fh:
        fh.write(repr(_proc_cpu_seconds(os.getpid())))


def make_agent(max_rounds: int, sleep_seconds: float, startup_dir: Optional[str] = None) -> Any:
    """Build the ``@rollout`` agent (imported lazily so ``--help`` stays fast); with ``startup_dir`` each runner
    process records its start-up CPU there on its first rollout."""
    from opentelemetry import trace

    from rollouthub.emitter import emit_reward
    from rollouthub.litagent import rollout
    from rollouthub.types import LLM

    async def full_stack_agent(task: str, llm: LLM) -> None:
        if startup_dir is not None:
            _record_startup_cpu(startup_dir)
        plan = plan_for(task, max_rounds, sleep_seconds)
        rng = random.Random(task + "/attrs")
        tracer = trace.get_tracer("benchmarks.full_stack")
        for i in range(plan.rounds):
            with tracer.start_as_current_span(f"agent{i}") as span:
                span.set_attributes({"llm.model": llm.model, **_random_attributes(rng)})
                for j in (1, 2):
                    with tracer.start_as_current_span(f"round{i}_{j}") as child:
                        child.set_attributes(_random_attributes(rng))
                        if i == plan.task_round and j == 1:
                            child.set_attribute(TASK_KEY, task)
                        await asyncio.sleep(plan.sleeps[2 * i + j - 1])
            if plan.round_rewards[i] is not None:
                emit_reward(plan.round_rewards[i])
        with tracer.start_as_current_span("final") as span:
            span.set_attributes(_random_attributes(rng))
        emit_reward(plan.final_reward)

    return rollout(full_stack_agent)


# ---------------------------------------------------------------------------------------------------------------------
# The algorithm: enqueue, wait, verify
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Verification:
    """Outcome of checking finished rollouts."""

    checked: int = 0
    ok: int = 0
    failures: List[str] = field(default_factory=list)
    spans: int = 0
    expected_spans: int = 0


class LoadAlgorithm:
    """Drives one workload against the store and verifies every finished rollout."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.verification = Verification()
        self.rollout_ids: List[str] = []
        self.start_time = 0.0
        self.end_time = 0.0
        self.last_progress = time.monotonic()
        self._submitted = 0
        self._next_poll = 0.0
        self._session_spans = 0
        if args.tracer == "agentops":
            from rollouthub.instrumentation import AGENTOPS_INSTALLED

            self._session_spans = 1 if AGENTOPS_INSTALLED else 0  # AgentOps adds a ``<rollout>.session`` root span

    async def _publish_resources(self, store: Any) -> str:
        from rollouthub.types import LLM

        update = await store.add_resources(
            {"llm": LLM(endpoint=f"http://localhost:{self._submitted}/v1", model=f"test-model-{self._submitted}")}
        )
        return update.resources_id

    async def _enqueue_batch(self, store: Any, count: int) -> List[str]:
        from rollouthub.types import EnqueueRolloutRequest

        resources_id = await self._publish_resources(store)
        requests = [
            EnqueueRolloutRequest(
                input=f"task-{self._submitted + k}-generated", mode="train", resources_id=resources_id
            )
            for k in range(count)
        ]
        self._submitted += count
        rollouts = await store.enqueue_many_rollouts(requests)
        ids = [r.rollout_id for r in rollouts]
        self.rollout_ids.extend(ids)
        return ids

    async def _verify(self, store: Any, rollout: Any) -> None:
        from rollouthub.emitter import find_final_reward

        v = self.verification
        v.checked += 1
        self.last_progress = time.monotonic()
        plan = plan_for(rollout.input, self.args.max_rounds, self.args.sleep_seconds)
        expected_spans = plan.expected_spans + self._session_spans
        v.expected_spans += expected_spans
        if rollout.status != "succeeded":
            v.failures.append(f"{rollout.rollout_id}: status {rollout.status}")
            return
        spans = list(await store.query_spans(rollout.rollout_id, attempt_id="latest"))
        v.spans += len(spans)
        problems = []
        if len(spans) != expected_spans:
            problems.append(f"{len(spans)} spans (expected {expected_spans})")
        if not any(s.attributes.get(TASK_KEY) == rollout.input for s in spans):
            problems.append("no span with the task attribute")
        reward = find_final_reward(spans)
        if reward is None or not 1.0 <= reward <= 2.0 or abs(reward - plan.final_reward) > 1e-9:
            problems.append(f"final reward {reward} (expected {plan.final_reward:.4f})")
        if problems:
            v.failures.append(f"{rollout.rollout_id}: " + "; ".join(problems))
        else:
            v.ok += 1

    async def _wait_some(self, store: Any, ids: Sequence[str]) -> List[Any]:
        """One long-poll (at most ``--poll-timeout``); calls are spaced by at least ``--poll-interval``."""
        delay = self._next_poll - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        self._next_poll = time.monotonic() + self.args.poll_interval
        window = list(ids)[: self.args.wait_window]  # the oldest ids: FIFO queue, they finish first
        return list(await store.wait_for_rollouts(rollout_ids=window, timeout=self.args.poll_timeout))

    def _check_stale(self) -> None:
        idle = time.monotonic() - self.last_progress
        if idle > self.args.stale_seconds:
            raise TimeoutError(f"No rollout completed for {idle:.0f}s; aborting the benchmark.")

    async def run_batch(self, store: Any) -> None:
        """``batch`` mode."""
        remaining = self.args.total_tasks
        while remaining > 0:
            ids = await self._enqueue_batch(store, min(self.args.batch_size, remaining))
            remaining -= len(ids)
            pending = set(ids)
            while pending:
                for rollout in await self._wait_some(store, [i for i in ids if i in pending]):
                    pending.discard(rollout.rollout_id)
                    await self._verify(store, rollout)
                self._check_stale()

    async def run_batch_partial(self, store: Any) -> None:
        """``batch_partial`` mode."""
        remaining = self.args.total_tasks
        active: List[str] = []
        while remaining > 0 or active:
            while remaining > 0 and len(active) < self.args.remaining_tasks:
                ids = await self._enqueue_batch(store, min(self.args.batch_size, remaining))
                remaining -= len(ids)
                active.extend(ids)
            finished = await self._wait_some(store, active)
            done = {r.rollout_id for r in finished}
            for rollout in finished:
                await self._verify(store, rollout)
            active = [i for i in active if i not in done]
            self._check_stale()

    async def run_single(self, store: Any) -> None:
        """``single`` mode: one coroutine per task; a shared long-poller wakes each one when its rollout ends."""
        from rollouthub.types import LLM

        semaphore = asyncio.Semaphore(self.args.concurrency)
        waiting: Dict[str, asyncio.Future[Any]] = {}
        finished_all = asyncio.Event()

        async def poller() -> None:
            while not finished_all.is_set():
                if not waiting:
                    await asyncio.sleep(0.01)
                    continue
                for rollout in await self._wait_some(store, list(waiting)):
                    future = waiting.pop(rollout.rollout_id, None)
                    if future is not None and not future.done():
                        future.set_result(rollout)
                self._check_stale()

        async def one(index: int) -> None:
            async with semaphore:
                update = await store.add_resources(
                    {"llm": LLM(endpoint=f"http://localhost:{index}/v1", model=f"test-model-{index}")}
                )
                rollout = await store.enqueue_rollout(
                    input=f"task-{index}-generated", mode="train", resources_id=update.resources_id
                )
                self.rollout_ids.append(rollout.rollout_id)
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                waiting[rollout.rollout_id] = future
                await self._verify(store, await future)

        poll_task = asyncio.create_task(poller())
        work = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(self.args.total_tasks))))
        try:
            await asyncio.wait({work, poll_task}, return_when=asyncio.FIRST_COMPLETED)
            if poll_task.done() and not work.done():  # the poller failed (e.g. stale): abort the workload
                work.cancel()
                poll_task.result()
            await work
        finally:
            finished_all.set()
            await poll_task

    async def __call__(self, store: Any) -> None:
        """The algorithm body (wrapped with ``@algo`` by :func:`run_once`)."""
        self.start_time = time.time()
        self.last_progress = time.monotonic()
        mode = self.args.mode
        await getattr(self, f"run_{mode}")(store)
        self.end_time = time.time()


# ---------------------------------------------------------------------------------------------------------------------
# Server process, probes and /proc sampling
# ---------------------------------------------------------------------------------------------------------------------


def _proc_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _cpu_delta(before: Any, after: Any) -> float:
    """User + system seconds between two ``resource.getrusage`` samples."""
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _proc_peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class HealthProber(threading.Thread):
    """Probes ``GET /v1/agl/health`` every ``interval`` seconds and records the latencies."""

    def __init__(self, url: str, interval: float = 0.2) -> None:
        super().__init__(name="health-prober", daemon=True)
        self.url = url
        self.interval = interval
        self.latencies: List[float] = []
        self.errors = 0
        self._stop_evt = threading.Event()

    def run(self) -> None:
        """Probe until stopped."""
        while not self._stop_evt.wait(self.interval):
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
                self.latencies.append(time.perf_counter() - start)
            except Exception:
                self.errors += 1

    def stop(self) -> None:
        """Stop probing and join."""
        self._stop_evt.set()
        self.join(5)


class StoreServerProcess:
    """``rollouthub store`` as a subprocess on a free port of ``host`` (with ``n_workers`` worker processes and the
    environment ``env``, e.g. an API token)."""

    def __init__(
        self,
        backend: str,
        log_dir: str,
        *,
        host: str = "127.0.0.1",
        n_workers: int = 1,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        from rollouthub.utils.server_launcher import pick_free_port

        self.port = pick_free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.log_path = os.path.join(log_dir, f"store-{self.port}.log")
        cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", backend, "--port", str(self.port)]
        cmd += ["--host", host, "--n-workers", str(n_workers), "--log-level", "WARNING"]
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rollouthub store exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/v1/agl/health", timeout=1):
                    return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("rollouthub store did not become healthy within 60 s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()


# ---------------------------------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------------------------------


def _percentiles(values: Sequence[float]) -> Dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "max": float("nan")}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    return {"p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99), "max": ordered[-1]}


async def _collect_timings(store: Any, rollout_ids: Sequence[str]) -> Dict[str, Dict[str, float]]:
    """Queue-wait (first attempt start - rollout start) and attempt-duration percentiles, in seconds."""
    waits: List[float] = []
    durations: List[float] = []
    semaphore = asyncio.Semaphore(16)

    async def one(rid: str) -> None:
        async with semaphore:
            rollout = await store.get_rollout_by_id(rid)
            attempts = list(await store.query_attempts(rid))
        if rollout is None or not attempts:
            return
        waits.append(max(0.0, attempts[0].start_time - rollout.start_time))
        for attempt in attempts:
            if attempt.end_time is not None:
                durations.append(attempt.end_time - attempt.start_time)

    await asyncio.gather(*(one(r) for r in rollout_ids))
    await store.close()
    return {"queue_wait_s": _percentiles(waits), "attempt_duration_s": _percentiles(durations)}


@dataclass
class RunResult:
    """The report of one run."""

    mode: str
    backend: str
    total_tasks: int
    n_runners: int
    wall_seconds: float
    rollouts: int
    rollouts_per_s: float
    spans: int
    spans_per_s: float
    server_cpu_s: float
    server_cpu_ms_per_span: float
    db_cpu_ms_per_span: float
    runners_cpu_ms_per_rollout: float
    driver_cpu_ms_per_rollout: float
    server_cpu_ms_per_rollout: float
    runtime_cpu_ms_per_rollout: float
    runner_startup_cpu_s: float
    server_peak_rss_mb: float
    health_p95_ms: float
    health_errors: int
    verified_ok: int
    lost_rollouts: int
    lost_spans: int
    failures: List[str]
    timings: Dict[str, Dict[str, float]]


TRACERS = {"otel": "rollouthub.tracer.otel.OtelTracer", "agentops": "rollouthub.tracer.agentops.AgentOpsTracer"}
"""``--tracer`` choices: plain OTel, or AgentOps (the Trainer's default tracer; it falls back to native OTel tracing
when the ``agentops`` extra is not installed)."""


def run_once(args: argparse.Namespace, workdir: str) -> RunResult:
    """Start a server (unless ``--store-url``), run the workload with a Trainer, and measure."""
    from rollouthub.algorithm import algo
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.trainer import Trainer

    server: Optional[StoreServerProcess] = None
    backend = args.backend
    pg_schema: Optional[str] = None
    db_sampler: Any = None
    if args.store_url:
        url = args.store_url.rstrip("/")
    else:
        served = backend
        if backend.startswith("sqlite:///") and args.fresh_sqlite:
            path = backend[len("sqlite:///") :]
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
        elif backend.startswith(("postgresql", "postgres:")):
            # A fresh schema per run (dropped afterwards), and connections the database CPU sampler can find.
            run_id = uuid.uuid4().hex[:8]
            pg_schema, app = f"rh_fullstack_{run_id}", f"rh-fullstack-{run_id}"
            served = f"{backend}{'&' if '?' in backend else '?'}schema={pg_schema}&application_name={app}"
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from pg_backends import BackendCpuSampler

            db_sampler = BackendCpuSampler(backend.split("?", 1)[0], app)
        server = StoreServerProcess(served, workdir)
        url = server.url
    prober = HealthProber(url + "/v1/agl/health")
    load = LoadAlgorithm(args)

    @algo
    async def load_algorithm(*, store: Any) -> None:
        await load(store)

    store = LightningStoreClient(url)
    trainer = Trainer(
        n_runners=args.n_runners,
        store=store,
        strategy={"type": "cs", "managed_store": False, "n_runners": args.n_runners},
        tracer=TRACERS[args.tracer],
        runner={
            "type": "rollouthub.runner.LitAgentRunner",
            "poll_interval": args.runner_poll,
            "interval_jitter": args.runner_jitter,
            "heartbeat_interval": 5.0,
        },
        algorithm=load_algorithm,
    )
    startup_dir = tempfile.mkdtemp(prefix="startup-", dir=workdir)
    agent = make_agent(args.max_rounds, args.sleep_seconds, startup_dir)
    try:
        cpu_before = _proc_cpu_seconds(server.process.pid) if server else float("nan")
        db_before = asyncio.run(db_sampler.sample()) if db_sampler else {}
        self_before, children_before = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        prober.start()
        try:
            trainer.fit(agent)
        finally:
            prober.stop()
            cpu_after = _proc_cpu_seconds(server.process.pid) if server else float("nan")
            db_cpu = db_sampler.delta(db_before, asyncio.run(db_sampler.sample())) if db_sampler else float("nan")
            self_after, children_after = (
                resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN),
            )
            peak_rss = _proc_peak_rss_mb(server.process.pid) if server else float("nan")
        timings = asyncio.run(_collect_timings(LightningStoreClient(url), load.rollout_ids))
    finally:
        if server is not None:
            server.stop()
        if pg_schema is not None:
            asyncio.run(_drop_schema(backend, pg_schema))
    v = load.verification
    wall = max(1e-9, load.end_time - load.start_time)
    server_cpu = cpu_after - cpu_before
    health = _percentiles(prober.latencies)
    runners_ms = 1000.0 * _cpu_delta(children_before, children_after) / max(1, v.checked)
    driver_ms = 1000.0 * _cpu_delta(self_before, self_after) / max(1, v.checked)
    startups = []
    for name in os.listdir(startup_dir):
        with open(os.path.join(startup_dir, name)) as fh:
            startups.append(float(fh.read()))
    return RunResult(
        mode=args.mode,
        backend=backend if not args.store_url else args.store_url,
        total_tasks=args.total_tasks,
        n_runners=args.n_runners,
        wall_seconds=wall,
        rollouts=v.checked,
        rollouts_per_s=v.checked / wall,
        spans=v.spans,
        spans_per_s=v.spans / wall,
        server_cpu_s=server_cpu,
        server_cpu_ms_per_span=1000.0 * server_cpu / max(1, v.spans),
        db_cpu_ms_per_span=1000.0 * db_cpu / max(1, v.spans),
        runners_cpu_ms_per_rollout=runners_ms,
        driver_cpu_ms_per_rollout=driver_ms,
        server_cpu_ms_per_rollout=1000.0 * server_cpu / max(1, v.checked),
        runtime_cpu_ms_per_rollout=runners_ms + driver_ms,
        runner_startup_cpu_s=statistics.median(startups) if startups else float("nan"),
        server_peak_rss_mb=peak_rss,
        health_p95_ms=1000.0 * health["p95"],
        health_errors=prober.errors,
        verified_ok=v.ok,
        lost_rollouts=args.total_tasks - v.ok,
        lost_spans=max(0, v.expected_spans - v.spans),
        failures=v.failures[:20],
        timings=timings,
    )


def _print_result(r: RunResult, echo_ms: Optional[float] = None) -> None:
    t = r.timings
    echo = f" = {r.server_cpu_ms_per_span / echo_ms:.2f} echo requests" if echo_ms else ""
    print(
        f"[{r.mode} | {r.backend}] {r.rollouts} rollouts in {r.wall_seconds:.1f}s: "
        f"{r.rollouts_per_s:.1f} rollouts/s, {r.spans_per_s:.0f} spans/s; "
        f"server CPU {r.server_cpu_ms_per_span:.3f} ms/span{echo}, peak RSS {r.server_peak_rss_mb:.0f} MB; "
        + (
            f"PostgreSQL CPU {r.db_cpu_ms_per_span:.3f} ms/span; "
            if r.db_cpu_ms_per_span == r.db_cpu_ms_per_span
            else ""
        )
        + f"CPU/rollout: server {r.server_cpu_ms_per_rollout:.2f} ms, runners {r.runners_cpu_ms_per_rollout:.2f} ms "
        f"(start-up {r.runner_startup_cpu_s:.3f} s per runner), algorithm {r.driver_cpu_ms_per_rollout:.2f} ms, "
        f"runtime side {r.runtime_cpu_ms_per_rollout:.2f} ms; "
        f"health p95 {r.health_p95_ms:.1f} ms ({r.health_errors} errors); "
        f"queue wait p50/p95 {t['queue_wait_s']['p50']:.2f}/{t['queue_wait_s']['p95']:.2f}s; "
        f"attempt p50/p95 {t['attempt_duration_s']['p50']:.2f}/{t['attempt_duration_s']['p95']:.2f}s; "
        f"verified {r.verified_ok}/{r.total_tasks}, lost rollouts {r.lost_rollouts}, lost spans {r.lost_spans}",
        flush=True,
    )
    for failure in r.failures[:5]:
        print(f"    failure: {failure}", flush=True)


ECHO_OPS = 5000
"""Requests per echo reference measurement: server CPU is read in 10 ms ticks, and 5000 requests keep the rounding
within a few percent."""


def _echo_reference_ms(clients: int = 2, ops: int = ECHO_OPS) -> float:
    """CPU milliseconds per request of the bare echo app of ``benchmarks/http_micro.py`` (median of 3)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from http_micro import measure_echo

    return statistics.median(float(measure_echo(clients, ops)["server_cpu_ms_per_op"]) for _ in range(3))


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.split("?", 1)[0].replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _positive(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return number


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (the reference's store benchmark flags plus server/backend/report options)."""
    from rollouthub.cli import plain_text

    p = argparse.ArgumentParser(description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store-url", default=None, help="Use a running server instead of starting one.")
    p.add_argument(
        "--backend",
        default="memory",
        help="'memory', a SQLite URL for the started server (sqlite:///relative.db or sqlite:////absolute/path.db), or a "
        "PostgreSQL URL (a fresh schema per run, dropped afterwards; the database backends' CPU is reported too).",
    )
    p.add_argument("--fresh-sqlite", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--mode", choices=["batch", "batch_partial", "single"], default="batch_partial")
    p.add_argument("--total-tasks", type=_positive, default=1024)
    p.add_argument("--batch-size", type=_positive, default=128)
    p.add_argument("--remaining-tasks", type=_positive, default=512)
    p.add_argument("--concurrency", type=_positive, default=32)
    p.add_argument("--n-runners", type=_positive, default=16)
    p.add_argument("--max-rounds", type=_positive, default=3)
    p.add_argument("--sleep-seconds", type=_positive_float, default=0.05)
    p.add_argument("--poll-timeout", type=float, default=0.1, help="wait_for_rollouts timeout per poll (max 0.1).")
    p.add_argument("--poll-interval", type=float, default=0.25, help="Minimum seconds between two polls.")
    p.add_argument(
        "--wait-window", type=_positive, default=64, help="Poll only the oldest N unfinished rollouts of the workload."
    )
    p.add_argument(
        "--runner-poll",
        type=float,
        default=5.0,
        help="Runner poll interval (LitAgentRunner's default). Runners long-poll (dequeue_rollout_or_wait): the server "
        "wakes them when a rollout is queued, so the interval costs no pickup latency; a small value (e.g. 0.05) "
        "makes them re-poll that often, as runners that sleep between dequeues would.",
    )
    p.add_argument("--runner-jitter", type=float, default=0.5, help="Jitter (+/-) of the runner poll interval.")
    p.add_argument("--stale-seconds", type=float, default=150.0, help="Abort when nothing completes this long.")
    p.add_argument(
        "--echo-reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Measure the CPU per request of a bare echo app first and express server CPU per span in it.",
    )
    p.add_argument(
        "--echo-ops",
        type=_positive,
        default=ECHO_OPS,
        help="Requests per echo reference measurement (server CPU is read in 10 ms ticks: enough requests keep the "
        "rounding within a few percent).",
    )
    p.add_argument(
        "--tracer",
        choices=sorted(TRACERS),
        default="otel",
        help="Runner tracer: OtelTracer, or AgentOpsTracer (the Trainer's default; AgentOps when installed).",
    )
    p.add_argument("--runs", type=_positive, default=1)
    p.add_argument("--json-out", default=None, help="Append one JSON line per run to this file.")
    p.add_argument("--debug", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark ``--runs`` times and print one line per run plus the median; exit 1 on lost data."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s",
    )
    echo_ms = _echo_reference_ms(ops=args.echo_ops) if args.echo_reference else None
    if echo_ms is not None:
        print(f"# echo reference (bare Starlette app, same launcher): {echo_ms:.3f} ms CPU per request", flush=True)
    results: List[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="rollouthub-fullstack-") as workdir:
        for _ in range(args.runs):
            result = run_once(args, workdir)
            _print_result(result, echo_ms)
            results.append(result)
            if args.json_out:
                with open(args.json_out, "a") as fh:
                    fh.write(json.dumps({**asdict(result), "echo_cpu_ms_per_request": echo_ms}) + "\n")
    if len(results) > 1:
        cpu = statistics.median(r.server_cpu_ms_per_span for r in results)
        print(
            f"[median of {len(results)}] {statistics.median(r.rollouts_per_s for r in results):.1f} rollouts/s, "
            f"{statistics.median(r.spans_per_s for r in results):.0f} spans/s, "
            f"{cpu:.3f} ms server CPU/span" + (f" ({cpu / echo_ms:.2f} echo requests)" if echo_ms else "") + ", "
            f"health p95 {statistics.median(r.health_p95_ms for r in results):.1f} ms; CPU/rollout: server "
            f"{statistics.median(r.server_cpu_ms_per_rollout for r in results):.2f} ms, runners "
            f"{statistics.median(r.runners_cpu_ms_per_rollout for r in results):.2f} ms (start-up "
            f"{statistics.median(r.runner_startup_cpu_s for r in results):.3f} s per runner), algorithm "
            f"{statistics.median(r.driver_cpu_ms_per_rollout for r in results):.2f} ms, runtime side "
            f"{statistics.median(r.runtime_cpu_ms_per_rollout for r in results):.2f} ms",
            flush=True,
        )
    lost = sum(r.lost_rollouts + r.lost_spans for r in results)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
