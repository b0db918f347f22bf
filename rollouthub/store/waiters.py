"""Event-driven wake-ups for ``wait_for_rollouts`` that work across threads and event loops.

A waiter registers the rollout ids it waits for. The store hands the finished rollouts of this process to their
waiters right after the unit that finished them has been written (:meth:`RolloutWaiters.wake`), so a waiter need not
re-read the store for those; backends that share data across processes wake waiters without a payload when they
notice an external change (:meth:`RolloutWaiters.wake_all` / :meth:`~RolloutWaiters.wake_ids`), and the waiter then
re-reads the store.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, Iterable, Mapping, Optional, Set

__all__ = ["RolloutWaiters", "Waiter"]


class Waiter:
    """One waiting coroutine: an ``asyncio.Event`` bound to its loop, settable from any thread."""

    __slots__ = ("loop", "event", "rollout_ids", "_delivered", "_stale", "_lock")

    def __init__(self, rollout_ids: Set[str]) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        self.rollout_ids = rollout_ids
        self._delivered: Dict[str, Any] = {}
        self._stale = False
        self._lock = threading.Lock()

    def deliver(self, rollouts: Mapping[str, Any]) -> None:
        """Hand finished rollouts to the waiter (so it need not re-read them) and wake it."""
        with self._lock:
            self._delivered.update(rollouts)
        self._set()

    def take_delivered(self) -> Dict[str, Any]:
        """Finished rollouts delivered since the last call."""
        with self._lock:
            delivered, self._delivered = self._delivered, {}
        return delivered

    def take_stale(self) -> bool:
        """Whether a wake-up without a payload (:meth:`wake`) arrived since the last call: the store may have changed
        in ways the deliveries do not tell, so the waiter must re-read it."""
        with self._lock:
            stale, self._stale = self._stale, False
        return stale

    def wake(self) -> None:
        """Wake the waiter so that it re-reads the store (from any thread)."""
        with self._lock:
            self._stale = True
        self._set()

    def _set(self) -> None:
        """Set the event from any thread (ignored when the waiter's loop is closed)."""
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            pass

    async def wait(self, timeout: Optional[float]) -> bool:
        """Wait for a wake-up or the timeout; returns True when woken. Clears the event."""
        try:
            if timeout is None:
                await self.event.wait()
            else:
                await asyncio.wait_for(self.event.wait(), timeout=max(timeout, 0.0))
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self.event.clear()


class RolloutWaiters:
    """Registry of waiters keyed by rollout id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_rollout: Dict[str, Set[Waiter]] = {}
        self._all: Set[Waiter] = set()

    def register(self, rollout_ids: Iterable[str]) -> Waiter:
        """Create and register a waiter for the given ids (call from inside the waiting coroutine)."""
        waiter = Waiter(set(rollout_ids))
        with self._lock:
            self._all.add(waiter)
            for rollout_id in waiter.rollout_ids:
                self._by_rollout.setdefault(rollout_id, set()).add(waiter)
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        """Remove a waiter."""
        with self._lock:
            self._all.discard(waiter)
            for rollout_id in waiter.rollout_ids:
                bucket = self._by_rollout.get(rollout_id)
                if bucket is not None:
                    bucket.discard(waiter)
                    if not bucket:
                        del self._by_rollout[rollout_id]

    def wake(self, rollouts: Mapping[str, Any]) -> None:
        """Deliver these finished rollouts (id -> rollout) to their waiters and wake them."""
        with self._lock:
            if not self._by_rollout:
                return
            targets: Dict[Waiter, Dict[str, Any]] = {}
            for rollout_id, rollout in rollouts.items():
                for waiter in self._by_rollout.get(rollout_id, ()):
                    targets.setdefault(waiter, {})[rollout_id] = rollout
        for waiter, delivered in targets.items():
            waiter.deliver(delivered)

    def wake_ids(self, rollout_ids: Iterable[str]) -> None:
        """Wake the waiters of these rollouts without a payload (they re-read the store)."""
        with self._lock:
            targets: Set[Waiter] = set()
            for rollout_id in rollout_ids:
                targets.update(self._by_rollout.get(rollout_id, ()))
        for waiter in targets:
            waiter.wake()

    def wake_all(self) -> None:
        """Wake every waiter (used when another process may have changed the data)."""
        with self._lock:
            targets = list(self._all)
        for waiter in targets:
            waiter.wake()

    def __len__(self) -> int:
        with self._lock:
            return len(self._all)
