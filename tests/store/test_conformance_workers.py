"""Conformance: workers."""

from __future__ import annotations

import time
from typing import Any

from rollouthub.types import Worker
from tests.store.backends import BackendTraits
from tests.store.conftest import FakeClock


async def test_update_worker_creates_unknown_worker(store: Any) -> None:
    before = time.time()
    worker = await store.update_worker("worker-1", heartbeat_stats={"cpu": 0.5, "gpu": [1, 2]})
    after = time.time()
    assert isinstance(worker, Worker)
    assert worker.worker_id == "worker-1"
    assert worker.status == "unknown"
    assert worker.heartbeat_stats == {"cpu": 0.5, "gpu": [1, 2]}
    assert isinstance(worker.last_heartbeat_time, float)
    assert before <= worker.last_heartbeat_time <= after
    assert worker.last_dequeue_time is None
    assert worker.last_busy_time is None
    assert worker.last_idle_time is None
    assert worker.current_rollout_id is None
    assert worker.current_attempt_id is None
    assert await store.get_worker_by_id("worker-1") == worker


async def test_update_worker_without_stats_keeps_previous(store: Any) -> None:
    first = await store.update_worker("worker-1", heartbeat_stats={"cpu": 1})
    second = await store.update_worker("worker-1")
    assert second.heartbeat_stats == {"cpu": 1}
    assert second.last_heartbeat_time >= first.last_heartbeat_time
    third = await store.update_worker("worker-1", heartbeat_stats={"mem": 2})
    assert third.heartbeat_stats == {"mem": 2}


async def test_update_worker_new_without_stats(store: Any) -> None:
    worker = await store.update_worker("worker-bare")
    assert worker.status == "unknown"
    assert worker.heartbeat_stats is None
    assert isinstance(worker.last_heartbeat_time, float)


async def test_update_worker_none_stats_raises(store: Any, traits: BackendTraits) -> None:
    with traits.raises(TypeError):
        await store.update_worker("worker-1", heartbeat_stats=None)


async def test_update_worker_copies_stats(store: Any) -> None:
    stats = {"cpu": 1}
    await store.update_worker("worker-1", heartbeat_stats=stats)
    stats["cpu"] = 99
    worker = await store.get_worker_by_id("worker-1")
    assert worker.heartbeat_stats == {"cpu": 1}


async def test_get_worker_by_id_missing(store: Any) -> None:
    assert await store.get_worker_by_id("missing") is None


async def test_worker_lifecycle_through_dequeue_and_attempt_updates(store: Any) -> None:
    await store.update_worker("worker-1", heartbeat_stats={"cpu": 0.1})
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout(worker_id="worker-1")
    assert claimed is not None
    assert claimed.attempt.worker_id == "worker-1"

    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, worker_id="worker-1")
    busy = await store.get_worker_by_id("worker-1")
    assert busy.status == "busy"
    assert busy.current_rollout_id == rollout.rollout_id
    assert busy.current_attempt_id == claimed.attempt.attempt_id
    assert isinstance(busy.last_dequeue_time, float)
    assert isinstance(busy.last_busy_time, float)
    assert busy.last_busy_time >= busy.last_dequeue_time
    first_heartbeat = busy.last_heartbeat_time

    beat = await store.update_worker("worker-1", heartbeat_stats={"cpu": 0.2})
    assert beat.last_heartbeat_time >= first_heartbeat
    assert beat.status == "busy"
    assert beat.current_rollout_id == rollout.rollout_id

    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    idle = await store.get_worker_by_id("worker-1")
    assert idle.status == "idle"
    assert idle.current_rollout_id is None
    assert idle.current_attempt_id is None
    assert isinstance(idle.last_idle_time, float)
    assert idle.last_idle_time >= idle.last_busy_time
    assert idle.heartbeat_stats == {"cpu": 0.2}


async def test_status_syncs_never_overwrite_heartbeat(store: Any) -> None:
    heartbeat = await store.update_worker("worker-hb", heartbeat_stats={"load": 3})
    rollout = await store.start_rollout(input="x", worker_id="worker-hb")
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="running")
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="failed")
    worker = await store.get_worker_by_id("worker-hb")
    assert worker.status == "idle"
    assert worker.heartbeat_stats == {"load": 3}
    assert worker.last_heartbeat_time == heartbeat.last_heartbeat_time


