"""The rollouts of a GRPO step: enqueue the groups, wait for them, read their spans into token samples (no torch).

**Which rollouts are trained on** (the counted drop rule). A rollout enters the step's batch only if

1. it finished with status ``succeeded`` before the step's timeout (else ``unfinished`` -- it is then cancelled so
   that no runner keeps working on it -- or ``failed``: failed, cancelled or timed out in the store);
2. its latest attempt's spans give at least one sample with token ids and serving log-probs (else ``no_sample``);
3. it has a finite final reward (else ``no_reward``);
4. it was not trained on before (``already_trained``: only possible when a store is shared by a resumed run);

and a group (the rollouts of one input) enters only with at least ``min_group_size`` such rollouts: a smaller group
has no baseline to compare with, and its rollouts are counted as ``small_group``. :class:`StepBatch.dropped` counts
every rollout left out by reason; nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

from rollouthub.adapter.trajectory import build_trajectories
from rollouthub.emitter import find_final_reward
from rollouthub.store.base import LightningStore
from rollouthub.types.core import EnqueueRolloutRequest, Rollout, RolloutMode
from rollouthub.types.trajectory import TrajectorySample

from ..utils import rollout_wait_step

__all__ = [
    "RolloutGroups",
    "StepBatch",
    "enqueue_groups",
    "wait_for_all",
    "collect_batch",
    "final_rewards",
    "DROP_REASONS",
]

logger = logging.getLogger(__name__)

DROP_REASONS = ("unfinished", "failed", "no_sample", "no_reward", "already_trained", "small_group")
"""Why a rollout left a step's batch, in the order the rules are applied."""

_SPAN_READS = 16
"""Rollouts whose spans are read concurrently."""


@dataclass
class RolloutGroups:
    """The rollout ids of a step, one list per input (group key ``"<step>-<index>"``)."""

    keys: List[str]
    rollout_ids: List[List[str]]

    @property
    def all_ids(self) -> List[str]:
        """Every rollout id, group by group."""
        return [rollout_id for group in self.rollout_ids for rollout_id in group]


@dataclass
class StepBatch:
    """The samples a step trains on and what happened to the other rollouts."""

    samples: List[TrajectorySample] = field(default_factory=list)
    enqueued: int = 0
    finished: int = 0
    dropped: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    mismatches: int = 0
    rewards: Dict[str, float] = field(default_factory=dict)
    """Final reward of every finished rollout that gave a sample (dropped groups included)."""

    @property
    def dropped_rollouts(self) -> int:
        """Rollouts left out of the batch, every reason together."""
        return sum(self.dropped.values())


async def enqueue_groups(
    store: LightningStore,
    tasks: Sequence[Any],
    copies: int,
    *,
    mode: RolloutMode,
    resources_id: str,
    group_prefix: str,
    metadata: Optional[Dict[str, Any]] = None,
) -> RolloutGroups:
    """Enqueue ``copies`` rollouts of each task in one store call; group ``i`` is keyed ``f"{group_prefix}-{i}"``."""
    keys = [f"{group_prefix}-{index}" for index in range(len(tasks))]
    requests = [
        EnqueueRolloutRequest(
            input=task, mode=mode, resources_id=resources_id, metadata={**(metadata or {}), "grpo_group": key}
        )
        for key, task in zip(keys, tasks, strict=True)
        for _ in range(copies)
    ]
    rollouts = list(await store.enqueue_many_rollouts(requests)) if requests else []
    ids = [rollout.rollout_id for rollout in rollouts]
    return RolloutGroups(keys, [ids[index * copies : (index + 1) * copies] for index in range(len(tasks))])


