"""Cooperative stop signals shared by execution strategies and bundles."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any, Optional, Protocol, runtime_checkable

__all__ = ["ExecutionEvent", "ThreadingEvent", "MultiprocessingEvent"]


@runtime_checkable
class ExecutionEvent(Protocol):
    """A settable flag: ``set``, ``clear``, ``is_set`` and ``wait``."""

    def set(self) -> None:
        """Raise the flag."""
        ...

    def clear(self) -> None:
        """Lower the flag."""
        ...

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        ...

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the flag is raised or ``timeout`` elapses; return the flag."""
        ...


class ThreadingEvent:
    """An :class:`ExecutionEvent` backed by :class:`threading.Event` (for threads of one process)."""

    __slots__ = ("_evt",)

    def __init__(self) -> None:
        self._evt = threading.Event()

    def set(self) -> None:
        """Raise the flag."""
        self._evt.set()

    def clear(self) -> None:
        """Lower the flag."""
        self._evt.clear()

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return self._evt.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the flag is raised or ``timeout`` elapses."""
        return self._evt.wait(timeout)


class MultiprocessingEvent:
    """An :class:`ExecutionEvent` backed by a multiprocessing ``Event`` (shared with child processes).

    Args:
        ctx: the multiprocessing context to create the event from (default: the module's default context).
    """

    __slots__ = ("_evt",)

    def __init__(self, *, ctx: Optional[Any] = None) -> None:
        self._evt = (ctx or multiprocessing).Event()

    def set(self) -> None:
        """Raise the flag."""
        self._evt.set()

    def clear(self) -> None:
        """Lower the flag."""
        self._evt.clear()

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return self._evt.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the flag is raised or ``timeout`` elapses."""
        return self._evt.wait(timeout)
