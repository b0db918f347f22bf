"""Reading one rollout's data for an export: the id of its latest attempt, the spans of that attempt and its final
reward (from a :class:`~rollouthub.export.reward_cache.FinalRewardCache` when it holds the current version)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

from rollouthub.types import Rollout, Span

from .reward_cache import FinalRewardCache
from .rows import final_reward

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["latest_attempt_id", "spans_of", "final_reward_of"]


def latest_attempt_id(rollout: Rollout) -> Optional[str]:
    """The id of ``rollout``'s latest attempt (``query_rollouts`` returns rollouts with it), or ``None``."""
    attempt = getattr(rollout, "attempt", None)
    return attempt.attempt_id if attempt is not None else None


async def spans_of(store: LightningStore, rollout: Rollout, attempt_id: str) -> List[Span]:
    """The spans of one attempt of ``rollout``."""
    return list(await store.query_spans(rollout.rollout_id, attempt_id))


async def final_reward_of(
    store: LightningStore, rollout: Rollout, attempt_id: str, rewards: Optional[FinalRewardCache]
) -> Optional[float]:
    """``rollout``'s final reward: from ``rewards`` when it holds the current version, else from the spans (and then
    remembered in ``rewards``)."""
    if rewards is not None:
        hit, reward = rewards.lookup(rollout)
        if hit:
            return reward
    reward = final_reward(await spans_of(store, rollout, attempt_id))
    if rewards is not None:
        rewards.store(rollout, reward)
    return reward
