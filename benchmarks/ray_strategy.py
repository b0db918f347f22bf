"""The "ray" execution strategy against "cs" on the same machine: rollouts/s and runner-side CPU per rollout.

One single-node Ray cluster (``rollouthub.testing.ray_cluster`` without namespaces: a head on ``127.0.0.1`` with a
private temp dir, started once and not timed) serves every ``ray`` run; this process stays connected to it, so each
run only creates and removes its runner actors. For each ``--runners`` count, ``--rounds`` interleaved rounds run
``cs`` and ``ray`` (alternating which goes first) with the same Trainer: a fresh thread-safe in-memory store served
by this process on ``127.0.0.1``, a cheap agent (``--spans`` spans with a few attributes, a reward, an
``asyncio.sleep(--sleep)``), ``--rollouts`` rollouts enqueued at once.

Measured window: from the moment every runner has polled the store (runner start-up is excluded for both) until the
last rollout finished. Figures per run:

* rollouts/s over the window;
* runner CPU per rollout (ms): the CPU time (user + system, from ``/proc`` via psutil) of the runner processes over
  the window -- for ``cs`` this process's runner children, for ``ray`` the node's worker processes hosting a
  ``RunnerActor``;
* driver CPU per rollout (ms): this process (store server + algorithm; for ``ray`` also the Ray driver);
* Ray system CPU per rollout (ms, ``ray`` only): the node's other processes (raylet, GCS, agents).

The table gives the median over rounds and the ray/cs ratio of rollouts/s. The machine may be shared: say so with
the figures. Needs the ``ray`` extra (``pip install 'rollouthub[ray]'``). Example::

    python benchmarks/ray_strategy.py --runners 4 16 --rounds 2 --rollouts 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: this tree's rollouthub

from rollouthub.algorithm import Algorithm  # noqa: E402

logger = logging.getLogger("benchmarks.ray_strategy")

HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------------------------------
# The agent and the algorithm
# ---------------------------------------------------------------------------------------------------------------------


def make_agent(spans: int, sleep: float) -> Any:
    """A cheap ``@rollout`` agent: ``spans`` spans with three attributes each, a reward, a short sleep."""
    from opentelemetry import trace

    from rollouthub.emitter import emit_reward
    from rollouthub.litagent import rollout
    from rollouthub.types import PromptTemplate

    async def cheap_agent(task: int, prompt_template: PromptTemplate) -> None:
        tracer = trace.get_tracer("benchmarks.ray_strategy")
        for i in range(spans):
            with tracer.start_as_current_span(f"step{i}") as span:
                span.set_attributes({"task": task, "step": i, "prompt": prompt_template.format(x=task)})
        await asyncio.sleep(sleep)
        emit_reward(float(task % 7))

    return rollout(cheap_agent)


@dataclass
class Window:
    """What the algorithm measured."""

    seconds: float = 0.0
    rollouts: int = 0
    succeeded: int = 0
    runner_cpu: float = 0.0
    driver_cpu: float = 0.0
    system_cpu: float = 0.0
    runner_processes: int = 0


def _cpu_seconds(pids: Sequence[int]) -> Dict[int, float]:
    out: Dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = times.user + times.system
    return out


def _driver_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


class Probe:
    """Finds the runner processes (and Ray's own) of one run."""

    def __init__(self, mode: str, cluster: Any) -> None:
        self.mode = mode
        self.cluster = cluster

    def _ray_pids(self) -> List[int]:
        return self.cluster.node_pids(0) if self.cluster is not None else []

    def runner_pids(self) -> List[int]:
        """cs: this process's children outside the Ray cluster; ray: the node's processes hosting a RunnerActor."""
        if self.mode == "cs":
            ray_pids = set(self._ray_pids())
            return [p.pid for p in psutil.Process().children(recursive=False) if p.pid not in ray_pids]
        found = []
        for pid in self._ray_pids():
            try:
                if "RunnerActor" in " ".join(psutil.Process(pid).cmdline()):
                    found.append(pid)
            except psutil.Error:
                continue
        return found

    def system_pids(self, runners: Sequence[int]) -> List[int]:
        """Ray's own processes (ray only): the node's processes that are not runners."""
        if self.mode != "ray":
            return []
        return [pid for pid in self._ray_pids() if pid not in set(runners)]


async def measure(store: Any, count: int, n_runners: int, probe: Probe, timeout: float) -> Window:
    """Wait until every runner has polled the store, enqueue ``count`` rollouts, wait for them; the window's
    figures."""
    from rollouthub.types import EnqueueRolloutRequest

    deadline = time.monotonic() + timeout
    while len([w for w in await store.query_workers() if w.last_dequeue_time]) < n_runners:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every one of {n_runners} runners polled the store")
        await asyncio.sleep(0.1)
    runners = probe.runner_pids()
    system = probe.system_pids(runners)
    runner_cpu, system_cpu, driver_cpu = _cpu_seconds(runners), _cpu_seconds(system), _driver_cpu()
    start = time.perf_counter()
    requests = [EnqueueRolloutRequest(input=i, mode="train") for i in range(count)]
    ids = [r.rollout_id for r in await store.enqueue_many_rollouts(requests)]
    done: List[Any] = []
    while len(done) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(done)} of {len(ids)} rollouts finished")
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0.1)
    seconds = time.perf_counter() - start
    runner_after, system_after = _cpu_seconds(runners), _cpu_seconds(system)
    return Window(
        seconds=seconds,
        rollouts=len(done),
        succeeded=sum(r.status == "succeeded" for r in done),
        runner_cpu=sum(runner_after[p] - runner_cpu[p] for p in runner_after if p in runner_cpu),
        driver_cpu=_driver_cpu() - driver_cpu,
        system_cpu=sum(system_after[p] - system_cpu[p] for p in system_after if p in system_cpu),
        runner_processes=len(runners),
    )


