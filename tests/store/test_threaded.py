"""``LightningStoreThreaded`` (a reference quirk fixed: ``query_workers`` forwards ``filter_logic``)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

import pytest

from rollouthub.store.base import LightningStore, LightningStoreCapabilities
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.threading import LightningStoreThreaded
from rollouthub.types import LLM, EnqueueRolloutRequest, ResourcesUpdate, RolloutConfig
from tests.store.helpers import make_otel_span, make_span, run_in_threads

LOCKED_METHODS = [
    "start_rollout",
    "enqueue_rollout",
    "enqueue_many_rollouts",
    "dequeue_rollout",
    "dequeue_many_rollouts",
    "start_attempt",
    "query_rollouts",
    "query_attempts",
    "get_rollout_by_id",
    "get_latest_attempt",
    "query_resources",
    "add_resources",
    "update_resources",
    "get_resources_by_id",
    "get_latest_resources",
    "add_many_spans",
    "add_span",
    "add_otel_span",
    "get_next_span_sequence_id",
    "get_many_span_sequence_ids",
    "add_many_spans_assigning_ids",
    "query_spans",
    "query_spans_json",
    "update_rollout",
    "update_attempt",
    "query_workers",
    "get_worker_by_id",
    "update_worker",
    "statistics",
]


def _bind(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Normalize a call against the abstract signature (defaults applied, ``self`` dropped)."""
    signature = inspect.signature(getattr(LightningStore, name))
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self")
    return arguments


