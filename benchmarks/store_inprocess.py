"""In-process throughput of the core store operations.

Measures, for one backend, the ops/s of: enqueue, dequeue, add_span (single), add_many_spans (batched),
update_attempt, query_spans, and the full enqueue -> dequeue -> update_attempt(succeeded) cycle. Each workload runs
``--runs`` times on a fresh store; min / median / max ops/s over the runs are printed.

``--count-statements`` also counts the SQL statements the store sends to the database per operation (SQLite: the
``sqlite3`` trace callback of every connection; PostgreSQL: an asyncpg query logger on every connection -- each
statement, ``BEGIN`` and ``COMMIT`` included, is one client/server round trip there), by kind, over the measured part
of each workload; ``--show-statements N`` prints the first N statements of each workload. On PostgreSQL the CPU time
of the database server processes serving this process is reported per operation too (see ``pg_backends.py``).

    python benchmarks/store_inprocess.py --backend memory
    python benchmarks/store_inprocess.py --backend sqlite --runs 3
    python benchmarks/store_inprocess.py --backend sqlite --only cycle --count-statements --show-statements 30
    ROLLOUTHUB_BENCH_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        python benchmarks/store_inprocess.py --backend postgres
    python benchmarks/store_inprocess.py --backend postgres --only cycle --runs 1 --count-statements \\
        --compare-with /tmp/base --rounds 6

``--compare-with DIR`` runs this script alternately on another checkout of rollouthub (``DIR`` on ``PYTHONPATH``,
e.g. a ``git worktree add /tmp/base <commit>``; A) and on this one (B), ``--rounds`` times (the order flips every
round; each run is a child process with the other options), and prints the median ops/s of both and their ratio:
an A/B measured in one run, on one machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, NamedTuple, Optional

from pg_backends import MONITOR_APPLICATION_NAME, BackendCpuSampler

from rollouthub.cli import plain_text
from rollouthub.store.base import LightningStore
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import Span, TraceStatus

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


class StatementCounter:
    """Counts the statements sent to the database, by kind (the first keyword: SELECT, INSERT, BEGIN, COMMIT, ...).

    See :func:`install_driver_hooks`, which feeds it."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.recorded: List[str] = []
        self.record_limit = 0

    def record(self, sql: str) -> None:
        """Count one statement (and keep its text while recording)."""
        words = sql.lstrip().split(None, 1)
        self.counts[words[0].rstrip(";").upper() if words else "?"] += 1
        if len(self.recorded) < self.record_limit:
            self.recorded.append(" ".join(sql.split()))

    def reset(self, record: int = 0) -> None:
        """Forget the counts; keep the text of the next ``record`` statements."""
        self.counts.clear()
        self.recorded = []
        self.record_limit = record


APPLICATION_NAME = f"rh-inprocess-{uuid.uuid4().hex[:8]}"
"""The PostgreSQL ``application_name`` of this process' connections (to find their server processes)."""