async def test_start_rollout_with_worker_marks_busy(store: Any) -> None:
    rollout = await store.start_rollout(input="x", worker_id="worker-s")
    assert rollout.attempt.worker_id == "worker-s"
    worker = await store.get_worker_by_id("worker-s")
    assert worker is not None
    assert worker.status == "busy"
    assert worker.current_rollout_id == rollout.rollout_id
    assert worker.current_attempt_id == rollout.attempt.attempt_id
    assert isinstance(worker.last_busy_time, float)
    assert worker.last_dequeue_time is None
    assert worker.last_heartbeat_time is None


async def test_dequeue_with_worker_marks_busy(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout(worker_id="worker-d")
    assert claimed is not None and claimed.attempt.worker_id == "worker-d"
    stored_attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert stored_attempt.worker_id == "worker-d"
    worker = await store.get_worker_by_id("worker-d")
    assert worker.status == "busy"
    assert worker.current_rollout_id == rollout.rollout_id
    assert worker.current_attempt_id == claimed.attempt.attempt_id
    assert isinstance(worker.last_dequeue_time, float)
    assert isinstance(worker.last_busy_time, float)
    assert worker.last_busy_time >= worker.last_dequeue_time


async def test_start_attempt_with_worker_marks_busy(store: Any) -> None:
    rollout = await store.start_rollout(input="x", worker_id="worker-old")
    retried = await store.start_attempt(rollout.rollout_id, worker_id="worker-new")
    assert retried.attempt.worker_id == "worker-new"
    assert retried.attempt.sequence_id == 2
    worker = await store.get_worker_by_id("worker-new")
    assert worker.status == "busy"
    assert worker.current_rollout_id == rollout.rollout_id
    assert worker.current_attempt_id == retried.attempt.attempt_id
    assert worker.last_dequeue_time is None


async def test_dequeue_many_associates_worker_with_last_claim(store: Any) -> None:
    for i in range(3):
        await store.enqueue_rollout(input=i)
    claimed = await store.dequeue_many_rollouts(limit=3, worker_id="worker-m")
    assert len(claimed) == 3
    worker = await store.get_worker_by_id("worker-m")
    assert worker.status == "busy"
    assert worker.current_rollout_id == claimed[-1].rollout_id
    assert worker.current_attempt_id == claimed[-1].attempt.attempt_id
    assert isinstance(worker.last_dequeue_time, float)


async def test_failed_attempt_marks_worker_idle(store: Any) -> None:
    rollout = await store.start_rollout(input="x", worker_id="worker-f")
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    worker = await store.get_worker_by_id("worker-f")
    assert worker.status == "idle"
    assert worker.current_rollout_id is None
    assert worker.current_attempt_id is None
    assert isinstance(worker.last_idle_time, float)


async def test_timeout_or_unresponsive_attempt_marks_worker_unknown(store: Any) -> None:
    first = await store.start_rollout(input="x", worker_id="worker-t")
    await store.update_attempt(first.rollout_id, "latest", status="timeout")
    worker = await store.get_worker_by_id("worker-t")
    assert worker.status == "unknown"
    assert worker.current_rollout_id is None
    assert worker.current_attempt_id is None
    assert isinstance(worker.last_idle_time, float)

    second = await store.start_rollout(input="y", worker_id="worker-u")
    await store.update_attempt(second.rollout_id, "latest", status="unresponsive")
    worker = await store.get_worker_by_id("worker-u")
    assert worker.status == "unknown"
    assert worker.current_rollout_id is None


async def test_update_attempt_with_status_syncs_attempt_worker(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout(worker_id="worker-a")
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="running")
    worker = await store.get_worker_by_id("worker-a")
    assert worker.status == "busy"
    assert worker.current_attempt_id == claimed.attempt.attempt_id


async def test_update_attempt_worker_id_reassigns(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    updated = await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, worker_id="worker-late")
    assert updated.worker_id == "worker-late"
    worker = await store.get_worker_by_id("worker-late")
    assert worker.status == "busy"
    assert worker.current_rollout_id == rollout.rollout_id
    assert worker.current_attempt_id == rollout.attempt.attempt_id


async def test_empty_dequeue_marks_worker_idle_but_keeps_current_ids(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout(worker_id="worker-e")
    assert claimed is not None
    assert await store.dequeue_rollout(worker_id="worker-e") is None
    worker = await store.get_worker_by_id("worker-e")
    assert worker.status == "idle"
    assert isinstance(worker.last_idle_time, float)
    assert isinstance(worker.last_dequeue_time, float)
    # Reference quirk kept: the empty dequeue does not clear the current ids.
    assert worker.current_rollout_id == rollout.rollout_id
    assert worker.current_attempt_id == claimed.attempt.attempt_id


async def test_empty_dequeue_creates_idle_worker(store: Any) -> None:
    assert await store.dequeue_rollout(worker_id="worker-new") is None
    worker = await store.get_worker_by_id("worker-new")
    assert worker is not None
    assert worker.status == "idle"
    assert isinstance(worker.last_dequeue_time, float)
    assert isinstance(worker.last_idle_time, float)
    assert worker.current_rollout_id is None


async def test_empty_dequeue_many_marks_worker_idle(store: Any, traits: BackendTraits) -> None:
    assert list(await store.dequeue_many_rollouts(limit=2, worker_id="worker-y")) == []
    assert (await store.get_worker_by_id("worker-y")).status == "idle"
    assert list(await store.dequeue_many_rollouts(limit=0, worker_id="worker-z")) == []
    if traits.zero_limit_dequeue_records_worker:
        assert (await store.get_worker_by_id("worker-z")).status == "idle"
    else:
        assert await store.get_worker_by_id("worker-z") is None


async def test_empty_dequeue_stamps_idle_time_only_on_transition(
    fake_clock: FakeClock, store: Any, traits: BackendTraits
) -> None:
    traits.require("in_process_clock")
    t0 = fake_clock.now
    assert await store.dequeue_rollout(worker_id="worker-i") is None
    first = await store.get_worker_by_id("worker-i")
    assert first.status == "idle"
    assert first.last_dequeue_time == t0
    assert first.last_idle_time == t0

    fake_clock.advance(7.0)
    assert await store.dequeue_rollout(worker_id="worker-i") is None
    second = await store.get_worker_by_id("worker-i")
    assert second.status == "idle"
    assert second.last_dequeue_time == t0 + 7.0
    assert second.last_idle_time == t0


async def test_worker_timestamps_follow_clock(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    await store.update_worker("worker-c", heartbeat_stats={})
    t_heartbeat = fake_clock.now
    fake_clock.advance(1.0)
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout(worker_id="worker-c")
    t_dequeue = fake_clock.now
    fake_clock.advance(1.0)
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    t_done = fake_clock.now
    worker = await store.get_worker_by_id("worker-c")
    assert worker.last_heartbeat_time == t_heartbeat
    assert worker.last_dequeue_time == t_dequeue
    assert worker.last_busy_time == t_dequeue
    assert worker.last_idle_time == t_done
    assert worker.status == "idle"


# ---------------------------------------------------------------------------------------------------------------------
# query_workers
# ---------------------------------------------------------------------------------------------------------------------


async def test_query_workers_filters_sort_and_pagination(store: Any) -> None:
    await store.update_worker("gpu-worker-a", heartbeat_stats={"n": 1})
    await store.start_rollout(input="b", worker_id="gpu-worker-b")
    idle_rollout = await store.start_rollout(input="c", worker_id="cpu-worker-c")
    await store.update_attempt(idle_rollout.rollout_id, "latest", status="succeeded")

    everything = await store.query_workers()
    assert everything.total == 3
    assert sorted(w.worker_id for w in everything) == ["cpu-worker-c", "gpu-worker-a", "gpu-worker-b"]

    busy = await store.query_workers(status_in=["busy"])
    assert [w.worker_id for w in busy] == ["gpu-worker-b"]

    gpu = await store.query_workers(worker_id_contains="gpu")
    assert sorted(w.worker_id for w in gpu) == ["gpu-worker-a", "gpu-worker-b"]

    desc = await store.query_workers(sort_by="worker_id", sort_order="desc")
    assert [w.worker_id for w in desc] == ["gpu-worker-b", "gpu-worker-a", "cpu-worker-c"]

    page = await store.query_workers(sort_by="worker_id", limit=1, offset=1)
    assert [w.worker_id for w in page] == ["gpu-worker-a"]
    assert page.total == 3 and page.limit == 1 and page.offset == 1

    anded = await store.query_workers(status_in=["busy"], worker_id_contains="cpu")
    assert list(anded) == []
    ored = await store.query_workers(
        status_in=["busy"], worker_id_contains="cpu", filter_logic="or", sort_by="worker_id"
    )
    assert [w.worker_id for w in ored] == ["cpu-worker-c", "gpu-worker-b"]
    assert ored.total == 2

    idle_or_unknown = await store.query_workers(status_in=["idle", "unknown"], sort_by="worker_id")
    assert [w.worker_id for w in idle_or_unknown] == ["cpu-worker-c", "gpu-worker-a"]