class MeasuredRun(Algorithm):
    """The algorithm of a run: :func:`measure`, keeping the figures in :attr:`window`."""

    def __init__(self, count: int, n_runners: int, probe: Probe, timeout: float) -> None:
        self.count = count
        self.n_runners = n_runners
        self.probe: Optional[Probe] = probe
        self.timeout = timeout
        self.window = Window()

    def __getstate__(self) -> Dict[str, Any]:
        """Copies of the algorithm (sent with the runner bundle) need no probe: it lives in this process."""
        state = self.__dict__.copy()
        state["probe"] = None
        return state

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:  # type: ignore[override]
        """Run the measured window."""
        assert self.probe is not None
        store = self.get_store()
        initial = self.get_initial_resources()
        if initial is not None:
            await store.add_resources(initial)
        self.window = await measure(store, self.count, self.n_runners, self.probe, self.timeout)


# ---------------------------------------------------------------------------------------------------------------------
# One run, the interleaved rounds, the table
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    """One run's figures (``error`` set when it failed)."""

    mode: str
    runners: int
    round: int
    rollouts_per_s: float = 0.0
    runner_cpu_ms: float = 0.0
    driver_cpu_ms: float = 0.0
    system_cpu_ms: float = 0.0
    runner_processes: int = 0
    succeeded: int = 0
    error: Optional[str] = None