async def wait_for_all(store: LightningStore, rollout_ids: Sequence[str], timeout: float) -> Dict[str, Rollout]:
    """Wait (on the store's wake-ups) until every rollout finished or ``timeout`` seconds passed.

    Returns the finished rollouts by id; the unfinished ones are cancelled (best effort) so that no runner keeps
    working for a step that is over.
    """
    deadline = time.monotonic() + timeout
    wait_step = rollout_wait_step(store, 5.0)
    finished: Dict[str, Rollout] = {}
    while len(finished) < len(rollout_ids):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        pending = [rollout_id for rollout_id in rollout_ids if rollout_id not in finished]
        for rollout in await store.wait_for_rollouts(rollout_ids=pending, timeout=min(wait_step, remaining)):
            finished[rollout.rollout_id] = rollout
    unfinished = [rollout_id for rollout_id in rollout_ids if rollout_id not in finished]
    if unfinished:
        logger.warning(
            "%d of %d rollouts unfinished after %.0f s: cancelled", len(unfinished), len(rollout_ids), timeout
        )
        for rollout_id in unfinished:
            try:
                await store.update_rollout(rollout_id, status="cancelled")
            except Exception as exc:  # it may have finished meanwhile; either way it is not trained on
                logger.debug("Could not cancel rollout %s: %s", rollout_id, exc)
    return finished


async def _samples_of(store: LightningStore, rollout: Rollout) -> Any:
    spans = list(await store.query_spans(rollout.rollout_id, "latest"))
    return build_trajectories(spans, rollout=rollout)


async def _read_all(store: LightningStore, rollouts: Sequence[Rollout], read: Any) -> Dict[str, Any]:
    """``await read(store, rollout)`` for every rollout, ``_SPAN_READS`` at a time; results by rollout id."""
    results: Dict[str, Any] = {}
    for start in range(0, len(rollouts), _SPAN_READS):
        chunk = rollouts[start : start + _SPAN_READS]
        for rollout, result in zip(chunk, await asyncio.gather(*(read(store, r) for r in chunk)), strict=True):
            results[rollout.rollout_id] = result
    return results


async def _final_reward_of(store: LightningStore, rollout: Rollout) -> Optional[float]:
    return find_final_reward(list(await store.query_spans(rollout.rollout_id, "latest")))


async def final_rewards(store: LightningStore, rollout_ids: Sequence[str], finished: Dict[str, Rollout]) -> List[float]:
    """The final reward of each rollout, in order; an unfinished, unsuccessful or unrewarded one counts 0."""
    succeeded = [finished[rid] for rid in rollout_ids if rid in finished and finished[rid].status == "succeeded"]
    found = await _read_all(store, succeeded, _final_reward_of)
    values = [found.get(rollout_id) for rollout_id in rollout_ids]
    return [float(value) if value is not None and math.isfinite(value) else 0.0 for value in values]


async def collect_batch(
    store: LightningStore,
    groups: RolloutGroups,
    finished: Dict[str, Rollout],
    *,
    min_group_size: int = 2,
    trained: Optional[Set[str]] = None,
) -> StepBatch:
    """Read the spans of the finished rollouts and apply the drop rule (see the module docstring).

    Every sample's ``input_id`` is set to its group key, so the advantages compare the rollouts of one enqueued
    group (two groups of equal inputs stay apart).
    """
    batch = StepBatch(enqueued=len(groups.all_ids), finished=len(finished))
    succeeded = [finished[rid] for rid in groups.all_ids if rid in finished and finished[rid].status == "succeeded"]
    batch.dropped["unfinished"] = batch.enqueued - len(finished)
    batch.dropped["failed"] = len(finished) - len(succeeded)
    results = await _read_all(store, succeeded, _samples_of)
    for key, rollout_ids in zip(groups.keys, groups.rollout_ids, strict=True):
        kept: List[List[TrajectorySample]] = []
        for rollout_id in rollout_ids:
            result = results.get(rollout_id)
            if result is None:
                continue
            batch.mismatches += len(result.mismatches)
            samples = [s for s in result.samples if s.response_logprobs is not None and any(s.response_mask)]
            reward = samples[0].reward if samples else None
            if not samples:
                batch.dropped["no_sample"] += 1
            elif reward is None or not math.isfinite(reward):
                batch.dropped["no_reward"] += 1
            elif trained is not None and rollout_id in trained:
                batch.dropped["already_trained"] += 1
            else:
                batch.rewards[rollout_id] = float(reward)
                kept.append([sample.model_copy(update={"input_id": key}) for sample in samples])
        if len(kept) < min_group_size:
            batch.dropped["small_group"] += len(kept)
            continue
        batch.samples.extend(sample for samples in kept for sample in samples)
    return batch
