"""Locks of the in-memory collections: per-loop and thread-safe async locks, and the scopes of
``InMemoryLightningCollections.atomic()`` (no lock for plain reads; the unit's locks in sorted order otherwise)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Dict, Tuple

import aiologic

__all__ = ["_LockScope", "_LoopAwareAsyncLock", "_NoLockScope", "_ThreadSafeAsyncLock"]


class _LoopAwareAsyncLock:
    """One ``asyncio.Lock`` per running event loop (weakly keyed): exclusion among the tasks of one loop only."""

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def _get(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            with self._guard:
                lock = self._locks.get(loop)
                if lock is None:
                    lock = asyncio.Lock()
                    self._locks[loop] = lock
        return lock

    async def __aenter__(self) -> asyncio.Lock:
        lock = self._get()
        await lock.acquire()
        return lock

    async def __aexit__(self, *exc: Any) -> None:
        self._get().release()

    def try_acquire(self) -> bool:
        """Never acquires without waiting (``asyncio.Lock`` has no public non-blocking acquire): ``False``."""
        return False

    def release(self) -> None:
        """Release the lock of the running loop."""
        self._get().release()

    def __getstate__(self) -> Dict[str, Any]:
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


class _ThreadSafeAsyncLock:
    """An awaitable lock that excludes across threads and event loops.

    An ``aiologic.BinarySemaphore`` (a mutex without an owner): about four times cheaper to take and release than
    ``aiologic.Lock``, which records the owning task, and units never re-enter their own locks.
    """

    def __init__(self) -> None:
        self._lock = aiologic.BinarySemaphore()

    async def __aenter__(self) -> _ThreadSafeAsyncLock:
        await self._lock.async_acquire()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._lock.async_release()

    def try_acquire(self) -> bool:
        """Take the lock if it is free, without waiting (``async_acquire`` of a free lock does not suspend either:
        aiologic's checkpoints are off under asyncio); ``False`` when it is held."""
        return self._lock.green_acquire(blocking=False)

    def release(self) -> None:
        """Release the lock (synchronous, like ``async_release``)."""
        self._lock.release()

    def locked(self) -> bool:
        """Whether the lock is held."""
        return self._lock.value == 0

    def __getstate__(self) -> Dict[str, Any]:
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


class _NoLockScope:
    """``atomic()`` of a plain read: no lock."""

    __slots__ = ("collections",)

    def __init__(self, collections: Any) -> None:
        self.collections = collections

    async def __aenter__(self) -> Any:
        return self.collections

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _LockScope:
    """``atomic()`` of a unit: acquire the locks in the given (sorted) order, release them in reverse."""

    __slots__ = ("collections", "locks", "held")

    def __init__(self, collections: Any, locks: Tuple[Any, ...]) -> None:
        self.collections = collections
        self.locks = locks
        self.held = 0

    async def __aenter__(self) -> Any:
        try:
            for lock in self.locks:
                if not lock.try_acquire():  # a free lock is taken without a coroutine round trip
                    await lock.__aenter__()
                self.held += 1
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self.collections

    async def __aexit__(self, *exc: Any) -> None:
        locks, held = self.locks, self.held
        self.held = 0
        for index in range(held - 1, -1, -1):
            locks[index].release()
