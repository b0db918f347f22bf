"""Conformance: status machines, retries, watchdog and debounce."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rollouthub.types import LLM, EnqueueRolloutRequest, RolloutConfig
from tests.store.backends import BackendTraits
from tests.store.conftest import FakeClock
from tests.store.helpers import make_span

# ---------------------------------------------------------------------------------------------------------------------
# end_time bookkeeping
# ---------------------------------------------------------------------------------------------------------------------


async def test_update_rollout_terminal_status_sets_end_time(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    updated = await store.update_rollout(rollout.rollout_id, status="succeeded")
    assert updated.status == "succeeded"
    assert updated.end_time is not None
    assert updated.end_time > updated.start_time
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.end_time == updated.end_time


@pytest.mark.parametrize("status", ["queuing", "requeuing", "preparing", "running"])
async def test_update_rollout_non_terminal_status_keeps_end_time_null(store: Any, status: str) -> None:
    rollout = await store.enqueue_rollout(input="x")
    updated = await store.update_rollout(rollout.rollout_id, status=status)
    assert updated.end_time is None


async def test_end_time_refreshed_on_every_terminal_write_and_never_cleared(
    fake_clock: FakeClock, store: Any, traits: BackendTraits
) -> None:
    traits.require("in_process_clock")
    rollout = await store.enqueue_rollout(input="x")
    fake_clock.advance(1.0)
    first = await store.update_rollout(rollout.rollout_id, status="succeeded")
    assert first.end_time == fake_clock.now
    fake_clock.advance(1.0)
    second = await store.update_rollout(rollout.rollout_id, status="cancelled")
    assert second.end_time == fake_clock.now
    fake_clock.advance(1.0)
    requeued = await store.update_rollout(rollout.rollout_id, status="requeuing")
    assert requeued.status == "requeuing"
    assert requeued.end_time == second.end_time


async def test_update_attempt_end_time_and_failure_propagation(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout()
    rid, aid = rollout.rollout_id, claimed.attempt.attempt_id

    running = await store.update_attempt(rid, aid, status="running")
    assert running.status == "running"
    assert running.end_time is None
    assert (await store.get_rollout_by_id(rid)).status == "running"

    failed = await store.update_attempt(rid, aid, status="failed")
    assert failed.status == "failed"
    assert failed.end_time is not None
    assert failed.end_time >= failed.start_time
    failed_rollout = await store.get_rollout_by_id(rid)
    assert failed_rollout.status == "failed"
    assert failed_rollout.end_time is not None
    assert failed_rollout.end_time >= failed.end_time


async def test_update_latest_attempt_succeeded(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    updated = await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    assert updated.attempt_id == rollout.attempt.attempt_id
    assert updated.status == "succeeded"
    assert updated.end_time is not None
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final.status == "succeeded"
    assert final.end_time is not None


@pytest.mark.parametrize("status", ["timeout", "unresponsive"])
async def test_timeout_like_attempt_status_has_no_end_time(store: Any, status: str) -> None:
    rollout = await store.start_rollout(input="x")
    updated = await store.update_attempt(rollout.rollout_id, "latest", status=status)
    assert updated.status == status
    assert updated.end_time is None
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final.status == "failed"
    assert final.end_time is not None


async def test_update_attempt_fields(store: Any) -> None:
    rollout = await store.start_rollout(input="x", worker_id="w-1")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    updated = await store.update_attempt(rid, aid, worker_id="", metadata={"a": 1}, last_heartbeat_time=123.5)
    assert updated.worker_id == ""
    assert updated.metadata == {"a": 1}
    assert updated.last_heartbeat_time == 123.5
    assert updated.status == "preparing"
    replaced = await store.update_attempt(rid, aid, metadata={"b": 2})
    assert replaced.metadata == {"b": 2}
    assert replaced.worker_id == ""
    assert replaced.last_heartbeat_time == 123.5
    stored = await store.get_latest_attempt(rid)
    assert stored == replaced


# ---------------------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------------------


async def test_update_attempt_errors(store: Any, traits: BackendTraits) -> None:
    queued = await store.enqueue_rollout(input="x")
    rid = queued.rollout_id
    with traits.raises(ValueError, match=f"^No attempts found for rollout {rid}$"):
        await store.update_attempt(rid, "latest", status="running")
    with traits.raises(ValueError, match=f"^No attempts found for rollout {rid}$"):
        await store.update_attempt(rid, "at-specific", status="running")
    with traits.raises(ValueError, match="^Rollout nonexistent not found$"):
        await store.update_attempt("nonexistent", "latest", status="running")
    started = await store.start_rollout(input="y")
    with traits.raises(ValueError, match=f"^Attempt at-missing not found for rollout {started.rollout_id}$"):
        await store.update_attempt(started.rollout_id, "at-missing", status="running")


async def test_update_rollout_unknown_id(store: Any, traits: BackendTraits) -> None:
    with traits.raises(ValueError, match="Item.*does not exist"):
        await store.update_rollout("ro-nonexistent", status="succeeded")
    assert await store.get_rollout_by_id("ro-nonexistent") is None


async def test_update_attempt_rejects_invalid_status(store: Any, traits: BackendTraits) -> None:
    import pydantic

    rollout = await store.start_rollout(input="x")
    with traits.raises(pydantic.ValidationError):
        await store.update_attempt(rollout.rollout_id, "latest", status="requeuing")
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "preparing"


# ---------------------------------------------------------------------------------------------------------------------
# start_attempt
# ---------------------------------------------------------------------------------------------------------------------


async def test_start_attempt_sequence_numbers(store: Any, traits: BackendTraits) -> None:
    rollout = await store.enqueue_rollout(input="x", config=RolloutConfig(max_attempts=1))
    first = await store.start_attempt(rollout.rollout_id)
    assert first.attempt.sequence_id == 1
    assert first.status == "preparing"
    assert first.attempt.status == "preparing"
    second = await store.start_attempt(rollout.rollout_id)
    third = await store.start_attempt(rollout.rollout_id)
    assert [second.attempt.sequence_id, third.attempt.sequence_id] == [2, 3]
    assert len({first.attempt.attempt_id, second.attempt.attempt_id, third.attempt.attempt_id}) == 3
    assert [a.sequence_id for a in await store.query_attempts(rollout.rollout_id)] == [1, 2, 3]
    with traits.raises(ValueError, match="^Rollout nonexistent not found$"):
        await store.start_attempt("nonexistent")


async def test_start_attempt_after_dequeue(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout()
    assert claimed.attempt.sequence_id == 1
    manual = await store.start_attempt(rollout.rollout_id)
    assert manual.attempt.sequence_id == 2
    assert (await store.get_latest_attempt(rollout.rollout_id)).attempt_id == manual.attempt.attempt_id


async def test_start_attempt_revives_finished_rollout(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "succeeded"
    retried = await store.start_attempt(rollout.rollout_id)
    assert retried.status == "preparing"
    assert retried.attempt.sequence_id == 2
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "preparing"


# ---------------------------------------------------------------------------------------------------------------------
# Propagation and retries
# ---------------------------------------------------------------------------------------------------------------------


async def test_only_latest_attempt_propagates(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid = rollout.rollout_id
    await store.start_attempt(rid)
    third = await store.start_attempt(rid)
    await store.update_attempt(rid, rollout.attempt.attempt_id, status="succeeded")
    assert (await store.get_rollout_by_id(rid)).status == "preparing"
    await store.update_attempt(rid, rollout.attempt.attempt_id, status="failed")
    assert (await store.get_rollout_by_id(rid)).status == "preparing"
    await store.update_attempt(rid, third.attempt.attempt_id, status="succeeded")
    assert (await store.get_rollout_by_id(rid)).status == "succeeded"


async def test_retry_requeues_and_old_attempt_updates_are_ignored(store: Any) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    rollout = await store.start_rollout(input="x", config=config)
    rid = rollout.rollout_id
    second = await store.start_attempt(rid)
    assert second.attempt.sequence_id == 2
    await store.update_attempt(rid, second.attempt.attempt_id, status="failed")
    requeued = await store.get_rollout_by_id(rid)
    assert requeued.status == "requeuing"
    assert requeued.end_time is None

    third = await store.dequeue_rollout()
    assert third is not None and third.rollout_id == rid
    assert third.attempt.sequence_id == 3
    await store.update_attempt(rid, second.attempt.attempt_id, status="succeeded")
    await store.update_attempt(rid, rollout.attempt.attempt_id, status="failed")
    assert (await store.get_rollout_by_id(rid)).status == "preparing"


async def test_full_retry_cycle_through_queue(store: Any) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout"])
    rollout = await store.enqueue_rollout(input="retry", config=config)
    outcomes = ["failed", "timeout", "failed"]
    expected_status = ["requeuing", "requeuing", "failed"]
    for sequence_id, (outcome, status) in enumerate(zip(outcomes, expected_status, strict=True), start=1):
        claimed = await store.dequeue_rollout()
        assert claimed is not None, f"attempt {sequence_id} was not re-enqueued"
        assert claimed.rollout_id == rollout.rollout_id
        assert claimed.attempt.sequence_id == sequence_id
        await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status=outcome)
        assert (await store.get_rollout_by_id(rollout.rollout_id)).status == status
    assert await store.dequeue_rollout() is None
    assert [a.status for a in await store.query_attempts(rollout.rollout_id)] == outcomes


async def test_non_retryable_failure_does_not_requeue(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x", config=RolloutConfig(max_attempts=3, retry_condition=["timeout"]))
    claimed = await store.dequeue_rollout()
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="failed")
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "failed"
    assert await store.dequeue_rollout() is None


async def test_recovery_after_unresponsive(store: Any) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.start_rollout(input="x", config=config)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, aid, status="unresponsive")
    assert (await store.get_rollout_by_id(rid)).status == "requeuing"

    await store.add_span(make_span(rid, aid, 1))
    assert (await store.get_latest_attempt(rid)).status == "running"
    assert (await store.get_rollout_by_id(rid)).status == "running"
    assert await store.dequeue_rollout() is None

    await store.update_attempt(rid, aid, status="succeeded")
    final = await store.get_rollout_by_id(rid)
    assert final.status == "succeeded"
    assert final.attempt.sequence_id == 1
    assert await store.dequeue_rollout() is None


async def test_recovered_rollout_failing_is_not_retried(store: Any) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.start_rollout(input="x", config=config)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, aid, status="unresponsive")
    await store.add_span(make_span(rid, aid, 1))
    await store.update_attempt(rid, aid, status="failed")
    assert (await store.get_rollout_by_id(rid)).status == "failed"
    assert await store.dequeue_rollout() is None
    assert (await store.query_attempts(rid)).total == 1


async def test_late_span_after_retry_was_dequeued(store: Any) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.start_rollout(input="x", config=config)
    rid, first_aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, first_aid, status="unresponsive")
    retry = await store.dequeue_rollout()
    assert retry is not None and retry.attempt.sequence_id == 2

    await store.add_span(make_span(rid, first_aid, 1))
    attempts = await store.query_attempts(rid)
    assert [a.status for a in attempts] == ["running", "preparing"]
    current = await store.get_rollout_by_id(rid)
    assert current.status == "preparing"
    assert current.attempt.sequence_id == 2


async def test_full_lifecycle(store: Any) -> None:
    rollout = await store.enqueue_rollout(input={"task": "full"})
    assert rollout.status == "queuing"
    claimed = await store.dequeue_rollout(worker_id="worker-full")
    rid, aid = rollout.rollout_id, claimed.attempt.attempt_id
    assert claimed.status == "preparing"

    sequence_id = await store.get_next_span_sequence_id(rid, aid)
    assert sequence_id == 1
    await store.add_span(make_span(rid, aid, sequence_id, name="first"))
    assert (await store.get_rollout_by_id(rid)).status == "running"
    assert (await store.get_latest_attempt(rid)).status == "running"

    done = await store.update_attempt(rid, aid, status="succeeded")
    assert done.end_time is not None and done.end_time >= done.start_time
    final = await store.get_rollout_by_id(rid)
    assert final.status == "succeeded"
    assert final.end_time is not None and final.end_time >= final.start_time
    assert final.attempt.status == "succeeded"
    assert [s.sequence_id for s in await store.query_spans(rid)] == [1]
    assert (await store.get_worker_by_id("worker-full")).status == "idle"


# ---------------------------------------------------------------------------------------------------------------------
# Watchdog — driven by the fake clock
# ---------------------------------------------------------------------------------------------------------------------


async def test_watchdog_timeout_requeues(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    config = RolloutConfig(timeout_seconds=0.1, max_attempts=2, retry_condition=["timeout"])
    rollout = await store.enqueue_rollout(input="x", config=config)
    claimed = await store.dequeue_rollout()
    rid, aid = rollout.rollout_id, claimed.attempt.attempt_id
    await store.update_attempt(rid, aid, status="running")

    fake_clock.advance(0.05)
    assert (await store.get_rollout_by_id(rid)).status == "running"
    fake_clock.advance(0.1)
    current = await store.get_rollout_by_id(rid)
    assert current.status == "requeuing"
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == "timeout"
    assert attempt.end_time is None

    retry = await store.dequeue_rollout()
    assert retry is not None and retry.rollout_id == rid
    assert retry.attempt.sequence_id == 2


async def test_watchdog_timeout_boundary_is_strict(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    rollout = await store.start_rollout(input="x", config=RolloutConfig(timeout_seconds=10.0))
    fake_clock.advance(10.0)
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "preparing"
    fake_clock.advance(0.5)
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "timeout"
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "failed"


async def test_watchdog_unresponsive_fails(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    config = RolloutConfig(unresponsive_seconds=0.2, max_attempts=2, retry_condition=["timeout"])
    rollout = await store.start_rollout(input="x", config=config)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_span(make_span(rid, aid, 1))
    assert (await store.get_latest_attempt(rid)).status == "running"

    fake_clock.advance(0.15)
    await store.add_span(make_span(rid, aid, 2))
    fake_clock.advance(0.15)
    assert (await store.get_latest_attempt(rid)).status == "running"
    fake_clock.advance(0.1)
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == "unresponsive"
    assert attempt.end_time is None
    final = await store.get_rollout_by_id(rid)
    assert final.status == "failed"
    assert final.end_time == fake_clock.now
    assert await store.dequeue_rollout() is None


async def test_watchdog_unresponsive_without_heartbeat(
    fake_clock: FakeClock, store: Any, traits: BackendTraits
) -> None:
    traits.require("in_process_clock")
    config = RolloutConfig(unresponsive_seconds=1.0, max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.enqueue_rollout(input="x", config=config)
    claimed = await store.dequeue_rollout()
    assert claimed.attempt.last_heartbeat_time is None
    fake_clock.advance(1.5)
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "unresponsive"
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "requeuing"
    retry = await store.dequeue_rollout()
    assert retry is not None and retry.attempt.sequence_id == 2


async def test_watchdog_marks_worker_unknown_with_single_sync_call(
    fake_clock: FakeClock, store: Any, traits: BackendTraits, monkeypatch: pytest.MonkeyPatch
) -> None:
    traits.require("in_process_clock", "collection_based")
    config = RolloutConfig(unresponsive_seconds=0.2)
    rollout = await store.enqueue_rollout(input="x", config=config)
    claimed = await store.dequeue_rollout(worker_id="worker-watch")
    rid, aid = rollout.rollout_id, claimed.attempt.attempt_id
    assert (await store.get_worker_by_id("worker-watch")).status == "busy"

    original = store._sync_workers_with_attempts
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return await original(*args, **kwargs)

    monkeypatch.setattr(store, "_sync_workers_with_attempts", spy)
    fake_clock.advance(0.25)
    await store.query_rollouts()

    assert len(calls) == 1
    args, kwargs = calls[0]
    assert kwargs == {}
    assert len(args) == 1
    attempts = list(args[0])
    assert [(a.rollout_id, a.attempt_id, a.status) for a in attempts] == [(rid, aid, "unresponsive")]

    worker = await store.get_worker_by_id("worker-watch")
    assert worker.status == "unknown"
    assert worker.current_rollout_id is None
    assert worker.current_attempt_id is None


async def test_watchdog_ignores_finished_and_non_latest(
    fake_clock: FakeClock, store: Any, traits: BackendTraits
) -> None:
    traits.require("in_process_clock")
    config = RolloutConfig(timeout_seconds=1.0)
    finished = await store.start_rollout(input="finished", config=config)
    await store.update_attempt(finished.rollout_id, "latest", status="running")
    await store.update_rollout(finished.rollout_id, status="succeeded")

    multi = await store.start_rollout(input="multi", config=config)
    await store.update_attempt(multi.rollout_id, multi.attempt.attempt_id, status="running")
    fake_clock.advance(0.8)
    newest = await store.start_attempt(multi.rollout_id)

    fake_clock.advance(0.5)  # first attempt of `multi` is 1.3 s old, the newest only 0.5 s
    await store.query_rollouts()
    assert (await store.get_latest_attempt(finished.rollout_id)).status == "running"
    assert (await store.get_rollout_by_id(finished.rollout_id)).status == "succeeded"
    multi_attempts = await store.query_attempts(multi.rollout_id)
    assert [a.status for a in multi_attempts] == ["running", "preparing"]
    assert (await store.get_rollout_by_id(multi.rollout_id)).status == "preparing"

    fake_clock.advance(0.6)
    assert (await store.get_latest_attempt(multi.rollout_id)).attempt_id == newest.attempt.attempt_id
    assert (await store.get_latest_attempt(multi.rollout_id)).status == "timeout"


async def test_wait_for_rollouts_runs_watchdog(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    rollout = await store.start_rollout(input="x", config=RolloutConfig(timeout_seconds=1.0))
    fake_clock.advance(2.0)
    finished = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0)
    assert [r.rollout_id for r in finished] == [rollout.rollout_id]
    assert finished[0].status == "failed"


async def _helper_rollout(store: Any) -> str:
    helper = await store.start_rollout(input="helper")
    return helper.rollout_id


TRIGGERING_CALLS: dict[str, Callable[[Any, str], Awaitable[Any]]] = {
    "start_rollout": lambda s, h: s.start_rollout(input="new"),
    "enqueue_rollout": lambda s, h: s.enqueue_rollout(input="new"),
    "enqueue_many_rollouts": lambda s, h: s.enqueue_many_rollouts([EnqueueRolloutRequest(input="new")]),
    "dequeue_rollout": lambda s, h: s.dequeue_rollout(),
    "dequeue_many_rollouts": lambda s, h: s.dequeue_many_rollouts(limit=2),
    "start_attempt": lambda s, h: s.start_attempt(h),
    "query_rollouts": lambda s, h: s.query_rollouts(),
    "get_rollout_by_id": lambda s, h: s.get_rollout_by_id(h),
    "query_attempts": lambda s, h: s.query_attempts(h),
    "get_latest_attempt": lambda s, h: s.get_latest_attempt(h),
    "update_resources": lambda s, h: s.update_resources("rs-watch", {}),
    "wait_for_rollouts": lambda s, h: s.wait_for_rollouts(rollout_ids=[h], timeout=0),
    "query_spans": lambda s, h: s.query_spans(h),
    "update_rollout": lambda s, h: s.update_rollout(h, metadata={"touched": True}),
    "update_attempt": lambda s, h: s.update_attempt(h, "latest", metadata={"touched": True}),
    "query_workers": lambda s, h: s.query_workers(),
}

NON_TRIGGERING_CALLS: dict[str, Callable[[Any, str], Awaitable[Any]]] = {
    "statistics": lambda s, h: s.statistics(),
    "add_resources": lambda s, h: s.add_resources({"llm": LLM(endpoint="http://x", model="m")}),
    "query_resources": lambda s, h: s.query_resources(),
    "get_resources_by_id": lambda s, h: s.get_resources_by_id("rs-any"),
    "get_latest_resources": lambda s, h: s.get_latest_resources(),
    "get_next_span_sequence_id": lambda s, h: s.get_next_span_sequence_id(h, "at-x"),
    "get_many_span_sequence_ids": lambda s, h: s.get_many_span_sequence_ids([(h, "at-x")]),
    "get_worker_by_id": lambda s, h: s.get_worker_by_id("w-any"),
    "update_worker": lambda s, h: s.update_worker("w-any", heartbeat_stats={}),
}


async def _raw_attempt_status(store: Any, rollout_id: str) -> str:
    """Read the attempt straight from the collections so that no watchdog scan is triggered."""
    async with store.collections.atomic(mode="r", labels=["attempts"]) as collections:
        attempt = await collections.attempts.get(filter={"rollout_id": {"exact": rollout_id}})
    assert attempt is not None
    return attempt.status


@pytest.mark.parametrize("method", sorted(TRIGGERING_CALLS))
async def test_watchdog_runs_before_method(
    fake_clock: FakeClock, store: Any, traits: BackendTraits, method: str
) -> None:
    traits.require("in_process_clock", "collection_based")
    target = await store.start_rollout(input="target", config=RolloutConfig(timeout_seconds=1.0))
    helper = await _helper_rollout(store)
    fake_clock.advance(2.0)
    await TRIGGERING_CALLS[method](store, helper)
    assert await _raw_attempt_status(store, target.rollout_id) == "timeout"


@pytest.mark.parametrize("method", sorted(NON_TRIGGERING_CALLS))
async def test_watchdog_does_not_run_for_method(
    fake_clock: FakeClock, store: Any, traits: BackendTraits, method: str
) -> None:
    traits.require("in_process_clock", "collection_based")
    target = await store.start_rollout(input="target", config=RolloutConfig(timeout_seconds=1.0))
    helper = await _helper_rollout(store)
    fake_clock.advance(2.0)
    await NON_TRIGGERING_CALLS[method](store, helper)
    assert await _raw_attempt_status(store, target.rollout_id) == "preparing"
    await store.get_latest_attempt(target.rollout_id)
    assert await _raw_attempt_status(store, target.rollout_id) == "timeout"


# ---------------------------------------------------------------------------------------------------------------------
# Debounce
# ---------------------------------------------------------------------------------------------------------------------


async def test_debounce_decisions(fake_clock: FakeClock, store_factory: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock", "collection_based")
    async with store_factory(scan_debounce_seconds=5.0) as debounced:
        assert debounced._scan_debounce_seconds == 5.0
        assert await debounced._should_scan_for_unhealthy_rollouts() is True
        assert await debounced._should_scan_for_unhealthy_rollouts() is False
        fake_clock.advance(4.0)
        assert await debounced._should_scan_for_unhealthy_rollouts() is False
        fake_clock.advance(1.0)
        assert await debounced._should_scan_for_unhealthy_rollouts() is True
        fake_clock.advance(5.0)
        results = await asyncio.gather(*(debounced._should_scan_for_unhealthy_rollouts() for _ in range(3)))
        assert sorted(results) == [False, False, True]


async def test_debounce_zero_always_scans(fake_clock: FakeClock, store: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock", "collection_based")
    for _ in range(3):
        assert await store._should_scan_for_unhealthy_rollouts() is True
    results = await asyncio.gather(*(store._should_scan_for_unhealthy_rollouts() for _ in range(3)))
    assert results == [True, True, True]


async def test_debounce_delays_detection(fake_clock: FakeClock, store_factory: Any, traits: BackendTraits) -> None:
    traits.require("in_process_clock")
    async with store_factory(scan_debounce_seconds=5.0) as debounced:
        rollout = await debounced.start_rollout(input="x", config=RolloutConfig(timeout_seconds=1.0))
        fake_clock.advance(2.0)
        assert (await debounced.get_latest_attempt(rollout.rollout_id)).status == "preparing"
        fake_clock.advance(2.5)
        assert (await debounced.get_latest_attempt(rollout.rollout_id)).status == "preparing"
        fake_clock.advance(0.5)
        assert (await debounced.get_latest_attempt(rollout.rollout_id)).status == "timeout"
        assert (await debounced.get_rollout_by_id(rollout.rollout_id)).status == "failed"
