"""HTTP micro benchmarks of the store server (the reference's micro workloads, targets of issue 4).

Starts ``rollouthub store`` as a subprocess (memory and/or SQLite backend) and a bare Starlette JSON echo app served
by uvicorn the same way (same launcher, same uvicorn settings) as the reference point, then drives three workloads
from N client processes (raw ``aiohttp``, keep-alive, one request in flight per client):

* ``update_worker``: ``POST /workers/Worker-<i mod 1024>`` with a ``system_snapshot()`` payload;
* ``dequeue_empty``: ``POST /queues/rollouts/dequeue`` on an empty queue + ``update_worker``;
* ``rollout``: ``POST /rollouts`` + 4 × ``POST /spans`` (1 random attribute each) + ``POST .../attempts/<id>``
  with ``status=succeeded``.

Reported per workload: throughput, client latency p50/p95/p99 of a whole operation, the server process's CPU time per
operation (``utime + stime`` deltas from ``/proc/<pid>/stat``; for multi-worker servers summed over the process tree),
and the ratio to the echo app's CPU per request. A prober in the parent measures ``GET /v1/agl/health`` latency every
50 ms while the workloads run. Idle RSS is read after start-up.

Usage::

    python benchmarks/http_micro.py --backend memory --backend sqlite --clients 4 --ops 2000
    python benchmarks/http_micro.py --backend memory --backend sqlite --clients 2 --ops 2000 \
        --compare-with /tmp/base --rounds 6

``--compare-with DIR`` instead runs the server of another checkout of rollouthub (``DIR`` on ``PYTHONPATH``, e.g. a
``git worktree add /tmp/base <commit>``) and this one alternately, ``--rounds`` times per backend (the order flips every
round), and prints the median server CPU per operation of both: an A/B measured in one run, on one machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

TARGETS = {"update_worker": 3.0, "dequeue_empty": 6.0, "rollout": 18.0}
HEALTH_P95_TARGET_MS = 25.0
IDLE_RSS_TARGET_MB = 100.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------------------------
# Process helpers
# ---------------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> List[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def process_tree(pid: int) -> List[int]:
    """``pid`` and all its descendants."""
    result, stack = [], [pid]
    while stack:
        current = stack.pop()
        result.append(current)
        stack.extend(_children(current))
    return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its descendants (live processes only)."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        except OSError:
            continue
    return total / _CLK_TCK


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` and its descendants, in MiB."""
    total = 0.0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def wait_healthy(url: str, timeout: float = 30.0) -> float:
    """Poll ``url`` until it answers 200; return the elapsed seconds."""
    start = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{url} did not become healthy within {timeout} s")
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------------------------------
# The echo reference server
# ---------------------------------------------------------------------------------------------------------------------


