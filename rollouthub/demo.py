"""A short end-to-end run of the store on the embedded default backend (a SQLite file).

``python -m rollouthub.demo`` enqueues tasks, lets several simulated runners claim them, record spans (an LLM call,
a tool call and a reward each) and finish them -- some fail once and are retried -- then prints a summary and where
the data lives. Running it again appends a new batch to the same database (``--fresh`` replaces it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from typing import List

from rollouthub.store.base import LightningStore
from rollouthub.types import AttemptedRollout, EnqueueRolloutRequest, RolloutConfig, Span, TraceStatus

__all__ = ["main", "run_demo"]


async def _runner(store: LightningStore, worker_id: str, failures: set[str], done: List[str]) -> None:
    """Claim rollouts until the queue stays empty; each one records three spans and finishes."""
    idle_polls = 0
    while idle_polls < 3:
        claimed = await store.dequeue_rollout(worker_id=worker_id)
        if claimed is None:
            idle_polls += 1
            await asyncio.sleep(0.02)
            continue
        idle_polls = 0
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        question = claimed.input["question"]
        seqs = await store.get_many_span_sequence_ids([(rid, aid)] * 3)
        now = time.time()
        reward = round(random.random(), 3)
        spans = [
            Span.from_attributes(
                attributes={"gen_ai.prompt.0.content": question, "gen_ai.completion.0.content": f"answer to {question}"},
                rollout_id=rid, attempt_id=aid, sequence_id=seqs[0], name="openai.chat.completion",
                start_time=now, end_time=now + 0.01,
            ),
            Span.from_attributes(
                attributes={"tool.name": "calculator"}, rollout_id=rid, attempt_id=aid, sequence_id=seqs[1],
                name="tool.call", start_time=now + 0.01, end_time=now + 0.02,
            ),
            Span.from_attributes(
                attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward},
                rollout_id=rid, attempt_id=aid, sequence_id=seqs[2], name="agentlightning.annotation",
                start_time=now + 0.02, end_time=now + 0.02, status=TraceStatus(status_code="OK"),
            ),
        ]  # fmt: skip
        await store.add_many_spans(spans)
        if rid in failures and claimed.attempt.sequence_id == 1:
            await store.update_attempt(rid, aid, status="failed")  # retried: max_attempts=2
        else:
            await store.update_attempt(rid, aid, status="succeeded")
            done.append(rid)


async def run_demo(database: str, n_tasks: int, n_runners: int) -> int:
    """Run the demo against ``database`` (a SQLite path or a database URL); returns an exit code."""
    from rollouthub.store.sql import SqlLightningStore

    url = database if "://" in database else f"sqlite+aiosqlite:///{os.path.abspath(database)}"
    store = SqlLightningStore(url)
    try:
        config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
        rollouts = await store.enqueue_many_rollouts(
            [
                EnqueueRolloutRequest(input={"question": f"What is {i} + {i}?"}, mode="train", config=config)
                for i in range(n_tasks)
            ]
        )
        ids = [r.rollout_id for r in rollouts]
        failures = set(random.sample(ids, k=max(1, n_tasks // 10)))
        done: List[str] = []
        start = time.time()
        runners = [asyncio.create_task(_runner(store, f"runner-{i}", failures, done)) for i in range(n_runners)]
        while not all(t.done() for t in runners):
            finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0.25)
            bar = "#" * int(30 * len(finished) / n_tasks)
            print(f"\r[{bar:<30}] {len(finished)}/{n_tasks} rollouts finished", end="", flush=True)
        await asyncio.gather(*runners)
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        elapsed = time.time() - start
        print(f"\r[{'#' * 30}] {len(finished)}/{n_tasks} rollouts finished in {elapsed:.2f}s")
        retried = [
            r
            for r in await store.query_rollouts(rollout_id_in=ids)
            if isinstance(r, AttemptedRollout) and r.attempt.sequence_id > 1
        ]
        stats = await store.statistics()
        print(f"succeeded: {sum(r.status == 'succeeded' for r in finished)}, retried once: {len(retried)}")
        print(
            f"store totals: {stats.get('total_rollouts')} rollouts, {stats.get('total_attempts')} attempts, "
            f"{stats.get('total_spans')} spans, {stats.get('total_workers')} workers"
        )
        print(f"data: {url}")
        print("inspect it with: rollouthub store --backend " + url)
        return 0 if len(finished) == n_tasks else 1
    finally:
        await store.close()


def main(argv: List[str] | None = None) -> int:
    """Command-line entry point of the demo."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", default="rollouthub-demo.db", help="SQLite file or database URL")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--fresh", action="store_true", help="delete the SQLite file first")
    args = parser.parse_args(argv)
    if args.fresh and "://" not in args.database:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(args.database + suffix):
                os.remove(args.database + suffix)
    return asyncio.run(run_demo(args.database, args.tasks, args.runners))


if __name__ == "__main__":
    sys.exit(main())
