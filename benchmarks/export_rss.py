"""Memory bound of ``rollouthub export`` (issue 18): RSS growth while exporting a large SQLite store.

Fills a SQLite store with ``--rollouts`` finished rollouts (default 20 000; 2 000 distinct inputs so that preference
pairs exist: 10 rollouts per input), each with an LLM-call span (a ~600-character prompt, token usage, a ~100-character answer) and a reward
span, then exports every format in a fresh child process per format -- in process (the Python API, as the CLI does)
and through the store server's streaming route -- and reports the peak RSS growth over the RSS just before the
export started (sampled every 20 ms). Target: < 200 MiB.

    python benchmarks/export_rss.py                              # 20 000 rollouts, every format, both paths
    python benchmarks/export_rss.py --db /tmp/big.db --keep      # reuse/keep the filled database
    python benchmarks/export_rss.py --formats messages --paths api
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollouthub.cli import plain_text  # noqa: E402

BATCH = 500
INPUTS = 2000
TARGET_MIB = 200.0


async def fill(url: str, total: int) -> None:
    """Enqueue, claim, trace and finish ``total`` rollouts in batches of 500."""
    from rollouthub.store.sql import SqlLightningStore
    from rollouthub.types import EnqueueRolloutRequest, Span

    store = SqlLightningStore(url)
    resources = await store.add_resources({})
    done = 0
    started = time.perf_counter()
    while done < total:
        n = min(BATCH, total - done)
        requests = [
            EnqueueRolloutRequest(
                input={"question": f"Question {(done + i) % INPUTS}: " + "context " * 40},
                mode="train" if (done + i) % 5 else "val",
                resources_id=resources.resources_id,
            )
            for i in range(n)
        ]
        await store.enqueue_many_rollouts(requests)
        claimed = await store.dequeue_many_rollouts(limit=n, worker_id="bench")
        spans: List[Span] = []
        now = time.time()
        for k, rollout in enumerate(claimed):
            rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
            question = rollout.input["question"]
            spans.append(
                Span.from_attributes(
                    attributes={
                        "gen_ai.request.model": "bench-model",
                        "gen_ai.prompt.0.role": "system",
                        "gen_ai.prompt.0.content": "You answer questions briefly.",
                        "gen_ai.prompt.1.role": "user",
                        "gen_ai.prompt.1.content": question,
                        "gen_ai.completion.0.role": "assistant",
                        # Varies with the reward below: the answers to one prompt differ where their rewards do.
                        "gen_ai.completion.0.content": f"Answer {(done + k) // INPUTS % 7}: " + "words " * 15,
                        "gen_ai.response.id": f"resp-{rid}",
                        "gen_ai.usage.prompt_tokens": 150,
                        "gen_ai.usage.completion_tokens": 25,
                    },
                    rollout_id=rid,
                    attempt_id=aid,
                    sequence_id=1,
                    name="openai.chat.completion",
                    start_time=now,
                    end_time=now + 0.5,
                )
            )
            spans.append(
                Span.from_attributes(
                    # Varies between the rollouts of one input (they are INPUTS apart): preference pairs exist.
                    attributes={
                        "agentlightning.reward.0.name": "primary",
                        "agentlightning.reward.0.value": ((done + k) // INPUTS % 7) / 6,
                    },
                    rollout_id=rid,
                    attempt_id=aid,
                    sequence_id=2,
                    name="agentlightning.annotation",
                    start_time=now + 0.6,
                    end_time=now + 0.6,
                )
            )
        await store.add_many_spans(spans)
        for rollout in claimed:
            await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
        done += n
        if done % 5000 == 0 or done == total:
            print(f"  filled {done}/{total} rollouts ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    await store.close()


class PeakRss:
    """Samples a process's RSS every 20 ms in a thread; ``peak`` in bytes."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> int:
        """Stop sampling; the peak RSS in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak


def child_api(database: str, kind: str, output: str) -> None:
    """In a fresh process: import and open everything, then export ``kind`` while sampling RSS."""
    from rollouthub.export import export_async

    async def run() -> Dict[str, Any]:
        # Warm-up on a 1-rollout selection: imports and caches (e.g. the OpenAI message types) are loaded before the
        # baseline, so the growth is what the size of the store costs.
        warm_up = output + ".warm-up.jsonl"  # a file of its own: an export replaces its output when it ends
        await export_async("messages", warm_up, database=database, rollout_id_in=[await first_rollout(database)])
        os.remove(warm_up)
        baseline = psutil.Process().memory_info().rss
        sampler = PeakRss(os.getpid())
        started = time.perf_counter()
        summary = await export_async(kind, output, database=database)
        elapsed = time.perf_counter() - started
        peak = sampler.stop()
        return {"rows": summary.rows, "seconds": elapsed, "baseline": baseline, "peak": peak}

    print(json.dumps(asyncio.run(run())))


async def first_rollout(database: str) -> str:
    from rollouthub.store.sql import SqlLightningStore

    store = SqlLightningStore(f"sqlite:///{database}")
    try:
        return (await store.query_rollouts(sort_by="start_time", limit=1)).items[0].rollout_id
    finally:
        await store.close()


def run_server_export(database: str, kind: str, output: str) -> Dict[str, Any]:
    """Start ``rollouthub store`` on the database, stream ``GET /v1/agl/export`` to a file, sample the server's RSS."""
    import urllib.request

    from rollouthub.utils.server_launcher import pick_free_port

    port = pick_free_port()
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", f"sqlite:///{database}"]
    server = subprocess.Popen(
        cmd + ["--port", str(port), "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}/v1/agl"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the store did not start") from None
                time.sleep(0.1)
        rollout = asyncio.run(first_rollout(database))
        urllib.request.urlopen(f"{base}/export?format=messages&rollout_id_in={rollout}", timeout=60).read()  # warm-up
        baseline = psutil.Process(server.pid).memory_info().rss
        sampler = PeakRss(server.pid)
        started = time.perf_counter()
        rows = 0
        with urllib.request.urlopen(f"{base}/export?format={kind}", timeout=3600) as response, open(output, "wb") as f:
            for line in response:
                f.write(line)
                rows += 1
        elapsed = time.perf_counter() - started
        peak = sampler.stop()
        return {"rows": rows, "seconds": elapsed, "baseline": baseline, "peak": peak}
    finally:
        server.terminate()
        server.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--db", default=None, help="SQLite file (filled when missing; default: a temporary file)")
    parser.add_argument("--keep", action="store_true", help="Keep the database")
    parser.add_argument("--formats", nargs="+", default=["messages", "triplets", "preferences", "rewards"])
    parser.add_argument("--paths", nargs="+", default=["api", "server"], choices=["api", "server"])
    parser.add_argument("--child", nargs=3, metavar=("DB", "FORMAT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_api(*args.child)
        return 0
    directory = tempfile.mkdtemp(prefix="rollouthub-export-rss-")
    database = os.path.abspath(args.db or os.path.join(directory, "export.db"))
    if not os.path.exists(database):
        print(f"Filling {database} with {args.rollouts} rollouts...", file=sys.stderr)
        asyncio.run(fill(f"sqlite:///{database}", args.rollouts))
    print(f"Database: {database} ({os.path.getsize(database) / 2**20:.0f} MiB)")
    results = []
    for kind in args.formats:
        out = os.path.join(directory, f"{kind}.jsonl")
        for path in args.paths:
            if path == "api":
                child = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--child", database, kind, out],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                result = json.loads(child.stdout.strip().splitlines()[-1])
            else:
                result = run_server_export(database, kind, out)
            growth = (result["peak"] - result["baseline"]) / 2**20
            results.append((kind, path, result, growth))
            print(
                f"{kind:<12} {path:<7} rows {result['rows']:>7}  {result['seconds']:6.1f} s  "
                f"RSS before {result['baseline'] / 2**20:6.1f} MiB  peak {result['peak'] / 2**20:6.1f} MiB  "
                f"growth {growth:6.1f} MiB  {'OK' if growth < TARGET_MIB else 'OVER TARGET'}",
                flush=True,
            )
            os.remove(out)
    if not args.keep and not args.db:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(database + suffix):
                os.remove(database + suffix)
        os.rmdir(directory)
    worst = max(growth for *_, growth in results)
    print(f"Largest RSS growth: {worst:.1f} MiB (target < {TARGET_MIB:.0f} MiB)")
    return 0 if worst < TARGET_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
