"""Small builders and waiting helpers shared by the store conformance tests."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from rollouthub.types import Span

T = TypeVar("T")

_TRACER = TracerProvider().get_tracer("rollouthub-store-tests")


def make_span(
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    *,
    span_id: str | None = None,
    trace_id: str | None = None,
    parent_id: str | None = None,
    name: str = "test-span",
    attributes: dict[str, Any] | None = None,
    start_time: float | None = None,
    end_time: float | None = None,
) -> Span:
    """A synthetic span built through ``Span.from_attributes`` (random OTel ids unless given)."""
    return Span.from_attributes(
        attributes=dict(attributes or {}),
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name=name,
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        start_time=start_time,
        end_time=end_time,
    )


def make_otel_span(name: str = "otel-span", attributes: dict[str, Any] | None = None) -> ReadableSpan:
    """A finished OpenTelemetry SDK span (an SDK ``Span`` is a ``ReadableSpan``)."""
    span = _TRACER.start_span(name, attributes=attributes or {})
    span.end()
    assert isinstance(span, ReadableSpan)
    return span


async def wait_until(
    predicate: Callable[[], Awaitable[bool] | bool], *, timeout: float = 5.0, interval: float = 0.005
) -> None:
    """Wait until ``predicate()`` is true (it may be sync or async); fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s")
        await asyncio.sleep(interval)


def run_in_threads(count: int, target: Callable[[int], T], *, timeout: float = 60.0) -> list[T]:
    """Run ``target(index)`` in ``count`` threads that start together; return the results in index order.

    Exceptions raised by a thread are re-raised in the caller.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def runner(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[index] = target(index)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=runner, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise AssertionError(f"thread did not finish within {timeout} s")
    if errors:
        raise errors[0]
    return results


def ids_of(items: Sequence[Any], attribute: str = "rollout_id") -> list[Any]:
    return [getattr(item, attribute) for item in items]


@contextlib.asynccontextmanager
async def held_by_another_thread(lock: Any) -> AsyncIterator[None]:
    """Hold ``lock`` (an ``async with`` lock) from a thread with its own event loop for the duration of the block."""
    held, release = threading.Event(), threading.Event()

    async def hold() -> None:
        async with lock:
            held.set()
            await asyncio.to_thread(release.wait, 30)

    thread = threading.Thread(target=lambda: asyncio.run(hold()))
    thread.start()
    try:
        assert await asyncio.to_thread(held.wait, 10), "the other thread never took the lock"
        yield
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 10)
