"""Status machines, retry policy, heartbeat rules, watchdog scan and worker status machine -- as pure functions.

This is the ONE place where the status transitions of the store are written down. The business logic
(:mod:`rollouthub.store.collection_based`) calls these functions; storage backends never re-implement them.
Nothing here performs I/O; functions that need "now" take it as an argument (or read ``time.time()`` once).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Sequence, Tuple

from rollouthub.types import Attempt, AttemptedRollout, AttemptStatus, RolloutConfig, RolloutStatus, Worker

__all__ = [
    "LATENCY_BUCKETS",
    "rollout_status_from_attempt",
    "derive_rollout_status",
    "scan_unhealthy_rollouts",
    "find_unhealthy_attempts",
    "ROLLOUT_TERMINAL_STATUSES",
    "ROLLOUT_QUEUING_STATUSES",
    "ROLLOUT_RUNNING_STATUSES",
    "attempt_status_sets_end_time",
    "rollout_status_sets_end_time",
    "heartbeat_attempt_status",
    "heartbeat_promotes_rollout",
    "worker_fields_for_attempt",
    "worker_fields_for_empty_dequeue",
]

LATENCY_BUCKETS: Tuple[float, ...] = (
    0.000001, 0.000002, 0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001,
    0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0,
    10.0, 12.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0,
)  # fmt: skip
"""Histogram buckets (seconds) used by every latency metric."""

ROLLOUT_TERMINAL_STATUSES: frozenset[str] = frozenset({"failed", "succeeded", "cancelled"})
ROLLOUT_QUEUING_STATUSES: frozenset[str] = frozenset({"queuing", "requeuing"})
ROLLOUT_RUNNING_STATUSES: frozenset[str] = frozenset({"preparing", "running"})

_PASS_THROUGH: frozenset[str] = frozenset({"preparing", "running", "succeeded"})
_FAILURE_LIKE: frozenset[str] = frozenset({"failed", "timeout", "unresponsive"})


def derive_rollout_status(attempt_status: str, sequence_id: int, config: RolloutConfig) -> RolloutStatus:
    """Rollout status implied by its latest attempt, including the retry policy."""
    if attempt_status in _PASS_THROUGH:
        return attempt_status  # type: ignore[return-value]
    if attempt_status in _FAILURE_LIKE:
        if attempt_status in config.retry_condition and sequence_id < config.max_attempts:
            return "requeuing"
        return "failed"
    raise ValueError(f"Invalid attempt status: {attempt_status}")


async def rollout_status_from_attempt(attempt: Attempt, config: RolloutConfig) -> RolloutStatus:
    """Rollout status implied by ``attempt`` under ``config`` (async for API compatibility)."""
    return derive_rollout_status(attempt.status, attempt.sequence_id, config)


def rollout_status_sets_end_time(status: str) -> bool:
    """Writing this rollout status stamps ``end_time`` (terminal statuses, every time)."""
    return status in ROLLOUT_TERMINAL_STATUSES


def attempt_status_sets_end_time(status: str) -> bool:
    """Writing this attempt status stamps ``end_time`` (only ``failed``/``succeeded``; not timeout/unresponsive)."""
    return status in ("failed", "succeeded")


def heartbeat_attempt_status(status: AttemptStatus) -> AttemptStatus:
    """Attempt status after a heartbeat (a span): ``preparing``/``unresponsive`` revive to ``running``."""
    return "running" if status in ("preparing", "unresponsive") else status


def heartbeat_promotes_rollout(status: RolloutStatus) -> bool:
    """A heartbeat on the latest attempt moves the rollout to ``running`` from these statuses only.

    Kept compatible with the reference, a known quirk of its own: ``queuing`` is deliberately not in the set.
    """
    return status in ("preparing", "requeuing")


async def scan_unhealthy_rollouts(rollouts: Sequence[AttemptedRollout]) -> Dict[Tuple[str, str], AttemptStatus]:
    """Watchdog scan of each rollout's latest attempt: ``(rollout_id, attempt_id) -> "timeout" | "unresponsive"``.

    A coroutine function, as in the reference (``await scan_unhealthy_rollouts(rollouts)``); it performs no I/O and
    reads ``time.time()`` once. The rules are :func:`find_unhealthy_attempts`.
    """
    return find_unhealthy_attempts(rollouts)


def find_unhealthy_attempts(
    rollouts: Sequence[AttemptedRollout], now: Optional[float] = None
) -> Dict[Tuple[str, str], AttemptStatus]:
    """Find latest attempts that ran too long (``timeout``) or went silent (``unresponsive``).

    First matching rule wins; comparisons are strict. ``now`` defaults to ``time.time()`` read once.
    """
    current = time.time() if now is None else now
    result: Dict[Tuple[str, str], AttemptStatus] = {}
    for rollout in rollouts:
        attempt = getattr(rollout, "attempt", None)
        if attempt is None:
            continue
        config = rollout.config
        key = (rollout.rollout_id, attempt.attempt_id)
        if config.timeout_seconds is not None and current - attempt.start_time > config.timeout_seconds:
            result[key] = "timeout"
            continue
        if config.unresponsive_seconds is not None:
            if attempt.last_heartbeat_time:
                if current - attempt.last_heartbeat_time > config.unresponsive_seconds:
                    result[key] = "unresponsive"
            elif attempt.last_heartbeat_time is None and current - attempt.start_time > config.unresponsive_seconds:
                result[key] = "unresponsive"
    return result


def worker_fields_for_attempt(attempt: Attempt, now: float, dequeue: bool) -> Dict[str, Any]:
    """Worker fields written when a worker is synced with one of its attempts."""
    fields: Dict[str, Any] = {}
    if attempt.status in ("preparing", "running"):
        fields.update(
            status="busy",
            last_busy_time=now,
            current_rollout_id=attempt.rollout_id,
            current_attempt_id=attempt.attempt_id,
        )
    elif attempt.status in ("succeeded", "failed"):
        fields.update(status="idle", last_idle_time=now, current_rollout_id=None, current_attempt_id=None)
    else:  # timeout / unresponsive
        fields.update(status="unknown", last_idle_time=now, current_rollout_id=None, current_attempt_id=None)
    if dequeue:
        fields["last_dequeue_time"] = now
    return fields


def worker_fields_for_empty_dequeue(worker: Optional[Worker], now: float) -> Dict[str, Any]:
    """Worker fields written when a worker polled an empty queue.

    The worker becomes ``idle`` (``last_idle_time`` only on the transition); ``current_*`` ids are kept
    (a reference quirk, kept).
    """
    fields: Dict[str, Any] = {"last_dequeue_time": now}
    if worker is None or worker.status != "idle":
        fields.update(status="idle", last_idle_time=now)
    return fields