def serve_echo(port: int) -> None:
    """Serve a bare Starlette JSON echo app with the same launcher/uvicorn settings as the store server."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from rollouthub.utils.server_launcher import PythonServerLauncher, PythonServerLauncherArgs

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"]), Route("/health", health)])
    launcher = PythonServerLauncher(
        app,
        PythonServerLauncherArgs(
            host="127.0.0.1", port=port, launch_mode="asyncio", healthcheck_url="/health", log_level=30
        ),
    )
    try:
        asyncio.run(launcher.run_forever())
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------------------------------------------------------------
# Client workloads (run in forked processes)
# ---------------------------------------------------------------------------------------------------------------------


def _span(rid: str, aid: str, seq: int) -> Dict[str, Any]:
    span_id = f"{random.getrandbits(64):016x}"
    trace_id = f"{random.getrandbits(128):032x}"
    return {
        "rollout_id": rid,
        "attempt_id": aid,
        "sequence_id": seq,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": None,
        "name": f"span-{seq}",
        "status": {"status_code": "OK", "description": None},
        "attributes": {f"attr-{random.randint(0, 9)}": "x" * random.randint(5, 50)},
        "events": [],
        "links": [],
        "start_time": time.time(),
        "end_time": time.time(),
        "context": {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}},
        "parent": None,
        "resource": {"attributes": {}, "schema_url": ""},
    }


async def _client_main(base: str, workload: str, client_index: int, n_ops: int) -> List[float]:
    import aiohttp

    from rollouthub.utils.system_snapshot import system_snapshot

    api = base + "/v1/agl"
    snapshot = system_snapshot()
    latencies: List[float] = []
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(url: str, payload: Any, expect: int = 200) -> Any:
            async with session.post(url, json=payload) as response:
                body = await response.json()
                if response.status != expect:
                    raise RuntimeError(f"{url}: HTTP {response.status}: {body}")
                return body

        for i in range(n_ops):
            op_id = client_index * n_ops + i
            worker_id = f"Worker-{op_id % 1024}"
            t0 = time.perf_counter()
            if workload == "echo":
                await post(base + "/echo", {"heartbeat_stats": snapshot})
            elif workload == "update_worker":
                await post(f"{api}/workers/{worker_id}", {"heartbeat_stats": snapshot})
            elif workload == "dequeue_empty":
                items = await post(f"{api}/queues/rollouts/dequeue", {"limit": 1, "worker_id": worker_id})
                if items:
                    raise RuntimeError("queue is not empty")
                await post(f"{api}/workers/{worker_id}", {"heartbeat_stats": snapshot})
            elif workload == "rollout":
                started = await post(f"{api}/rollouts", {"input": {"task": op_id}}, expect=201)
                rid, aid = started["rollout_id"], started["attempt"]["attempt_id"]
                for k in range(4):
                    await post(f"{api}/spans", _span(rid, aid, op_id * 4 + k), expect=201)
                await post(f"{api}/rollouts/{rid}/attempts/{aid}", {"status": "succeeded"})
            else:
                raise ValueError(workload)
            latencies.append(time.perf_counter() - t0)
    return latencies


def _client_entry(args: Tuple[str, str, int, int]) -> List[float]:
    return asyncio.run(_client_main(*args))


# ---------------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------------


class HealthProber:
    """Probe a health URL every ``interval`` seconds in a thread and keep the latencies."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self.url = url
        self.interval = interval
        self.samples: List[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.samples.append(time.perf_counter() - t0)
            except OSError:
                self.failures += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> HealthProber:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


def run_workload(base: str, pid: int, workload: str, clients: int, ops: int) -> Dict[str, Any]:
    """Run ``ops`` operations split over ``clients`` processes; measure throughput, latency and server CPU."""
    per_client = max(1, ops // clients)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(clients) as pool:
        cpu0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        results = pool.map(_client_entry, [(base, workload, i, per_client) for i in range(clients)])
        elapsed = time.perf_counter() - t0
        cpu1 = cpu_seconds(pid)
    latencies = [x for chunk in results for x in chunk]
    n = len(latencies)
    return {
        "workload": workload,
        "ops": n,
        "seconds": elapsed,
        "throughput": n / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p95_ms": percentile(latencies, 0.95) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "server_cpu_ms_per_op": (cpu1 - cpu0) / n * 1000,
    }


def start_store(
    backend: str, port: int, n_workers: int, workdir: str, pythonpath: Optional[str] = None
) -> subprocess.Popen[bytes]:
    """Start ``rollouthub store`` as a subprocess (of the checkout at ``pythonpath`` when given)."""
    cmd = [
        sys.executable,
        "-m",
        "rollouthub.cli",
        "store",
        "--backend",
        backend,
        "--port",
        str(port),
        "--n-workers",
        str(n_workers),
        "--log-level",
        "WARNING",
    ]
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT, then wait (kill after 15 s)."""
    import signal

    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def measure_echo(clients: int, ops: int) -> Dict[str, Any]:
    """CPU per request of the bare Starlette echo app (the reference point)."""
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    process = ctx.Process(target=serve_echo, args=(port,), daemon=True)
    process.start()
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health")
        assert process.pid is not None
        run_workload(f"http://127.0.0.1:{port}", process.pid, "echo", clients, min(ops, 200))  # warm-up
        return run_workload(f"http://127.0.0.1:{port}", process.pid, "echo", clients, ops)
    finally:
        if process.pid is not None:
            os.kill(process.pid, 2)
        process.join(10)
        if process.is_alive():
            process.kill()


def bench_backend(
    label: str,
    backend: str,
    clients: int,
    ops: int,
    n_workers: int,
    echo_cpu_ms: float,
    pythonpath: Optional[str] = None,
) -> Dict[str, Any]:
    """Benchmark one backend (the server of the checkout at ``pythonpath`` when given); returns a report dict."""
    workdir = tempfile.mkdtemp(prefix="rollouthub-bench-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_store(backend, port, n_workers, workdir, pythonpath)
    report: Dict[str, Any] = {"backend": label, "workloads": []}
    try:
        report["startup_s"] = wait_healthy(base + "/v1/agl/health")
        time.sleep(1.0)
        report["idle_rss_mb"] = rss_mb(process.pid)
        run_workload(base, process.pid, "update_worker", clients, min(200, ops))  # warm-up
        with HealthProber(base + "/v1/agl/health") as prober:
            for workload, scale in (("update_worker", 1), ("dequeue_empty", 1), ("rollout", 4)):
                result = run_workload(base, process.pid, workload, clients, max(clients, ops // scale))
                result["ratio_vs_echo"] = result["server_cpu_ms_per_op"] / echo_cpu_ms
                result["target_ratio"] = TARGETS[workload]
                report["workloads"].append(result)
        report["health_p50_ms"] = percentile(prober.samples, 0.5) * 1000
        report["health_p95_ms"] = percentile(prober.samples, 0.95) * 1000
        report["health_probes"] = len(prober.samples)
        report["health_failures"] = prober.failures
    finally:
        stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def _fmt(report: Dict[str, Any], echo: Dict[str, Any]) -> str:
    lines = [
        f"== backend {report['backend']}: start-up {report['startup_s']:.2f} s, idle RSS {report['idle_rss_mb']:.1f} MiB "
        f"(target <= {IDLE_RSS_TARGET_MB:.0f}: {'OK' if report['idle_rss_mb'] <= IDLE_RSS_TARGET_MB else 'MISSED'})",
        f"{'workload':<15}{'ops':>7}{'ops/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'cpu ms/op':>11}"
        f"{'x echo':>8}{'target':>8}  verdict",
    ]
    for w in report["workloads"]:
        ok = w["ratio_vs_echo"] <= w["target_ratio"]
        lines.append(
            f"{w['workload']:<15}{w['ops']:>7}{w['throughput']:>9.1f}{w['p50_ms']:>9.2f}{w['p95_ms']:>9.2f}"
            f"{w['p99_ms']:>9.2f}{w['server_cpu_ms_per_op']:>11.3f}{w['ratio_vs_echo']:>8.2f}"
            f"{w['target_ratio']:>8.1f}  {'OK' if ok else 'MISSED'}"
        )
    ok = report["health_p95_ms"] <= HEALTH_P95_TARGET_MS
    lines.append(
        f"health probe under load: p50 {report['health_p50_ms']:.2f} ms, p95 {report['health_p95_ms']:.2f} ms "
        f"({report['health_probes']} probes, {report['health_failures']} failures; target p95 <= "
        f"{HEALTH_P95_TARGET_MS:.0f} ms: {'OK' if ok else 'MISSED'})"
    )
    return "\n".join(lines)


def compare_checkouts(
    backends: Sequence[str], clients: int, ops: int, n_workers: int, rounds: int, other: str
) -> Dict[Tuple[str, str, str], List[float]]:
    """Server CPU per operation of the checkout at ``other`` (A) and of this one (B): interleaved rounds, medians."""
    import statistics

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkouts = {"A": os.path.abspath(other), "B": here}
    samples: Dict[Tuple[str, str, str], List[float]] = {}
    for round_index in range(rounds):
        for backend in backends:
            url, label = ("sqlite:///./bench.db", "sqlite") if backend == "sqlite" else (backend, backend)
            for side in ("A", "B") if round_index % 2 == 0 else ("B", "A"):
                workers = n_workers if backend != "memory" else 1
                report = bench_backend(label, url, clients, ops, workers, echo_cpu_ms=1.0, pythonpath=checkouts[side])
                for w in report["workloads"]:
                    samples.setdefault((label, w["workload"], side), []).append(w["server_cpu_ms_per_op"])
        print(f"# round {round_index + 1}/{rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"# A = {checkouts['A']}, B = {checkouts['B']}")
    print(f"{'backend':<9}{'workload':<15}{'A':>9}{'B':>9}{'B/A':>9}   (server CPU ms/op, medians of {rounds})")
    for (label, workload, side), values in samples.items():
        if side != "A":
            continue
        before = statistics.median(values)
        after = statistics.median(samples[(label, workload, "B")])
        print(f"{label:<9}{workload:<15}{before:>9.3f}{after:>9.3f}{100 * (after / before - 1):>+8.1f}%")
    return samples


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point."""
    from rollouthub.cli import plain_text

    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        action="append",
        default=None,
        help="'memory', 'sqlite' (a fresh SQLite file) or a SQL URL; repeatable (default: memory and sqlite)",
    )
    parser.add_argument("--clients", type=int, default=4, help="client processes (default 4)")
    parser.add_argument("--ops", type=int, default=2000, help="operations per workload (rollout uses ops/4)")
    parser.add_argument("--n-workers", type=int, default=1, help="server worker processes (SQL backends only)")
    parser.add_argument("--json", default=None, help="also write the raw results to this JSON file")
    parser.add_argument(
        "--compare-with",
        default=None,
        metavar="DIR",
        help="instead: A/B against the server of the rollouthub checkout in DIR (interleaved runs, medians)",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds of --compare-with (default 6)")
    parser.add_argument("--serve-echo", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo is not None:
        serve_echo(args.serve_echo)
        return 0
    backends = args.backend or ["memory", "sqlite"]
    print(f"# clients={args.clients} ops={args.ops} n_workers={args.n_workers} cpus={os.cpu_count()}")
    print(f"# load average at start: {os.getloadavg()}")
    if args.compare_with:
        samples = compare_checkouts(backends, args.clients, args.ops, args.n_workers, args.rounds, args.compare_with)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump({"|".join(key): values for key, values in samples.items()}, handle, indent=2)
        return 0
    reports = []
    echoes = []
    for backend in backends:
        # The reference point is re-measured right before each backend, so that both see the same machine load.
        echo = measure_echo(args.clients, args.ops)
        echoes.append(echo)
        echo_cpu = echo["server_cpu_ms_per_op"]
        print(
            f"== echo reference (bare Starlette + uvicorn, same launcher): {echo['throughput']:.1f} req/s, "
            f"p50 {echo['p50_ms']:.2f} ms, CPU {echo_cpu:.3f} ms/request"
        )
        if backend == "sqlite":
            url = "sqlite:///./bench.db"
            label = "sqlite"
        else:
            url, label = backend, backend
        n_workers = args.n_workers if backend != "memory" else 1
        report = bench_backend(label, url, args.clients, args.ops, n_workers, echo_cpu)
        reports.append(report)
        print(_fmt(report, echo))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"echo": echoes, "backends": reports}, handle, indent=2)
    print(f"# load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
