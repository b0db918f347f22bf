"""Scale-out on PostgreSQL: M store servers on one database, K runner processes and one algorithm process.

For each M of ``--servers`` (default 1 2 4), the script creates a fresh schema in the PostgreSQL database of
``--database-url`` (``$ROLLOUTHUB_BENCH_POSTGRES_URL``), starts M ``rollouthub store`` processes on their own ports
(each with ``--n-workers`` worker processes) with an API token, K runner processes (``--n-runners``; runner ``i``
talks to server ``i mod M``: *runner groups pointed at different servers*) and one algorithm process (on server 0),
which runs the full-stack workload of ``full_stack.py`` (same agent, modes and verification) and checks every
rollout and span. Reported per run:

* rollouts/s and spans/s (wall clock of the algorithm's workload);
* server CPU per span: user + system time of every server process (workers included) over the run;
* PostgreSQL CPU per span and per rollout: the CPU time of the database backends serving the servers' connections
  (found by ``application_name`` in ``pg_stat_activity``; their ``/proc/<pid>/stat``, so the database must run on
  this machine);
* p50 / p95 rollout latency (enqueue to terminal status, from the stored rollouts);
* lost rollouts and lost spans (must be 0; the exit status is 1 otherwise).

``--runs N`` repeats the whole sweep N times, interleaving the M values (M=1, 2, 4, 1, 2, 4, ...), and prints the
median and range of each figure. ``--netns`` runs the runners and the algorithm in two network namespaces (other
"hosts", see ``rollouthub.testing.netns``; needs root and iproute2): the servers then listen on a veth address
instead of loopback. Examples::

    python benchmarks/scale_out.py                                  # M = 1, 2, 4; 16 runners; batch_partial
    python benchmarks/scale_out.py --servers 1 2 4 --runs 3 --total-tasks 512 --json-out scale.jsonl
    python benchmarks/scale_out.py --servers 2 --netns --total-tasks 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from full_stack import LoadAlgorithm, StoreServerProcess, build_parser, make_agent  # noqa: E402
from pg_backends import BackendCpuSampler, proc_cpu_seconds  # noqa: E402

from rollouthub.cli import plain_text  # noqa: E402

logger = logging.getLogger("benchmarks.scale_out")

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
SCRIPT = os.path.abspath(__file__)


# ---------------------------------------------------------------------------------------------------------------------
# Roles run in child processes (possibly inside a network namespace)
# ---------------------------------------------------------------------------------------------------------------------


async def _runner_role(args: argparse.Namespace) -> None:
    """One runner process: a LitAgentRunner with the OpenTelemetry tracer on its server, until SIGTERM."""
    from rollouthub.execution.events import ThreadingEvent
    from rollouthub.runner import LitAgentRunner
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.tracer.otel import OtelTracer

    event = ThreadingEvent()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, event.set)
    store = LightningStoreClient(args.store_url)  # the token comes from $ROLLOUTHUB_API_TOKEN
    runner: Any = LitAgentRunner(
        OtelTracer(),
        poll_interval=args.runner_poll,
        heartbeat_interval=5.0,
        interval_jitter=args.runner_jitter,
    )
    runner.init(agent=make_agent(args.max_rounds, args.sleep_seconds))
    runner.init_worker(args.worker_id, store)
    try:
        await runner.iter(event=event)
    finally:
        runner.teardown_worker(args.worker_id)
        runner.teardown()
        await store.close()


class _TimedLoad(LoadAlgorithm):
    """The full-stack load, also keeping each finished rollout's latency (enqueue to terminal status)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.latencies: List[float] = []

    async def _verify(self, store: Any, rollout: Any) -> None:
        if rollout.end_time is not None:
            self.latencies.append(rollout.end_time - rollout.start_time)
        await super()._verify(store, rollout)


async def _algorithm_role(args: argparse.Namespace) -> None:
    """The algorithm process: run the workload on its server, write the outcome as JSON to ``--result``."""
    from rollouthub.store.client import LightningStoreClient

    store = LightningStoreClient(args.store_url)
    load = _TimedLoad(args)
    try:
        await load(store)
    finally:
        await store.close()
    v = load.verification
    with open(args.result, "w") as fh:
        json.dump(
            {
                "start": load.start_time,
                "end": load.end_time,
                "checked": v.checked,
                "ok": v.ok,
                "spans": v.spans,
                "expected_spans": v.expected_spans,
                "failures": v.failures[:20],
                "latencies": load.latencies,
            },
            fh,
        )


# ---------------------------------------------------------------------------------------------------------------------
# The orchestrator
# ---------------------------------------------------------------------------------------------------------------------


class ServerProcess(StoreServerProcess):
    """``rollouthub store`` on ``host`` with an API token and ``n_workers`` worker processes; CPU of all of them."""

    def __init__(self, backend: str, host: str, n_workers: int, token: str, log_dir: str) -> None:
        env = {**os.environ, "ROLLOUTHUB_API_TOKEN": token}
        super().__init__(backend, log_dir, host=host, n_workers=n_workers, env=env)

    def cpu_seconds(self) -> float:
        """CPU time of the server process and all its (worker) children so far."""
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for proc in procs:
            cpu = proc_cpu_seconds(proc.pid)
            if cpu == cpu:
                total += cpu
        return total


