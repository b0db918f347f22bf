"""Conformance: ``wait_for_rollouts``.

rollouthub requires waiting to be event-driven: a waiter must return within 50 ms of the rollout reaching a terminal
status. These are the only tests of the suite that measure wall-clock time; bounds are generous but meaningful.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.store.backends import BackendTraits
from tests.store.helpers import run_in_threads

EVENT_LATENCY = 0.05


async def _finish_after(store: Any, rollout_id: str, delay: float, status: str = "succeeded") -> None:
    await asyncio.sleep(delay)
    await store.update_rollout(rollout_id, status=status)


async def _wait_blocked(task: asyncio.Task[Any], seconds: float = 0.215) -> None:
    """Give a waiter time to block; it must not have returned yet.

    The default is deliberately not a multiple of common polling periods (0.05 s, 0.1 s, 0.2 s ...), so that a
    polling implementation cannot pass the latency assertions by being phase-aligned with the test.
    """
    await asyncio.sleep(seconds)
    assert not task.done(), "wait_for_rollouts returned before any rollout finished"


async def _wake_latency(waiters: list[asyncio.Task[Any]], finish: Awaitable[Any]) -> float:
    """Seconds between the end of ``finish`` (the terminal status is then stored) and the last waiter returning.

    A waiter that already returned while ``finish`` was still running counts as zero latency.
    """
    done_at: list[float] = []
    for waiter in waiters:
        waiter.add_done_callback(lambda _: done_at.append(time.perf_counter()))
    await finish
    finished_at = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=5.0)
    assert len(done_at) == len(waiters)
    return max(0.0, max(done_at) - finished_at)


FINISHERS: dict[str, Callable[[Any, Any], Awaitable[Any]]] = {
    "update_rollout_succeeded": lambda s, r: s.update_rollout(r.rollout_id, status="succeeded"),
    "update_rollout_failed": lambda s, r: s.update_rollout(r.rollout_id, status="failed"),
    "update_rollout_cancelled": lambda s, r: s.update_rollout(r.rollout_id, status="cancelled"),
    "update_attempt_succeeded": lambda s, r: s.update_attempt(r.rollout_id, "latest", status="succeeded"),
    "update_attempt_failed": lambda s, r: s.update_attempt(r.rollout_id, "latest", status="failed"),
    "update_attempt_timeout": lambda s, r: s.update_attempt(r.rollout_id, "latest", status="timeout"),
}

EXPECTED_STATUS = {
    "update_rollout_succeeded": "succeeded",
    "update_rollout_failed": "failed",
    "update_rollout_cancelled": "cancelled",
    "update_attempt_succeeded": "succeeded",
    "update_attempt_failed": "failed",
    "update_attempt_timeout": "failed",
}


@pytest.mark.parametrize("finisher", sorted(FINISHERS))
async def test_waiter_wakes_within_50ms_of_terminal_status(store: Any, traits: BackendTraits, finisher: str) -> None:
    traits.require_wait_timeout(None)
    rollout = await store.start_rollout(input="x")
    waiter = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=None))
    await _wait_blocked(waiter)
    latency = await _wake_latency([waiter], FINISHERS[finisher](store, rollout))
    result = waiter.result()
    assert [r.rollout_id for r in result] == [rollout.rollout_id]
    assert result[0].status == EXPECTED_STATUS[finisher]
    assert latency < EVENT_LATENCY, f"waiter woke {latency * 1000:.1f} ms after the status change"


async def test_waiter_with_deadline_wakes_within_50ms(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(30.0)
    rollout = await store.enqueue_rollout(input="x")
    waiter = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=30.0))
    await _wait_blocked(waiter)
    latency = await _wake_latency([waiter], store.update_rollout(rollout.rollout_id, status="cancelled"))
    assert latency < EVENT_LATENCY
    assert [r.status for r in waiter.result()] == ["cancelled"]


async def test_waiting_for_several_returns_when_last_finishes(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(5.0)
    first = await store.start_rollout(input=1)
    second = await store.start_rollout(input=2)
    ignored = await store.start_rollout(input=3)
    waiter = asyncio.create_task(
        store.wait_for_rollouts(rollout_ids=[first.rollout_id, second.rollout_id], timeout=5.0)
    )
    await _wait_blocked(waiter, 0.115)
    await store.update_attempt(first.rollout_id, "latest", status="succeeded")
    await _wait_blocked(waiter, 0.1)
    latency = await _wake_latency([waiter], store.update_attempt(second.rollout_id, "latest", status="failed"))
    assert latency < EVENT_LATENCY
    result = waiter.result()
    assert [(r.rollout_id, r.status) for r in result] == [
        (first.rollout_id, "succeeded"),
        (second.rollout_id, "failed"),
    ]
    assert (await store.get_rollout_by_id(ignored.rollout_id)).status == "preparing"


async def test_timeout_with_unfinished_rollout(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    started = time.perf_counter()
    result = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.1)
    elapsed = time.perf_counter() - started
    assert result == []
    assert 0.08 <= elapsed < 0.2


async def test_zero_timeout_checks_once(store: Any) -> None:
    unfinished = await store.start_rollout(input="x")
    finished = await store.start_rollout(input="y")
    await store.update_rollout(finished.rollout_id, status="succeeded")
    started = time.perf_counter()
    result = await store.wait_for_rollouts(rollout_ids=[unfinished.rollout_id, finished.rollout_id], timeout=0)
    assert time.perf_counter() - started < 0.05
    assert [r.rollout_id for r in result] == [finished.rollout_id]
    started = time.perf_counter()
    assert await store.wait_for_rollouts(rollout_ids=[unfinished.rollout_id], timeout=-1) == []
    assert time.perf_counter() - started < 0.05


async def test_timeout_none_returns_after_completion(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(None)
    rollout = await store.start_rollout(input="x")
    finisher = asyncio.create_task(_finish_after(store, rollout.rollout_id, 0.5))
    started = time.perf_counter()
    result = await asyncio.wait_for(
        store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=None), timeout=5.0
    )
    elapsed = time.perf_counter() - started
    await finisher
    assert [r.status for r in result] == ["succeeded"]
    assert 0.4 <= elapsed < 0.7


async def test_wait_is_cancellable(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(None)
    rollout = await store.start_rollout(input="x")
    waiter = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=None))
    await _wait_blocked(waiter, 0.1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiter, timeout=5.0)
    assert waiter.cancelled()
    # The store keeps working and the rollout is untouched.
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "preparing"


async def test_already_finished_returns_immediately(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(5.0)
    rollout = await store.start_rollout(input="x")
    await store.update_rollout(rollout.rollout_id, status="succeeded")
    for timeout in (None, 5.0) if traits.max_wait_timeout is None else (5.0,):
        started = time.perf_counter()
        result = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=timeout)
        assert time.perf_counter() - started < 0.05
        assert [r.rollout_id for r in result] == [rollout.rollout_id]
        assert result[0].status == "succeeded"


async def test_rollouts_finishing_at_different_times(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(5.0)
    rollouts = [await store.start_rollout(input=i) for i in range(3)]
    finishers = [
        asyncio.create_task(_finish_after(store, r.rollout_id, delay, status))
        for r, delay, status in zip(rollouts, (0.15, 0.05, 0.1), ("succeeded", "failed", "cancelled"), strict=True)
    ]
    started = time.perf_counter()
    result = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=5.0)
    elapsed = time.perf_counter() - started
    await asyncio.gather(*finishers)
    assert [r.rollout_id for r in result] == [r.rollout_id for r in rollouts]
    assert [r.status for r in result] == ["succeeded", "failed", "cancelled"]
    assert 0.14 <= elapsed < 0.15 + 0.2


async def test_partial_results_on_timeout(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(0.3)
    quick = await store.start_rollout(input="quick")
    slow = await store.start_rollout(input="slow")
    finisher = asyncio.create_task(_finish_after(store, quick.rollout_id, 0.05))
    started = time.perf_counter()
    result = await store.wait_for_rollouts(rollout_ids=[slow.rollout_id, quick.rollout_id], timeout=0.3)
    elapsed = time.perf_counter() - started
    await finisher
    assert [r.rollout_id for r in result] == [quick.rollout_id]
    assert 0.25 <= elapsed < 0.6


async def test_concurrent_waiters_on_one_rollout(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(5.0)
    rollout = await store.start_rollout(input="x")
    waiters = [
        asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=5.0)) for _ in range(5)
    ]
    await asyncio.sleep(0.215)
    assert not any(w.done() for w in waiters)
    latency = await _wake_latency(waiters, store.update_rollout(rollout.rollout_id, status="succeeded"))
    assert latency < EVENT_LATENCY
    results = [w.result() for w in waiters]
    assert all([r.rollout_id for r in result] == [rollout.rollout_id] for result in results)


async def test_unknown_ids(store: Any) -> None:
    started = time.perf_counter()
    assert await store.wait_for_rollouts(rollout_ids=["ro-unknown"], timeout=0.1) == []
    assert time.perf_counter() - started < 0.2


async def test_unknown_ids_with_no_timeout_return_immediately(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(None)
    started = time.perf_counter()
    result = await asyncio.wait_for(
        store.wait_for_rollouts(rollout_ids=["ro-unknown-1", "ro-unknown-2"], timeout=None), timeout=5.0
    )
    assert result == []
    assert time.perf_counter() - started < 0.2


async def test_mixed_known_and_unknown_ids(store: Any) -> None:
    finished = await store.start_rollout(input="x")
    unfinished = await store.start_rollout(input="y")
    await store.update_rollout(finished.rollout_id, status="failed")
    result = await store.wait_for_rollouts(
        rollout_ids=["ro-unknown", finished.rollout_id, unfinished.rollout_id], timeout=0.1
    )
    assert [(r.rollout_id, r.status) for r in result] == [(finished.rollout_id, "failed")]


async def test_result_order_follows_requested_ids(store: Any) -> None:
    rollouts = [await store.start_rollout(input=i) for i in range(3)]
    for rollout in rollouts:
        await store.update_rollout(rollout.rollout_id, status="succeeded")
    order = [rollouts[2].rollout_id, rollouts[0].rollout_id, rollouts[1].rollout_id]
    result = await store.wait_for_rollouts(rollout_ids=order, timeout=0)
    assert [r.rollout_id for r in result] == order


async def test_requeuing_is_not_finished(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    await store.update_rollout(rollout.rollout_id, status="requeuing")
    assert await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.1) == []
    queued = await store.enqueue_rollout(input="q")
    assert await store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=0) == []


async def test_wait_does_not_mutate(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    before = (await store.get_rollout_by_id(rollout.rollout_id)).model_dump()
    await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.05)
    after = (await store.get_rollout_by_id(rollout.rollout_id)).model_dump()
    assert after == before


async def test_wait_does_not_busy_wait(store: Any, traits: BackendTraits) -> None:
    traits.require_wait_timeout(0.5)
    rollout = await store.start_rollout(input="x")
    cpu_before = time.process_time()
    started = time.perf_counter()
    assert await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.5) == []
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    assert wall >= 0.45
    assert cpu < 0.25, f"waiting 0.5 s burnt {cpu:.2f} s of CPU"


async def test_waiter_woken_by_another_thread(store: Any, traits: BackendTraits) -> None:
    traits.require("thread_safe")
    traits.require_wait_timeout(None)
    rollout = await store.start_rollout(input="x")
    waiter = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=None))
    await _wait_blocked(waiter)
    done_at: list[float] = []
    waiter.add_done_callback(lambda _: done_at.append(time.perf_counter()))

    def finish(_: int) -> float:
        asyncio.run(store.update_rollout(rollout.rollout_id, status="succeeded"))
        return time.perf_counter()

    finished_at = (await asyncio.to_thread(run_in_threads, 1, finish))[0]
    result = await asyncio.wait_for(waiter, timeout=5.0)
    await asyncio.sleep(0)  # let the done callback run
    assert done_at and done_at[0] - finished_at < EVENT_LATENCY
    assert [r.status for r in result] == ["succeeded"]
