"""What to export: :class:`ExportSelection` (which rollouts) and the export formats.

One model validates the selection wherever it comes from -- the REST route's query string, the ``rollouthub export``
flags, the Python API -- so the same input is rejected with the same message naming the field everywhere.
"""

from __future__ import annotations

import math
from typing import Any, List, Literal, Optional, Tuple, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollouthub.types import RolloutMode, RolloutStatus

__all__ = [
    "ExportFormat",
    "EXPORT_FORMATS",
    "Pairing",
    "TripletFields",
    "TRIPLET_FIELDS",
    "ExportSelection",
    "FINISHED_STATUSES",
    "MAX_ID_FILTERS",
    "MAX_ID_LENGTH",
]

ExportFormat = Literal["messages", "triplets", "preferences", "rewards", "trajectories"]
"""``messages`` (chat SFT), ``triplets`` (RL), ``preferences`` (chosen/rejected pairs), ``rewards`` (one line per
rollout: ids and final reward; what the dashboard's learning curve and reward column read), ``trajectories``
(token-level RL samples: prompt and response ids, mask, serving log-probabilities)."""

EXPORT_FORMATS: Tuple[str, ...] = get_args(ExportFormat)

Pairing = Literal["all", "best-worst"]
"""Preference pairs per group of answers to one prompt: every pair of rollouts with different final rewards, or only
best against worst."""

TripletFields = Literal["completion", "response"]
"""Field names of ``triplets`` rows: ``completion`` (default; TRL's conversational prompt-completion layout: ``prompt``
messages, ``completion`` = a list with the assistant message, ``completion_token_ids``) or ``response`` (the answer as
text in ``response``, ``response_token_ids``: the rows of rollouthub before TRL's names became the default)."""

TRIPLET_FIELDS: Tuple[str, ...] = get_args(TripletFields)

FINISHED_STATUSES: Tuple[RolloutStatus, ...] = ("succeeded", "failed")
"""Default status selection: rollouts that ran to an end (cancelled ones usually stopped half way)."""

MAX_ID_FILTERS = 1000
"""Most ids accepted by ``rollout_id_in`` / ``resources_id_in`` (a URL of 1000 ids is ~20 KB)."""

MAX_ID_LENGTH = 256


class ExportSelection(BaseModel):
    """Which rollouts to export; every field is optional and the fields combine with AND.

    Rollouts are read in start-time order (ties in insertion order); for each one the spans of its latest attempt are
    used, and its *final reward* is the reward of the last span that carries one (``find_final_reward``).
    """

    model_config = ConfigDict(extra="forbid")

    status_in: List[RolloutStatus] = Field(default_factory=lambda: list(FINISHED_STATUSES), min_length=1)
    """Rollout statuses (default: ``succeeded`` and ``failed``)."""
    mode_in: Optional[List[RolloutMode]] = Field(default=None, min_length=1)
    """Rollout modes (``train``, ``val``, ``test``); ``None`` = any, including rollouts without a mode."""
    resources_id_in: Optional[List[str]] = Field(default=None, min_length=1, max_length=MAX_ID_FILTERS)
    """Resources ids (prompt/model versions) the rollouts ran with."""
    rollout_id_in: Optional[List[str]] = Field(default=None, min_length=1, max_length=MAX_ID_FILTERS)
    """Only these rollouts."""
    since: Optional[float] = None
    """Rollouts started at or after this time (epoch seconds)."""
    until: Optional[float] = None
    """Rollouts started at or before this time (epoch seconds)."""
    min_reward: Optional[float] = None
    """Rollouts whose final reward is at least this (rollouts without a reward are skipped)."""
    max_reward: Optional[float] = None
    """Rollouts whose final reward is at most this (rollouts without a reward are skipped)."""

    @field_validator("resources_id_in", "rollout_id_in")
    @classmethod
    def _ids(cls, value: Optional[List[str]]) -> Optional[List[str]]:
        for item in value or ():
            if not item or len(item) > MAX_ID_LENGTH or "\x00" in item:
                raise ValueError(f"ids must be 1 to {MAX_ID_LENGTH} characters without NUL")
        return value

    @field_validator("since", "until", "min_reward", "max_reward")
    @classmethod
    def _finite(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _ranges(self) -> ExportSelection:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since must not be after until")
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            raise ValueError("min_reward must not be greater than max_reward")
        return self

    @property
    def filters_reward(self) -> bool:
        """Whether a reward range is set (rollouts without a final reward are then skipped)."""
        return self.min_reward is not None or self.max_reward is not None

    def reward_rejects(self, reward: Optional[float]) -> Optional[str]:
        """Why ``reward`` falls outside the selection (a skip reason), or ``None`` when it is selected."""
        if not self.filters_reward:
            return None
        if reward is None:
            return "no final reward"
        if (self.min_reward is not None and reward < self.min_reward) or (
            self.max_reward is not None and reward > self.max_reward
        ):
            return "final reward outside the selected range"
        return None

    def time_rejects(self, start_time: Any) -> bool:
        """Whether a rollout started at ``start_time`` is outside ``since``/``until``."""
        if self.since is None and self.until is None:
            return False
        if not isinstance(start_time, (int, float)):
            return True
        return (self.since is not None and start_time < self.since) or (
            self.until is not None and start_time > self.until
        )
