"""``LightningStoreThreaded``: serialize every call to a store from many threads with one lock."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from rollouthub.types import AttemptedRollout

from .base import LightningStore, LightningStoreCapabilities
from .delegation import UNLOCKED_METHODS, CrossThreadLock, DelegatingLightningStore

__all__ = ["LightningStoreThreaded"]


class LightningStoreThreaded(DelegatingLightningStore):
    """Facade that serializes calls from multiple threads (one event loop per thread) with one lock.

    Every data method forwards all its arguments unchanged (``filter_logic`` included) to the wrapped store while
    holding the lock -- a :class:`~rollouthub.store.delegation.CrossThreadLock`: a call waiting for it suspends its
    coroutine and never blocks its event loop, so other coroutines of that loop (and the holder, wherever it runs) go
    on. ``wait_for_rollouts`` is passed through without the lock because it blocks for long and only reads, and
    ``dequeue_rollout_or_wait`` waits without the lock and takes it for each claim attempt.
    """

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._lock = CrossThreadLock()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """The inner capabilities with ``thread_safe`` and ``async_safe`` forced on."""
        caps = LightningStoreCapabilities(**self.store.capabilities)
        caps["thread_safe"] = True
        caps["async_safe"] = True
        return caps

    async def _delegate(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """The wrapped store's method ``name`` under the lock (but for :data:`UNLOCKED_METHODS`)."""
        if name in UNLOCKED_METHODS:
            if name == "dequeue_rollout_or_wait":
                return await self._dequeue_or_wait(*args, **kwargs)
            return await getattr(self.store, name)(*args, **kwargs)
        async with self._lock:
            return await getattr(self.store, name)(*args, **kwargs)

    async def _dequeue_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """``dequeue_rollout_or_wait``: wait without the lock (woken by the inner store when it can be, else polling
        like the base contract); every claim attempt is a ``dequeue_rollout`` under the lock."""

        async def attempt() -> Optional[AttemptedRollout]:
            async with self._lock:
                return await self.store.dequeue_rollout(worker_id=worker_id)

        return await self.store._wait_and_claim(attempt, timeout, abandoned)
