"""Overlap CPU work with a request in flight: start a coroutine at once, compute while it waits, then finish it.

``await coro`` runs the caller's next line only once ``coro`` finished; ``asyncio.create_task(coro)`` starts it only at
the next turn of the event loop. :func:`overlapped` runs ``coro`` in the calling task up to its first wait -- for a
database driver's query: once the query is written to the socket -- then runs ``work()`` while the server executes
it (on another core), then waits for ``coro`` as ``await`` would have: results, exceptions and cancellation flow
exactly as if the caller had awaited ``coro`` directly.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine, Generator, Optional, Tuple, TypeVar

__all__ = ["overlapped"]

T = TypeVar("T")
W = TypeVar("W")


class _PassUp:
    """Awaiting it hands one value that a driven coroutine yielded (the future it waits on) to the running task."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, None]:
        yield self.value


async def overlapped(coro: Coroutine[Any, Any, T], work: Callable[[], W]) -> Tuple[T, W]:
    """Run ``coro`` until it first waits, run ``work()``, then finish ``coro``: ``(coro's result, work's result)``.

    ``work`` must not change shared state (it runs whether or not ``coro`` then succeeds; use its result only after
    ``coro`` did). When ``work`` raises, ``coro`` still runs to its end (a connection must not be left in the middle of
    a query) and then the exception of ``work`` is raised -- unless ``coro`` raised, whose exception wins."""
    try:
        waiting = coro.send(None)
    except StopIteration as done:  # finished without waiting
        return done.value, work()
    failure: Optional[BaseException] = None
    extra: Any = None  # work()'s result: returned only when work() returned
    try:
        extra = work()
    except BaseException as exc:  # noqa: BLE001 -- raised below, once coro is done
        failure = exc
    while True:
        try:
            try:
                await _PassUp(waiting)
            except BaseException as exc:  # what the task throws in (a failed future, a cancellation): coro handles it
                waiting = coro.throw(exc)
            else:
                waiting = coro.send(None)
        except StopIteration as done:
            result = done.value
            break
    if failure is not None:
        raise failure
    return result, extra