class RecordingStore(LightningStore):
    """Records every call (normalized arguments) and returns a fresh sentinel object per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.results: list[object] = []
        self.active = 0
        self.max_active = 0
        self.counter = 0
        self.release = threading.Event()
        self.block_update_attempt = False
        self.slow_seconds = 0.0

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=False, async_safe=False, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return "http://inner/v1/traces"

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        self.calls.append((name, _bind(name, args, kwargs)))
        sentinel = object()
        self.results.append(sentinel)
        return sentinel

    async def update_attempt(self, *args: Any, **kwargs: Any) -> Any:
        result = self._record("update_attempt", args, kwargs)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.block_update_attempt:
                await asyncio.to_thread(self.release.wait, 10)
            elif self.slow_seconds:
                await asyncio.sleep(self.slow_seconds)
        finally:
            self.active -= 1
        return result

    async def update_resources(self, *args: Any, **kwargs: Any) -> Any:
        if not self.slow_seconds:
            return self._record("update_resources", args, kwargs)
        value = self.counter
        await asyncio.sleep(self.slow_seconds)
        self.counter = value + 1
        now = time.time()
        return ResourcesUpdate(
            resources_id=f"res-{self.counter}", create_time=now, update_time=now, version=1, resources={}
        )


def _make_recorder(name: str) -> Any:
    async def method(self: RecordingStore, *args: Any, **kwargs: Any) -> Any:
        return self._record(name, args, kwargs)

    method.__name__ = name
    return method


for _name in [*LOCKED_METHODS, "wait_for_rollouts"]:
    if _name not in RecordingStore.__dict__:
        setattr(RecordingStore, _name, _make_recorder(_name))


def _calls() -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    span = make_span("ro-1", "at-1", 1)
    return [
        (
            "start_rollout",
            (),
            dict(
                input={"q": 1},
                mode="train",
                resources_id="rs-1",
                config=RolloutConfig(max_attempts=2),
                metadata={"m": 1},
                worker_id="w-0",
            ),
        ),
        ("enqueue_rollout", ({"q": 2},), dict(mode="val", metadata={"n": 2})),
        ("enqueue_many_rollouts", ([EnqueueRolloutRequest(input=1), EnqueueRolloutRequest(input=2)],), {}),
        ("dequeue_rollout", (), dict(worker_id="w-1")),
        ("dequeue_many_rollouts", (), dict(limit=3, worker_id="w-2")),
        ("start_attempt", ("ro-1",), dict(worker_id="w-3")),
        (
            "query_rollouts",
            (),
            dict(
                status_in=["queuing"],
                rollout_id_contains="ro",
                filter_logic="or",
                sort_by="rollout_id",
                sort_order="desc",
                limit=2,
                offset=1,
            ),
        ),
        ("query_attempts", ("ro-1",), dict(sort_by="start_time", sort_order="desc", limit=1, offset=2)),
        ("get_rollout_by_id", ("ro-1",), {}),
        ("get_latest_attempt", ("ro-1",), {}),
        (
            "query_resources",
            (),
            dict(resources_id_contains="rs", sort_by="resources_id", sort_order="desc", limit=5, offset=1),
        ),
        ("add_resources", ({"llm": LLM(endpoint="http://x", model="m")},), {}),
        ("update_resources", ("rs-1", {"llm": LLM(endpoint="http://y", model="n")}), {}),
        ("get_resources_by_id", ("rs-1",), {}),
        ("get_latest_resources", (), {}),
        ("add_many_spans", ([span],), {}),
        ("add_span", (span,), {}),
        ("add_otel_span", ("ro-1", "at-1", make_otel_span()), dict(sequence_id=7)),
        ("get_next_span_sequence_id", ("ro-1", "at-1"), {}),
        ("get_many_span_sequence_ids", ([("ro-1", "at-1"), ("ro-2", "at-2")],), {}),
        ("add_many_spans_assigning_ids", ([span], [True]), {}),
        (
            "query_spans",
            ("ro-1", "latest"),
            dict(name_contains="llm", filter_logic="or", limit=3, offset=1, sort_by="start_time", sort_order="desc"),
        ),
        ("query_spans_json", ("ro-1", "latest"), dict(limit=2)),
        ("update_rollout", ("ro-1",), dict(status="succeeded", metadata={"x": 1})),
        ("update_attempt", ("ro-1", "latest"), dict(status="failed", worker_id="w-4")),
        (
            "query_workers",
            (),
            dict(
                status_in=["busy"],
                worker_id_contains="cpu",
                filter_logic="or",
                sort_by="worker_id",
                sort_order="desc",
                limit=4,
                offset=1,
            ),
        ),
        ("get_worker_by_id", ("w-1",), {}),
        ("update_worker", ("w-1",), dict(heartbeat_stats={"cpu": 1})),
        ("wait_for_rollouts", (), dict(rollout_ids=["ro-1"], timeout=0.5)),
        ("statistics", (), {}),
    ]


async def test_every_method_delegates_unchanged() -> None:
    inner = RecordingStore()
    wrapper = LightningStoreThreaded(inner)
    assert wrapper.store is inner
    calls = _calls()
    assert {name for name, _, _ in calls} == {*LOCKED_METHODS, "wait_for_rollouts"}

    for name, args, kwargs in calls:
        result = await getattr(wrapper, name)(*args, **kwargs)
        assert result is inner.results[-1], f"{name} did not return the inner result unchanged"
        recorded_name, recorded_args = inner.calls[-1]
        assert recorded_name == name
        assert recorded_args == _bind(name, args, kwargs), name

    assert [name for name, _ in inner.calls] == [name for name, _, _ in calls]
    by_name = {name: arguments for name, arguments in inner.calls}
    requests = next(args[0] for name, args, _ in calls if name == "enqueue_many_rollouts")
    assert by_name["enqueue_many_rollouts"]["rollouts"] is requests
    resources = next(args[0] for name, args, _ in calls if name == "add_resources")
    assert by_name["add_resources"]["resources"] is resources
    assert by_name["dequeue_many_rollouts"]["limit"] == 3
    assert by_name["dequeue_many_rollouts"]["worker_id"] == "w-2"
    assert by_name["query_workers"]["filter_logic"] == "or"


async def test_capabilities_force_thread_and_async_safety() -> None:
    wrapper = LightningStoreThreaded(RecordingStore())
    assert wrapper.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": True}
    memory = LightningStoreThreaded(InMemoryLightningStore())
    caps = memory.capabilities
    assert caps["thread_safe"] is True and caps["async_safe"] is True
    assert not caps.get("zero_copy") and not caps.get("otlp_traces")


def test_otlp_endpoint_is_not_forwarded() -> None:
    with pytest.raises(NotImplementedError):
        LightningStoreThreaded(RecordingStore()).otlp_traces_endpoint()


async def test_calls_from_five_threads_never_overlap() -> None:
    inner = RecordingStore()
    inner.slow_seconds = 0.05
    wrapper = LightningStoreThreaded(inner)

    def call(index: int) -> object:
        return asyncio.run(wrapper.update_attempt(f"ro-{index}", "latest", status="running"))

    results = await asyncio.to_thread(run_in_threads, 5, call)
    assert len(inner.calls) == 5
    assert inner.max_active == 1
    assert len({id(r) for r in results}) == 5
    assert sorted(args["rollout_id"] for _, args in inner.calls) == [f"ro-{i}" for i in range(5)]


async def test_unwrapped_calls_do_overlap() -> None:
    """Control for the test above: without the wrapper the same calls do run concurrently."""
    inner = RecordingStore()
    inner.slow_seconds = 0.05

    def call(index: int) -> object:
        return asyncio.run(inner.update_attempt(f"ro-{index}", "latest", status="running"))

    await asyncio.to_thread(run_in_threads, 5, call)
    assert inner.max_active > 1


async def test_read_modify_write_from_twenty_threads() -> None:
    inner = RecordingStore()
    inner.slow_seconds = 0.001
    wrapper = LightningStoreThreaded(inner)

    def call(index: int) -> ResourcesUpdate:
        return asyncio.run(wrapper.update_resources(f"input-{index}", {}))

    results = await asyncio.to_thread(run_in_threads, 20, call)
    assert inner.counter == 20
    assert sorted(r.resources_id for r in results) == sorted(f"res-{i}" for i in range(1, 21))


async def test_wait_for_rollouts_bypasses_the_lock() -> None:
    inner = RecordingStore()
    inner.block_update_attempt = True
    wrapper = LightningStoreThreaded(inner)
    holder = threading.Thread(target=lambda: asyncio.run(wrapper.update_attempt("ro-1", "latest", status="running")))
    holder.start()
    try:
        deadline = time.monotonic() + 5
        while inner.active == 0:
            assert time.monotonic() < deadline, "the lock holder never started"
            await asyncio.sleep(0.005)

        def wait_call() -> object:
            return asyncio.run(wrapper.wait_for_rollouts(rollout_ids=["ro-1"], timeout=0.5))

        result = await asyncio.wait_for(asyncio.to_thread(wait_call), timeout=2)
        assert result is inner.results[-1]
        assert inner.calls[-1][0] == "wait_for_rollouts"

        locked_call = asyncio.ensure_future(
            asyncio.to_thread(lambda: asyncio.run(wrapper.get_worker_by_id("w-blocked")))
        )
        await asyncio.sleep(0.2)
        assert not locked_call.done(), "a locked method ran while another thread held the lock"
        inner.release.set()
        await asyncio.wait_for(locked_call, timeout=5)
        assert inner.calls[-1][0] == "get_worker_by_id"
    finally:
        inner.release.set()
        await asyncio.to_thread(holder.join, 10)


async def test_ten_threads_add_resources_on_memory_store() -> None:
    store = InMemoryLightningStore()
    wrapper = LightningStoreThreaded(store)

    def call(index: int) -> str:
        return asyncio.run(wrapper.add_resources({"llm": LLM(endpoint="http://x", model=f"m{index}")})).resources_id

    ids = await asyncio.to_thread(run_in_threads, 10, call)
    assert len(set(ids)) == 10
    stored = await wrapper.query_resources()
    assert sorted(r.resources_id for r in stored) == sorted(ids)


async def test_threads_drive_memory_store_through_wrapper() -> None:
    store = InMemoryLightningStore(scan_debounce_seconds=0.0)
    wrapper = LightningStoreThreaded(store)
    created = [await wrapper.enqueue_rollout(input=i) for i in range(40)]

    def drain(index: int) -> list[str]:
        async def body() -> list[str]:
            claimed = []
            while (rollout := await wrapper.dequeue_rollout(worker_id=f"w-{index}")) is not None:
                claimed.append(rollout.rollout_id)
            return claimed

        return asyncio.run(body())

    per_thread = await asyncio.to_thread(run_in_threads, 4, drain)
    claims = [rid for chunk in per_thread for rid in chunk]
    assert sorted(claims) == sorted(r.rollout_id for r in created)
    assert len(claims) == len(set(claims))


async def test_statistics_match_wrapped_store() -> None:
    store = InMemoryLightningStore(scan_debounce_seconds=0.0)
    wrapper = LightningStoreThreaded(store)
    rollout = await wrapper.start_rollout(input="x")
    await wrapper.add_span(make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1))
    await wrapper.update_worker("w-1", heartbeat_stats={})
    wrapped = dict(await wrapper.statistics())
    inner = dict(await store.statistics())
    assert wrapped.pop("uptime") <= inner.pop("uptime")
    assert wrapped == inner
    assert wrapped["name"] == "InMemoryLightningStore"
    assert wrapped["total_spans"] == 1


async def test_query_workers_forwards_filter_logic_on_real_store() -> None:
    store = InMemoryLightningStore(scan_debounce_seconds=0.0)
    wrapper = LightningStoreThreaded(store)
    await wrapper.start_rollout(input="x", worker_id="gpu-busy")
    await wrapper.update_worker("cpu-idle", heartbeat_stats={})
    anded = await wrapper.query_workers(status_in=["busy"], worker_id_contains="cpu")
    assert list(anded) == []
    ored = await wrapper.query_workers(
        status_in=["busy"], worker_id_contains="cpu", filter_logic="or", sort_by="worker_id"
    )
    assert [w.worker_id for w in ored] == ["cpu-idle", "gpu-busy"]


def test_locked_method_list_covers_the_contract() -> None:
    """Every contract method but the two waits is serialized (new contract methods included)."""
    from rollouthub.store.base import LIGHTNING_STORE_METHODS
    from rollouthub.store.delegation import UNLOCKED_METHODS

    assert set(LIGHTNING_STORE_METHODS) - UNLOCKED_METHODS == set(LOCKED_METHODS)


async def test_dequeue_or_wait_waits_outside_the_lock_and_wakes_across_threads() -> None:
    """A thread waiting for a rollout does not hold the wrapper's lock; an enqueue from another thread wakes it."""
    wrapper = LightningStoreThreaded(InMemoryLightningStore())
    waiting_started = threading.Event()
    outcome: dict[str, Any] = {}

    def waiter(index: int) -> Any:
        if index == 0:
            waiting_started.set()
            return asyncio.run(wrapper.dequeue_rollout_or_wait(worker_id="waiter", timeout=10.0))
        assert waiting_started.wait(5)
        time.sleep(0.3)
        started = time.monotonic()
        asyncio.run(wrapper.update_worker("other"))  # would block for 10 s if the waiter held the lock
        outcome["locked_call_seconds"] = time.monotonic() - started
        rollout = asyncio.run(wrapper.enqueue_rollout(input="cross-thread"))
        outcome["queued_at"] = time.monotonic()
        return rollout

    claimed, queued = run_in_threads(2, waiter, timeout=30)
    assert outcome["locked_call_seconds"] < 2.0
    assert claimed is not None and claimed.rollout_id == queued.rollout_id
    assert claimed.attempt.worker_id == "waiter"


async def test_dequeue_or_wait_on_a_store_that_cannot_wait_makes_a_locked_dequeue() -> None:
    """A wrapped store without the event-driven wait gets the reference poll: a ``dequeue_rollout`` (under the lock)."""
    inner = RecordingStore()
    wrapper = LightningStoreThreaded(inner)
    result = await wrapper.dequeue_rollout_or_wait(worker_id="w", timeout=5.0)
    assert result is inner.results[-1]  # the recorder's answer counts as a claim: no waiting
    assert inner.calls == [("dequeue_rollout", {"worker_id": "w"})]
