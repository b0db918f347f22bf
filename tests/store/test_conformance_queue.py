"""Conformance: the rollout queue."""

from __future__ import annotations

import asyncio
from typing import Any

from rollouthub.types import AttemptedRollout, EnqueueRolloutRequest, RolloutConfig
from tests.store.helpers import ids_of


async def test_dequeue_returns_attempted_rollout(store: Any) -> None:
    rollout = await store.enqueue_rollout(input={"q": 1}, mode="train", metadata={"m": 1})
    claimed = await store.dequeue_rollout()
    assert type(claimed) is AttemptedRollout
    assert claimed.rollout_id == rollout.rollout_id
    assert claimed.status == "preparing"
    assert claimed.input == {"q": 1}
    assert claimed.mode == "train"
    assert claimed.metadata == {"m": 1}
    assert claimed.attempt.rollout_id == rollout.rollout_id
    assert claimed.attempt.attempt_id.startswith("at-")
    assert claimed.attempt.sequence_id == 1
    assert claimed.attempt.status == "preparing"
    assert claimed.attempt.worker_id is None
    assert claimed.attempt.start_time >= rollout.start_time
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.status == "preparing"
    assert fetched.attempt == claimed.attempt


async def test_dequeue_skips_rollouts_finished_while_queued(store: Any) -> None:
    first = await store.enqueue_rollout(input=1)
    second = await store.enqueue_rollout(input=2)
    third = await store.enqueue_rollout(input=3)
    fourth = await store.enqueue_rollout(input=4)
    await store.update_rollout(first.rollout_id, status="succeeded")
    await store.update_rollout(second.rollout_id, status="failed")
    await store.update_rollout(fourth.rollout_id, status="cancelled")

    claimed = await store.dequeue_rollout()
    assert claimed is not None
    assert claimed.rollout_id == third.rollout_id
    assert claimed.status == "preparing"
    assert await store.dequeue_rollout() is None

    assert (await store.get_rollout_by_id(first.rollout_id)).status == "succeeded"
    assert (await store.get_rollout_by_id(second.rollout_id)).status == "failed"
    assert (await store.get_rollout_by_id(fourth.rollout_id)).status == "cancelled"
    assert list(await store.query_attempts(first.rollout_id)) == []
    assert list(await store.query_attempts(fourth.rollout_id)) == []


async def test_dequeue_is_fifo(store: Any) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(5)]
    claimed = [await store.dequeue_rollout() for _ in range(5)]
    assert [c.rollout_id for c in claimed] == ids_of(created)
    assert [c.input for c in claimed] == list(range(5))


async def test_empty_queue_returns_none_repeatedly(store: Any) -> None:
    for _ in range(3):
        assert await store.dequeue_rollout() is None
    assert await store.dequeue_many_rollouts(limit=3) == []


async def test_requeuing_puts_rollout_back_with_second_attempt(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="retry-me")
    first = await store.dequeue_rollout()
    assert first is not None and first.attempt.sequence_id == 1
    assert await store.dequeue_rollout() is None

    updated = await store.update_rollout(rollout.rollout_id, status="requeuing")
    assert updated.status == "requeuing"
    second = await store.dequeue_rollout()
    assert second is not None
    assert second.rollout_id == rollout.rollout_id
    assert second.status == "preparing"
    assert second.attempt.sequence_id == 2
    assert second.attempt.status == "preparing"
    assert second.attempt.attempt_id != first.attempt.attempt_id
    assert await store.dequeue_rollout() is None
    attempts = await store.query_attempts(rollout.rollout_id)
    assert [a.sequence_id for a in attempts] == [1, 2]


async def test_update_to_queuing_reenqueues_at_tail(store: Any) -> None:
    first = await store.enqueue_rollout(input="first")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == first.rollout_id
    second = await store.enqueue_rollout(input="second")
    await store.update_rollout(first.rollout_id, status="queuing")
    order = [await store.dequeue_rollout() for _ in range(2)]
    assert [o.rollout_id for o in order] == [second.rollout_id, first.rollout_id]
    assert order[1].attempt.sequence_id == 2
    assert await store.dequeue_rollout() is None


