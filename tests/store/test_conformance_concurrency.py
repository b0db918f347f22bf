"""Conformance: concurrent use from many coroutines and (for thread-safe backends) many threads.

Invariants: no lost and no doubly-claimed rollout, unique ids, unique and gap-free span sequence ids.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from rollouthub.types import EnqueueRolloutRequest
from tests.store.backends import BackendTraits
from tests.store.helpers import ids_of, make_otel_span, make_span, run_in_threads


async def _drain(store: Any, worker_id: str) -> list[str]:
    claimed: list[str] = []
    while True:
        rollout = await store.dequeue_rollout(worker_id=worker_id)
        if rollout is None:
            return claimed
        assert rollout.status == "preparing"
        claimed.append(rollout.rollout_id)


async def _assert_each_claimed_once(store: Any, expected_ids: list[str], claims: list[str]) -> None:
    duplicates = [rid for rid, count in Counter(claims).items() if count > 1]
    assert duplicates == [], f"rollouts claimed more than once: {duplicates}"
    assert sorted(claims) == sorted(expected_ids), "some rollouts were lost"
    for rollout_id in expected_ids:
        attempts = await store.query_attempts(rollout_id)
        assert attempts.total == 1, f"{rollout_id} has {attempts.total} attempts"
    preparing = await store.query_rollouts(status_in=["preparing"])
    assert preparing.total == len(expected_ids)
    assert await store.dequeue_rollout() is None


async def test_200_rollouts_dequeued_by_20_coroutines(store: Any) -> None:
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(200)])
    per_worker = await asyncio.gather(*(_drain(store, f"worker-{i}") for i in range(20)))
    claims = [rid for chunk in per_worker for rid in chunk]
    await _assert_each_claimed_once(store, ids_of(created), claims)


async def test_200_rollouts_dequeued_many_by_20_coroutines(store: Any) -> None:
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(200)])

    async def drain_many(worker_id: str) -> list[str]:
        claimed: list[str] = []
        while True:
            batch = await store.dequeue_many_rollouts(limit=7, worker_id=worker_id)
            if not batch:
                return claimed
            claimed.extend(ids_of(batch))

    per_worker = await asyncio.gather(*(drain_many(f"worker-{i}") for i in range(20)))
    claims = [rid for chunk in per_worker for rid in chunk]
    await _assert_each_claimed_once(store, ids_of(created), claims)


async def test_200_rollouts_dequeued_by_8_threads(store: Any, traits: BackendTraits) -> None:
    traits.require("thread_safe")
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(200)])

    def drain_in_own_loop(index: int) -> list[str]:
        return asyncio.run(_drain(store, f"thread-worker-{index}"))

    per_thread = await asyncio.to_thread(run_in_threads, 8, drain_in_own_loop)
    claims = [rid for chunk in per_thread for rid in chunk]
    await _assert_each_claimed_once(store, ids_of(created), claims)


async def test_threads_produce_and_consume_concurrently(store: Any, traits: BackendTraits) -> None:
    traits.require("thread_safe")
    producers, consumers, per_producer = 4, 4, 25
    total = producers * per_producer
    producers_left = [producers]
    producers_lock = threading.Lock()
    all_produced = threading.Event()

    async def produce(index: int) -> list[str]:
        produced = [(await store.enqueue_rollout(input={"p": index, "i": i})).rollout_id for i in range(per_producer)]
        with producers_lock:
            producers_left[0] -= 1
            if producers_left[0] == 0:
                all_produced.set()
        return produced

    async def consume(index: int) -> list[str]:
        claimed: list[str] = []
        while True:
            finished = all_produced.is_set()
            rollout = await store.dequeue_rollout(worker_id=f"consumer-{index}")
            if rollout is not None:
                claimed.append(rollout.rollout_id)
            elif finished:
                # Every producer had finished before this empty dequeue started: the queue is drained.
                return claimed
            else:
                await asyncio.sleep(0.001)

    def run(index: int) -> list[str]:
        if index < producers:
            return asyncio.run(produce(index))
        return asyncio.run(consume(index))

    results = await asyncio.to_thread(run_in_threads, producers + consumers, run)
    produced = [rid for chunk in results[:producers] for rid in chunk]
    claims = [rid for chunk in results[producers:] for rid in chunk]
    assert len(set(produced)) == total
    await _assert_each_claimed_once(store, produced, claims)


async def test_50_concurrent_enqueues(store: Any) -> None:
    created = await asyncio.gather(*(store.enqueue_rollout(input=i) for i in range(50)))
    assert len(set(ids_of(created))) == 50
    assert (await store.query_rollouts()).total == 50
    assert (await store.statistics())["total_rollouts"] == 50


async def test_concurrent_enqueues_from_threads(store: Any, traits: BackendTraits) -> None:
    traits.require("thread_safe")

    def enqueue_batch(index: int) -> list[str]:
        async def body() -> list[str]:
            return [(await store.enqueue_rollout(input={"t": index, "i": i})).rollout_id for i in range(25)]

        return asyncio.run(body())

    results = await asyncio.to_thread(run_in_threads, 8, enqueue_batch)
    ids = [rid for chunk in results for rid in chunk]
    assert len(set(ids)) == 200
    stored = await store.query_rollouts()
    assert stored.total == 200
    assert sorted(ids_of(stored)) == sorted(ids)


async def test_30_concurrent_otel_spans_get_ids_1_to_30(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    spans = await asyncio.gather(*(store.add_otel_span(rid, aid, make_otel_span(f"s{i}")) for i in range(30)))
    assert all(span is not None for span in spans)
    assert sorted(span.sequence_id for span in spans) == list(range(1, 31))
    stored = await store.query_spans(rid)
    assert [s.sequence_id for s in stored] == list(range(1, 31))
    assert await store.get_next_span_sequence_id(rid, aid) == 31


async def test_concurrent_sequence_allocation_is_unique(store: Any, traits: BackendTraits) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    singles = [store.get_next_span_sequence_id(rid, aid) for _ in range(60)]
    batches = [store.get_many_span_sequence_ids([(rid, aid)] * 4) for _ in range(10)]
    results = await asyncio.gather(*singles, *batches)
    allocated: list[int] = []
    for value in results:
        if isinstance(value, int):
            allocated.append(value)
        else:
            block = list(value)
            assert block == sorted(block), "ids of one batch are handed out in request order"
            if traits.atomic_sequence_id_blocks:
                assert block == list(range(block[0], block[0] + 4)), "a batch must be a consecutive block"
            allocated.extend(block)
    assert sorted(allocated) == list(range(1, 101))


async def test_concurrent_spans_on_many_rollouts(store: Any) -> None:
    rollouts = [await store.start_rollout(input=i) for i in range(5)]

    async def emit(rollout: Any, index: int) -> Any:
        sequence_id = await store.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
        return await store.add_span(
            make_span(rollout.rollout_id, rollout.attempt.attempt_id, sequence_id, span_id=f"span-{index}")
        )

    await asyncio.gather(*(emit(r, i) for r in rollouts for i in range(10)))
    for rollout in rollouts:
        stored = await store.query_spans(rollout.rollout_id)
        assert [s.sequence_id for s in stored] == list(range(1, 11))
        assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "running"


async def test_span_sequence_ids_unique_across_threads(store: Any, traits: BackendTraits) -> None:
    traits.require("thread_safe")
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id

    def emit(index: int) -> list[int]:
        async def body() -> list[int]:
            results = []
            for i in range(10):
                span = await store.add_otel_span(rid, aid, make_otel_span(f"t{index}-{i}"))
                assert span is not None
                results.append(span.sequence_id)
            return results

        return asyncio.run(body())

    per_thread = await asyncio.to_thread(run_in_threads, 6, emit)
    allocated = sorted(seq for chunk in per_thread for seq in chunk)
    assert allocated == list(range(1, 61))
    assert (await store.query_spans(rid)).total == 60


async def test_concurrent_attempt_updates_keep_attempts_consistent(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid = rollout.rollout_id
    new_attempts = await asyncio.gather(*(store.start_attempt(rid) for _ in range(10)))
    sequence_ids = sorted(a.attempt.sequence_id for a in new_attempts)
    assert sequence_ids == list(range(2, 12))
    assert (await store.query_attempts(rid)).total == 11
    assert (await store.get_latest_attempt(rid)).sequence_id == 11


async def test_concurrent_worker_heartbeats(store: Any) -> None:
    await asyncio.gather(*(store.update_worker(f"w-{i % 5}", heartbeat_stats={"i": i}) for i in range(50)))
    workers = await store.query_workers()
    assert workers.total == 5
    assert all(w.status == "unknown" for w in workers)
