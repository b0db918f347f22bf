"""SharedMemoryExecutionStrategy (with the reference's quirks fixed)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

from rollouthub.execution import SharedMemoryExecutionStrategy, ThreadingEvent
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.threading import LightningStoreThreaded


def test_validation_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError):
        SharedMemoryExecutionStrategy(main_thread="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SharedMemoryExecutionStrategy(n_runners=2, main_thread="runner")
    assert SharedMemoryExecutionStrategy().managed_store is True
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    assert SharedMemoryExecutionStrategy().managed_store is False
    assert SharedMemoryExecutionStrategy(managed_store=True).managed_store is True
    assert SharedMemoryExecutionStrategy.alias == "shm"


def test_algorithm_on_main_thread_stops_runners() -> None:
    seen: List[Any] = []
    lock = threading.Lock()

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        seen.append(("algo", threading.current_thread() is threading.main_thread(), type(store)))
        rollout = await store.enqueue_rollout(input=1)
        done = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=10)
        assert done and done[0].status == "succeeded"

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        with lock:
            seen.append(("runner", worker_id, threading.current_thread().name))
        while not event.is_set():
            claimed = await store.dequeue_rollout(worker_id=f"Worker-{worker_id}")
            if claimed is not None:
                await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
            await asyncio.sleep(0.01)
        with lock:
            seen.append(("stopped", worker_id))

    store = InMemoryLightningStore()
    start = time.monotonic()
    SharedMemoryExecutionStrategy(n_runners=3, main_thread="algorithm", poll_interval=0.01).execute(
        algorithm, runner, store
    )
    assert time.monotonic() - start < 5
    algo_entries = [s for s in seen if s[0] == "algo"]
    assert algo_entries == [("algo", True, LightningStoreThreaded)]
    assert sorted(s[1] for s in seen if s[0] == "runner") == [0, 1, 2]
    assert sorted(s[2] for s in seen if s[0] == "runner") == ["runner-0", "runner-1", "runner-2"]
    assert sorted(s[1] for s in seen if s[0] == "stopped") == [0, 1, 2]


def test_runner_on_main_thread_stops_when_algorithm_finishes() -> None:
    stores: List[Any] = []

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        stores.append(store)
        await asyncio.sleep(0.05)

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        stores.append(store)
        assert threading.current_thread() is threading.main_thread()
        while not event.is_set():
            await asyncio.sleep(0.01)

    store = InMemoryLightningStore()
    SharedMemoryExecutionStrategy(managed_store=False, poll_interval=0.01).execute(algorithm, runner, store)
    assert stores == [store, store] or (stores[0] is store and stores[1] is store)


def test_unresponsive_bundle_is_cancelled_then_abandoned() -> None:
    cancelled: List[int] = []

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        return None

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        if worker_id == 0:  # ignores the event but honours cancellation
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(worker_id)
                raise
        else:  # ignores cancellation too
            while True:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.append(worker_id)

    strategy = SharedMemoryExecutionStrategy(
        n_runners=2, main_thread="algorithm", graceful_delay=0.2, join_timeout=3, poll_interval=0.01
    )
    start = time.monotonic()
    strategy.execute(algorithm, runner, InMemoryLightningStore())
    elapsed = time.monotonic() - start
    assert sorted(set(cancelled)) == [0, 1]
    assert elapsed < 3


def test_runner_exception_stops_algorithm_and_is_reraised() -> None:
    stopped: List[bool] = []

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        while not event.is_set():
            await asyncio.sleep(0.01)
        stopped.append(True)

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        raise RuntimeError(f"runner {worker_id} broke")

    with pytest.raises(RuntimeError, match="broke"):
        SharedMemoryExecutionStrategy(n_runners=2, main_thread="algorithm", poll_interval=0.01).execute(
            algorithm, runner, InMemoryLightningStore()
        )
    assert stopped == [True]


def test_algorithm_exception_is_reraised_and_runners_stop() -> None:
    stopped: List[int] = []

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        raise ValueError("algorithm broke")

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        while not event.is_set():
            await asyncio.sleep(0.01)
        stopped.append(worker_id)

    with pytest.raises(ValueError, match="algorithm broke"):
        SharedMemoryExecutionStrategy(n_runners=2, main_thread="algorithm", poll_interval=0.01).execute(
            algorithm, runner, InMemoryLightningStore()
        )
    assert sorted(stopped) == [0, 1]


def test_keyboard_interrupt_on_main_thread_is_cooperative(caplog: pytest.LogCaptureFixture) -> None:
    stopped: List[int] = []

    async def algorithm(store: Any, event: ThreadingEvent) -> None:
        await asyncio.sleep(0.05)
        raise KeyboardInterrupt

    async def runner(store: Any, worker_id: int, event: ThreadingEvent) -> None:
        while not event.is_set():
            await asyncio.sleep(0.01)
        stopped.append(worker_id)

    SharedMemoryExecutionStrategy(n_runners=1, main_thread="algorithm", poll_interval=0.01).execute(
        algorithm, runner, InMemoryLightningStore()
    )
    assert stopped == [0]
    assert "KeyboardInterrupt received on main thread" in caplog.text