async def test_repeated_requeue_does_not_duplicate_claims(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    # Already queued: setting a queuing status again must not make it claimable twice.
    await store.update_rollout(rollout.rollout_id, status="requeuing")
    await store.update_rollout(rollout.rollout_id, status="queuing")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    assert await store.dequeue_rollout() is None
    assert [a.sequence_id for a in await store.query_attempts(rollout.rollout_id)] == [1]


async def test_enqueue_many_preserves_order_and_fields(store: Any) -> None:
    requests = [
        EnqueueRolloutRequest(input={"i": 0}, mode="train", metadata={"n": 0}),
        EnqueueRolloutRequest(
            input={"i": 1},
            mode="val",
            resources_id="rs-given",
            config=RolloutConfig(max_attempts=3, retry_condition=["failed"]),
        ),
        EnqueueRolloutRequest(input={"i": 2}, mode="test", metadata={"n": 2}, config=RolloutConfig(timeout_seconds=9)),
    ]
    created = await store.enqueue_many_rollouts(requests)
    assert len(created) == 3
    assert [r.input for r in created] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [r.mode for r in created] == ["train", "val", "test"]
    assert [r.metadata for r in created] == [{"n": 0}, {}, {"n": 2}]
    assert created[1].resources_id == "rs-given"
    assert created[0].resources_id is None
    assert created[0].config == RolloutConfig()
    assert created[1].config == RolloutConfig(max_attempts=3, retry_condition=["failed"])
    assert created[2].config == RolloutConfig(timeout_seconds=9)
    assert all(r.status == "queuing" and r.rollout_id.startswith("ro-") for r in created)
    assert len({r.rollout_id for r in created}) == 3

    for original in created:
        fetched = await store.get_rollout_by_id(original.rollout_id)
        assert fetched == original

    claimed = [await store.dequeue_rollout() for _ in range(3)]
    assert [c.rollout_id for c in claimed] == ids_of(created)
    assert claimed[1].config == RolloutConfig(max_attempts=3, retry_condition=["failed"])
    assert await store.dequeue_rollout() is None


async def test_enqueue_many_empty(store: Any) -> None:
    assert list(await store.enqueue_many_rollouts([])) == []
    assert (await store.query_rollouts()).total == 0


async def test_enqueue_many_then_single_keeps_fifo(store: Any) -> None:
    single = await store.enqueue_rollout(input="single-1")
    batch = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=f"b{i}") for i in range(3)])
    last = await store.enqueue_rollout(input="single-2")
    expected = [single.rollout_id, *ids_of(batch), last.rollout_id]
    claimed = await store.dequeue_many_rollouts(limit=10)
    assert ids_of(claimed) == expected


async def test_dequeue_many_with_worker(store: Any) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(4)]
    first_batch = await store.dequeue_many_rollouts(limit=2, worker_id="worker-many")
    assert ids_of(first_batch) == ids_of(created[:2])
    for claimed in first_batch:
        assert type(claimed) is AttemptedRollout
        assert claimed.status == "preparing"
        assert claimed.attempt.worker_id == "worker-many"
        assert claimed.attempt.sequence_id == 1
        stored = await store.get_latest_attempt(claimed.rollout_id)
        assert stored.worker_id == "worker-many"
    rest = await store.dequeue_many_rollouts(limit=5, worker_id="worker-many")
    assert ids_of(rest) == ids_of(created[2:])
    assert list(await store.dequeue_many_rollouts(limit=5, worker_id="worker-many")) == []


async def test_dequeue_many_skips_stale_ids(store: Any) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(5)]
    await store.update_rollout(created[0].rollout_id, status="cancelled")
    await store.update_rollout(created[2].rollout_id, status="succeeded")
    claimed = await store.dequeue_many_rollouts(limit=2)
    assert ids_of(claimed) == [created[1].rollout_id, created[3].rollout_id]
    remaining = await store.dequeue_many_rollouts(limit=2)
    assert ids_of(remaining) == [created[4].rollout_id]


async def test_dequeue_many_non_positive_limit(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="keep")
    assert list(await store.dequeue_many_rollouts(limit=0)) == []
    assert list(await store.dequeue_many_rollouts(limit=-3)) == []
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id


async def test_start_attempt_leaves_stale_queue_entry_that_is_skipped(store: Any) -> None:
    queued = await store.enqueue_rollout(input="q")
    started = await store.start_attempt(queued.rollout_id)
    assert started.status == "preparing"
    assert started.attempt.sequence_id == 1
    assert await store.dequeue_rollout() is None
    assert [a.sequence_id for a in await store.query_attempts(queued.rollout_id)] == [1]


async def test_concurrent_dequeue_claims_each_rollout_once(store: Any) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(20)]
    results = await asyncio.gather(*(store.dequeue_rollout() for _ in range(30)))
    claimed = [r for r in results if r is not None]
    assert len(claimed) == 20
    assert sum(r is None for r in results) == 10
    assert sorted(ids_of(claimed)) == sorted(ids_of(created))
    for rollout in created:
        attempts = await store.query_attempts(rollout.rollout_id)
        assert attempts.total == 1


async def test_concurrent_enqueue_creates_distinct_rollouts(store: Any) -> None:
    created = await asyncio.gather(*(store.enqueue_rollout(input={"n": i}) for i in range(50)))
    ids = ids_of(created)
    assert len(set(ids)) == 50
    stored = await store.query_rollouts()
    assert stored.total == 50
    assert sorted(ids_of(stored)) == sorted(ids)
    assert sorted(r.input["n"] for r in stored) == list(range(50))
    claimed = await store.dequeue_many_rollouts(limit=100)
    assert sorted(ids_of(claimed)) == sorted(ids)
