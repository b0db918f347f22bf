"""Resident memory of a process holding a ``SqlLightningStore`` as spans accumulate (spans live in the database).

Adds ``--spans`` spans of about 1 KB each (``add_many_spans`` batches of 500 over 100 rollouts) to a fresh SQLite file
and prints the RSS after the first 1 000 spans and after all of them. Target: the difference stays within 50 MB.

    python benchmarks/sql_rss.py                 # 100 000 spans on SQLite
    python benchmarks/sql_rss.py --backend postgres --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any, Dict

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollouthub.cli import plain_text  # noqa: E402
from rollouthub.store.sql import SqlLightningStore  # noqa: E402
from rollouthub.types import Span  # noqa: E402

BATCH = 500


def rss_mb() -> float:
    """Current resident set size in MiB (after a full garbage collection)."""
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def make_span(rollout_id: str, attempt_id: str, seq: int) -> Span:
    """A span whose JSON form is about 1 KB."""
    return Span.from_attributes(
        attributes={"payload": "y" * 700, "index": seq, "kind": "rss"},
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=seq,
        name=f"span-{seq}",
        start_time=time.time(),
        end_time=time.time(),
    )


async def measure(store: SqlLightningStore, total: int) -> Dict[str, Any]:
    rollouts = [await store.start_rollout({"i": i}) for i in range(100)]
    seq: Dict[str, int] = {}
    added = 0
    report: Dict[str, Any] = {"rss_start_mb": rss_mb()}
    started = time.perf_counter()
    while added < total:
        r = rollouts[(added // BATCH) % len(rollouts)]
        n = min(BATCH, total - added, 1000 - added if added < 1000 else BATCH)
        base = seq.get(r.rollout_id, 0)
        await store.add_many_spans([make_span(r.rollout_id, r.attempt.attempt_id, base + k + 1) for k in range(n)])
        seq[r.rollout_id] = base + n
        added += n
        if added == 1000:
            report["rss_1k_mb"] = rss_mb()
    report["rss_end_mb"] = rss_mb()
    report["spans"] = added
    report["seconds"] = time.perf_counter() - started
    report["stored_spans"] = (await store.statistics())["total_spans"]
    report["delta_mb"] = report["rss_end_mb"] - report["rss_1k_mb"]
    return report


async def main_async(args: argparse.Namespace) -> Dict[str, Any]:
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            store = SqlLightningStore(f"sqlite:///{tmp}/rss.db")
            try:
                report = await measure(store, args.spans)
                report["db_file_mb"] = os.path.getsize(f"{tmp}/rss.db") / 2**20
            finally:
                await store.close()
            return report
    schema = f"rh_rss_{uuid.uuid4().hex[:8]}"
    store = SqlLightningStore(args.url, schema=schema)
    try:
        return await measure(store, args.spans)
    finally:
        await store.close()
        import asyncpg

        conn = await asyncpg.connect(args.url.replace("+asyncpg", ""))
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--url", default=os.environ.get("ROLLOUTHUB_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    parser.add_argument("--spans", type=int, default=100_000)
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in report.items()}, indent=2))
    verdict = "OK" if report["delta_mb"] <= 50 else "OVER TARGET"
    print(
        f"RSS after 1k spans: {report['rss_1k_mb']:.1f} MiB; after {report['spans']}: {report['rss_end_mb']:.1f} MiB; "
        f"delta {report['delta_mb']:.1f} MiB (target <= 50): {verdict}"
    )


if __name__ == "__main__":
    main()
