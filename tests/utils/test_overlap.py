"""``overlapped``: the coroutine starts at once, the work runs while it waits, and it ends as ``await`` would end it."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from rollouthub.utils.overlap import overlapped


async def test_the_coroutine_starts_before_the_work_and_the_work_runs_while_it_waits() -> None:
    events: List[str] = []
    release = asyncio.Event()

    async def request() -> str:
        events.append("sent")
        await release.wait()
        events.append("answered")
        return "rows"

    def work() -> int:
        events.append("work")
        asyncio.get_running_loop().call_soon(release.set)  # the answer can only come after the work
        return 7

    # (were the work run after the request, the request would never be answered: the timeout would fail the test)
    assert await asyncio.wait_for(overlapped(request(), work), timeout=5) == ("rows", 7)
    assert events == ["sent", "work", "answered"]


async def test_a_coroutine_that_does_not_wait() -> None:
    async def ready() -> int:
        return 1

    assert await overlapped(ready(), lambda: "w") == (1, "w")


async def test_the_coroutine_waits_several_times_and_yields_bare() -> None:
    async def request() -> int:
        await asyncio.sleep(0)  # a bare yield to the loop
        await asyncio.sleep(0.001)  # a future
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, 5)
        return await fut

    assert await overlapped(request(), lambda: None) == (5, None)


async def test_the_coroutines_exception_propagates_through_it() -> None:
    async def failing() -> None:
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_exception, ValueError("from the server"))
        try:
            await fut
        except ValueError as exc:
            raise KeyError("handled inside, re-raised") from exc

    with pytest.raises(KeyError, match="handled inside"):
        await overlapped(failing(), lambda: None)


async def test_a_failing_work_lets_the_coroutine_finish_then_raises() -> None:
    finished: List[bool] = []

    async def request() -> int:
        await asyncio.sleep(0.001)
        finished.append(True)
        return 1

    def work() -> None:
        raise RuntimeError("work failed")

    with pytest.raises(RuntimeError, match="work failed"):
        await overlapped(request(), work)
    assert finished == [True]


async def test_the_coroutines_exception_wins_over_the_works() -> None:
    async def request() -> None:
        await asyncio.sleep(0.001)
        raise ValueError("statement failed")

    def work() -> None:
        raise RuntimeError("work failed")

    with pytest.raises(ValueError, match="statement failed"):
        await overlapped(request(), work)


async def test_cancelling_the_caller_cancels_the_coroutine_where_it_waits() -> None:
    started = asyncio.Event()
    cleaned: List[str] = []

    async def request() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cleaned.append("cancelled inside")
            raise

    async def caller() -> None:
        await overlapped(request(), lambda: None)

    task = asyncio.ensure_future(caller())
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert cleaned == ["cancelled inside"]
