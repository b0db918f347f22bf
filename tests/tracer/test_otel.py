"""``LightningSpanProcessor``, ``StoreOTLPSpanProcessor`` and ``OtelTracer``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Optional

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from rollouthub.store import InMemoryLightningStore
from rollouthub.tracer import OtelTracer, get_active_tracer
from rollouthub.tracer import otel as otel_module
from rollouthub.tracer.otel import LightningSpanProcessor, StoreOTLPSpanProcessor
from rollouthub.types import TraceStatus
from rollouthub.utils.otlp import LightningStoreOTLPExporter


def _provider_with(processor: Any, **kwargs: Any) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False, **kwargs)
    provider.add_span_processor(processor)
    return provider


class SlowStore:
    """A store whose ``add_otel_span`` never completes until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    @property
    def capabilities(self) -> Dict[str, bool]:
        return {"otlp_traces": False}

    async def add_otel_span(
        self, rollout_id: str, attempt_id: str, span: Any, sequence_id: Optional[int] = None
    ) -> Any:
        self.calls += 1
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return None


class FailingStore(SlowStore):
    async def add_otel_span(
        self, rollout_id: str, attempt_id: str, span: Any, sequence_id: Optional[int] = None
    ) -> Any:
        raise ConnectionError("store down")


# ---------------------------------------------------------------------------------------------------------------------
# LightningSpanProcessor
# ---------------------------------------------------------------------------------------------------------------------


def test_processor_ignores_unsampled_spans() -> None:
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor, sampler=ALWAYS_OFF).get_tracer("t")
    with processor:
        with tracer.start_as_current_span("dropped"):
            pass
    assert processor.spans() == []


def test_processor_context_resets_collected_spans() -> None:
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    with processor:
        tracer.start_span("first").end()
    assert [s.name for s in processor.spans()] == ["first"]
    assert processor.spans()[0].rollout_id == "rollout-dummy"
    assert processor.spans()[0].attempt_id == "attempt-dummy"
    with processor:
        assert processor.spans() == []
        tracer.start_span("second").end()
    assert [s.name for s in processor.spans()] == ["second"]


async def test_processor_with_context_writes_to_store_and_keeps_spans_after_exit() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    rollout = await store.start_rollout(input="x")
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    with processor.with_context(store, rid, aid):  # type: ignore[arg-type]
        assert (processor.store, processor.rollout_id, processor.attempt_id) == (store, rid, aid)
        tracer.start_span("a").end()
        tracer.start_span("b").end()
    assert (processor.store, processor.rollout_id, processor.attempt_id) == (None, None, None)
    collected = processor.spans()
    assert [s.name for s in collected] == ["a", "b"]
    assert [s.sequence_id for s in collected] == [1, 2]
    stored = await store.query_spans(rid)
    assert [s.name for s in stored] == ["a", "b"]
    processor.shutdown()


def test_processor_loop_thread_is_named_otel_loop() -> None:
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    store = InMemoryLightningStore(thread_safe=True)
    rollout = asyncio.run(store.start_rollout(input="x"))
    with processor.with_context(store, rollout.rollout_id, rollout.attempt.attempt_id):  # type: ignore[arg-type]
        tracer.start_span("a").end()
    names = [t.name for t in threading.enumerate()]
    assert "otel-loop" in names
    thread = processor._loop_thread
    assert thread is not None and thread.daemon
    processor.shutdown()
    thread.join(5)
    assert not thread.is_alive()


def test_processor_store_timeout_falls_back_to_local_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_module, "STORE_WRITE_TIMEOUT_SECONDS", 0.3)
    store = SlowStore()
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    with processor.with_context(store, "ro-1", "at-1"):  # type: ignore[arg-type]
        started = time.monotonic()
        tracer.start_span("slow").end()
        elapsed = time.monotonic() - started
    store.release.set()
    assert elapsed < 5.0  # bounded by the (patched) store timeout, not by the store
    [span] = processor.spans()
    assert (span.name, span.rollout_id, span.attempt_id) == ("slow", "ro-1", "at-1")
    assert store.calls == 1
    assert processor.force_flush(5000)
    processor.shutdown()


def test_processor_default_store_timeout_is_ten_seconds() -> None:
    assert otel_module.STORE_WRITE_TIMEOUT_SECONDS == 10.0


