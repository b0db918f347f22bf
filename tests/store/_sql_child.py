"""Child processes of the SQL multi-process and durability tests.

Run as ``python -m tests.store._sql_child <command> <database url> <pg schema or '-'> [args...]``; every result is
printed as one JSON object per line on stdout (flushed), so the parent can read acknowledgements as they happen.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Optional

from rollouthub.store.sql import SqlLightningStore
from rollouthub.types import RolloutConfig, Span


def emit(**payload: Any) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def open_store(url: str, schema: str) -> SqlLightningStore:
    kwargs: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    return SqlLightningStore(url, scan_debounce_seconds=3600.0, **kwargs)


def make_span(rollout_id: str, attempt_id: str, sequence_id: int, tag: str) -> Span:
    return Span.from_attributes(
        attributes={"tag": tag, "payload": "x" * 200},
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name=f"child-{tag}",
    )


async def load(store: SqlLightningStore, timeout_seconds: float) -> None:
    """Enqueue, claim and add spans forever, acknowledging every completed write (killed by the parent)."""
    config = RolloutConfig(timeout_seconds=timeout_seconds, max_attempts=2, retry_condition=["timeout"])
    i = 0
    while True:
        rollout = await store.enqueue_rollout({"i": i}, config=config)
        emit(kind="enqueued", rollout_id=rollout.rollout_id)
        if i % 2 == 0:
            claimed = await store.dequeue_rollout(worker_id="child")
            if claimed is not None:
                emit(kind="dequeued", rollout_id=claimed.rollout_id, attempt_id=claimed.attempt.attempt_id)
                for k in range(2):
                    span = make_span(claimed.rollout_id, claimed.attempt.attempt_id, k + 1, f"{i}-{k}")
                    stored = await store.add_span(span)
                    assert stored is not None
                    emit(
                        kind="span",
                        rollout_id=claimed.rollout_id,
                        attempt_id=claimed.attempt.attempt_id,
                        span_id=span.span_id,
                    )
        i += 1


async def drain(store: SqlLightningStore, shared_rollout: str, shared_attempt: str, spans: int) -> None:
    """Claim rollouts until the queue is empty; add ``spans`` spans with fresh sequence ids to a shared rollout."""
    claimed: list[str] = []
    sequence_ids: list[int] = []
    batch_ids: list[int] = []
    emit(kind="ready")
    while True:
        rollout = await store.dequeue_rollout(worker_id=f"proc-{id(store)}")
        if rollout is None:
            break
        claimed.append(rollout.rollout_id)
        seq = await store.get_next_span_sequence_id(shared_rollout, shared_attempt)
        sequence_ids.append(seq)
        await store.add_span(make_span(shared_rollout, shared_attempt, seq, f"{rollout.rollout_id}"))
    for k in range(spans):
        seq = await store.get_next_span_sequence_id(shared_rollout, shared_attempt)
        sequence_ids.append(seq)
        await store.add_span(make_span(shared_rollout, shared_attempt, seq, f"extra-{k}"))
    batch_ids.extend(await store.get_many_span_sequence_ids([(shared_rollout, shared_attempt)] * 5))
    emit(kind="done", claimed=claimed, sequence_ids=sequence_ids, batch_ids=batch_ids)


async def claim_concurrently(store: SqlLightningStore, claimers: int) -> None:
    """``claimers`` tasks claim rollouts concurrently until the queue is empty; print what each claimed."""
    emit(kind="ready")

    async def claimer(index: int) -> list[str]:
        claimed: list[str] = []
        while True:
            rollout = await store.dequeue_rollout(worker_id=f"claimer-{index}")
            if rollout is None:
                return claimed
            claimed.append(rollout.rollout_id)

    results = await asyncio.gather(*(claimer(i) for i in range(claimers)))
    emit(kind="done", claimed=[rid for result in results for rid in result])


async def change_resources(store: SqlLightningStore, target: str) -> None:
    """Add a resources snapshot (``target`` = ``-``) or update snapshot ``target``; print its id."""
    if target == "-":
        update = await store.add_resources({"model": {"resource_type": "llm", "endpoint": "http://a", "model": "m"}})
    else:
        update = await store.update_resources(
            target, {"model": {"resource_type": "llm", "endpoint": "http://b", "model": "m"}}
        )
    emit(kind="resources", resources_id=update.resources_id)


async def touch_rollout(store: SqlLightningStore, rollout_id: str, attempt_id: str) -> None:
    """Change an attempt's metadata, then start a new attempt of its rollout; print the new attempt's id."""
    await store.update_attempt(rollout_id, attempt_id, metadata={"child": True})
    attempted = await store.start_attempt(rollout_id, worker_id="child")
    emit(kind="touched", attempt_id=attempted.attempt.attempt_id)


async def finish_later(store: SqlLightningStore, delay: float, rollout_ids: list[str]) -> None:
    """Finish each rollout after ``delay`` seconds, printing the commit time."""
    emit(kind="ready")
    for rollout_id in rollout_ids:
        await asyncio.sleep(delay)
        await store.update_rollout(rollout_id, status="succeeded")
        emit(kind="finished", rollout_id=rollout_id, at=time.time())


async def enqueue_later(store: SqlLightningStore, delay: float, count: int) -> None:
    """Enqueue ``count`` rollouts, one every ``delay`` seconds, printing each commit time."""
    emit(kind="ready")
    for i in range(count):
        await asyncio.sleep(delay)
        rollout = await store.enqueue_rollout({"from_child": i})
        emit(kind="enqueued", rollout_id=rollout.rollout_id, at=time.time())


async def main(argv: list[str]) -> None:
    command, url, schema, *args = argv
    store = open_store(url, schema)
    try:
        await store.initialize()
        if command == "load":
            await load(store, float(args[0]))
        elif command == "drain":
            await drain(store, args[0], args[1], int(args[2]))
        elif command == "claim":
            await claim_concurrently(store, int(args[0]))
        elif command == "resources":
            await change_resources(store, args[0])
        elif command == "touch":
            await touch_rollout(store, args[0], args[1])
        elif command == "finish":
            await finish_later(store, float(args[0]), args[1:])
        elif command == "enqueue":
            await enqueue_later(store, float(args[0]), int(args[1]))
        else:  # pragma: no cover
            raise SystemExit(f"unknown command {command}")
    finally:
        await store.close()


def run(argv: Optional[list[str]] = None) -> None:
    asyncio.run(main(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    run()