def run_once(mode: str, n_runners: int, round_index: int, args: argparse.Namespace, cluster: Any) -> Result:
    """One Trainer.fit with ``mode`` (``cs`` or ``ray``) and ``n_runners`` runners; never raises."""
    from rollouthub.execution import ClientServerExecutionStrategy
    from rollouthub.store.memory import InMemoryLightningStore
    from rollouthub.tracer import OtelTracer
    from rollouthub.trainer import Trainer
    from rollouthub.types import PromptTemplate
    from rollouthub.utils.server_launcher import pick_free_port

    result = Result(mode, n_runners, round_index)
    measured = MeasuredRun(args.rollouts, n_runners, Probe(mode, cluster), args.timeout)
    strategy: Any
    if mode == "cs":
        strategy = ClientServerExecutionStrategy(
            n_runners=n_runners, server_host=HOST, server_port=pick_free_port(HOST)
        )
    else:
        from rollouthub.execution.ray import RayExecutionStrategy

        strategy = RayExecutionStrategy(
            address=cluster.address,
            n_runners=n_runners,
            num_cpus_per_runner=args.cpus_per_runner,
            server_host=HOST,
            advertise_host=HOST,
        )
    trainer = Trainer(
        algorithm=measured,
        strategy=strategy,
        n_runners=n_runners,
        store=InMemoryLightningStore(thread_safe=True),
        tracer=OtelTracer(),
        runner={"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.05},
        initial_resources={"prompt_template": PromptTemplate(template="task {x}", engine="f-string")},
        progress=False,
    )
    try:
        trainer.fit(make_agent(args.spans, args.sleep), list(range(args.rollouts)))
    except BaseException as exc:  # KeyboardInterrupt included: report the rest
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        if isinstance(exc, KeyboardInterrupt):
            raise
        return result
    w = measured.window
    if w.rollouts == 0:
        result.error = "no rollout measured"
        return result
    result.rollouts_per_s = w.rollouts / w.seconds
    result.runner_cpu_ms = 1000 * w.runner_cpu / w.rollouts
    result.driver_cpu_ms = 1000 * w.driver_cpu / w.rollouts
    result.system_cpu_ms = 1000 * w.system_cpu / w.rollouts
    result.runner_processes = w.runner_processes
    result.succeeded = w.succeeded
    if w.succeeded != w.rollouts:
        result.error = f"{w.rollouts - w.succeeded} of {w.rollouts} rollouts did not succeed"
    return result


def _median(results: List[Result], field: str) -> float:
    values = [getattr(r, field) for r in results if r.error is None]
    return statistics.median(values) if values else math.nan


def print_table(results: List[Result], runner_counts: Sequence[int]) -> None:
    """Medians per (runners, mode) and the ray/cs ratio of rollouts/s."""
    header = (
        f"{'runners':>7} {'mode':>4} {'ok/runs':>7} {'rollouts/s':>10} {'runner ms/r':>11} "
        f"{'driver ms/r':>11} {'raysys ms/r':>11} {'procs':>5} {'ray/cs':>6}"
    )
    print(header)
    print("-" * len(header))
    for n in runner_counts:
        rates: Dict[str, float] = {}
        for mode in ("cs", "ray"):
            rows = [r for r in results if r.runners == n and r.mode == mode]
            ok = [r for r in rows if r.error is None]
            rates[mode] = _median(rows, "rollouts_per_s")
            ratio = rates["ray"] / rates["cs"] if mode == "ray" and ok and rates["cs"] > 0 else math.nan
            print(
                f"{n:>7} {mode:>4} {len(ok):>3}/{len(rows):<3} {rates[mode]:>10.1f} "
                f"{_median(rows, 'runner_cpu_ms'):>11.2f} {_median(rows, 'driver_cpu_ms'):>11.2f} "
                f"{_median(rows, 'system_cpu_ms') if mode == 'ray' else math.nan:>11.2f} "
                f"{int(_median(rows, 'runner_processes')) if ok else 0:>5} "
                f"{'' if math.isnan(ratio) else f'{ratio:.2f}':>6}"
            )
            for r in rows:
                if r.error is not None:
                    print(f"{'':>7} {mode:>4} round {r.round} FAILED: {r.error}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse the arguments, start the Ray cluster, run the interleaved rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runners", type=int, nargs="+", default=[4, 16, 64], help="runner counts (default 4 16 64)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved cs/ray rounds per runner count")
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts per run")
    parser.add_argument("--spans", type=int, default=3, help="spans per rollout")
    parser.add_argument("--sleep", type=float, default=0.05, help="agent sleep per rollout (seconds)")
    parser.add_argument("--cpus-per-runner", type=float, default=0.1, help="Ray CPUs reserved per runner actor")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take")
    parser.add_argument("--modes", nargs="+", choices=["cs", "ray"], default=["cs", "ray"], help="strategies to run")
    parser.add_argument("--json-out", type=Path, default=None, help="append every run's figures as JSON lines")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.runners) or args.rounds < 1 or args.rollouts < 1:
        parser.error("--runners, --rounds and --rollouts must be positive")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from rollouthub.testing.ray_cluster import ray_cluster, ray_cluster_unavailable_reason

    reason = ray_cluster_unavailable_reason(use_namespaces=False) if "ray" in args.modes else None
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    cpus = max(2, math.ceil(max(args.runners) * args.cpus_per_runner) + 1)
    results: List[Result] = []
    with ExitStack() as stack:
        cluster = None
        if "ray" in args.modes:
            import ray

            cluster = stack.enter_context(ray_cluster(n_worker_nodes=0, cpus_per_node=cpus, use_namespaces=False))
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            stack.callback(ray.shutdown)
        for n in args.runners:
            for round_index in range(args.rounds):
                modes = [m for m in ("cs", "ray") if m in args.modes]
                for mode in modes if round_index % 2 == 0 else reversed(modes):
                    result = run_once(mode, n, round_index, args, cluster)
                    results.append(result)
                    print(json.dumps(asdict(result)), file=sys.stderr, flush=True)
                    if args.json_out is not None:
                        with args.json_out.open("a") as fh:
                            fh.write(json.dumps(asdict(result)) + "\n")
    print(
        f"\n{args.rollouts} rollouts per run, {args.spans} spans each, agent sleep {args.sleep}s, "
        f"{os.cpu_count()} CPUs; medians of {args.rounds} interleaved round(s)"
    )
    print_table(results, args.runners)
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
