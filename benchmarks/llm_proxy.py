"""The LLM proxy's cost per call: proxy CPU, store CPU, added latency and calls/s against a mock upstream.

Three processes are started per code tree measured: a ``rollouthub store`` server (SQLite in a temporary folder), the mock
OpenAI upstream (``rollouthub.testing.MockOpenAIServer``) and an ``LLMProxy`` (default ``mp`` launch mode, a
``LightningStoreClient`` as its store). For each concurrency of ``--concurrency`` (default 1 16 64) and each mode
(non-streaming, streaming) the driver sends ``--calls`` chat completions through the proxy (one rollout attempt per
concurrent worker) and the same number directly to the mock, and reports per call:

* proxy CPU: user + system time of the proxy process and its children (from /proc) over the proxied calls;
* store CPU: the same for the store server;
* added latency p50 / p99: proxied call latency percentile minus the direct call's percentile;
* calls/s through the proxy.

After each run the spans of the proxied calls are counted (3 per call) so a faster proxy cannot lose spans.

``--base DIR`` runs the same measurements with the proxy of another checkout (e.g. a copy of main) in the same run,
alternating with this tree (store server and mock still from this tree), and prints both tables and their ratios; with
``--rounds N`` the trees alternate N times and the medians are reported. ``--proxy-workers N`` serves the proxy with
N processes behind one port (``LLMProxy(num_workers=N)``; its CPU figure is then theirs together). Examples::

    python benchmarks/llm_proxy.py --calls 400
    python benchmarks/llm_proxy.py --calls 400 --base /tmp/proxy-base --json-out proxy.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(SCRIPT))
SPANS_PER_CALL = 3


# ---------------------------------------------------------------------------------------------------------------------
# Child roles
# ---------------------------------------------------------------------------------------------------------------------


def _announce(payload: Dict[str, Any]) -> None:
    """Tell the driver how to reach this role (one JSON line on stdout)."""
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _wait_for_stdin_close() -> None:
    """Block until the driver closes our stdin (its way of asking us to stop)."""
    sys.stdin.read()


def role_mock() -> None:
    """Serve the mock upstream until stdin closes."""
    from rollouthub.testing import MockOpenAIServer

    server = MockOpenAIServer()
    server.start()
    _announce({"endpoint": server.endpoint, "pid": os.getpid()})
    _wait_for_stdin_close()
    server.stop()


def role_proxy(store_url: str, mock_base_url: str, num_workers: int = 1) -> None:
    """Serve the LLM proxy (``mp`` mode, the default, with ``num_workers`` server processes behind one port) in front
    of the mock until stdin closes."""
    from rollouthub.llm_proxy import LLMProxy
    from rollouthub.store.client import LightningStoreClient

    async def main() -> None:
        client = LightningStoreClient(store_url)
        model_list = [
            {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/upstream", "api_base": mock_base_url}}
        ]
        proxy = LLMProxy(
            host="127.0.0.1",
            store=client,  # type: ignore[arg-type]
            model_list=model_list,
            num_workers=num_workers,
        )
        await proxy.start()
        _announce({"endpoint": proxy.endpoint, "pid": os.getpid()})
        await asyncio.get_running_loop().run_in_executor(None, _wait_for_stdin_close)
        await proxy.stop()
        await client.close()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------------


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (and their reaped children)."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class Child:
    """A role subprocess run with ``PYTHONPATH=tree``; it announces its endpoint on stdout and stops at stdin EOF."""

    def __init__(self, tree: str, role: str, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=tree, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "--role", role, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=tree,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"role {role} exited before announcing itself")
        info = json.loads(line)
        self.endpoint: str = info["endpoint"]
        self.pid: int = info["pid"]

    def close(self) -> None:
        """Close stdin and wait for the role to exit (kill it after 20 s)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Store:
    """``rollouthub store --backend sqlite:///<tmp>/bench.db`` run with ``PYTHONPATH=tree``."""

    def __init__(self, tree: str) -> None:
        from rollouthub.testing.store_process import store_is_healthy
        from rollouthub.utils.server_launcher import pick_free_port

        self.workdir = tempfile.TemporaryDirectory(prefix="bench-llm-proxy-")
        port = pick_free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        env = dict(os.environ, PYTHONPATH=tree)
        env.pop("ROLLOUTHUB_API_TOKEN", None)
        command = [sys.executable, "-m", "rollouthub.cli", "store", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--backend", f"sqlite:///{self.workdir.name}/bench.db", "--log-level", "WARNING"]
        self.process = subprocess.Popen(command, cwd=self.workdir.name, env=env, stdout=subprocess.DEVNULL)
        self.pid = self.process.pid
        deadline = time.monotonic() + 60
        while not store_is_healthy(self.endpoint, timeout=0.5):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the store server did not start")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.workdir.cleanup()


@dataclass
class Row:
    """One measurement: a tree, a concurrency and a mode."""

    tree: str
    concurrency: int
    stream: bool
    calls: int
    proxy_cpu_ms: float
    store_cpu_ms: float
    direct_p50_ms: float
    direct_p99_ms: float
    proxy_p50_ms: float
    proxy_p99_ms: float
    added_p50_ms: float
    added_p99_ms: float
    calls_per_s: float
    spans_ok: bool


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


async def drive(urls: Sequence[str], n_calls: int, concurrency: int, stream: bool) -> Tuple[List[float], float]:
    """Send ``n_calls`` chat completions, worker ``i`` to ``urls[i % len(urls)]``; latencies (s) and wall time."""
    import aiohttp

    latencies: List[float] = []
    counter = iter(range(n_calls))
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(index: int) -> None:
            url = urls[index % len(urls)]
            for i in counter:
                body = {
                    "model": "policy",
                    "messages": [{"role": "user", "content": f"question {i}: what is {i} + {i}?"}],
                    "max_tokens": 16,
                    "stream": stream,
                }
                start = time.perf_counter()
                async with session.post(url, json=body) as response:
                    if stream:
                        async for _ in response.content:
                            pass
                    else:
                        await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"call failed with {response.status}: {await response.text()}")
                latencies.append(time.perf_counter() - start)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        wall = time.perf_counter() - started
    return latencies, wall


