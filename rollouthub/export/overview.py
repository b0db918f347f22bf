"""What a store holds at a glance (``rollouthub inspect``): counts, the most recent rollouts and the final reward per
resources version. Read from any ``LightningStore`` with the export's reading code: final rewards are the export's
(the reward of the last span that carries one, in the rollout's latest attempt)."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, get_args

from rollouthub.types import Rollout, RolloutMode, RolloutStatus

from .reading import final_reward_of, latest_attempt_id
from .selection import FINISHED_STATUSES, ExportSelection
from .stream import ProgressCallback, iter_selected_rollouts

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["StoreOverview", "RecentRollout", "VersionRewards", "store_overview", "DEFAULT_RECENT"]

DEFAULT_RECENT = 10
"""Recent rollouts shown by default."""


@dataclass
class RecentRollout:
    """One of the most recent rollouts."""

    rollout_id: str
    status: str
    mode: Optional[str]
    resources_id: Optional[str]
    reward: Optional[float]
    start_time: float
    end_time: Optional[float]
    duration: Optional[float]
    """Seconds from start to end (to now while it has not ended); ``None`` for a start time in the future."""


@dataclass
class VersionRewards:
    """Final rewards of the finished rollouts of one resources version."""

    resources_id: Optional[str]
    rollouts: int = 0
    """Finished rollouts (``succeeded``/``failed``) of this version."""
    rewarded: int = 0
    """Those with a final reward (the mean, min and max are over them)."""
    mean: Optional[float] = None
    min: Optional[float] = None
    max: Optional[float] = None
    _sum: float = field(default=0.0, repr=False)

    def add(self, reward: Optional[float]) -> None:
        """Count one finished rollout and its final reward (``None``: no reward)."""
        self.rollouts += 1
        if reward is None or not math.isfinite(reward):
            return
        self.rewarded += 1
        self._sum += reward
        self.mean = self._sum / self.rewarded
        self.min = reward if self.min is None else min(self.min, reward)
        self.max = reward if self.max is None else max(self.max, reward)


@dataclass
class StoreOverview:
    """Counts, recent rollouts and rewards per resources version of one store."""

    rollouts_by_status: Dict[str, int]
    attempts: Optional[int]
    spans: Optional[int]
    resources: int
    workers_by_status: Dict[str, int]
    recent: List[RecentRollout]
    rewards_by_resources: List[VersionRewards]
    """In the order each version first appears among the finished rollouts (by start time)."""
    mode_in: Optional[List[str]] = None
    """The modes the rewards were restricted to (``None``: all)."""

    @property
    def rollouts(self) -> int:
        """Rollouts in the store, any status."""
        return sum(self.rollouts_by_status.values())

    @property
    def workers(self) -> int:
        """Workers the store knows."""
        return sum(self.workers_by_status.values())

    def as_dict(self) -> Dict[str, Any]:
        """JSON-able form (what ``rollouthub inspect --json`` prints)."""
        return {
            "counts": {
                "rollouts": self.rollouts,
                "rollouts_by_status": self.rollouts_by_status,
                "attempts": self.attempts,
                "spans": self.spans,
                "resources": self.resources,
                "workers": self.workers,
                "workers_by_status": self.workers_by_status,
            },
            "recent": [asdict(item) for item in self.recent],
            "rewards_by_resources": [
                {k: v for k, v in asdict(item).items() if not k.startswith("_")} for item in self.rewards_by_resources
            ],
            "rewards_mode_in": self.mode_in,
        }


async def _recent(store: LightningStore, count: int, now: float) -> List[RecentRollout]:
    if count <= 0:
        return []
    page = await store.query_rollouts(sort_by="start_time", sort_order="desc", limit=count)
    items: List[RecentRollout] = []
    for rollout in page.items:
        attempt_id = latest_attempt_id(rollout)
        reward = await final_reward_of(store, rollout, attempt_id, None) if attempt_id is not None else None
        end = rollout.end_time if rollout.end_time is not None else now
        items.append(
            RecentRollout(
                rollout_id=rollout.rollout_id,
                status=rollout.status,
                mode=rollout.mode,
                resources_id=rollout.resources_id,
                reward=reward,
                start_time=rollout.start_time,
                end_time=rollout.end_time,
                duration=end - rollout.start_time if end >= rollout.start_time else None,
            )
        )
    return items


async def _rewards_by_resources(
    store: LightningStore, mode_in: Optional[Sequence[RolloutMode]], on_progress: Optional[ProgressCallback]
) -> List[VersionRewards]:
    selection = ExportSelection(status_in=list(FINISHED_STATUSES), mode_in=list(mode_in) if mode_in else None)
    versions: Dict[Optional[str], VersionRewards] = {}
    rollout: Rollout
    async for rollout in iter_selected_rollouts(store, selection, on_progress=on_progress):
        attempt_id = latest_attempt_id(rollout)
        reward = await final_reward_of(store, rollout, attempt_id, None) if attempt_id is not None else None
        versions.setdefault(rollout.resources_id, VersionRewards(rollout.resources_id)).add(reward)
    return list(versions.values())


async def store_overview(
    store: LightningStore,
    *,
    recent: int = DEFAULT_RECENT,
    mode_in: Optional[Sequence[RolloutMode]] = None,
    on_progress: Optional[ProgressCallback] = None,
) -> StoreOverview:
    """Read the overview of ``store``: rollouts by status, attempts, spans, resources versions and workers; the
    ``recent`` latest rollouts by start time; the final rewards of the finished rollouts per resources version
    (restricted to ``mode_in`` when given). ``on_progress`` follows the reward pass, the one read proportional to the
    store's size (the spans of every finished rollout)."""
    if recent < 0:
        raise ValueError(f"recent must be >= 0, got {recent}")
    now = time.time()
    by_status: Dict[str, int] = {}
    for status in get_args(RolloutStatus):
        by_status[status] = (await store.query_rollouts(status_in=[status], limit=1)).total
    statistics = await store.statistics()
    resources = (await store.query_resources(limit=1)).total
    workers = Counter(worker.status for worker in (await store.query_workers()).items)
    return StoreOverview(
        rollouts_by_status=by_status,
        attempts=statistics.get("total_attempts"),
        spans=statistics.get("total_spans"),
        resources=resources,
        workers_by_status=dict(sorted(workers.items())),
        recent=await _recent(store, recent, now),
        rewards_by_resources=await _rewards_by_resources(store, mode_in, on_progress),
        mode_in=list(mode_in) if mode_in else None,
    )
