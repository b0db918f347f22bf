"""``LitAgentRunner`` behaviour (the reference's runner test checklist)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional

import pytest
from opentelemetry.sdk.trace import TracerProvider

from rollouthub.emitter import emit_reward, find_final_reward, get_reward_value
from rollouthub.execution.events import ThreadingEvent
from rollouthub.litagent import LitAgent
from rollouthub.runner import LegacyAgentRunner, LitAgentRunner, Runner
from rollouthub.store import InMemoryLightningStore
from rollouthub.tracer import OtelTracer, get_active_tracer
from rollouthub.types import Hook, PromptTemplate, Span, SpanCoreFields, TraceStatus

pytestmark = pytest.mark.timeout(60)

RESOURCES: Any = {"prompt": PromptTemplate(template="Q: {q}", engine="f-string")}


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.02) -> None:
    """Poll an async predicate until it is true (``AssertionError`` after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


class FuncAgent(LitAgent[Any]):
    """A sync agent delegating to a plain function ``fn(task, resources, rollout)``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.modes: List[str] = []

    def training_rollout(self, task: Any, resources: Any, rollout: Any) -> Any:
        self.modes.append("train")
        return self.fn(task, resources, rollout)

    def validation_rollout(self, task: Any, resources: Any, rollout: Any) -> Any:
        self.modes.append("val")
        return self.fn(task, resources, rollout)


class AsyncFuncAgent(LitAgent[Any]):
    """An async agent delegating to a coroutine function."""

    def __init__(self, fn: Callable[..., Awaitable[Any]]) -> None:
        super().__init__()
        self.fn = fn

    async def rollout_async(self, task: Any, resources: Any, rollout: Any) -> Any:
        return await self.fn(task, resources, rollout)


class RecordingHook(Hook):
    def __init__(self, log: List[str], fail: bool = False) -> None:
        self.log = log
        self.fail = fail
        self.rollout_end_spans: List[Any] = []
        self.trace_end_spans: List[Any] = []

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Any) -> None:
        self.log.append("on_rollout_start")
        if self.fail:
            raise RuntimeError("hook failure is ignored")

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        assert get_active_tracer() is tracer
        self.log.append("on_trace_start")

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        self.trace_end_spans = list(tracer.get_last_trace())
        self.log.append("on_trace_end")

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Any, spans: Any) -> None:
        self.rollout_end_spans = list(spans)
        self.log.append("on_rollout_end")


@pytest.fixture()
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore(thread_safe=True)


def make_runner(**kwargs: Any) -> LitAgentRunner[Any]:
    kwargs.setdefault("poll_interval", 0.05)
    kwargs.setdefault("heartbeat_interval", 0)
    kwargs.setdefault("interval_jitter", 0.0)
    return LitAgentRunner(OtelTracer(), **kwargs)


async def run_one(
    store: InMemoryLightningStore, agent: LitAgent[Any], *, hooks: Optional[List[Any]] = None, mode: Any = "train"
) -> Any:
    """Enqueue one rollout and let a runner process it through ``iter``; returns the final rollout."""
    await store.add_resources(RESOURCES)
    enqueued = await store.enqueue_rollout(input={"q": "1+1"}, mode=mode)
    runner = make_runner(max_rollouts=1)
    with runner.run_context(agent=agent, store=store, hooks=hooks, worker_id=0):
        await runner.iter()
    return await store.get_rollout_by_id(enqueued.rollout_id)


async def spans_of(store: InMemoryLightningStore, rollout_id: str) -> List[Span]:
    return sorted(await store.query_spans(rollout_id), key=lambda s: s.sequence_id)


# ---------------------------------------------------------------------------------------------------------------------
# Result post-processing
# ---------------------------------------------------------------------------------------------------------------------


async def test_none_result_streams_spans_and_reports_last_trace(store: InMemoryLightningStore) -> None:
    log: List[str] = []
    hook = RecordingHook(log)

    def agent_fn(task: Any, resources: Any, rollout: Any) -> None:
        assert resources["prompt"].format(**task) == "Q: 1+1"
        emit_reward(0.25)

    rollout = await run_one(store, FuncAgent(agent_fn), hooks=[hook])
    assert rollout.status == "succeeded"
    stored = await spans_of(store, rollout.rollout_id)
    assert find_final_reward(stored) == 0.25
    assert [s.span_id for s in hook.rollout_end_spans] == [s.span_id for s in stored]


async def test_float_result_adds_reward_span(store: InMemoryLightningStore) -> None:
    hook = RecordingHook([])

    def agent_fn(task: Any, resources: Any, rollout: Any) -> float:
        emit_reward(0.1)  # a streamed span before the final reward
        return 0.75

    rollout = await run_one(store, FuncAgent(agent_fn), hooks=[hook])
    assert rollout.status == "succeeded"
    stored = await spans_of(store, rollout.rollout_id)
    assert len(stored) == 2
    assert find_final_reward(stored) == 0.75
    assert get_reward_value(stored[-1]) == 0.75
    # Reference quirk: the hook sees the snapshot taken before the reward span was added.
    assert [get_reward_value(s) for s in hook.rollout_end_spans] == [0.1]


async def test_completion_log_counts_the_returned_reward(
    store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18 (point 8): a returned float is the rollout's final reward, and its span is counted in the log line."""

    def agent_fn(task: Any, resources: Any, rollout: Any) -> float:
        return 0.5

    caplog.set_level(logging.INFO, logger="rollouthub.runner.agent")
    rollout = await run_one(store, FuncAgent(agent_fn))
    [line] = [r.getMessage() for r in caplog.records if "Completed in" in r.getMessage()]
    assert line.endswith("Collected 1 span(s). Final reward: 0.5"), line
    assert len(await spans_of(store, rollout.rollout_id)) == 1


@pytest.mark.parametrize("value, expected", [(1, 1.0), (True, 1.0), (0, 0.0)])
async def test_int_and_bool_results_are_converted(
    store: InMemoryLightningStore, value: Any, expected: float, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        rollout = await run_one(store, FuncAgent(lambda *a: value))
    assert rollout.status == "succeeded"
    assert find_final_reward(await spans_of(store, rollout.rollout_id)) == expected
    assert "Auto converting to float" in caplog.text


async def test_readable_span_list_is_added(store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture) -> None:
    private_tracer = TracerProvider(shutdown_on_exit=False).get_tracer("agent")

    def agent_fn(task: Any, resources: Any, rollout: Any) -> List[Any]:
        spans = []
        for name in ("r1", "r2"):
            span = private_tracer.start_span(name)
            span.end()
            spans.append(span)
        return spans

    hook = RecordingHook([])
    with caplog.at_level(logging.WARNING):
        rollout = await run_one(store, FuncAgent(agent_fn), hooks=[hook])
    assert rollout.status == "succeeded"
    assert [s.name for s in await spans_of(store, rollout.rollout_id)] == ["r1", "r2"]
    assert [s.name for s in hook.rollout_end_spans] == ["r1", "r2"]
    assert "duplicated" in caplog.text


async def test_span_list_is_added_unchanged(store: InMemoryLightningStore) -> None:
    hook = RecordingHook([])

    def agent_fn(task: Any, resources: Any, rollout: Any) -> List[Span]:
        return [
            Span.from_attributes(
                attributes={"k": i},
                rollout_id=rollout.rollout_id,
                attempt_id=rollout.attempt.attempt_id,
                sequence_id=10 + i,
                name=f"given-{i}",
            )
            for i in range(2)
        ]

    rollout = await run_one(store, FuncAgent(agent_fn), hooks=[hook])
    stored = await spans_of(store, rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in stored] == [("given-0", 10), ("given-1", 11)]
    assert [s.name for s in hook.rollout_end_spans] == ["given-0", "given-1"]


async def test_core_fields_list_is_converted(store: InMemoryLightningStore) -> None:
    def agent_fn(task: Any, resources: Any, rollout: Any) -> List[SpanCoreFields]:
        return [
            SpanCoreFields(
                name=f"core-{i}", status=TraceStatus(status_code="OK"), attributes={}, start_time=1.0, end_time=2.0
            )
            for i in range(3)
        ]

    rollout = await run_one(store, FuncAgent(agent_fn))
    stored = await spans_of(store, rollout.rollout_id)
    assert [s.name for s in stored] == ["core-0", "core-1", "core-2"]
    assert len({s.sequence_id for s in stored}) == 3
    attempts = await store.query_attempts(rollout.rollout_id)
    assert {s.attempt_id for s in stored} == {attempts[-1].attempt_id}


async def test_empty_list_warns(store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture) -> None:
    hook = RecordingHook([])
    with caplog.at_level(logging.WARNING):
        rollout = await run_one(store, FuncAgent(lambda *a: []), hooks=[hook])
    assert rollout.status == "succeeded"
    assert hook.rollout_end_spans == []
    assert "empty list" in caplog.text


@pytest.mark.parametrize("bad_result", [[1, "x"], [Span.from_attributes(attributes={}), 3], "text", {"a": 1}])
async def test_invalid_results_fail_the_attempt(store: InMemoryLightningStore, bad_result: Any) -> None:
    rollout = await run_one(store, FuncAgent(lambda *a: bad_result))
    assert rollout.status == "failed"
    attempts = await store.query_attempts(rollout.rollout_id)
    assert attempts[-1].status == "failed"


async def test_agent_exception_fails_attempt_and_skips_trace_end(store: InMemoryLightningStore) -> None:
    log: List[str] = []

    def agent_fn(task: Any, resources: Any, rollout: Any) -> None:
        raise RuntimeError("agent crashed")

    rollout = await run_one(store, FuncAgent(agent_fn), hooks=[RecordingHook(log)])
    assert rollout.status == "failed"
    assert log == ["on_rollout_start", "on_trace_start", "on_rollout_end"]


# ---------------------------------------------------------------------------------------------------------------------
# Hooks, modes, async agents
# ---------------------------------------------------------------------------------------------------------------------


async def test_hook_order_and_failing_hooks_are_ignored(store: InMemoryLightningStore) -> None:
    log: List[str] = []
    failing = RecordingHook(log, fail=True)
    second = RecordingHook(log)

    def agent_fn(task: Any, resources: Any, rollout: Any) -> float:
        log.append("agent")
        return 1.0

    rollout = await run_one(store, FuncAgent(agent_fn), hooks=[failing, second])
    assert rollout.status == "succeeded"
    assert log == [
        "on_rollout_start",
        "on_rollout_start",
        "on_trace_start",
        "on_trace_start",
        "agent",
        "on_trace_end",
        "on_trace_end",
        "on_rollout_end",
        "on_rollout_end",
    ]


async def test_trace_end_hook_sees_spans_without_final_reward(store: InMemoryLightningStore) -> None:
    hook = RecordingHook([])

    def agent_fn(task: Any, resources: Any, rollout: Any) -> float:
        emit_reward(0.3)
        return 0.9

    await run_one(store, FuncAgent(agent_fn), hooks=[hook])
    assert [get_reward_value(s) for s in hook.trace_end_spans] == [0.3]


@pytest.mark.parametrize("mode, method", [("train", "train"), ("val", "val"), ("test", "val"), (None, "val")])
async def test_mode_selects_training_or_validation(store: InMemoryLightningStore, mode: Any, method: str) -> None:
    agent = FuncAgent(lambda *a: 1.0)
    await run_one(store, agent, mode=mode)
    assert agent.modes == [method]


async def test_async_agent(store: InMemoryLightningStore) -> None:
    async def agent_fn(task: Any, resources: Any, rollout: Any) -> None:
        await asyncio.sleep(0.01)
        emit_reward(0.6)

    agent = AsyncFuncAgent(agent_fn)
    assert agent.is_async()
    rollout = await run_one(store, agent)
    assert rollout.status == "succeeded"
    assert find_final_reward(await spans_of(store, rollout.rollout_id)) == 0.6


# ---------------------------------------------------------------------------------------------------------------------
# iter: max_rollouts, stop event, polling, missing resources
# ---------------------------------------------------------------------------------------------------------------------


async def test_max_rollouts_caps_iter(store: InMemoryLightningStore) -> None:
    await store.add_resources(RESOURCES)
    for i in range(3):
        await store.enqueue_rollout(input={"q": str(i)}, mode="train")
    runner = make_runner(max_rollouts=2)
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        await runner.iter()
    statuses = sorted(r.status for r in await store.query_rollouts())
    assert statuses == ["queuing", "succeeded", "succeeded"]


async def test_failed_rollouts_count_towards_max_rollouts(store: InMemoryLightningStore) -> None:
    await store.add_resources(RESOURCES)
    for i in range(2):
        await store.enqueue_rollout(input={"q": str(i)}, mode="train")

    def agent_fn(*args: Any) -> None:
        raise ValueError("nope")

    runner = make_runner(max_rollouts=2)
    with runner.run_context(agent=FuncAgent(agent_fn), store=store, worker_id=0):
        await runner.iter()
    assert sorted(r.status for r in await store.query_rollouts()) == ["failed", "failed"]


async def test_stop_event_ends_polling_on_empty_queue(store: InMemoryLightningStore) -> None:
    runner = make_runner(poll_interval=30.0)
    event = ThreadingEvent()
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        task = asyncio.create_task(runner.iter(event=event))
        await asyncio.sleep(0.2)
        assert not task.done()
        started = time.monotonic()
        event.set()
        await asyncio.wait_for(task, timeout=5)
    assert time.monotonic() - started < 2.0  # woke up long before the 30 s poll interval


async def test_stop_event_set_before_iter(store: InMemoryLightningStore) -> None:
    await store.add_resources(RESOURCES)
    await store.enqueue_rollout(input={"q": "x"}, mode="train")
    event = ThreadingEvent()
    event.set()
    runner = make_runner()
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        await asyncio.wait_for(runner.iter(event=event), timeout=5)
    assert [r.status for r in await store.query_rollouts()] == ["queuing"]


async def test_empty_queue_polling_picks_up_later_rollouts(store: InMemoryLightningStore) -> None:
    await store.add_resources(RESOURCES)
    dequeues: List[float] = []
    original = store.dequeue_rollout

    async def counting_dequeue(*args: Any, **kwargs: Any) -> Any:
        dequeues.append(time.monotonic())
        return await original(*args, **kwargs)

    store.dequeue_rollout = counting_dequeue  # type: ignore[method-assign]
    runner = make_runner(max_rollouts=1, poll_interval=0.05)
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        task = asyncio.create_task(runner.iter())

        async def polled_a_few_times() -> bool:
            return len(dequeues) >= 3

        await wait_for(polled_a_few_times)
        enqueued = await store.enqueue_rollout(input={"q": "late"}, mode="train")
        await asyncio.wait_for(task, timeout=10)
    rollout = await store.get_rollout_by_id(enqueued.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"


async def test_waiting_runner_claims_a_rollout_queued_mid_interval(store: InMemoryLightningStore) -> None:
    """With a store that can wait, the poll interval no longer delays pickup: the enqueue wakes the runner."""
    await store.add_resources(RESOURCES)
    runner = make_runner(max_rollouts=1, poll_interval=30.0)
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        task = asyncio.create_task(runner.iter())

        async def idle() -> bool:
            worker = await store.get_worker_by_id(runner.get_worker_id())
            return worker is not None and worker.status == "idle"

        await wait_for(idle)
        enqueued = await store.enqueue_rollout(input={"q": "late"}, mode="train")
        started = time.monotonic()
        await asyncio.wait_for(task, timeout=10)
    assert time.monotonic() - started < 5.0  # long before the 30 s interval
    rollout = await store.get_rollout_by_id(enqueued.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"


class _PollOnlyStore:
    """A store object with the reference contract only (no ``dequeue_rollout_or_wait``)."""

    def __init__(self) -> None:
        self.calls: List[float] = []

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> None:
        self.calls.append(time.monotonic())
        return None


async def test_store_without_waiting_dequeue_is_polled_every_interval() -> None:
    store = _PollOnlyStore()
    runner = make_runner(poll_interval=0.2)
    runner._store = store  # type: ignore[assignment]
    runner.worker_id = 0
    event = ThreadingEvent()
    task = asyncio.create_task(runner.iter(event=event))
    await asyncio.sleep(0.7)
    event.set()
    await asyncio.wait_for(task, timeout=5)
    gaps = [b - a for a, b in zip(store.calls, store.calls[1:], strict=False)]
    assert 3 <= len(store.calls) <= 5 and all(gap >= 0.19 for gap in gaps)


async def test_missing_resources_leaves_attempt_untouched(store: InMemoryLightningStore) -> None:
    enqueued = await store.enqueue_rollout(input={"q": "x"}, mode="train")
    called: List[Any] = []
    runner = make_runner(max_rollouts=1)
    with runner.run_context(agent=FuncAgent(lambda *a: called.append(a)), store=store, worker_id=0):
        await runner.iter()
    assert called == []
    attempts = await store.query_attempts(enqueued.rollout_id)
    assert attempts[-1].status == "preparing"


# ---------------------------------------------------------------------------------------------------------------------
# step, worker ids, lifecycle
# ---------------------------------------------------------------------------------------------------------------------


async def test_step_returns_completed_rollout_and_registers_worker(store: InMemoryLightningStore) -> None:
    runner = make_runner()
    with runner.run_context(agent=FuncAgent(lambda *a: 0.5), store=store, worker_id=3):
        assert runner.get_worker_id() == "Worker-3"
        rollout = await runner.step({"q": "2+2"}, resources=RESOURCES, mode="train")
    assert rollout.status == "succeeded"
    assert rollout.resources_id is not None
    assert find_final_reward(await spans_of(store, rollout.rollout_id)) == 0.5
    workers = [w.worker_id for w in await store.query_workers()]
    assert "Worker-3" in workers


async def test_step_reraises_agent_errors_after_marking_failed(store: InMemoryLightningStore) -> None:
    def agent_fn(*args: Any) -> None:
        raise KeyError("broken")

    runner = make_runner()
    with runner.run_context(agent=FuncAgent(agent_fn), store=store, worker_id=0):
        with pytest.raises(KeyError):
            await runner.step({"q": "x"}, resources=RESOURCES)
    [rollout] = list(await store.query_rollouts())
    assert rollout.status == "failed"


async def test_step_without_resources_raises(store: InMemoryLightningStore) -> None:
    runner = make_runner()
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=0):
        with pytest.raises(RuntimeError, match="No resources"):
            await runner.step({"q": "x"})


def test_lifecycle_and_accessors(store: InMemoryLightningStore) -> None:
    runner = make_runner()
    assert runner.get_worker_id() == "Worker-Unknown"
    with pytest.raises(ValueError):
        runner.get_agent()
    with pytest.raises(ValueError):
        runner.get_store()
    with pytest.raises(RuntimeError):
        runner.run()
    agent = FuncAgent(lambda *a: 1.0)
    with runner.run_context(agent=agent, store=store) as inside:
        assert inside is runner
        assert runner.get_agent() is agent and agent.get_runner() is runner
        assert runner.get_store() is store
        assert runner.get_worker_id() == "Worker-0"
        assert runner.tracer.worker_id == 0
    assert runner.get_worker_id() == "Worker-Unknown"
    with pytest.raises(ValueError):
        runner.get_agent()


def test_invalid_heartbeat_mode() -> None:
    with pytest.raises(ValueError):
        LitAgentRunner(OtelTracer(), heartbeat_launch_mode="process")  # type: ignore[arg-type]


def test_base_runner_and_legacy_shim() -> None:
    with pytest.raises(NotImplementedError):
        Runner().init(agent=None)
    with pytest.warns(DeprecationWarning):
        legacy = LegacyAgentRunner()
    with pytest.raises(NotImplementedError):
        legacy.init(agent=None)


# ---------------------------------------------------------------------------------------------------------------------
# Heartbeats
# ---------------------------------------------------------------------------------------------------------------------


async def _worker(store: InMemoryLightningStore, worker_id: str) -> Any:
    return next((w for w in await store.query_workers() if w.worker_id == worker_id), None)


@pytest.mark.parametrize("launch_mode", ["thread", "asyncio"])
async def test_heartbeats_send_system_snapshot(store: InMemoryLightningStore, launch_mode: Any) -> None:
    runner = make_runner(heartbeat_interval=0.1, heartbeat_launch_mode=launch_mode, poll_interval=0.05)
    event = ThreadingEvent()
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=5):
        task = asyncio.create_task(runner.iter(event=event))

        async def has_stats() -> bool:
            worker = await _worker(store, "Worker-5")
            return bool(worker and worker.heartbeat_stats and "cpu_usage_pct" in worker.heartbeat_stats)

        await wait_for(has_stats)
        if launch_mode == "thread":
            names = {t.name for t in threading.enumerate()}
            assert {"Worker-5-heartbeat-producer", "Worker-5-heartbeat-consumer"} <= names
        else:
            assert any(t.get_name() == "Worker-5-heartbeat" for t in asyncio.all_tasks())
        event.set()
        await asyncio.wait_for(task, timeout=10)
    if launch_mode == "thread":
        names = {t.name for t in threading.enumerate()}
        assert not any(name.startswith("Worker-5-heartbeat") for name in names)


async def test_heartbeats_disabled_when_interval_not_positive(store: InMemoryLightningStore) -> None:
    runner = make_runner(heartbeat_interval=0, max_rollouts=1)
    await store.add_resources(RESOURCES)
    await store.enqueue_rollout(input={"q": "x"}, mode="train")
    with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=1):
        await runner.iter()
    worker = await _worker(store, "Worker-1")
    assert worker is None or not worker.heartbeat_stats


async def test_asyncio_heartbeat_snapshot_timeout_is_skipped(
    store: InMemoryLightningStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def slow_snapshot(self: Any) -> Dict[str, Any]:
        release.wait(5)
        return {"cpu_usage_pct": 1.0}

    monkeypatch.setattr(LitAgentRunner, "_take_snapshot", slow_snapshot)
    runner = make_runner(heartbeat_interval=0.1, heartbeat_launch_mode="asyncio")
    event = ThreadingEvent()
    with caplog.at_level(logging.WARNING):
        with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=2):
            task = asyncio.create_task(runner.iter(event=event))

            async def warned() -> bool:
                return "snapshot timed out" in caplog.text

            await wait_for(warned)
            event.set()
            await asyncio.wait_for(task, timeout=10)
    release.set()


async def test_thread_heartbeat_skips_stale_snapshots(
    store: InMemoryLightningStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    calls: List[int] = []

    def snapshot_then_hang(self: Any) -> Dict[str, Any]:
        calls.append(1)
        if len(calls) > 1:
            release.wait(10)  # the producer stalls: the first snapshot becomes stale
        return {"cpu_usage_pct": 2.0}

    monkeypatch.setattr(LitAgentRunner, "_take_snapshot", snapshot_then_hang)
    runner = make_runner(heartbeat_interval=0.1, heartbeat_launch_mode="thread")
    event = ThreadingEvent()
    with caplog.at_level(logging.WARNING):
        with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=4):
            task = asyncio.create_task(runner.iter(event=event))

            async def warned_stale() -> bool:
                return "stale" in caplog.text

            await wait_for(warned_stale, timeout=15)
            # Warned only once for the same stale snapshot even though the consumer keeps running.
            await asyncio.sleep(0.3)
            assert caplog.text.count("stale") == 1
            release.set()
            event.set()
            await asyncio.wait_for(task, timeout=10)
    worker = await _worker(store, "Worker-4")
    # The last heartbeat (runner stopped) reports the last snapshot taken.
    assert worker is not None
    assert worker.heartbeat_stats == {"cpu_usage_pct": 2.0, "heartbeat_interval": 0.1, "runner_state": "stopped"}


def test_run_context_logs_teardown_errors_and_uses_worker_id(
    store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture
) -> None:
    calls: List[Any] = []

    class BrokenTeardownRunner(LitAgentRunner[Any]):
        def init_worker(self, worker_id: int, store: Any, **kwargs: Any) -> None:
            calls.append(("init_worker", worker_id))
            super().init_worker(worker_id, store)

        def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
            calls.append(("teardown_worker", worker_id))
            raise RuntimeError("teardown_worker exploded")

        def teardown(self, *args: Any, **kwargs: Any) -> None:
            calls.append(("teardown",))
            raise RuntimeError("teardown exploded")

    runner = BrokenTeardownRunner(OtelTracer(), heartbeat_interval=0)
    with caplog.at_level(logging.ERROR):
        with runner.run_context(agent=FuncAgent(lambda *a: 1.0), store=store, worker_id=7):
            assert runner.get_worker_id() == "Worker-7"
    assert calls == [("init_worker", 7), ("teardown_worker", 7), ("teardown",)]
    assert "teardown_worker exploded" in caplog.text and "teardown exploded" in caplog.text