async def measure(
    tree_name: str,
    tree: str,
    concurrencies: Sequence[int],
    n_calls: int,
    modes: Sequence[bool],
    proxy_workers: int = 1,
) -> List[Row]:
    """Start store, mock and proxy (``proxy_workers`` server processes) from ``tree`` and measure every
    (concurrency, mode)."""
    from rollouthub.store.client import LightningStoreClient

    store = Store(REPO)  # the store server and the mock always come from this tree: only the proxy differs
    mock = Child(REPO, "mock")
    proxy_args = ["--store-url", store.endpoint, "--mock-url", mock.endpoint + "/v1"]
    proxy = Child(tree, "proxy", *proxy_args, "--proxy-workers", str(proxy_workers))
    client = LightningStoreClient(store.endpoint)
    rows: List[Row] = []
    try:
        direct_url = mock.endpoint + "/v1/chat/completions"
        # warm-up: a few calls both ways
        warm = await client.start_rollout({"task": "warm"})
        warm_url = f"{proxy.endpoint}/rollout/{warm.rollout_id}/attempt/{warm.attempt.attempt_id}/v1/chat/completions"
        await drive([warm_url], 20, 4, False)
        await drive([direct_url], 20, 4, False)
        for concurrency in concurrencies:
            for stream in modes:
                direct, _ = await drive([direct_url], n_calls, concurrency, stream)
                attempts = [await client.start_rollout({"task": "bench"}) for _ in range(concurrency)]
                urls = [
                    f"{proxy.endpoint}/rollout/{a.rollout_id}/attempt/{a.attempt.attempt_id}/v1/chat/completions"
                    for a in attempts
                ]
                proxy_cpu0, store_cpu0 = tree_cpu_seconds(proxy.pid), tree_cpu_seconds(store.pid)
                proxied, wall = await drive(urls, n_calls, concurrency, stream)
                proxy_cpu = tree_cpu_seconds(proxy.pid) - proxy_cpu0
                spans = 0
                deadline = time.monotonic() + 30
                while True:  # spans may land just after the answer; wait on the count, bounded
                    spans = sum([len(list(await client.query_spans(a.rollout_id))) for a in attempts])
                    if spans >= SPANS_PER_CALL * n_calls or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.05)
                store_cpu = tree_cpu_seconds(store.pid) - store_cpu0
                row = Row(
                    tree=tree_name,
                    concurrency=concurrency,
                    stream=stream,
                    calls=n_calls,
                    proxy_cpu_ms=1000 * proxy_cpu / n_calls,
                    store_cpu_ms=1000 * store_cpu / n_calls,
                    direct_p50_ms=1000 * percentile(direct, 0.5),
                    direct_p99_ms=1000 * percentile(direct, 0.99),
                    proxy_p50_ms=1000 * percentile(proxied, 0.5),
                    proxy_p99_ms=1000 * percentile(proxied, 0.99),
                    added_p50_ms=1000 * (percentile(proxied, 0.5) - percentile(direct, 0.5)),
                    added_p99_ms=1000 * (percentile(proxied, 0.99) - percentile(direct, 0.99)),
                    calls_per_s=n_calls / wall,
                    spans_ok=spans == SPANS_PER_CALL * n_calls,
                )
                rows.append(row)
                print_rows([row], header=False)
    finally:
        await client.close()
        proxy.close()
        mock.close()
        store.close()
    return rows


