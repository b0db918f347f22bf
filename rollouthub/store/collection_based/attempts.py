"""Attempts and the watchdog: attempt updates with their rollout's derived status, what follows a status change
(metrics, waking waiters, backend hooks), and the scan that times out attempts without heartbeats.
"""

from __future__ import annotations

import logging
import math
import time
from typing import (
    Any,
    Dict,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
)

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    Rollout,
)
from rollouthub.types.updates import AttemptUpdate

from ..base import (
    is_finished,
)
from ..collection.base import LightningCollections
from ..utils import (
    ROLLOUT_QUEUING_STATUSES,
    ROLLOUT_RUNNING_STATUSES,
    attempt_status_sets_end_time,
    derive_rollout_status,
    scan_unhealthy_rollouts,
)
from .core import (
    StoreCore,
    T_collections,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class AttemptsMixin(StoreCore[T_collections]):
    """Attempt updates, status propagation and the watchdog."""

    @tracked("update_attempt")
    @healthcheck_before
    async def _update_attempt(
        self, rollout_id: str, attempt_id: str | Literal["latest"], updates: AttemptUpdate
    ) -> Attempt:
        """Update an attempt; the latest attempt's status propagates to the rollout (with retries)."""
        sync_worker = bool(updates.get("worker_id")) or "status" in updates

        async def apply(c: LightningCollections) -> Tuple[Attempt, Optional[Rollout]]:
            attempt, changed = await self._unlocked_update_attempt_and_rollout(c, rollout_id, attempt_id, updates)
            if sync_worker:
                await self._unlocked_sync_workers_with_attempts(c, [attempt])
            return attempt, changed

        attempt, changed = await self._commit(apply, "rollouts", "attempts", "rollout_queue", "workers")
        if changed is not None:
            await self._post_update_rollout([(changed, ("status", "end_time"))])
        return attempt

    @tracked("_unlocked_update_attempt_and_rollout")
    async def _unlocked_update_attempt_and_rollout(
        self, c: LightningCollections, rollout_id: str, attempt_id: str, updates: AttemptUpdate
    ) -> Tuple[Attempt, Optional[Rollout]]:
        """Inside a unit: update one attempt; when it is the latest, propagate its status to the rollout."""
        rollout, latest, target = await c.get_rollout_and_attempts(
            rollout_id, None if attempt_id == "latest" else attempt_id
        )
        if rollout is None:
            raise ValueError(f"Rollout {rollout_id} not found")
        if latest is None:
            raise ValueError(f"No attempts found for rollout {rollout_id}")
        if attempt_id == "latest":
            target = latest
        elif target is None:
            raise ValueError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
        fields: Dict[str, Any] = dict(updates)
        if "status" in fields and attempt_status_sets_end_time(fields["status"]):
            fields["end_time"] = time.time()
        attempt = target
        if fields:
            attempt = Attempt.model_validate({**target.__dict__, **fields})
            await c.attempts.write_update([attempt], update_fields=list(fields))
        if attempt.attempt_id != latest.attempt_id:
            return attempt, None
        new_status = derive_rollout_status(attempt.status, attempt.sequence_id, rollout.config)
        if new_status == rollout.status:
            return attempt, None
        return attempt, await self._unlocked_update_rollout_only(c, rollout, {"status": new_status})

    # ----------------------------------------------------------------------------------------------------------
    # Post-update hook, waiting
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_post_update_rollout")
    async def _post_update_rollout(
        self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]], skip_enqueue: bool = False
    ) -> None:
        """After a unit wrote rollout fields: metrics, waking waiters, backend hooks.

        (Re-enqueueing happens inside the writing unit -- see :meth:`_unlocked_update_rollout_only`.)
        """
        finished: Dict[str, Rollout] = {}
        queued = 0
        for rollout, fields in rollouts:
            if "status" in fields:
                if is_finished(rollout):
                    finished[rollout.rollout_id] = rollout
                elif rollout.status in ROLLOUT_QUEUING_STATUSES:
                    queued += 1
            if self._tracker is not None and "end_time" in fields and is_finished(rollout):
                labels = {"status": rollout.status, "mode": rollout.mode or "unknown"}
                await self._tracker.inc_counter("agl.rollouts.total", labels=labels)
                if rollout.end_time is not None:
                    await self._tracker.observe_histogram(
                        "agl.rollouts.duration", rollout.end_time - rollout.start_time, labels=labels
                    )
        await self._on_rollouts_updated(rollouts)
        if queued:
            self._queue_generation += 1
            self._queue_seen_empty_at = -math.inf
            self._queue_waiters.notify(queued)
        if finished:
            self._rollout_waiters.wake(finished)
            await self._on_rollouts_finished(list(finished))

    async def _on_rollouts_updated(self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]]) -> None:
        """Backend hook: called after every unit that wrote rollouts (default: nothing)."""

    async def _on_rollouts_finished(self, rollout_ids: Sequence[str]) -> None:
        """Backend hook: rollouts reached a terminal status (e.g. notify other processes). Default: nothing."""

    # ----------------------------------------------------------------------------------------------------------
    # Watchdog
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_scan_for_unhealthy_rollouts")
    async def _scan_for_unhealthy_rollouts(self) -> None:
        """Detect timed-out / unresponsive attempts (re-entrancy guarded and debounced)."""
        if self._scan_in_progress:
            return
        if not await self._should_scan_for_unhealthy_rollouts():
            return
        self._scan_in_progress = True
        try:
            await self._find_and_update_unhealthy_rollouts()
        finally:
            self._scan_in_progress = False

    @tracked("_should_scan_for_unhealthy_rollouts")
    async def _should_scan_for_unhealthy_rollouts(self) -> bool:
        """Debounce: at most one scan per ``scan_debounce_seconds`` per store instance."""
        if self._scan_debounce_seconds <= 0:
            return True
        if self._scan_debounced():
            return False
        async with self.collections.atomic(mode="rw", labels=["generic"]):
            if self._scan_debounced():  # another caller entered meanwhile
                return False
            self._last_scan_entrance_time = time.time()
            return True

    @tracked("_unlocked_get_running_rollouts")
    async def _unlocked_get_running_rollouts(self, c: LightningCollections) -> List[AttemptedRollout]:
        """Inside a unit: ``preparing``/``running`` rollouts with their latest attempts."""
        page = await c.rollouts.query(filter={"status": {"within": list(ROLLOUT_RUNNING_STATUSES)}})
        out: List[AttemptedRollout] = []
        for item in await self._unlocked_many_rollouts_to_attempted_rollouts(c, page.items):
            if isinstance(item, AttemptedRollout):
                out.append(item)
            else:
                logger.warning("Running rollout %s has no attempt; skipping health check", item.rollout_id)
        return out

    @tracked("_find_and_update_unhealthy_rollouts")
    async def _find_and_update_unhealthy_rollouts(self) -> None:
        async with self._read("rollouts", "attempts") as c:
            candidates = await scan_unhealthy_rollouts(await self._unlocked_get_running_rollouts(c))
        if not candidates:
            return

        async def apply(c: LightningCollections) -> Tuple[List[Rollout], List[Attempt]]:
            changed: List[Rollout] = []
            attempts: List[Attempt] = []
            rollouts = await self._unlocked_query_rollouts_by_rollout_ids(c, [rid for rid, _ in candidates])
            fresh = await self._unlocked_many_rollouts_to_attempted_rollouts(
                c, [r for r in rollouts.values() if r.status in ROLLOUT_RUNNING_STATUSES]
            )
            confirmed = await scan_unhealthy_rollouts([r for r in fresh if isinstance(r, AttemptedRollout)])
            for (rollout_id, attempt_id), new_status in confirmed.items():
                attempt, rollout = await self._unlocked_update_attempt_and_rollout(
                    c, rollout_id, attempt_id, {"status": new_status}
                )
                attempts.append(attempt)
                if rollout is not None:
                    changed.append(rollout)
            return changed, attempts

        changed, attempts = await self._commit(apply, "rollouts", "attempts", "rollout_queue")
        if changed:
            await self._post_update_rollout([(r, ("status", "end_time")) for r in changed])
        with_workers = [a for a in attempts if a.worker_id]
        if with_workers:
            await self._sync_workers_with_attempts(with_workers)
