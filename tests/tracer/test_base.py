"""Active-tracer registry and ``Tracer`` base-class contract."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, List

import pytest

from rollouthub.tracer import DummyTracer, Tracer, clear_active_tracer, get_active_tracer, set_active_tracer
from rollouthub.tracer.base import with_active_tracer_context


class RecordingTracer(Tracer):
    """A tracer whose lifecycle calls are recorded; ``fail_on`` makes one step raise."""

    def __init__(self, fail_on: str = "") -> None:
        super().__init__()
        self.calls: List[str] = []
        self.fail_on = fail_on

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_on:
            raise RuntimeError(f"{name} failed")

    def init(self, *args: Any, **kwargs: Any) -> None:
        self._step("init")

    def init_worker(self, worker_id: int, store: Any = None) -> None:
        super().init_worker(worker_id, store)
        self._step(f"init_worker:{worker_id}")

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        super().teardown_worker(worker_id)
        self._step(f"teardown_worker:{worker_id}")

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._step("teardown")

    @with_active_tracer_context
    @asynccontextmanager
    async def trace_context(self, name: Any = None, **kwargs: Any) -> AsyncIterator[str]:
        if self.fail_on == "enter":
            raise RuntimeError("enter failed")
        yield "inner"


def test_set_get_clear() -> None:
    tracer = DummyTracer()
    assert get_active_tracer() is None
    set_active_tracer(tracer)
    assert get_active_tracer() is tracer
    clear_active_tracer()
    assert get_active_tracer() is None


def test_double_activation_raises() -> None:
    first, second = DummyTracer(), DummyTracer()
    set_active_tracer(first)
    with pytest.raises(ValueError):
        set_active_tracer(second)
    assert get_active_tracer() is first
    clear_active_tracer()
    set_active_tracer(second)
    assert get_active_tracer() is second


async def test_active_tracer_visible_in_tasks_and_worker_threads() -> None:
    tracer = DummyTracer()
    set_active_tracer(tracer)
    try:
        assert await asyncio.create_task(asyncio.sleep(0, result=None)) is None
        assert await asyncio.to_thread(get_active_tracer) is tracer

        seen: List[Any] = []
        thread = threading.Thread(target=lambda: seen.append(get_active_tracer()))
        thread.start()
        thread.join(5)
        assert seen == [tracer]  # plain threads fall back to the process-wide value
    finally:
        clear_active_tracer()
    assert await asyncio.to_thread(get_active_tracer) is None


def test_clear_from_a_derived_context_is_visible_to_the_parent() -> None:
    tracer = DummyTracer()
    set_active_tracer(tracer)
    contextvars.copy_context().run(clear_active_tracer)
    assert get_active_tracer() is None


def test_independent_contexts_can_each_hold_a_tracer() -> None:
    """Two runner threads (separate contexts) can both activate their tracer."""
    tracers = [DummyTracer(), DummyTracer()]
    barrier = threading.Barrier(2, timeout=5)
    seen: List[Any] = []
    errors: List[BaseException] = []

    def worker(tracer: Tracer) -> None:
        try:
            set_active_tracer(tracer)
            barrier.wait()
            seen.append(get_active_tracer() is tracer)
            barrier.wait()
            clear_active_tracer()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in tracers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert seen == [True, True]
    assert get_active_tracer() is None


async def test_with_active_tracer_context_sets_and_clears() -> None:
    tracer = RecordingTracer()
    async with tracer.trace_context("x") as value:
        assert value == "inner"
        assert get_active_tracer() is tracer
        with pytest.raises(ValueError):
            async with tracer.trace_context("nested"):
                pass  # pragma: no cover
        assert get_active_tracer() is tracer
    assert get_active_tracer() is None


async def test_with_active_tracer_context_clears_when_inner_fails() -> None:
    tracer = RecordingTracer(fail_on="enter")
    with pytest.raises(RuntimeError, match="enter failed"):
        async with tracer.trace_context("x"):
            pass  # pragma: no cover
    assert get_active_tracer() is None


async def test_with_active_tracer_context_clears_when_body_fails() -> None:
    tracer = RecordingTracer()
    with pytest.raises(KeyError):
        async with tracer.trace_context("x"):
            raise KeyError("boom")
    assert get_active_tracer() is None


def test_lifespan_order() -> None:
    tracer = RecordingTracer()
    store = object()
    with tracer.lifespan(store) as inside:  # type: ignore[arg-type]
        assert inside is tracer
        assert tracer.store is store
        assert tracer.worker_id == 0
    assert tracer.calls == ["init", "init_worker:0", "teardown_worker:0", "teardown"]


def test_lifespan_undoes_only_successful_steps() -> None:
    tracer = RecordingTracer(fail_on="init_worker:0")
    with pytest.raises(RuntimeError):
        with tracer.lifespan():
            pass  # pragma: no cover
    assert tracer.calls == ["init", "init_worker:0", "teardown"]

    tracer = RecordingTracer(fail_on="init")
    with pytest.raises(RuntimeError):
        with tracer.lifespan():
            pass  # pragma: no cover
    assert tracer.calls == ["init"]


async def test_base_methods_are_abstract() -> None:
    tracer = Tracer()
    with pytest.raises(NotImplementedError):
        tracer.trace_context()
    with pytest.raises(NotImplementedError):
        tracer._trace_context_sync()
    with pytest.raises(NotImplementedError):
        tracer.get_last_trace()
    with pytest.raises(NotImplementedError):
        tracer.create_span("x")
    with pytest.raises(NotImplementedError):
        tracer.operation_context("x")
    assert tracer.get_langchain_handler() is None


def test_trace_run_is_deprecated() -> None:
    from rollouthub.tracer import OtelTracer

    tracer = OtelTracer()
    with tracer.lifespan():
        with pytest.warns(DeprecationWarning):
            assert tracer.trace_run(lambda: 42) == 42


async def test_trace_run_async_is_deprecated() -> None:
    from rollouthub.tracer import OtelTracer

    tracer = OtelTracer()

    async def work() -> int:
        assert get_active_tracer() is tracer
        return 7

    with tracer.lifespan():
        with pytest.warns(DeprecationWarning):
            assert await tracer.trace_run_async(work) == 7
    assert get_active_tracer() is None
