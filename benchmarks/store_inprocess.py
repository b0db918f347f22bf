"""In-process throughput of the core store operations.

Measures, for one backend, the ops/s of: enqueue, dequeue, add_span (single), add_many_spans (batched),
update_attempt, query_spans, and the full enqueue -> dequeue -> update_attempt(succeeded) cycle. Each workload runs
``--runs`` times on a fresh store; min / median / max ops/s over the runs are printed.

    python benchmarks/store_inprocess.py --backend memory
    python benchmarks/store_inprocess.py --backend sqlite --runs 3
    ROLLOUTHUB_BENCH_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        python benchmarks/store_inprocess.py --backend postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Dict, List

from rollouthub.cli import plain_text
from rollouthub.store.base import LightningStore
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import Span, TraceStatus

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@asynccontextmanager
async def open_store(backend: str) -> AsyncIterator[LightningStore]:
    """A fresh store of the requested backend, cleaned up afterwards."""
    if backend == "memory":
        yield InMemoryLightningStore(scan_debounce_seconds=10.0)
        return
    from rollouthub.store.sql import SqlLightningStore  # type: ignore[import-not-found]

    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            store = SqlLightningStore(f"sqlite+aiosqlite:///{tmp}/bench.db")
            try:
                await store.initialize()
                yield store
            finally:
                await store.close()
        return
    if backend == "postgres":
        url = os.environ.get("ROLLOUTHUB_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
        schema = f"rh_bench_{uuid.uuid4().hex[:10]}"  # a fresh, empty schema per run (dropped afterwards)
        store = SqlLightningStore(url, schema=schema)
        try:
            await store.initialize()
            yield store
        finally:
            await store.close()
            await _drop_postgres_schema(url, schema)
        return
    raise SystemExit(f"unknown backend {backend!r} (expected memory, sqlite or postgres)")


async def _drop_postgres_schema(url: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def make_span(rollout_id: str, attempt_id: str, seq: int, payload: str) -> Span:
    """A ~1 KB span."""
    return Span.from_attributes(
        attributes={"payload": payload, "index": seq, "kind": "bench"},
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=seq,
        name=f"span-{seq}",
        start_time=time.time(),
        end_time=time.time(),
        status=TraceStatus(status_code="OK"),
    )


Workload = Callable[[LightningStore, int], Awaitable[int]]


async def w_enqueue(store: LightningStore, n: int) -> int:
    for i in range(n):
        await store.enqueue_rollout({"task": i})
    return n


async def w_dequeue(store: LightningStore, n: int) -> int:
    for i in range(n):
        await store.enqueue_rollout({"task": i})
    start = time.perf_counter()
    for _ in range(n):
        assert await store.dequeue_rollout(worker_id="bench") is not None
    return -int((time.perf_counter() - start) * 1e9)  # negative = measured inside


async def w_add_span(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    payload = "x" * 900
    start = time.perf_counter()
    for i in range(n):
        await store.add_span(make_span(rollout.rollout_id, rollout.attempt.attempt_id, i + 1, payload))
    return -int((time.perf_counter() - start) * 1e9)


async def w_add_many_spans(store: LightningStore, n: int, batch: int = 500) -> int:
    rollouts = [await store.start_rollout({"task": i}) for i in range(max(1, n // batch))]
    payload = "x" * 900
    spans_by_batch: List[List[Span]] = []
    seq = 0
    for b in range(n // batch):
        r = rollouts[b % len(rollouts)]
        spans_by_batch.append(
            [make_span(r.rollout_id, r.attempt.attempt_id, seq + k + 1, payload) for k in range(batch)]
        )
        seq += batch
    start = time.perf_counter()
    for spans in spans_by_batch:
        await store.add_many_spans(spans)
    return -int((time.perf_counter() - start) * 1e9)


async def w_update_attempt(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    start = time.perf_counter()
    for i in range(n):
        await store.update_attempt(rollout.rollout_id, "latest", metadata={"i": i}, last_heartbeat_time=time.time())
    return -int((time.perf_counter() - start) * 1e9)


async def w_query_spans(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    payload = "x" * 900
    await store.add_many_spans(
        [make_span(rollout.rollout_id, rollout.attempt.attempt_id, i + 1, payload) for i in range(50)]
    )
    start = time.perf_counter()
    for _ in range(n):
        result = await store.query_spans(rollout.rollout_id, "latest", limit=20)
        assert len(result) == 20
    return -int((time.perf_counter() - start) * 1e9)


async def w_cycle(store: LightningStore, n: int) -> int:
    for i in range(n):
        await store.enqueue_rollout({"task": i})
        claimed = await store.dequeue_rollout(worker_id="bench")
        assert claimed is not None
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    return n


WORKLOADS: Dict[str, tuple[Workload, int]] = {
    "enqueue": (w_enqueue, 2000),
    "dequeue": (w_dequeue, 2000),
    "add_span": (w_add_span, 2000),
    "add_many_spans(batch=500)": (w_add_many_spans, 20000),
    "update_attempt": (w_update_attempt, 2000),
    "query_spans(limit=20)": (w_query_spans, 1000),
    "cycle(enqueue+dequeue+update)": (w_cycle, 1000),
}


async def run_one(backend: str, workload: Workload, n: int) -> float:
    """Run a workload on a fresh store and return ops/s."""
    async with open_store(backend) as store:
        start = time.perf_counter()
        result = await workload(store, n)
        elapsed = time.perf_counter() - start
        if result < 0:  # the workload timed its own measured section (setup excluded)
            elapsed = -result / 1e9
        return n / elapsed


async def main_async(args: argparse.Namespace) -> Dict[str, Dict[str, float]]:
    report: Dict[str, Dict[str, float]] = {}
    selected = [w for w in WORKLOADS if not args.only or any(o in w for o in args.only)]
    for name in selected:
        workload, n = WORKLOADS[name]
        n = max(1, int(n * args.scale))
        rates = []
        for run in range(args.runs):
            rates.append(await run_one(args.backend, workload, n))
            print(f"  {name:32s} run {run + 1}/{args.runs}: {rates[-1]:10.0f} ops/s", file=sys.stderr, flush=True)
        report[name] = {"min": min(rates), "median": statistics.median(rates), "max": max(rates), "n": n}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every workload size")
    parser.add_argument("--only", nargs="*", help="substrings of workload names to run")
    parser.add_argument("--json", help="also write the report as JSON to this file")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: time with this process' CPU time (time.process_time) -- comparable on a shared, loaded machine; "
        "meaningless for postgres (the server's work is not counted)",
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        time.perf_counter = time.process_time  # type: ignore[assignment]
    report = asyncio.run(main_async(args))
    print(f"\nbackend={args.backend} runs={args.runs} clock={args.clock}  (ops/s: min / median / max)")
    for name, row in report.items():
        print(f"  {name:32s} {row['min']:10.0f} {row['median']:10.0f} {row['max']:10.0f}   (n={int(row['n'])})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"backend": args.backend, "runs": args.runs, "results": report}, fh, indent=2)


if __name__ == "__main__":
    main()