def install_driver_hooks(counter: Optional[StatementCounter]) -> None:
    """Wrap the drivers' connect functions for the rest of the process (works with any version of the store):
    every new asyncpg connection gets :data:`APPLICATION_NAME` and, with a counter, a query logger (asyncpg logs
    prepared statements and the ``BEGIN``/``COMMIT`` of transactions alike); every new ``sqlite3`` connection gets a
    trace callback feeding the counter. Connections opened before this call are not seen."""
    if counter is not None:
        connect_sqlite = sqlite3.connect

        def traced_sqlite(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = connect_sqlite(*args, **kwargs)
            conn.set_trace_callback(counter.record)
            return conn

        sqlite3.connect = traced_sqlite  # type: ignore[assignment]
    try:
        import asyncpg
    except ImportError:
        return
    connect_pg = asyncpg.connect

    async def tagged_pg(*args: Any, **kwargs: Any) -> Any:
        settings = dict(kwargs.get("server_settings") or {})
        if settings.get("application_name") != MONITOR_APPLICATION_NAME:
            settings["application_name"] = APPLICATION_NAME  # also over the store's own (``rollouthub``)
        kwargs["server_settings"] = settings
        conn = await connect_pg(*args, **kwargs)
        if counter is not None and settings["application_name"] == APPLICATION_NAME:  # not the CPU sampler's
            conn.add_query_logger(lambda record: counter.record(record.query))
        return conn

    asyncpg.connect = tagged_pg


COUNTER: Optional[StatementCounter] = None
"""The statement counter when ``--count-statements`` is given."""


class Measure:
    """The measured part of the running workload: its start time and, on PostgreSQL, the CPU time of this process'
    database backends at its start."""

    start = 0.0
    sampler: Optional[BackendCpuSampler] = None
    backends_before: Dict[int, float] = {}


async def begin_measure() -> None:
    """Start the measured part of a workload (run_one starts one before the workload; workloads with a setup start
    theirs after it): reset the statement counter, sample the backends' CPU, note the time."""
    if COUNTER is not None:
        COUNTER.reset(COUNTER.record_limit)
    if Measure.sampler is not None:
        Measure.backends_before = await Measure.sampler.sample()
    Measure.start = time.perf_counter()


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
    await begin_measure()
    for _ in range(n):
        assert await store.dequeue_rollout(worker_id="bench") is not None
    return n


async def w_add_span(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    payload = "x" * 900
    await begin_measure()
    for i in range(n):
        await store.add_span(make_span(rollout.rollout_id, rollout.attempt.attempt_id, i + 1, payload))
    return n


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
    await begin_measure()
    for spans in spans_by_batch:
        await store.add_many_spans(spans)
    return n


async def w_update_attempt(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    await begin_measure()
    for i in range(n):
        await store.update_attempt(rollout.rollout_id, "latest", metadata={"i": i}, last_heartbeat_time=time.time())
    return n


async def w_query_spans(store: LightningStore, n: int) -> int:
    rollout = await store.start_rollout({"task": 0})
    payload = "x" * 900
    await store.add_many_spans(
        [make_span(rollout.rollout_id, rollout.attempt.attempt_id, i + 1, payload) for i in range(50)]
    )
    await begin_measure()
    for _ in range(n):
        result = await store.query_spans(rollout.rollout_id, "latest", limit=20)
        assert len(result) == 20
    return n


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


class RunResult(NamedTuple):
    """One run of a workload: ops/s, and per operation the statements by kind and the database server CPU."""

    rate: float
    statements: Dict[str, float]
    db_cpu_ms: float


async def run_one(backend: str, workload: Workload, n: int) -> RunResult:
    """Run a workload on a fresh store."""
    async with open_store(backend) as store:
        await begin_measure()
        await workload(store, n)
        elapsed = time.perf_counter() - Measure.start
        db_cpu = float("nan")
        if Measure.sampler is not None:
            db_cpu = BackendCpuSampler.delta(Measure.backends_before, await Measure.sampler.sample())
        await asyncio.sleep(0)  # asyncpg hands its query-log records over with call_soon
        statements = {kind: count / n for kind, count in COUNTER.counts.items()} if COUNTER is not None else {}
        return RunResult(n / elapsed, statements, 1000.0 * db_cpu / n)


def _format_statements(per_op: Dict[str, float]) -> str:
    total = sum(per_op.values())
    parts = ", ".join(f"{kind} {count:.2f}" for kind, count in sorted(per_op.items(), key=lambda kv: -kv[1]))
    return f"{total:.2f} statements/op ({parts})"


async def main_async(args: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    if args.backend == "postgres":
        url = os.environ.get("ROLLOUTHUB_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
        Measure.sampler = BackendCpuSampler(url, APPLICATION_NAME)
    report: Dict[str, Dict[str, Any]] = {}
    selected = [w for w in WORKLOADS if not args.only or any(o in w for o in args.only)]
    for name in selected:
        workload, n = WORKLOADS[name]
        n = max(1, int(n * args.scale))
        runs: List[RunResult] = []
        for run in range(args.runs):
            if COUNTER is not None:
                COUNTER.reset(args.show_statements_chars if run == 0 else 0)
            result = await run_one(args.backend, workload, n)
            runs.append(result)
            line = f"  {name:32s} run {run + 1}/{args.runs}: {result.rate:10.0f} ops/s"
            if result.db_cpu_ms == result.db_cpu_ms:
                line += f", database CPU {result.db_cpu_ms:.3f} ms/op"
            if COUNTER is not None:
                line += ", " + _format_statements(result.statements)
            print(line, file=sys.stderr, flush=True)
            if COUNTER is not None and run == 0 and COUNTER.recorded:
                print("    first statements of the measured part:", file=sys.stderr)
                for sql in COUNTER.recorded:
                    print(f"      {sql[:220]}", file=sys.stderr)
        rates = [r.rate for r in runs]
        report[name] = {
            "min": min(rates),
            "median": statistics.median(rates),
            "max": max(rates),
            "n": n,
            "db_cpu_ms_per_op": statistics.median(r.db_cpu_ms for r in runs),
            "statements_per_op": runs[-1].statements,
        }
    return report


def compare_checkouts(args: argparse.Namespace, argv: List[str]) -> None:
    """Run this script on the checkout ``args.compare_with`` (A) and on this one (B) alternately, ``args.rounds``
    times, and print the medians of both per workload (ops/s, database CPU, statements)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkouts = {"A": os.path.abspath(args.compare_with), "B": here}
    child_argv: List[str] = []
    skip = False
    for arg in argv:  # the same options, without --compare-with/--rounds/--json
        if skip:
            skip = False
            continue
        if arg in ("--compare-with", "--rounds", "--json"):
            skip = True
            continue
        if arg.startswith(("--compare-with=", "--rounds=", "--json=")):
            continue
        child_argv.append(arg)
    samples: Dict[str, Dict[str, List[Dict[str, Any]]]] = {"A": {}, "B": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for side in ("A", "B") if round_index % 2 == 0 else ("B", "A"):
                out = os.path.join(tmp, f"{side}{round_index}.json")
                env = dict(os.environ, PYTHONPATH=checkouts[side])
                check = "import rollouthub, sys; sys.stdout.write(rollouthub.__file__)"
                where = subprocess.run(
                    [sys.executable, "-c", check], env=env, cwd=checkouts[side], capture_output=True, text=True
                ).stdout
                if not where.startswith(checkouts[side]):
                    raise SystemExit(f"rollouthub of {side} imports from {where!r}, not from {checkouts[side]}")
                subprocess.run(
                    [sys.executable, os.path.abspath(__file__), *child_argv, "--json", out],
                    env=env,
                    cwd=checkouts[side],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                with open(out) as fh:
                    for name, row in json.load(fh)["results"].items():
                        samples[side].setdefault(name, []).append(row)
            print(
                f"# round {round_index + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}",
                file=sys.stderr,
                flush=True,
            )
    print(f"\n# A = {checkouts['A']}, B = {checkouts['B']}; backend={args.backend} loop={args.loop}")
    print(f"# medians over {args.rounds} rounds of the per-run medians (--runs {args.runs}); [min-max] of those")
    print(
        f"{'workload':32s} {'A ops/s':>20s} {'B ops/s':>20s} {'B/A':>6s} {'A db ms':>8s} {'B db ms':>8s}  statements A -> B"
    )
    for name, rows_a in samples["A"].items():
        rows_b = samples["B"].get(name, [])
        if not rows_b:
            continue
        med_a = [r["median"] for r in rows_a]
        med_b = [r["median"] for r in rows_b]
        a, b = statistics.median(med_a), statistics.median(med_b)
        cell_a = f"{a:.0f} [{min(med_a):.0f}-{max(med_a):.0f}]"
        cell_b = f"{b:.0f} [{min(med_b):.0f}-{max(med_b):.0f}]"
        db_a = statistics.median(r["db_cpu_ms_per_op"] for r in rows_a)
        db_b = statistics.median(r["db_cpu_ms_per_op"] for r in rows_b)
        st_a = sum(rows_a[-1]["statements_per_op"].values())
        st_b = sum(rows_b[-1]["statements_per_op"].values())
        stm = f"{st_a:.2f} -> {st_b:.2f}" if rows_a[-1]["statements_per_op"] else ""
        print(f"{name:32s} {cell_a:>20s} {cell_b:>20s} {b / a:6.2f} {db_a:8.3f} {db_b:8.3f}  {stm}")


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
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="event loop (the store server runs on uvloop when it is installed)",
    )
    parser.add_argument(
        "--count-statements",
        action="store_true",
        help="count the statements sent to the database per operation, by kind (BEGIN/COMMIT included)",
    )
    parser.add_argument(
        "--show-statements",
        type=int,
        default=0,
        dest="show_statements_chars",
        metavar="N",
        help="with --count-statements: print the first N statements of each workload's measured part",
    )
    parser.add_argument(
        "--compare-with",
        metavar="DIR",
        help="A/B: run this script alternately on the rollouthub checkout DIR (A) and on this one (B), print medians",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds of --compare-with (default 6)")
    args = parser.parse_args()
    if args.compare_with:
        compare_checkouts(args, sys.argv[1:])
        return
    global COUNTER
    if args.count_statements:
        COUNTER = StatementCounter()
    install_driver_hooks(COUNTER)
    if args.clock == "cpu":
        time.perf_counter = time.process_time  # type: ignore[assignment]
    if args.loop == "uvloop":
        import uvloop

        uvloop.install()
    report = asyncio.run(main_async(args))
    print(f"\nbackend={args.backend} runs={args.runs} clock={args.clock} loop={args.loop}  (ops/s: min / median / max)")
    for name, row in report.items():
        line = f"  {name:32s} {row['min']:10.0f} {row['median']:10.0f} {row['max']:10.0f}   (n={int(row['n'])})"
        if row["db_cpu_ms_per_op"] == row["db_cpu_ms_per_op"]:
            line += f"  database CPU {row['db_cpu_ms_per_op']:.3f} ms/op"
        if row["statements_per_op"]:
            line += "  " + _format_statements(row["statements_per_op"])
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"backend": args.backend, "runs": args.runs, "results": report}, fh, indent=2)


if __name__ == "__main__":
    main()
