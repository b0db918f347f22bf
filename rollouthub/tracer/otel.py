"""``OtelTracer`` and ``LightningSpanProcessor``: OpenTelemetry SDK based tracing into a store."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import warnings
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Coroutine, Dict, Iterator, List, Optional, Set, Tuple

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as OtelStatusCode

from rollouthub.semconv import LightningResourceAttributes
from rollouthub.types.tracer import Attributes, Span, SpanCoreFields, StatusCode, TraceStatus, convert_timestamp

from .base import Tracer, with_active_tracer_context
from .otlp_export import SUPPRESS_KEY as _SUPPRESS
from .otlp_export import StoreOTLPSpanProcessor, StoreTrafficFilter

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = [
    "OtelTracer",
    "LightningSpanProcessor",
    "OtelSpanRecordingContext",
    "StoreOTLPSpanProcessor",
    "STORE_WRITE_TIMEOUT_SECONDS",
]

logger = logging.getLogger(__name__)

STORE_WRITE_TIMEOUT_SECONDS = 10.0
"""Longest time ``LightningSpanProcessor.on_end`` waits for the store before keeping a local copy of the span."""

LOOP_START_TIMEOUT_SECONDS = 30.0
LOOP_THREAD_NAME = "otel-loop"
SHUTDOWN_JOIN_TIMEOUT_SECONDS = 5.0

_ROLLOUT_ID_KEY = LightningResourceAttributes.ROLLOUT_ID.value
_ATTEMPT_ID_KEY = LightningResourceAttributes.ATTEMPT_ID.value


class LightningSpanProcessor(SpanProcessor):
    """Collect the spans of the current trace locally and write each ended span to the store.

    Store writes run on a private asyncio loop (daemon thread ``otel-loop``) and are awaited at most
    :data:`STORE_WRITE_TIMEOUT_SECONDS`; on timeout or error a locally converted span is kept instead, so
    :meth:`spans` never loses a span, whatever the store does. After a timeout, the remaining spans of the same
    store context are written in the background without waiting, so a slow or unreachable store costs the agent
    at most one timeout per trace. Safe to call from many threads at once.
    """

    def __init__(self, disable_store_submission: bool = False) -> None:
        """Create a processor; with ``disable_store_submission`` spans are only collected locally."""
        self._disable_store_submission = disable_store_submission
        self._spans: List[Span] = []
        self._lock = threading.Lock()
        self._store: Optional[LightningStore] = None
        self._rollout_id: Optional[str] = None
        self._attempt_id: Optional[str] = None
        self._local_sequence_id = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._loop_lock = threading.Lock()
        self._loop_ready = threading.Event()
        self._pending: Set[concurrent.futures.Future[Any]] = set()
        self._background_tasks: Set[asyncio.Task[Any]] = set()
        self._shutdown = False
        self._traffic_filter = StoreTrafficFilter()
        self._degraded = False

    # ------------------------------------------------------------------ properties

    @property
    def store(self) -> Optional[LightningStore]:
        """The store spans are written to (``None`` outside a store context)."""
        return self._store

    @property
    def rollout_id(self) -> Optional[str]:
        """The rollout the current spans belong to."""
        return self._rollout_id

    @property
    def attempt_id(self) -> Optional[str]:
        """The attempt the current spans belong to."""
        return self._attempt_id

    @property
    def disable_store_submission(self) -> bool:
        """When True, spans are only collected locally (the native OTLP path writes them to the store)."""
        return self._disable_store_submission

    @disable_store_submission.setter
    def disable_store_submission(self, value: bool) -> None:
        self._disable_store_submission = value

    # ------------------------------------------------------------------ contexts

    def __enter__(self) -> LightningSpanProcessor:
        """Start a local-only trace: clear the collected spans."""
        with self._lock:
            self._spans = []
        return self

    def __exit__(self, *exc: Any) -> None:
        """Forget the store, rollout and attempt."""
        with self._lock:
            self._store = None
            self._rollout_id = None
            self._attempt_id = None

    @contextmanager
    def with_context(self, store: LightningStore, rollout_id: str, attempt_id: str) -> Iterator[LightningSpanProcessor]:
        """Attribute spans ended inside the block to (``rollout_id``, ``attempt_id``) and write them to ``store``.

        The collected spans are cleared on enter and survive the exit (so ``get_last_trace`` works afterwards).
        """
        with self._lock:
            self._store = store
            self._rollout_id = rollout_id
            self._attempt_id = attempt_id
            self._spans = []
            self._degraded = False
        try:
            yield self
        finally:
            with self._lock:
                self._store = None
                self._rollout_id = None
                self._attempt_id = None

    # ------------------------------------------------------------------ private loop

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        """Start the private loop thread once and return its loop."""
        with self._loop_lock:
            if self._loop is not None and self._loop_thread is not None and self._loop_thread.is_alive():
                return self._loop
            if self._shutdown:
                raise RuntimeError("LightningSpanProcessor has been shut down.")
            self._loop_ready.clear()
            thread = threading.Thread(target=self._run_loop, name=LOOP_THREAD_NAME, daemon=True)
            self._loop_thread = thread
            thread.start()
            if not self._loop_ready.wait(LOOP_START_TIMEOUT_SECONDS) or self._loop is None:
                raise RuntimeError("The otel-loop thread failed to start in time.")
            return self._loop

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._loop_ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    @staticmethod
    async def _suppressed(coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` with instrumentation suppressed (the store client's own traffic is not traced)."""
        token = otel_context.attach(otel_context.set_value(_SUPPRESS, True))
        try:
            return await coro
        finally:
            otel_context.detach(token)

    # ------------------------------------------------------------------ SpanProcessor API

    def on_start(self, span: SdkSpan, parent_context: Optional[otel_context.Context] = None) -> None:
        """Remember spans of the store's own HTTP traffic (never recorded, to avoid feedback loops)."""
        self._traffic_filter.on_start(span)

    def _local_span(self, span: ReadableSpan, rollout_id: Optional[str], attempt_id: Optional[str]) -> Span:
        with self._lock:
            sequence_id = self._local_sequence_id
            self._local_sequence_id += 1
        return Span.from_opentelemetry(
            span,
            rollout_id=rollout_id or "rollout-dummy",
            attempt_id=attempt_id or "attempt-dummy",
            sequence_id=sequence_id,
        )

    def _append(self, span: Span) -> None:
        with self._lock:
            self._spans.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        """Record an ended span locally and (unless disabled) in the store; never raises."""
        try:
            self._on_end(span)
        except Exception:  # pragma: no cover - defensive: on_end must never raise
            logger.exception("LightningSpanProcessor failed to process span %r", getattr(span, "name", span))

    def _on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if self._traffic_filter.is_ignored_on_end(span):
            return
        with self._lock:
            store, rollout_id, attempt_id = self._store, self._rollout_id, self._attempt_id
            submit = not self._disable_store_submission
        if not (submit and store is not None and rollout_id and attempt_id):
            self._append(self._local_span(span, rollout_id, attempt_id))
            return

        try:
            loop = self._ensure_loop()
        except RuntimeError as exc:
            logger.warning("Cannot write span %r to the store (%s); keeping it locally.", span.name, exc)
            self._append(self._local_span(span, rollout_id, attempt_id))
            return

        coro = self._suppressed(store.add_otel_span(rollout_id, attempt_id, span))
        if threading.current_thread() is self._loop_thread:
            # Called on the loop thread itself (e.g. a finaliser during GC): never block on our own loop.
            task = loop.create_task(coro)
            self._background_tasks.add(task)
            task.add_done_callback(self._background_tasks.discard)
            self._append(self._local_span(span, rollout_id, attempt_id))
            return

        future = asyncio.run_coroutine_threadsafe(coro, loop)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._discard_pending)
        if self._degraded:
            # The store already timed out in this trace: do not block the agent again; the write goes on in the
            # background and a local copy is kept.
            self._append(self._local_span(span, rollout_id, attempt_id))
            return
        try:
            stored = future.result(timeout=STORE_WRITE_TIMEOUT_SECONDS)
        except concurrent.futures.TimeoutError:
            self._degraded = True
            logger.warning(
                "Writing span %r to the store timed out after %.1fs; keeping a local copy (the write continues in "
                "the background). Further spans of this trace will not wait for the store.",
                span.name,
                STORE_WRITE_TIMEOUT_SECONDS,
            )
            self._append(self._local_span(span, rollout_id, attempt_id))
            return
        except Exception:
            logger.exception("Failed to write span %r to the store; keeping a local copy.", span.name)
            self._append(self._local_span(span, rollout_id, attempt_id))
            return
        if stored is not None:
            self._append(stored)
        else:
            logger.debug("The store did not keep span %r (returned None).", span.name)

    def _discard_pending(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def spans(self) -> List[Span]:
        """The spans collected in the current (or most recent) trace."""
        with self._lock:
            return list(self._spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (bounded by ``timeout_millis``) for store writes still running in the background; returns True."""
        with self._lock:
            pending = list(self._pending)
        if pending:
            concurrent.futures.wait(pending, timeout=timeout_millis / 1000.0)
        return True

    def shutdown(self) -> None:
        """Stop the private loop and join its thread (at most 5 s)."""
        with self._loop_lock:
            self._shutdown = True
            loop, thread = self._loop, self._loop_thread
            self._loop = None
            self._loop_thread = None
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # pragma: no cover - loop closed concurrently
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(SHUTDOWN_JOIN_TIMEOUT_SECONDS)


def _to_otel_status(status_code: StatusCode, description: Optional[str]) -> Status:
    code = {"OK": OtelStatusCode.OK, "ERROR": OtelStatusCode.ERROR}.get(status_code, OtelStatusCode.UNSET)
    # OTel only keeps a description for ERROR (it warns otherwise).
    return Status(code, description if code is OtelStatusCode.ERROR else None)


def _core_fields(span: ReadableSpan) -> SpanCoreFields:
    return SpanCoreFields(
        name=span.name,
        status=TraceStatus.from_opentelemetry(span.status),
        attributes=dict(span.attributes or {}),  # type: ignore[arg-type]
        start_time=convert_timestamp(span.start_time),
        end_time=convert_timestamp(span.end_time),
    )


class OtelSpanRecordingContext:
    """:class:`~rollouthub.types.tracer.SpanRecordingContext` backed by a live OpenTelemetry span."""

    def __init__(self, span: trace_api.Span) -> None:
        """Wrap ``span`` (an SDK span started by :meth:`OtelTracer.operation_context`)."""
        self._span = span

    @property
    def span(self) -> trace_api.Span:
        """The underlying OpenTelemetry span."""
        return self._span

    def record_exception(self, exception: BaseException) -> None:
        """Record ``exception`` as a span event and set status ERROR with its message."""
        self._span.record_exception(exception)
        self._span.set_status(Status(OtelStatusCode.ERROR, str(exception)))

    def record_attributes(self, attributes: Attributes) -> None:
        """Set attributes on the span."""
        self._span.set_attributes(attributes)  # type: ignore[arg-type]

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None:
        """Set the span status."""
        self._span.set_status(_to_otel_status(status_code, description))

    def get_recorded_span(self) -> SpanCoreFields:
        """Return the recorded span; raises ``ValueError`` while the span has not ended."""
        if not isinstance(self._span, ReadableSpan) or self._span.end_time is None:
            raise ValueError("The span has not ended yet.")
        return _core_fields(self._span)


def _span_exporter_of(processor: Any) -> Any:
    """The exporter of a Simple/Batch span processor (``None`` for other processors)."""
    exporter = getattr(processor, "span_exporter", None)
    if exporter is not None:
        return exporter
    batch = getattr(processor, "_batch_processor", None)
    if batch is not None:
        return getattr(batch, "_exporter", None)
    return getattr(processor, "_exporter", None)


def get_span_processors_of(provider: TracerProvider) -> List[SpanProcessor]:
    """The active span processors of an SDK tracer provider."""
    active = getattr(provider, "_active_span_processor", None)
    return list(getattr(active, "_span_processors", ()) or ())


class OtelTracer(Tracer):
    """A tracer owning a plain OpenTelemetry SDK ``TracerProvider``.

    It captures spans created through the OTel API (user code, frameworks with native OTel support, emitters)
    and writes them to the store, either span by span (``LightningSpanProcessor``) or through the store's native
    OTLP endpoint when ``store.capabilities["otlp_traces"]`` is true. While a worker is initialised it also keeps
    rollouthub's native OpenAI instrumentation (:mod:`rollouthub.instrumentation.openai`) applied, so the agent's
    OpenAI SDK calls become LLM spans of the rollout; no other third-party instrumentation is installed.

    Args:
        instrument_openai: apply the native OpenAI instrumentation between :meth:`init_worker` and
            :meth:`teardown_worker` (reference-counted with every other user; patches the user applied themselves
            are left alone). ``False`` when another layer instruments OpenAI (AgentOps, OpenLLMetry...).
    """

    def __init__(self, *, instrument_openai: bool = True) -> None:
        """Create an uninitialised tracer (see :meth:`init_worker`)."""
        super().__init__()
        self._tracer_provider: Optional[TracerProvider] = None
        self._lightning_span_processor: Optional[LightningSpanProcessor] = None
        self._provider_lock = threading.Lock()
        self._instrument_openai = instrument_openai
        self._holds_openai_instrumentation = False
        self._otel_tracers: Dict[str, Tuple[TracerProvider, trace_api.Tracer]] = {}

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> Dict[str, Any]:
        """The configuration only: a copy (e.g. sent to a runner on another machine) starts uninitialised, without
        this process's provider, lock, store or instrumentation hold."""
        state = self.__dict__.copy()
        del state["_provider_lock"]
        state.update(
            worker_id=None,
            _store=None,
            _tracer_provider=None,
            _lightning_span_processor=None,
            _holds_openai_instrumentation=False,
            _otel_tracers={},
        )
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """Restore the configuration and give the copy its own lock."""
        self.__dict__.update(state)
        self._provider_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None) -> None:  # type: ignore[override]
        """Remember the worker and store, then create and install the tracer provider (once per instance)."""
        super().init_worker(worker_id, store)
        self._initialize_tracer_provider(worker_id)
        if self._instrument_openai and not self._holds_openai_instrumentation:
            from rollouthub.instrumentation.openai import acquire_native_openai

            self._holds_openai_instrumentation = acquire_native_openai()

    def preload(self) -> None:
        """Import the store OTLP exporter with what building one imports (the OpenTelemetry exporter loads its HTTP
        transport then: an exporter is built and shut down, nothing is sent) and, unless ``instrument_openai=False``,
        the OpenAI SDK modules the native instrumentation patches (nothing is patched here; see
        :meth:`Tracer.preload`)."""
        try:
            from rollouthub.utils.otlp import LightningStoreOTLPExporter
        except ImportError:  # the exporter package is missing: init_worker says so
            pass
        else:
            LightningStoreOTLPExporter().shutdown()
        if self._instrument_openai:
            from rollouthub.instrumentation.openai import preload_openai

            preload_openai()

    def _initialize_tracer_provider(self, worker_id: int) -> None:
        with self._provider_lock:
            if self._tracer_provider is not None:
                return
            provider = TracerProvider()
            current = trace_api.get_tracer_provider()
            if isinstance(current, trace_api.ProxyTracerProvider):
                trace_api.set_tracer_provider(provider)
            else:
                logger.error(
                    "[Worker %s] A global OpenTelemetry tracer provider (%r) is already installed; the new one of "
                    "OtelTracer is not global. Spans created through the global OTel API go to the existing "
                    "provider; use the tracer yielded by trace_context() (emitters always use this tracer).",
                    worker_id,
                    current,
                )
            processor = LightningSpanProcessor()
            provider.add_span_processor(processor)
            self._add_otlp_processor(provider)
            self._lightning_span_processor = processor
            self._tracer_provider = provider

    @staticmethod
    def _add_otlp_processor(provider: TracerProvider) -> None:
        try:
            from rollouthub.utils.otlp import LightningStoreOTLPExporter
        except ImportError as exc:
            logger.warning("The store OTLP exporter is unavailable (%s); the native OTLP path is disabled.", exc)
            return
        provider.add_span_processor(StoreOTLPSpanProcessor(LightningStoreOTLPExporter()))

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Forget the worker id and release the OpenAI instrumentation; the tracer provider stays installed
        (OpenTelemetry cannot uninstall it)."""
        super().teardown_worker(worker_id)
        if self._holds_openai_instrumentation:
            from rollouthub.instrumentation.openai import release_native_openai

            self._holds_openai_instrumentation = False
            release_native_openai()
        logger.debug("[Worker %s] OtelTracer teardown: the tracer provider is kept installed.", worker_id)

    @property
    def tracer_provider(self) -> Optional[TracerProvider]:
        """The SDK tracer provider (``None`` before :meth:`init_worker`)."""
        return self._tracer_provider

    @property
    def span_processor(self) -> Optional[LightningSpanProcessor]:
        """The :class:`LightningSpanProcessor` of this tracer (``None`` before :meth:`init_worker`)."""
        return self._lightning_span_processor

    def _require_provider(self) -> TracerProvider:
        if self._tracer_provider is None or self._lightning_span_processor is None:
            raise RuntimeError("OtelTracer is not initialized; call init_worker() (or use lifespan()) first.")
        return self._tracer_provider

    def get_otel_tracer(self, name: str = "rollouthub") -> trace_api.Tracer:
        """An OpenTelemetry ``Tracer`` bound to this tracer's provider: one per name and provider, created on first
        use (every ``emit_reward`` and ``create_span`` uses it, so it is not rebuilt each time)."""
        provider = self._require_provider()
        cached = self._otel_tracers.get(name)
        if cached is not None and cached[0] is provider:
            return cached[1]
        tracer = provider.get_tracer(name)
        self._otel_tracers[name] = (provider, tracer)
        return tracer

    # ------------------------------------------------------------------ native OTLP switching

    def _set_rollout_resource(self, rollout_id: str, attempt_id: str) -> None:
        provider = self._require_provider()
        extra = Resource({_ROLLOUT_ID_KEY: rollout_id, _ATTEMPT_ID_KEY: attempt_id})
        updater = getattr(provider, "_update_resource", None)
        if callable(updater):
            updater(extra)
        else:  # pragma: no cover - older SDKs
            provider._resource = provider.resource.merge(extra)  # type: ignore[attr-defined]

    def _otlp_exporters(self) -> List[Any]:
        from rollouthub.utils.otlp import LightningStoreOTLPExporter

        found = []
        for processor in get_span_processors_of(self._require_provider()):
            exporter = _span_exporter_of(processor)
            if isinstance(exporter, LightningStoreOTLPExporter):
                found.append(exporter)
        return found

    def _enable_native_otlp_exporter(self, store: LightningStore, rollout_id: str, attempt_id: str) -> None:
        """Send spans through the store's OTLP endpoint instead of span-by-span ``add_otel_span`` calls."""
        provider = self._require_provider()
        processors = get_span_processors_of(provider)
        try:
            exporters = self._otlp_exporters()
        except ImportError:
            exporters = []
        if not exporters:
            raise RuntimeError(
                "The store supports OTLP traces but no LightningStoreOTLPExporter is installed on the tracer provider; "
                f"processors found: {[type(p).__name__ for p in processors]}"
            )
        self._set_rollout_resource(rollout_id, attempt_id)
        for processor in processors:
            if isinstance(processor, LightningSpanProcessor):
                processor.disable_store_submission = True
        endpoint = store.otlp_traces_endpoint()
        for exporter in exporters:
            exporter.enable_store_otlp(endpoint, rollout_id, attempt_id)
        for processor in processors:
            if isinstance(processor, StoreOTLPSpanProcessor):
                processor.reset()

    def _disable_native_otlp_exporter(self) -> None:
        """Back to span-by-span store submission; exporters forget the ids so nothing is exported with stale ids."""
        provider = self._require_provider()
        for processor in get_span_processors_of(provider):
            if isinstance(processor, StoreOTLPSpanProcessor) and not processor.flush(STORE_WRITE_TIMEOUT_SECONDS):
                logger.warning(
                    "OTLP exports did not finish within %.1fs; the remaining spans of this trace are dropped from "
                    "the store (they remain in get_last_trace()).",
                    STORE_WRITE_TIMEOUT_SECONDS,
                )
        self._set_rollout_resource("", "")
        for processor in get_span_processors_of(provider):
            if isinstance(processor, LightningSpanProcessor):
                processor.disable_store_submission = False
        try:
            exporters = self._otlp_exporters()
        except ImportError:
            exporters = []
        for exporter in exporters:
            exporter.disable_store_otlp()

    # ------------------------------------------------------------------ tracing scopes

    @with_active_tracer_context
    @asynccontextmanager
    async def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncIterator[trace_api.Tracer]:
        """Open a tracing scope for (``rollout_id``, ``attempt_id``); yields an OTel tracer bound to this provider."""
        with self._trace_context_sync(name, store=store, rollout_id=rollout_id, attempt_id=attempt_id) as tracer:
            yield tracer

    @contextmanager
    def _trace_context_sync(  # type: ignore[override]
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> Iterator[trace_api.Tracer]:
        """Synchronous tracing scope (see :meth:`trace_context`)."""
        self._require_provider()
        processor = self._lightning_span_processor
        assert processor is not None
        if store is not None:
            warnings.warn(
                "Passing store to trace_context is deprecated; pass it to init_worker() instead.",
                DeprecationWarning,
                stacklevel=3,
            )
        else:
            store = self._store
        if rollout_id is not None and attempt_id is not None:
            if store is None:
                raise ValueError("A store is required to trace a rollout attempt (pass it to init_worker()).")
            if store.capabilities.get("otlp_traces", False):
                self._enable_native_otlp_exporter(store, rollout_id, attempt_id)
            else:
                self._disable_native_otlp_exporter()
            try:
                with processor.with_context(store, rollout_id, attempt_id):
                    yield self.get_otel_tracer()
            finally:
                self._disable_native_otlp_exporter()
        elif rollout_id is None and attempt_id is None:
            self._disable_native_otlp_exporter()
            with processor:
                yield self.get_otel_tracer()
        else:
            raise ValueError("rollout_id and attempt_id must be given together (or both omitted).")

    def get_last_trace(self) -> List[Span]:
        """The spans collected by the :class:`LightningSpanProcessor` in the most recent trace context."""
        self._require_provider()
        assert self._lightning_span_processor is not None
        return self._lightning_span_processor.spans()

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        """Start and immediately end a span (child of the current OTel span) and return its core fields."""
        tracer = self.get_otel_tracer()
        ts_ns = int(timestamp * 1e9) if timestamp is not None else time.time_ns()
        span = tracer.start_span(name, attributes=attributes, start_time=ts_ns)  # type: ignore[arg-type]
        if status is not None:
            span.set_status(_to_otel_status(status.status_code, status.description))
        span.end(end_time=ts_ns)
        if isinstance(span, ReadableSpan):
            return _core_fields(span)
        # Sampling disabled the span: describe what was requested.
        return SpanCoreFields(  # pragma: no cover
            name=name,
            status=status or TraceStatus(status_code="UNSET"),
            attributes=dict(attributes or {}),
            start_time=ts_ns / 1e9,
            end_time=ts_ns / 1e9,
        )

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[OtelSpanRecordingContext]:
        """Record the block as the *current* span; an exception is recorded (status ERROR) and re-raised."""
        tracer = self.get_otel_tracer()
        if end_time is not None:
            logger.warning("OtelTracer.operation_context does not support end_time; it is ignored.")
        start_ns = int(start_time * 1e9) if start_time is not None else None
        with tracer.start_as_current_span(
            name,
            attributes=attributes,  # type: ignore[arg-type]
            start_time=start_ns,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            recording = OtelSpanRecordingContext(span)
            try:
                yield recording
            except GeneratorExit:
                raise
            except BaseException as exc:
                recording.record_exception(exc)
                raise
