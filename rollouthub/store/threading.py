"""``LightningStoreThreaded``: serialize every call to a store from many threads with one lock."""

from __future__ import annotations

import functools
import threading
from typing import Any, Awaitable, Callable, Optional, TypeVar

from rollouthub.types import AttemptedRollout

from .base import LIGHTNING_STORE_METHODS, LightningStore, LightningStoreCapabilities, dequeue_or_wait_with

__all__ = ["LightningStoreThreaded"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_UNLOCKED_METHODS = frozenset({"wait_for_rollouts", "dequeue_rollout_or_wait"})
_LOCKED_METHODS = tuple(name for name in LIGHTNING_STORE_METHODS if name not in _UNLOCKED_METHODS)


def _locked(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: LightningStoreThreaded, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return await getattr(self.store, name)(*args, **kwargs)

    base = getattr(LightningStore, name)
    functools.update_wrapper(method, base)
    method.__doc__ = f"{base.__doc__ or name} (serialized by the wrapper's lock)"
    return method


class LightningStoreThreaded(LightningStore):
    """Facade that serializes calls from multiple threads (one event loop per thread) with a ``threading.Lock``.

    Every data method forwards all its arguments unchanged (``filter_logic`` included); ``wait_for_rollouts`` is
    passed through without the lock because it blocks for long and only reads, and ``dequeue_rollout_or_wait`` waits
    without the lock and takes it for each claim attempt.
    """

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """The inner capabilities with ``thread_safe`` and ``async_safe`` forced on."""
        caps = LightningStoreCapabilities(**self.store.capabilities)
        caps["thread_safe"] = True
        caps["async_safe"] = True
        return caps

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: float | None = None) -> list[Any]:
        """Pass-through without the lock."""
        return await self.store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)

    async def dequeue_rollout_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """Wait without the lock (woken by the inner store when it can be, else polling like the base contract);
        every claim attempt is a ``dequeue_rollout`` under the lock."""

        async def attempt() -> Optional[AttemptedRollout]:
            with self._lock:
                return await self.store.dequeue_rollout(worker_id=worker_id)

        return await dequeue_or_wait_with(self.store, attempt, timeout, abandoned)


for _name in _LOCKED_METHODS:
    setattr(LightningStoreThreaded, _name, _locked(_name))
del _name
