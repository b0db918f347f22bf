"""Update objects: the fields a store update method was given, declared once.

The public ``update_rollout``/``update_attempt`` keep their keyword arguments (a field left out is not changed;
``None`` is a value) and pass on only the fields provided, as one of these; the business logic and the client read
them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from typing_extensions import TypedDict

from .core import AttemptStatus, RolloutConfig, RolloutMode, RolloutStatus, TaskInput

__all__ = ["AttemptUpdate", "RolloutUpdate"]


class RolloutUpdate(TypedDict, total=False):
    """The rollout fields ``update_rollout`` was given (absent: unchanged)."""

    input: TaskInput
    mode: Optional[RolloutMode]
    resources_id: Optional[str]
    status: RolloutStatus
    config: RolloutConfig
    metadata: Optional[Dict[str, Any]]


class AttemptUpdate(TypedDict, total=False):
    """The attempt fields ``update_attempt`` was given (absent: unchanged)."""

    status: AttemptStatus
    worker_id: str
    last_heartbeat_time: float
    metadata: Optional[Dict[str, Any]]
