"""Waits: a dequeue that waits for a rollout to be queued, and ``wait_for_rollouts`` (both event-driven, with a
slow poll for stores shared by several processes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import (
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
)

from rollouthub.types import (
    AttemptedRollout,
    Rollout,
)

from ..base import (
    ABANDON_CHECK_SECONDS,
    is_finished,
)
from .core import (
    _WAIT_SLICE_SECONDS,
    StoreCore,
    T_collections,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class WaitsMixin(StoreCore[T_collections]):
    """Waiting for queued rollouts and for finished rollouts."""

    @tracked("dequeue_rollout_or_wait")
    async def dequeue_rollout_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """Claim the next queued rollout, waiting up to ``timeout`` seconds for one when the queue is empty.

        Event-driven: a rollout queued (or re-queued) in this process wakes one waiting caller, the one waiting
        longest; stores shared by several processes also look at the queue every :meth:`_queue_poll_interval`
        seconds. Each claim attempt is a :meth:`dequeue_rollout`, so an empty one marks the worker idle as usual.
        """
        return await self._wait_and_claim(lambda: self.dequeue_rollout(worker_id=worker_id), timeout, abandoned)

    async def _wait_and_claim(
        self,
        attempt: Callable[[], Awaitable[Optional[AttemptedRollout]]],
        timeout: float,
        abandoned: Optional[Callable[[], bool]],
        *,
        poll_abandoned: bool = True,
    ) -> Optional[AttemptedRollout]:
        """The loop behind :meth:`dequeue_rollout_or_wait`, with the claim attempt as a parameter (the threaded
        wrapper passes an attempt made under its lock); ``poll_abandoned=False`` asks ``abandoned`` only before
        claims (see :meth:`~rollouthub.store.base.LightningStore._wait_and_claim`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        waiter = self._queue_waiters.register()  # before the first attempt: an enqueue right after it wakes us
        claimed: Optional[AttemptedRollout] = None
        claimed_after_wake = False
        attempted = False
        try:
            if abandoned is not None and abandoned():
                return None
            # When the queue is known to be empty (seen empty, nothing queued since), the first claim attempt -- a
            # write unit that only marks the worker idle -- is put off until the wait ends empty-handed: a claim
            # during the wait stamps the worker anyway.
            if not self._queue_known_empty():
                claimed = await attempt()
                attempted = True
            while claimed is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                slice_seconds = remaining
                poll = self._queue_poll_interval()
                if poll is not None:
                    slice_seconds = min(slice_seconds, poll)
                if abandoned is not None and poll_abandoned:
                    slice_seconds = min(slice_seconds, ABANDON_CHECK_SECONDS)
                woken = await waiter.wait(slice_seconds)
                if abandoned is not None and abandoned():
                    break
                waiter.take_stale()
                if not self._queue_waiters.is_notified(waiter):
                    # A poll slice, or a wake-up whose notification was already used: claim only if something is
                    # queued (cheap read). A plain abandon-check slice needs no look at all.
                    if (not woken and poll is None) or not await self._queue_has_items():
                        continue
                claimed = await attempt()
                attempted = claimed_after_wake = True
                if claimed is None:
                    self._queue_waiters.rearm(waiter)
            if claimed is None and not attempted and not (abandoned is not None and abandoned()):
                # The put-off attempt: the empty dequeue's bookkeeping (worker idle, ``last_dequeue_time``), or a
                # rollout queued meanwhile by another process.
                claimed = await attempt()
                claimed_after_wake = claimed is not None
            return claimed
        finally:
            # A wake-up this caller did not use (it timed out, gave up, or claimed before it looked) goes to the next.
            self._queue_waiters.unregister(waiter, pass_on=not (claimed is not None and claimed_after_wake))

    def _queue_poll_interval(self) -> Optional[float]:
        """How often waiting dequeues look at the queue themselves (``None``: only rollouts queued in this process
        wake them; stores shared by several processes return a period)."""
        return None

    async def _queue_has_items(self) -> bool:
        """Whether the rollout queue holds anything (a read unit; used by the waiting dequeue's polls).

        An empty answer is shared by every waiter of this store (they would all read the same thing) until a rollout
        is queued in this process -- and for at most half a poll period when other processes may queue rollouts too
        (:meth:`_queue_known_empty`)."""
        if self._queue_known_empty():
            return False
        generation = self._queue_generation
        async with self._read("rollout_queue") as c:
            has_items = bool(await c.rollout_queue.peek(1))
        if not has_items:
            self._note_queue_empty(generation)
        return has_items

    def _note_queue_empty(self, generation: int) -> None:
        """A look at the queue that began in ``generation`` found it empty."""
        self._queue_empty_generation = generation
        self._queue_seen_empty_at = time.monotonic()

    def _queue_known_empty(self) -> bool:
        """Whether the queue was seen empty and nothing was queued in this process since -- for at most half a poll
        period when other processes may queue rollouts too (:meth:`_queue_poll_interval`)."""
        if self._queue_empty_generation != self._queue_generation:
            return False
        poll = self._queue_poll_interval()
        return poll is None or time.monotonic() - self._queue_seen_empty_at < poll / 2

    def _wake_waiters(self) -> None:
        """Wake every ``wait_for_rollouts`` caller so it re-reads the store (for cross-process notifiers)."""
        self._rollout_waiters.wake_all()

    def _cross_process_poll_interval(self) -> Optional[float]:
        """How often waiters re-read when other processes may finish rollouts (``None``: in-process only)."""
        return None

    @tracked("wait_for_rollouts")
    @healthcheck_before
    async def wait_for_rollouts(self, *, rollout_ids: List[str], timeout: float | None = None) -> List[Rollout]:
        """Return the requested rollouts that are finished by the deadline, in input order (event-driven)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        remaining = set(rollout_ids)
        finished: Dict[str, Rollout] = {}
        waiter = self._rollout_waiters.register(remaining)
        read_store = True  # first pass, after a wake-up without a payload, after a slice without any wake-up
        try:
            while True:
                for rollout_id, rollout in waiter.take_delivered().items():
                    if rollout_id in remaining:
                        finished[rollout_id] = rollout
                        remaining.discard(rollout_id)
                if not remaining:
                    break
                if read_store or waiter.take_stale():
                    # A wake-up that only delivered rollouts finished in this process needs no re-read.
                    async with self._read("rollouts") as c:
                        current = await self._unlocked_query_rollouts_by_rollout_ids(c, list(remaining))
                    for rollout_id in list(remaining):
                        rollout = current.get(rollout_id)
                        if rollout is None:
                            remaining.discard(rollout_id)
                        elif is_finished(rollout):
                            finished[rollout_id] = rollout
                            remaining.discard(rollout_id)
                    if not remaining:
                        break
                if deadline is None:
                    slice_seconds: Optional[float] = _WAIT_SLICE_SECONDS
                else:
                    slice_seconds = deadline - loop.time()
                    if slice_seconds <= 0:
                        break
                poll = self._cross_process_poll_interval()
                if poll is not None:
                    slice_seconds = poll if slice_seconds is None else min(slice_seconds, poll)
                woken = await waiter.wait(slice_seconds)
                read_store = not woken
                if not woken and deadline is None:
                    await self._scan_for_unhealthy_rollouts()
        finally:
            self._rollout_waiters.unregister(waiter)
        return [finished[r] for r in rollout_ids if r in finished]

    @tracked("wait_for_rollout")
    async def wait_for_rollout(self, rollout_id: str, timeout: float | None = None) -> Rollout | None:
        """Wait for one rollout; returns it when finished by the deadline, else ``None``."""
        result = await self.wait_for_rollouts(rollout_ids=[rollout_id], timeout=timeout)
        return result[0] if result else None