def test_processor_store_error_falls_back_to_local_span() -> None:
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    with processor.with_context(FailingStore(), "ro-1", "at-1"):  # type: ignore[arg-type]
        tracer.start_span("x").end()
    assert [(s.name, s.rollout_id) for s in processor.spans()] == [("x", "ro-1")]
    processor.shutdown()


def test_processor_disable_store_submission_keeps_spans_local() -> None:
    store = SlowStore()
    processor = LightningSpanProcessor(disable_store_submission=True)
    assert processor.disable_store_submission
    tracer = _provider_with(processor).get_tracer("t")
    with processor.with_context(store, "ro-1", "at-1"):  # type: ignore[arg-type]
        tracer.start_span("x").end()
    assert store.calls == 0
    assert [(s.name, s.rollout_id, s.attempt_id) for s in processor.spans()] == [("x", "ro-1", "at-1")]


async def test_processor_on_loop_thread_does_not_deadlock() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    rollout = await store.start_rollout(input="x")
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    with processor.with_context(store, rid, aid):  # type: ignore[arg-type]
        tracer.start_span("warmup").end()  # starts the private loop
        loop = processor._loop
        assert loop is not None

        async def end_on_loop() -> None:
            tracer.start_span("on-loop").end()

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(end_on_loop(), loop))
        assert processor.force_flush(5000)
    names = {s.name for s in await store.query_spans(rid)}
    assert names == {"warmup", "on-loop"}
    processor.shutdown()


