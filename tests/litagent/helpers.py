"""Helpers for the agent tests."""

from __future__ import annotations

from rollouthub.types.core import Attempt, AttemptedRollout


def make_attempted_rollout(rollout_id: str = "ro-1", attempt_id: str = "at-1", mode: str = "train") -> AttemptedRollout:
    """An attempted rollout with one running attempt."""
    return AttemptedRollout(
        rollout_id=rollout_id,
        input={"q": 1},
        start_time=1.0,
        mode=mode,  # type: ignore[arg-type]
        status="running",
        attempt=Attempt(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=1, start_time=1.0, status="running"),
    )
