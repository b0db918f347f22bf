"""Pure types and utilities of the store package."""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence

import pytest

from rollouthub.store.base import UNSET, Unset, is_finished, is_queuing, is_running
from rollouthub.store.utils import LATENCY_BUCKETS, rollout_status_from_attempt, scan_unhealthy_rollouts
from rollouthub.types import Attempt, AttemptedRollout, PaginatedResult, Rollout, RolloutConfig

# ---------------------------------------------------------------------------------------------------------------------
# PaginatedResult
# ---------------------------------------------------------------------------------------------------------------------


def test_paginated_result_is_a_sequence() -> None:
    result = PaginatedResult(items=["a", "b", "c"], limit=2, offset=1, total=5)
    assert isinstance(result, Sequence)
    assert len(result) == 3
    assert result[0] == "a"
    assert result[-1] == "c"
    assert list(result[1:]) == ["b", "c"]
    assert list(result) == ["a", "b", "c"]
    assert "b" in result
    assert result.limit == 2 and result.offset == 1 and result.total == 5


def test_paginated_result_repr_with_limit() -> None:
    result = PaginatedResult(items=["a", "b", "c"], limit=2, offset=1, total=5)
    assert repr(result) == "<PaginatedResult (1:3 of 5) ['a', ...]>"


def test_paginated_result_repr_unlimited() -> None:
    result = PaginatedResult(items=["a", "b", "c"], limit=-1, offset=1, total=5)
    assert repr(result) == "<PaginatedResult (1: of 5) ['a', ...]>"


def test_paginated_result_repr_single_and_empty() -> None:
    assert repr(PaginatedResult(items=["a"], limit=1, offset=0, total=1)) == "<PaginatedResult (0:1 of 1) 'a'>"
    assert repr(PaginatedResult(items=[], limit=10, offset=0, total=0)) == "<PaginatedResult (0:10 of 0) empty>"


def test_paginated_result_wire_form() -> None:
    result = PaginatedResult(items=[1, 2], limit=-1, offset=0, total=2)
    assert result.model_dump() == {"items": [1, 2], "limit": -1, "offset": 0, "total": 2}


# ---------------------------------------------------------------------------------------------------------------------
# UNSET and status predicates
# ---------------------------------------------------------------------------------------------------------------------


def test_unset_sentinel() -> None:
    assert repr(UNSET) == "UNSET"
    assert isinstance(UNSET, Unset)
    assert pickle.loads(pickle.dumps(UNSET)) is UNSET
    assert UNSET is not None


@pytest.mark.parametrize(
    ("status", "queuing", "running", "finished"),
    [
        ("queuing", True, False, False),
        ("requeuing", True, False, False),
        ("preparing", False, True, False),
        ("running", False, True, False),
        ("failed", False, False, True),
        ("succeeded", False, False, True),
        ("cancelled", False, False, True),
    ],
)
def test_status_predicates(status: str, queuing: bool, running: bool, finished: bool) -> None:
    rollout = Rollout(rollout_id="ro-1", input=None, start_time=1.0, status=status)  # type: ignore[arg-type]
    assert is_queuing(rollout) is queuing
    assert is_running(rollout) is running
    assert is_finished(rollout) is finished


def test_latency_buckets_are_increasing_seconds() -> None:
    buckets = list(LATENCY_BUCKETS)
    assert buckets[0] == pytest.approx(0.000001)
    assert buckets == sorted(buckets)
    assert len(set(buckets)) == len(buckets)


# ---------------------------------------------------------------------------------------------------------------------
# rollout_status_from_attempt
# ---------------------------------------------------------------------------------------------------------------------