def test_processor_concurrent_threads_lose_no_span() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    rollout = asyncio.run(store.start_rollout(input="x"))
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    n_threads, per_thread = 16, 25
    barrier = threading.Barrier(n_threads, timeout=10)

    def emit(index: int) -> None:
        barrier.wait()
        for j in range(per_thread):
            tracer.start_span(f"t{index}-{j}").end()

    with processor.with_context(store, rid, aid):  # type: ignore[arg-type]
        threads = [threading.Thread(target=emit, args=(i,)) for i in range(n_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    expected = {f"t{i}-{j}" for i in range(n_threads) for j in range(per_thread)}
    collected = processor.spans()
    assert {s.name for s in collected} == expected and len(collected) == len(expected)
    stored = asyncio.run(store.query_spans(rid))
    assert {s.name for s in stored} == expected
    assert len({s.sequence_id for s in stored}) == len(expected)
    processor.shutdown()


async def test_tracer_concurrent_coroutines_and_threads_lose_no_span() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    tracer = OtelTracer()
    with tracer.lifespan(store):  # type: ignore[arg-type]
        async with tracer.trace_context("t", rollout_id=rid, attempt_id=aid):

            async def coroutine_emitter(index: int) -> None:
                for j in range(10):
                    tracer.create_span(f"co{index}-{j}")
                    await asyncio.sleep(0)

            def thread_emitter(index: int) -> None:
                for j in range(10):
                    tracer.create_span(f"th{index}-{j}")

            await asyncio.gather(
                *(coroutine_emitter(i) for i in range(8)),
                *(asyncio.to_thread(thread_emitter, i) for i in range(8)),
            )
    expected = {f"{kind}{i}-{j}" for kind in ("co", "th") for i in range(8) for j in range(10)}
    assert {s.name for s in tracer.get_last_trace()} == expected
    assert {s.name for s in await store.query_spans(rid)} == expected


# ---------------------------------------------------------------------------------------------------------------------
# OtelTracer
# ---------------------------------------------------------------------------------------------------------------------


async def test_uninitialised_tracer_raises() -> None:
    tracer = OtelTracer()
    with pytest.raises(RuntimeError):
        tracer.create_span("x")
    with pytest.raises(RuntimeError):
        tracer.get_last_trace()
    with pytest.raises(RuntimeError):
        async with tracer.trace_context():
            pass  # pragma: no cover
    assert get_active_tracer() is None


async def test_trace_context_argument_validation() -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        with pytest.raises(ValueError):
            async with tracer.trace_context(rollout_id="ro-1"):
                pass  # pragma: no cover
        with pytest.raises(ValueError):  # ids without any store
            async with tracer.trace_context(rollout_id="ro-1", attempt_id="at-1"):
                pass  # pragma: no cover
        assert get_active_tracer() is None


async def test_trace_context_store_argument_is_deprecated() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    rollout = await store.start_rollout(input="x")
    tracer = OtelTracer()
    with tracer.lifespan():
        with pytest.warns(DeprecationWarning):
            async with tracer.trace_context(
                store=store, rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
            ):
                tracer.create_span("x")
    assert [s.name for s in await store.query_spans(rollout.rollout_id)] == ["x"]


async def test_trace_context_without_ids_buffers_locally() -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        async with tracer.trace_context("local") as otel_tracer:
            assert get_active_tracer() is tracer
            with otel_tracer.start_as_current_span("outer"):
                tracer.create_span("inner")
        spans = tracer.get_last_trace()
    assert [s.name for s in spans] == ["inner", "outer"]
    assert {s.rollout_id for s in spans} == {"rollout-dummy"}
    assert spans[0].parent_id == spans[1].span_id


async def test_create_span_fields_and_status() -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        async with tracer.trace_context():
            plain = tracer.create_span("plain", attributes={"a": 1, "b": "x"}, timestamp=1_700_000_000.5)
            failed = tracer.create_span("failed", status=TraceStatus(status_code="ERROR", description="nope"))
            ok = tracer.create_span("ok", status=TraceStatus(status_code="OK"))
    assert plain.name == "plain"
    assert plain.attributes == {"a": 1, "b": "x"}
    assert plain.start_time == plain.end_time == pytest.approx(1_700_000_000.5)
    assert plain.status.status_code == "UNSET"
    assert (failed.status.status_code, failed.status.description) == ("ERROR", "nope")
    assert ok.status.status_code == "OK"


async def test_operation_context_is_current_span_and_records_errors(caplog: pytest.LogCaptureFixture) -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        async with tracer.trace_context():
            with tracer.operation_context("op", attributes={"k": "v"}) as op:
                op.record_attributes({"extra": 1})
                child = tracer.create_span("child")
            with pytest.raises(ValueError):
                with tracer.operation_context("bad", end_time=5.0) as bad:
                    raise ValueError("kaboom")
        spans = {s.name: s for s in tracer.get_last_trace()}
    assert spans["child"].parent_id == spans["op"].span_id
    assert child.name == "child"
    recorded = op.get_recorded_span()
    assert recorded.attributes == {"k": "v", "extra": 1}
    bad_span = bad.get_recorded_span()
    assert (bad_span.status.status_code, bad_span.status.description) == ("ERROR", "kaboom")
    assert spans["bad"].events[0].name == "exception"
    assert "end_time" in caplog.text


def test_recording_context_before_end_raises() -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        with tracer.operation_context("op") as op:
            with pytest.raises(ValueError):
                op.get_recorded_span()


class OtlpCapableStore(InMemoryLightningStore):
    """An in-memory store that claims OTLP support (endpoint on a closed local port)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(thread_safe=True)
        self._endpoint = endpoint

    @property
    def capabilities(self) -> Any:
        return {**super().capabilities, "otlp_traces": True}

    def otlp_traces_endpoint(self) -> str:
        return self._endpoint


def _exporter_of(tracer: OtelTracer) -> LightningStoreOTLPExporter:
    assert tracer.tracer_provider is not None
    [exporter] = tracer._otlp_exporters()
    return exporter


async def test_otlp_enabled_and_disabled_by_store_capability() -> None:
    otlp_store = OtlpCapableStore("http://127.0.0.1:9/v1/traces")
    rollout = await otlp_store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    tracer = OtelTracer()
    with tracer.lifespan(otlp_store):
        exporter = _exporter_of(tracer)
        processor = tracer.span_processor
        assert processor is not None
        default_endpoint = exporter.endpoint
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            assert processor.disable_store_submission is True
            assert (exporter.endpoint, exporter.rollout_id, exporter.attempt_id) == (
                "http://127.0.0.1:9/v1/traces",
                rid,
                aid,
            )
            assert tracer.tracer_provider is not None
            resource = tracer.tracer_provider.resource.attributes
            assert resource["agentlightning.rollout_id"] == rid
            assert resource["agentlightning.attempt_id"] == aid
        # Disabled again after the context: no stale ids, store submission back on.
        assert processor.disable_store_submission is False
        assert (exporter.endpoint, exporter.rollout_id, exporter.attempt_id) == (default_endpoint, None, None)

        plain_store = InMemoryLightningStore(thread_safe=True)
        plain_rollout = await plain_store.start_rollout(input="y")
        tracer._store = plain_store
        async with tracer.trace_context(
            rollout_id=plain_rollout.rollout_id, attempt_id=plain_rollout.attempt.attempt_id
        ):
            assert processor.disable_store_submission is False
            assert exporter.rollout_id is None
            tracer.create_span("direct")
        assert [s.name for s in await plain_store.query_spans(plain_rollout.rollout_id)] == ["direct"]


async def test_otlp_without_exporter_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    store = OtlpCapableStore("http://127.0.0.1:9/v1/traces")
    tracer = OtelTracer()
    with tracer.lifespan(store):
        monkeypatch.setattr(tracer, "_otlp_exporters", lambda: [])
        with pytest.raises(RuntimeError, match="processors found"):
            async with tracer.trace_context(rollout_id="ro-1", attempt_id="at-1"):
                pass  # pragma: no cover
    assert get_active_tracer() is None


async def test_unreachable_otlp_store_blocks_at_most_one_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans keep flowing locally and the agent is blocked at most ~2 timeouts per trace when the store is down."""
    monkeypatch.setattr(otel_module, "STORE_WRITE_TIMEOUT_SECONDS", 0.5)
    store = OtlpCapableStore("http://127.0.0.1:9/v1/traces")  # nothing listens on the discard port
    tracer = OtelTracer()
    with tracer.lifespan(store):
        started = time.monotonic()
        async with tracer.trace_context(rollout_id="ro-1", attempt_id="at-1"):
            for i in range(5):
                tracer.create_span(f"s{i}")
        elapsed = time.monotonic() - started
        assert [s.name for s in tracer.get_last_trace()] == [f"s{i}" for i in range(5)]
    assert elapsed < 4.0


def test_store_otlp_processor_drops_late_exports_for_other_ids() -> None:
    exported: List[Any] = []

    class FakeExporter:
        rollout_id: Optional[str] = "ro-1"
        attempt_id: Optional[str] = "at-1"
        gate = threading.Event()

        def should_bypass(self) -> bool:
            return True

        def export(self, spans: Any) -> None:
            self.gate.wait(5)
            exported.extend(s.name for s in spans)

        def shutdown(self) -> None:
            pass

    exporter = FakeExporter()
    processor = StoreOTLPSpanProcessor(exporter)
    tracer = _provider_with(processor).get_tracer("t")
    processor._degraded = True  # do not wait in on_end
    tracer.start_span("first").end()
    tracer.start_span("second").end()
    exporter.rollout_id = "ro-2"  # context switched while exports were pending
    exporter.gate.set()
    assert processor.flush(5)
    assert exported in ([], ["first"])  # "first" may already have been in flight; "second" never leaks
    processor.shutdown()


def test_processor_waits_for_a_slow_store_at_most_once_per_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_module, "STORE_WRITE_TIMEOUT_SECONDS", 0.5)
    store = SlowStore()
    processor = LightningSpanProcessor()
    tracer = _provider_with(processor).get_tracer("t")
    with processor.with_context(store, "ro-1", "at-1"):  # type: ignore[arg-type]
        started = time.monotonic()
        for i in range(6):
            tracer.start_span(f"s{i}").end()
        elapsed = time.monotonic() - started
    assert elapsed < 0.5 * 3  # one timeout, not six
    assert [s.name for s in processor.spans()] == [f"s{i}" for i in range(6)]
    store.release.set()
    assert processor.force_flush(5000)
    assert store.calls == 6  # every write still reached the store in the background
    processor.shutdown()


def test_get_otel_tracer_is_built_once_per_name() -> None:
    tracer = OtelTracer()
    with tracer.lifespan():
        assert tracer.get_otel_tracer() is tracer.get_otel_tracer()
        assert tracer.get_otel_tracer("a") is tracer.get_otel_tracer("a")
        assert tracer.get_otel_tracer("a") is not tracer.get_otel_tracer("b")
