"""How far the PostgreSQL store's cycle is from what its three commits cost on this machine.

The in-process cycle (``store_inprocess.py --only cycle``: enqueue, dequeue, update_attempt) is three acknowledged
writes, hence three commits, each waiting for a WAL flush. This script measures, alternately in one run (the machine
is shared and noisy: only figures of one run compare):

* ``floor``: plain asyncpg on one connection, three committed one-row statements per cycle shaped like the cycle's
  (insert a rollout with a JSON input; insert an attempt and update the rollout; update both and upsert a worker) --
  what three durable round trips cost, with no store at all;
* ``floor, synchronous_commit=off``: the same without waiting for the WAL flush -- the flush's share of the floor
  (for reference only: the store never turns it off, an acknowledged write must survive a crash);
* ``store``: the real ``SqlLightningStore`` cycle (fresh schema).

For each: cycles/s, wall time, client (this process) CPU and database backend CPU per cycle (``/proc`` of the
backends, so the database must run on this machine).

    ROLLOUTHUB_BENCH_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test python benchmarks/pg_cycle_floor.py
    python benchmarks/pg_cycle_floor.py --cycles 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
import uuid
from typing import Awaitable, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pg_backends import BackendCpuSampler  # noqa: E402
from store_inprocess import DEFAULT_POSTGRES_URL, _drop_postgres_schema, w_cycle  # noqa: E402

from rollouthub.cli import plain_text  # noqa: E402

Cycles = Callable[[int], Awaitable[int]]
"""Runs n cycles."""


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(cycles: Cycles, sampler: BackendCpuSampler, n: int) -> Tuple[float, ...]:
    """(cycles/s, wall ms, client CPU ms, backend CPU ms) per cycle over ``n`` cycles after 50 warm-up cycles."""
    await cycles(50)
    backends = await sampler.sample()
    client0, start = _client_cpu(), time.perf_counter()
    await cycles(n)
    wall = time.perf_counter() - start
    client = _client_cpu() - client0
    backend = BackendCpuSampler.delta(backends, await sampler.sample())
    return n / wall, wall / n * 1e3, client / n * 1e3, backend / n * 1e3


async def run_floor(url: str, n: int, synchronous_commit: bool) -> Tuple[float, ...]:
    """Three committed one-row statements per cycle on plain asyncpg."""
    import asyncpg

    schema = f"rh_floor_{uuid.uuid4().hex[:10]}"
    app = f"rh-floor-{uuid.uuid4().hex[:8]}"
    settings = {"application_name": app, "synchronous_commit": "on" if synchronous_commit else "off"}
    conn = await asyncpg.connect(url, server_settings=settings)
    try:
        await conn.execute(
            f'CREATE SCHEMA "{schema}"; SET search_path = "{schema}";'
            "CREATE TABLE r (id text PRIMARY KEY, status text, input jsonb);"
            "CREATE TABLE a (id text PRIMARY KEY, rid text, status text);"
            "CREATE TABLE w (id text PRIMARY KEY, status text, t float8)"
        )
        done = 0

        async def cycles(count: int) -> int:
            nonlocal done
            for i in range(done, done + count):
                await conn.execute("INSERT INTO r VALUES ($1, 'queuing', $2::jsonb)", f"r{i}", '{"task": 1}')
                await conn.execute(
                    "WITH u AS (UPDATE r SET status = 'preparing' WHERE id = $1) "
                    "INSERT INTO a VALUES ($2, $1, 'preparing')",
                    f"r{i}",
                    f"a{i}",
                )
                await conn.execute(
                    "WITH u AS (UPDATE a SET status = 'succeeded' WHERE id = $2), "
                    "u2 AS (UPDATE r SET status = 'succeeded' WHERE id = $1) "
                    "INSERT INTO w VALUES ('bench', 'idle', $3) ON CONFLICT (id) DO UPDATE "
                    "SET status = excluded.status, t = excluded.t",
                    f"r{i}",
                    f"a{i}",
                    time.time(),
                )
            done += count
            return count

        return await _measure(cycles, BackendCpuSampler(url, app), n)
    finally:
        await conn.close()
        await _drop_postgres_schema(url, schema)


async def run_store(url: str, n: int) -> Tuple[float, ...]:
    """The store's enqueue -> dequeue -> update_attempt cycle (``store_inprocess.py``'s own)."""
    from rollouthub.store.sql import SqlLightningStore

    schema = f"rh_floor_{uuid.uuid4().hex[:10]}"
    app = f"rh-floor-{uuid.uuid4().hex[:8]}"  # the store names its connections after the URL's application_name
    store = SqlLightningStore(f"{url}{'&' if '?' in url else '?'}application_name={app}", schema=schema)
    try:
        await store.initialize()
        return await _measure(lambda count: w_cycle(store, count), BackendCpuSampler(url, app), n)
    finally:
        await store.close()
        await _drop_postgres_schema(url, schema)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=1000, help="measured cycles per run (after 50 warm-up cycles)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds; each runs the three variants in turn")
    args = parser.parse_args()
    url = os.environ.get("ROLLOUTHUB_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL).replace(
        "postgresql+asyncpg://", "postgresql://"
    )
    variants: Dict[str, Callable[[], Awaitable[Tuple[float, ...]]]] = {
        "floor": lambda: run_floor(url, args.cycles, True),
        "floor, synchronous_commit=off": lambda: run_floor(url, args.cycles, False),
        "store": lambda: run_store(url, args.cycles),
    }
    results: Dict[str, List[Tuple[float, ...]]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        names = list(variants) if round_ % 2 == 0 else list(reversed(variants))
        for name in names:
            results[name].append(await variants[name]())
            rate, wall, client, backend = results[name][-1]
            print(
                f"round {round_ + 1}/{args.rounds} {name:31s} {rate:6.0f} cycles/s  wall {wall:.3f} ms  "
                f"client CPU {client:.3f} ms  database CPU {backend:.3f} ms",
                flush=True,
            )
    print(f"\nmedians over {args.rounds} rounds, per cycle ({args.cycles} cycles per run)")
    print(f"{'variant':31s} {'cycles/s':>9s} {'wall ms':>8s} {'client ms':>10s} {'db ms':>7s}")
    medians = {name: [statistics.median(r[i] for r in rows) for i in range(4)] for name, rows in results.items()}
    for name, (rate, wall, client, backend) in medians.items():
        print(f"{name:31s} {rate:9.0f} {wall:8.3f} {client:10.3f} {backend:7.3f}")
    store, floor = medians["store"], medians["floor"]
    print(
        f"\nstore - floor: wall +{store[1] - floor[1]:.3f} ms, client CPU +{store[2] - floor[2]:.3f} ms, "
        f"database CPU +{store[3] - floor[3]:.3f} ms per cycle; the WAL flushes: "
        f"{floor[1] - medians['floor, synchronous_commit=off'][1]:.3f} ms of the floor's wall time"
    )


if __name__ == "__main__":
    asyncio.run(main())
