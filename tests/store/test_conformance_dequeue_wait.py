"""Conformance: ``dequeue_rollout_or_wait``, the waiting dequeue runners long-poll with (a rollouthub extension)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List

from rollouthub.types import RolloutConfig
from tests.store.helpers import wait_until


async def test_claims_at_once_when_something_is_queued(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="ready")
    started = time.monotonic()
    claimed = await store.dequeue_rollout_or_wait(worker_id="w", timeout=5.0)
    assert time.monotonic() - started < 1.0
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    assert claimed.status == "preparing" and claimed.attempt.worker_id == "w"
    assert (await store.get_worker_by_id("w")).status == "busy"


async def test_empty_queue_returns_none_after_the_timeout_and_marks_the_worker_idle(store: Any) -> None:
    started = time.monotonic()
    assert await store.dequeue_rollout_or_wait(worker_id="w", timeout=0.3) is None
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0
    worker = await store.get_worker_by_id("w")
    assert worker is not None and worker.status == "idle" and worker.last_dequeue_time is not None


async def test_zero_timeout_is_a_plain_dequeue(store: Any) -> None:
    started = time.monotonic()
    assert await store.dequeue_rollout_or_wait(timeout=0.0) is None
    assert time.monotonic() - started < 1.0
    rollout = await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout_or_wait(timeout=0.0)
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id


async def test_rollout_queued_while_waiting_is_claimed_at_once(store: Any) -> None:
    waiting = asyncio.create_task(store.dequeue_rollout_or_wait(worker_id="w", timeout=10.0))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    rollout = await store.enqueue_rollout(input="late")
    queued_at = time.monotonic()
    claimed = await asyncio.wait_for(waiting, timeout=10)
    assert time.monotonic() - queued_at < 1.0  # long before the 10 s timeout
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    assert claimed.attempt.worker_id == "w"
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "preparing"


async def test_one_queued_rollout_is_claimed_by_exactly_one_waiter(store: Any) -> None:
    waiters = [asyncio.create_task(store.dequeue_rollout_or_wait(worker_id=f"w{i}", timeout=1.5)) for i in range(3)]
    await asyncio.sleep(0.2)
    rollout = await store.enqueue_rollout(input="one")
    results = await asyncio.gather(*waiters)
    claimed = [r for r in results if r is not None]
    assert [c.rollout_id for c in claimed] == [rollout.rollout_id]
    assert len(list(await store.query_attempts(rollout.rollout_id))) == 1


async def test_a_batch_wakes_as_many_waiters_as_rollouts(store: Any) -> None:
    waiters = [asyncio.create_task(store.dequeue_rollout_or_wait(worker_id=f"w{i}", timeout=10.0)) for i in range(4)]
    await asyncio.sleep(0.2)
    queued = await store.enqueue_many_rollouts([{"input": i} for i in range(4)])
    started = time.monotonic()
    results = await asyncio.wait_for(asyncio.gather(*waiters), timeout=10)
    assert time.monotonic() - started < 2.0
    assert sorted(r.rollout_id for r in results) == sorted(r.rollout_id for r in queued)
    assert sorted(r.attempt.worker_id for r in results) == ["w0", "w1", "w2", "w3"]


async def test_requeued_rollout_wakes_a_waiter(store: Any) -> None:
    rollout = await store.enqueue_rollout(
        input="retry", config=RolloutConfig(max_attempts=2, retry_condition=["failed"])
    )
    first = await store.dequeue_rollout(worker_id="a")
    waiting = asyncio.create_task(store.dequeue_rollout_or_wait(worker_id="b", timeout=10.0))
    await asyncio.sleep(0.2)
    await store.update_attempt(rollout.rollout_id, first.attempt.attempt_id, status="failed")
    requeued_at = time.monotonic()
    second = await asyncio.wait_for(waiting, timeout=10)
    assert time.monotonic() - requeued_at < 1.0
    assert second is not None and second.rollout_id == rollout.rollout_id
    assert second.attempt.sequence_id == 2 and second.attempt.worker_id == "b"


async def test_abandoned_ends_the_wait_early(store: Any) -> None:
    stop: List[bool] = []
    waiting = asyncio.create_task(
        store.dequeue_rollout_or_wait(worker_id="w", timeout=30.0, abandoned=lambda: bool(stop))
    )
    await asyncio.sleep(0.2)
    stop.append(True)
    stopped_at = time.monotonic()
    assert await asyncio.wait_for(waiting, timeout=10) is None
    assert time.monotonic() - stopped_at < 2.0  # the HTTP client asks between requests of at most 1 s
    rollout = await store.enqueue_rollout(input="after")
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "queuing"


async def test_abandoned_before_the_call_claims_nothing(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="kept")
    assert await store.dequeue_rollout_or_wait(timeout=5.0, abandoned=lambda: True) is None
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "queuing"


async def test_concurrent_waiters_and_enqueues_claim_each_rollout_once(store: Any) -> None:
    claimed: List[str] = []

    async def runner(index: int) -> None:
        while len(claimed) < 12:
            got = await store.dequeue_rollout_or_wait(worker_id=f"r{index}", timeout=0.5)
            if got is not None:
                claimed.append(got.rollout_id)
                await store.update_attempt(got.rollout_id, got.attempt.attempt_id, status="succeeded")

    runners = [asyncio.create_task(runner(i)) for i in range(4)]
    queued: List[str] = []
    for batch in range(4):
        queued += [r.rollout_id for r in await store.enqueue_many_rollouts([{"input": (batch, i)} for i in range(3)])]
        await asyncio.sleep(0.05)
    await asyncio.wait_for(asyncio.gather(*runners), timeout=30)
    assert sorted(claimed) == sorted(queued)


async def test_collection_store_wakes_without_polling(store: Any, traits: Any) -> None:
    """The wake-up comes from the enqueue itself, not from a poll of the queue (which SQL stores also do)."""
    traits.require("collection_based")
    store._queue_poll_interval = lambda: None  # only in-process notifications remain
    attempts: List[float] = []
    original = store.dequeue_rollout

    async def counting(*args: Any, **kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        return await original(*args, **kwargs)

    store.dequeue_rollout = counting
    waiters = [asyncio.create_task(store.dequeue_rollout_or_wait(worker_id="w0", timeout=1.5))]
    await wait_until(store._queue_known_empty)  # the first waiter looked and found the queue empty
    for i in (1, 2):
        waiters.append(asyncio.create_task(store.dequeue_rollout_or_wait(worker_id=f"w{i}", timeout=1.5)))
        await wait_until(lambda n=i + 1: len(store._queue_waiters) == n)
    assert len(attempts) == 1  # the others knew the queue was empty and did not look
    await asyncio.sleep(0.1)
    rollout = await store.enqueue_rollout(input="wake")
    queued_at = time.monotonic()
    await wait_until(lambda: any(w.done() for w in waiters), timeout=1.0)
    assert time.monotonic() - queued_at < 0.5
    assert len(attempts) == 2  # the claim by the woken waiter: the others stayed asleep
    results = await asyncio.gather(*waiters)
    assert [r.rollout_id for r in results if r is not None] == [rollout.rollout_id]
    assert len(attempts) == 4  # the two others made their put-off look when their wait ended


async def test_wait_on_known_empty_queue_marks_the_worker_when_it_ends(store: Any, traits: Any) -> None:
    """A waiting dequeue that skipped its first look (queue known to be empty) still does the empty dequeue's
    bookkeeping when it ends empty-handed: the worker is idle with ``last_dequeue_time`` stamped at the end."""
    traits.require("collection_based")
    store._queue_poll_interval = lambda: None  # no time bound on "known to be empty" (in-process queueing only)
    assert await store.dequeue_rollout(worker_id="first") is None  # the queue is now known to be empty
    started = time.time()
    assert await store.dequeue_rollout_or_wait(worker_id="waiter", timeout=0.2) is None
    workers = {w.worker_id: w for w in await store.query_workers()}
    assert workers["waiter"].status == "idle"
    assert workers["waiter"].last_dequeue_time is not None and workers["waiter"].last_dequeue_time >= started + 0.15
    # A rollout queued after the empty look is claimed at once (the queue is no longer known to be empty).
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout_or_wait(worker_id="waiter", timeout=0.0)
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