def _attempt(status: str = "preparing", sequence_id: int = 1, **kwargs: object) -> Attempt:
    return Attempt(
        rollout_id="ro-1",
        attempt_id=f"at-{sequence_id}",
        sequence_id=sequence_id,
        start_time=kwargs.pop("start_time", time.time()),  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("status", ["preparing", "running", "succeeded"])
async def test_rollout_status_passes_through_non_failure_statuses(status: str) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout", "unresponsive"])
    assert await rollout_status_from_attempt(_attempt(status), config) == status
    assert await rollout_status_from_attempt(_attempt(status), RolloutConfig()) == status


@pytest.mark.parametrize(
    ("status", "sequence_id", "max_attempts", "retry_condition", "expected"),
    [
        ("failed", 1, 3, ["failed"], "requeuing"),
        ("failed", 3, 3, ["failed"], "failed"),
        ("failed", 1, 3, [], "failed"),
        ("failed", 1, 3, ["timeout"], "failed"),
        ("timeout", 2, 3, ["timeout"], "requeuing"),
        ("timeout", 1, 3, ["failed"], "failed"),
        ("unresponsive", 1, 2, ["unresponsive"], "requeuing"),
        ("unresponsive", 2, 2, ["unresponsive"], "failed"),
        ("unresponsive", 1, 2, ["failed", "timeout"], "failed"),
        ("failed", 4, 3, ["failed"], "failed"),
    ],
)
async def test_rollout_status_retry_table(
    status: str, sequence_id: int, max_attempts: int, retry_condition: list[str], expected: str
) -> None:
    config = RolloutConfig(max_attempts=max_attempts, retry_condition=retry_condition)  # type: ignore[arg-type]
    assert await rollout_status_from_attempt(_attempt(status, sequence_id), config) == expected


@pytest.mark.parametrize("status", ["failed", "timeout", "unresponsive"])
async def test_default_config_fails_every_failure_like_status(status: str) -> None:
    assert await rollout_status_from_attempt(_attempt(status), RolloutConfig()) == "failed"


async def test_rollout_status_rejects_invalid_attempt_status() -> None:
    attempt = _attempt("running").model_copy(update={"status": "invalid_status"})
    with pytest.raises(ValueError, match="Invalid attempt status: invalid_status"):
        await rollout_status_from_attempt(attempt, RolloutConfig())


def test_rollout_config_defaults_and_validation() -> None:
    config = RolloutConfig()
    assert config.timeout_seconds is None
    assert config.unresponsive_seconds is None
    assert config.max_attempts == 1
    assert config.retry_condition == []
    assert RolloutConfig().retry_condition is not config.retry_condition
    with pytest.raises(ValueError):
        RolloutConfig(max_attempts=0)


# ---------------------------------------------------------------------------------------------------------------------
# scan_unhealthy_rollouts
# ---------------------------------------------------------------------------------------------------------------------


def _running_rollout(
    rollout_id: str,
    *,
    started_ago: float,
    heartbeat_ago: float | None = None,
    timeout_seconds: float | None = None,
    unresponsive_seconds: float | None = None,
) -> AttemptedRollout:
    now = time.time()
    start = now - started_ago
    attempt = Attempt(
        rollout_id=rollout_id,
        attempt_id=f"at-{rollout_id}",
        sequence_id=1,
        start_time=start,
        status="running",
        last_heartbeat_time=None if heartbeat_ago is None else now - heartbeat_ago,
    )
    return AttemptedRollout(
        rollout_id=rollout_id,
        input={"task": rollout_id},
        start_time=start,
        status="running",
        config=RolloutConfig(timeout_seconds=timeout_seconds, unresponsive_seconds=unresponsive_seconds),
        attempt=attempt,
    )


async def test_scan_unhealthy_rollouts_empty() -> None:
    assert await scan_unhealthy_rollouts([]) == {}


async def test_scan_unhealthy_rollouts_only_expired_timeout() -> None:
    first = _running_rollout("ro-a", started_ago=2.0, timeout_seconds=1.0)
    second = _running_rollout("ro-b", started_ago=2.0, timeout_seconds=10.0)
    assert await scan_unhealthy_rollouts([first, second]) == {("ro-a", "at-ro-a"): "timeout"}


@pytest.mark.parametrize(
    ("timeout_seconds", "unresponsive_seconds", "expected"),
    [
        (None, None, None),
        (None, 1.0, "unresponsive"),
        (1.0, None, "timeout"),
        (0.5, 1.0, "timeout"),
        (2.0, 0.5, "unresponsive"),
        (10.0, 10.0, None),
    ],
)
async def test_scan_unhealthy_config_matrix_without_heartbeat(
    timeout_seconds: float | None, unresponsive_seconds: float | None, expected: str | None
) -> None:
    rollout = _running_rollout(
        "ro-m", started_ago=1.5, timeout_seconds=timeout_seconds, unresponsive_seconds=unresponsive_seconds
    )
    result = await scan_unhealthy_rollouts([rollout])
    if expected is None:
        assert result == {}
    else:
        assert result == {("ro-m", "at-ro-m"): expected}


async def test_scan_unhealthy_uses_heartbeat_when_present() -> None:
    healthy = _running_rollout("ro-h", started_ago=5.0, heartbeat_ago=0.5, unresponsive_seconds=1.0)
    silent = _running_rollout("ro-s", started_ago=5.0, heartbeat_ago=2.0, unresponsive_seconds=1.0)
    assert await scan_unhealthy_rollouts([healthy, silent]) == {("ro-s", "at-ro-s"): "unresponsive"}


async def test_scan_unhealthy_timeout_wins_over_unresponsive_with_heartbeat() -> None:
    rollout = _running_rollout(
        "ro-t", started_ago=5.0, heartbeat_ago=3.0, timeout_seconds=4.0, unresponsive_seconds=1.0
    )
    assert await scan_unhealthy_rollouts([rollout]) == {("ro-t", "at-ro-t"): "timeout"}


async def test_scan_unhealthy_skips_rollout_without_attempt() -> None:
    broken = _running_rollout("ro-x", started_ago=5.0, timeout_seconds=1.0).model_copy(update={"attempt": None})
    expired = _running_rollout("ro-y", started_ago=5.0, timeout_seconds=1.0)
    assert await scan_unhealthy_rollouts([broken, expired]) == {("ro-y", "at-ro-y"): "timeout"}


def test_attempted_rollout_rejects_inconsistent_rollout_id() -> None:
    attempt = Attempt(rollout_id="ro-other", attempt_id="at-1", sequence_id=1, start_time=1.0)
    with pytest.raises(ValueError, match="Inconsistent rollout_id between Rollout and Attempt"):
        AttemptedRollout(rollout_id="ro-1", input=None, start_time=1.0, attempt=attempt)


# ---------------------------------------------------------------------------------------------------------------------
# The abstract LightningStore
# ---------------------------------------------------------------------------------------------------------------------


async def test_abstract_store_defaults() -> None:
    from rollouthub.store.base import LightningStore

    class BareStore(LightningStore):
        pass

    store = BareStore()
    capabilities = store.capabilities
    for flag in ("thread_safe", "async_safe", "zero_copy", "otlp_traces"):
        assert not capabilities.get(flag, False), flag
    assert await store.statistics() == {"name": "BareStore"}
    with pytest.raises(NotImplementedError):
        store.otlp_traces_endpoint()
    with pytest.raises(NotImplementedError):
        await store.enqueue_rollout(input="x")
    with pytest.raises(NotImplementedError):
        await store.query_spans("ro-1")
    with pytest.raises(NotImplementedError):
        await store.wait_for_rollouts(rollout_ids=["ro-1"], timeout=0)
