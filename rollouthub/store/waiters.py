"""Event-driven wake-ups for ``wait_for_rollouts`` and for waiting dequeues, across threads and event loops.

A waiter registers the rollout ids it waits for. The store hands the finished rollouts of this process to their
waiters right after the unit that finished them has been written (:meth:`RolloutWaiters.wake`), so a waiter need not
re-read the store for those; backends that share data across processes wake waiters without a payload when they
notice an external change (:meth:`RolloutWaiters.wake_all` / :meth:`~RolloutWaiters.wake_ids`), and the waiter then
re-reads the store.

:class:`QueueWaiters` serves ``dequeue_rollout_or_wait``: when rollouts are queued in this process, the store wakes as
many waiting dequeues as there are new rollouts (oldest waiter first), so an enqueue of one rollout makes one runner
try to claim it instead of all of them.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

__all__ = ["QueueWaiters", "RolloutWaiters", "Waiter"]


class Waiter:
    """One waiting coroutine, bound to its event loop and woken from any thread.

    A wake-up that arrives while nobody waits is kept: the next :meth:`wait` returns at once.
    """

    __slots__ = ("loop", "rollout_ids", "_delivered", "_stale", "_lock", "_woken", "_future")

    def __init__(self, rollout_ids: Set[str]) -> None:
        self.loop = asyncio.get_running_loop()
        self.rollout_ids = rollout_ids
        self._delivered: Dict[str, Any] = {}
        self._stale = False
        self._lock = threading.Lock()
        self._woken = False  # only touched in the loop's thread
        self._future: Optional[asyncio.Future[bool]] = None

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
        """Wake the waiter from any thread (ignored when the waiter's loop is closed)."""
        try:
            self.loop.call_soon_threadsafe(self._wake_in_loop)
        except RuntimeError:
            pass

    def _wake_in_loop(self) -> None:
        self._woken = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(True)

    async def wait(self, timeout: Optional[float]) -> bool:
        """Wait for a wake-up or the timeout; returns True when woken (the wake-up is then consumed).

        A plain future and a timer (no task per call, unlike ``asyncio.wait_for``): long-polls wait in many slices.
        """
        if self._woken:
            self._woken = False
            return True
        loop = self.loop
        future: asyncio.Future[bool] = loop.create_future()
        self._future = future
        timer = loop.call_later(max(timeout, 0.0), _resolve, future, False) if timeout is not None else None
        try:
            woken = await future
        finally:
            self._future = None
            if timer is not None:
                timer.cancel()
        if woken:
            self._woken = False
        return woken


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


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


class QueueWaiters:
    """Waiting dequeues in arrival order (thread-safe).

    :meth:`notify` wakes the ``count`` oldest waiters that have not been woken yet (a woken waiter tries to claim, and
    re-arms with :meth:`rearm` when it finds the queue empty). A waiter that leaves after being woken without having
    used the wake-up passes it on to the next waiter (:meth:`unregister` with ``pass_on=True``), so a rollout queued
    while its waiter was timing out is not left unclaimed until the next poll.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: OrderedDict[Waiter, None] = OrderedDict()  # registered and not woken yet, oldest first
        self._woken: Set[Waiter] = set()

    def register(self) -> Waiter:
        """Create and register a waiter (call from inside the waiting coroutine)."""
        waiter = Waiter(set())
        with self._lock:
            self._idle[waiter] = None
        return waiter

    def rearm(self, waiter: Waiter) -> None:
        """The woken ``waiter`` found nothing to claim: put it back at the head of the line (it waited longest)."""
        with self._lock:
            if waiter in self._woken:
                self._woken.discard(waiter)
                self._idle[waiter] = None
                self._idle.move_to_end(waiter, last=False)

    def is_notified(self, waiter: Waiter) -> bool:
        """Whether ``waiter`` was woken by :meth:`notify` and has not been re-armed since."""
        with self._lock:
            return waiter in self._woken

    def unregister(self, waiter: Waiter, *, pass_on: bool) -> None:
        """Remove ``waiter``; with ``pass_on``, a notification it had received but not used wakes the next waiter."""
        with self._lock:
            self._idle.pop(waiter, None)
            was_woken = waiter in self._woken
            self._woken.discard(waiter)
        if was_woken and pass_on:
            self.notify(1)

    def notify(self, count: int) -> None:
        """``count`` rollouts were queued: wake that many waiters (oldest first)."""
        if count <= 0 or not self._idle:  # unlocked peek: a waiter registers before it first looks at the queue
            return
        with self._lock:
            targets: List[Waiter] = []
            while self._idle and len(targets) < count:
                waiter, _ = self._idle.popitem(last=False)
                self._woken.add(waiter)
                targets.append(waiter)
        for waiter in targets:
            waiter.deliver({})

    def wake_all(self) -> None:
        """Wake every waiter so that it checks the queue (another process may have queued rollouts)."""
        with self._lock:
            targets = list(self._idle) + list(self._woken)
        for waiter in targets:
            waiter.wake()

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._woken)