HEADER = (
    f"{'tree':<6} {'conc':>4} {'stream':>6} {'calls':>5} {'proxyCPU':>9} {'storeCPU':>9} {'direct50':>9} "
    f"{'added50':>8} {'added99':>8} {'calls/s':>8} spans"
)


def print_rows(rows: Sequence[Row], header: bool = True) -> None:
    """Print rows as a plain-text table (CPU and latency in ms per call)."""
    if header:
        print(HEADER)
    for r in rows:
        print(
            f"{r.tree:<6} {r.concurrency:>4} {str(r.stream):>6} {r.calls:>5} {r.proxy_cpu_ms:>9.3f} "
            f"{r.store_cpu_ms:>9.3f} {r.direct_p50_ms:>9.3f} {r.added_p50_ms:>8.3f} {r.added_p99_ms:>8.3f} "
            f"{r.calls_per_s:>8.0f} {'ok' if r.spans_ok else 'LOST'}",
            flush=True,
        )


def median_rows(runs: Sequence[Row]) -> List[Row]:
    """One row per (tree, concurrency, mode): the median of every figure over the rounds."""
    groups: Dict[Tuple[str, int, bool], List[Row]] = {}
    for r in runs:
        groups.setdefault((r.tree, r.concurrency, r.stream), []).append(r)
    rows = []
    for (tree, concurrency, stream), group in groups.items():
        figures = {
            name: statistics.median(getattr(r, name) for r in group)
            for name in Row.__dataclass_fields__
            if name not in ("tree", "concurrency", "stream", "calls", "spans_ok")
        }
        rows.append(
            Row(
                tree=tree,
                concurrency=concurrency,
                stream=stream,
                calls=group[0].calls,
                spans_ok=all(r.spans_ok for r in group),
                **figures,
            )
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    """The command line (plain-text help)."""
    from rollouthub.cli import plain_text

    p = argparse.ArgumentParser(description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=400, help="calls per (concurrency, mode) and path (default 400)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64], help="concurrent callers (1 16 64)")
    p.add_argument("--mode", choices=["plain", "stream", "both"], default="both", help="non-streaming, streaming")
    p.add_argument("--rounds", type=int, default=1, help="rounds, alternating the trees; medians reported (1)")
    p.add_argument("--base", default=None, help="another checkout to measure in the same run (e.g. main)")
    p.add_argument("--json-out", default=None, help="append the rows as JSON lines to this file")
    p.add_argument(
        "--proxy-workers",
        type=int,
        default=1,
        help="proxy server processes behind one port (LLMProxy num_workers; CPU counts all of them) (1)",
    )
    p.add_argument("--role", choices=["mock", "proxy"], default=None, help=argparse.SUPPRESS)
    p.add_argument("--store-url", default="", help=argparse.SUPPRESS)
    p.add_argument("--mock-url", default="", help=argparse.SUPPRESS)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark; exit status 1 when spans were lost."""
    args = build_parser().parse_args(argv)
    if args.role == "mock":
        role_mock()
        return 0
    if args.role == "proxy":
        role_proxy(args.store_url, args.mock_url, args.proxy_workers)
        return 0
    modes = {"plain": [False], "stream": [True], "both": [False, True]}[args.mode]
    trees = [("this", REPO)] + ([("base", os.path.abspath(args.base))] if args.base else [])
    print(HEADER)
    runs: List[Row] = []
    for _ in range(args.rounds):  # trees alternate round by round, so background load hits both alike
        for name, tree in trees:
            runs += asyncio.run(measure(name, tree, args.concurrency, args.calls, modes, args.proxy_workers))
    rows = median_rows(runs)
    print(f"\nmedian of {args.rounds} round(s); ms per call; added = proxied minus direct percentile")
    print_rows(rows)
    if args.base:
        print("\nratio base / this (higher = this tree better)")
        for mine in (r for r in rows if r.tree == "this"):
            base = next(
                r for r in rows if r.tree == "base" and (r.concurrency, r.stream) == (mine.concurrency, mine.stream)
            )
            print(
                f"c={mine.concurrency:<3} stream={str(mine.stream):<5} proxyCPU {base.proxy_cpu_ms / mine.proxy_cpu_ms:.2f}x"
                f"  storeCPU {base.store_cpu_ms / mine.store_cpu_ms:.2f}x"
                f"  added50 {base.added_p50_ms / max(mine.added_p50_ms, 1e-6):.2f}x"
                f"  calls/s {mine.calls_per_s / base.calls_per_s:.2f}x"
            )
    if args.json_out:
        with open(args.json_out, "a", encoding="utf-8") as handle:
            for r in runs:
                handle.write(json.dumps(asdict(r)) + "\n")
    return 0 if all(r.spans_ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