@dataclass
class ScaleResult:
    """One run of one M."""

    servers: int
    n_workers: int
    n_runners: int
    mode: str
    total_tasks: int
    netns: bool
    wall_seconds: float
    rollouts: int
    rollouts_per_s: float
    spans: int
    spans_per_s: float
    server_cpu_ms_per_span: float
    db_cpu_ms_per_span: float
    db_cpu_ms_per_rollout: float
    latency_p50_s: float
    latency_p95_s: float
    lost_rollouts: int
    lost_spans: int
    load_average: float
    failures: List[str] = field(default_factory=list)


def _pick(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def _role_argv(args: argparse.Namespace, extra: Sequence[str]) -> List[str]:
    """The command line of a child role: this script with the workload flags of the orchestrator."""
    argv = [sys.executable, SCRIPT, *args.workload_argv, *extra]
    return argv


async def _create_schema(url: str, schema: str, drop: bool) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE' if drop else f'CREATE SCHEMA "{schema}"')
    finally:
        await conn.close()


def run_once(args: argparse.Namespace, servers: int, workdir: str, hosts: Optional[List[Any]]) -> ScaleResult:
    """Start M servers, K runners and the algorithm; measure; stop everything."""
    run_id = uuid.uuid4().hex[:8]
    schema = f"rh_scale_{run_id}"
    app = f"rh-scale-{run_id}"
    sep = "&" if "?" in args.database_url else "?"
    backend = f"{args.database_url}{sep}schema={schema}&application_name={app}&{args.pool}"
    token = uuid.uuid4().hex
    host = hosts[0].gateway if hosts else "127.0.0.1"
    env = {**os.environ, "ROLLOUTHUB_API_TOKEN": token}
    asyncio.run(_create_schema(args.database_url, schema, drop=False))
    started: List[ServerProcess] = []
    runners: List[subprocess.Popen[bytes]] = []
    sampler = BackendCpuSampler(args.database_url, app + "%")
    try:
        for _ in range(servers):
            started.append(ServerProcess(backend, host, args.n_workers, token, workdir))
        for i in range(args.n_runners):
            argv = _role_argv(
                args, ["--role", "runner", "--store-url", started[i % servers].url, "--worker-id", str(i)]
            )
            log = open(os.path.join(workdir, f"runner-{run_id}-{i}.log"), "w")
            runners.append(
                subprocess.Popen(
                    hosts[0].command(argv) if hosts else argv, stdout=log, stderr=subprocess.STDOUT, env=env
                )
            )
        result_path = os.path.join(workdir, f"algorithm-{run_id}.json")
        argv = _role_argv(args, ["--role", "algorithm", "--store-url", started[0].url, "--result", result_path])
        cpu_before = sum(s.cpu_seconds() for s in started)
        db_before = asyncio.run(sampler.sample())
        algorithm = subprocess.run(hosts[1].command(argv) if hosts else argv, env=env, timeout=args.timeout)
        cpu_after = sum(s.cpu_seconds() for s in started)
        db_after = asyncio.run(sampler.sample())
        if algorithm.returncode != 0:
            raise RuntimeError(f"the algorithm process failed with exit status {algorithm.returncode}")
        with open(result_path) as fh:
            outcome = json.load(fh)
    finally:
        for proc in runners:
            proc.terminate()
        for proc in runners:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for server in started:
            server.stop()
        asyncio.run(_create_schema(args.database_url, schema, drop=True))
    wall = max(1e-9, outcome["end"] - outcome["start"])
    spans = max(1, outcome["spans"])
    db_cpu = BackendCpuSampler.delta(db_before, db_after)
    return ScaleResult(
        servers=servers,
        n_workers=args.n_workers,
        n_runners=args.n_runners,
        mode=args.mode,
        total_tasks=args.total_tasks,
        netns=hosts is not None,
        wall_seconds=wall,
        rollouts=outcome["checked"],
        rollouts_per_s=outcome["checked"] / wall,
        spans=outcome["spans"],
        spans_per_s=outcome["spans"] / wall,
        server_cpu_ms_per_span=1000.0 * (cpu_after - cpu_before) / spans,
        db_cpu_ms_per_span=1000.0 * db_cpu / spans,
        db_cpu_ms_per_rollout=1000.0 * db_cpu / max(1, outcome["checked"]),
        latency_p50_s=_pick(outcome["latencies"], 0.5),
        latency_p95_s=_pick(outcome["latencies"], 0.95),
        lost_rollouts=args.total_tasks - outcome["ok"],
        lost_spans=max(0, outcome["expected_spans"] - outcome["spans"]),
        load_average=os.getloadavg()[0],
        failures=outcome["failures"],
    )


_COLUMNS = (
    ("rollouts_per_s", "rollouts/s", "{:.1f}"),
    ("spans_per_s", "spans/s", "{:.0f}"),
    ("server_cpu_ms_per_span", "server CPU ms/span", "{:.3f}"),
    ("db_cpu_ms_per_span", "PG CPU ms/span", "{:.3f}"),
    ("db_cpu_ms_per_rollout", "PG CPU ms/rollout", "{:.2f}"),
    ("latency_p50_s", "p50 s", "{:.2f}"),
    ("latency_p95_s", "p95 s", "{:.2f}"),
)


def _print_run(r: ScaleResult) -> None:
    figures = ", ".join(f"{label} {fmt.format(getattr(r, key))}" for key, label, fmt in _COLUMNS)
    print(
        f"[M={r.servers} x{r.n_workers} workers, K={r.n_runners}{', netns' if r.netns else ''}] {r.rollouts} rollouts "
        f"in {r.wall_seconds:.1f}s: {figures}; lost rollouts {r.lost_rollouts}, lost spans {r.lost_spans} "
        f"(load average {r.load_average:.1f})",
        flush=True,
    )
    for failure in r.failures[:5]:
        print(f"    failure: {failure}", flush=True)


def _print_table(results: List[ScaleResult]) -> None:
    """Median [min-max] of each figure per M (a markdown table)."""
    print("\n| M (servers x workers) | runs | " + " | ".join(label for _, label, _ in _COLUMNS) + " | lost |")
    print("|---" * (len(_COLUMNS) + 3) + "|")
    for m in sorted({r.servers for r in results}):
        rows = [r for r in results if r.servers == m]
        cells = []
        for key, _, fmt in _COLUMNS:
            values = [getattr(r, key) for r in rows]
            cell = fmt.format(statistics.median(values))
            if len(values) > 1:
                cell += f" [{fmt.format(min(values))}-{fmt.format(max(values))}]"
            cells.append(cell)
        lost = sum(r.lost_rollouts + r.lost_spans for r in rows)
        print(f"| {m} x {rows[0].n_workers} | {len(rows)} | " + " | ".join(cells) + f" | {lost} |")


def build_scale_parser() -> argparse.ArgumentParser:
    """The full-stack workload flags plus the scale-out ones."""
    parser = build_parser()
    parser.description = plain_text(__doc__)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLOUTHUB_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="PostgreSQL database (a fresh schema is created and dropped per run).",
    )
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4], help="Values of M to measure.")
    parser.add_argument("--n-workers", type=int, default=1, help="Worker processes per server (--n-workers).")
    parser.add_argument("--netns", action="store_true", help="Runners and algorithm in network namespaces.")
    parser.add_argument(
        "--pool",
        default="pool_size=4&max_overflow=4",
        help="Pool of each server process (URL parameters): at most pool_size + max_overflow connections, plus one "
        "LISTEN connection and one for schema work -- M=4 servers then hold at most 40 of the database's "
        "max_connections.",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="Seconds allowed for one run's workload.")
    parser.add_argument("--role", choices=["orchestrator", "runner", "algorithm"], default="orchestrator")
    parser.add_argument("--worker-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return parser


_ROLE_FLAGS = {"--role", "--store-url", "--worker-id", "--result", "--servers", "--runs", "--json-out", "--netns"}


def _workload_argv(argv: Sequence[str]) -> List[str]:
    """The orchestrator's flags minus those that only concern it (passed on to the child roles)."""
    out: List[str] = []
    skip = False
    for item in argv:
        if skip and not item.startswith("--"):
            continue
        skip = False
        name = item.split("=", 1)[0]
        if name in _ROLE_FLAGS:
            skip = "=" not in item
            continue
        out.append(item)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the roles, or the sweep (exit status 1 when a rollout or a span was lost)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_scale_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING)
    if args.role == "runner":
        asyncio.run(_runner_role(args))
        return 0
    if args.role == "algorithm":
        asyncio.run(_algorithm_role(args))
        return 0
    args.workload_argv = _workload_argv(argv)
    results: List[ScaleResult] = []
    with tempfile.TemporaryDirectory(prefix="rollouthub-scale-") as workdir:
        if args.netns:
            from rollouthub.testing.netns import namespaces_unavailable_reason, network_namespaces

            reason = namespaces_unavailable_reason()
            if reason is not None:
                print(f"--netns: {reason}", file=sys.stderr)
                return 2
            with network_namespaces(2) as hosts:
                results = _sweep(args, workdir, hosts)
        else:
            results = _sweep(args, workdir, None)
    _print_table(results)
    return 1 if any(r.lost_rollouts or r.lost_spans for r in results) else 0


def _sweep(args: argparse.Namespace, workdir: str, hosts: Optional[List[Any]]) -> List[ScaleResult]:
    results: List[ScaleResult] = []
    for _ in range(args.runs):
        for servers in args.servers:
            result = run_once(args, servers, workdir, hosts)
            _print_run(result)
            results.append(result)
            if args.json_out:
                with open(args.json_out, "a") as fh:
                    fh.write(json.dumps(asdict(result)) + "\n")
    return results


if __name__ == "__main__":
    sys.exit(main())
