"""Span-processor helpers for the store OTLP path: bounded-wait export and store-traffic filtering."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Deque, List, Optional, Set, Tuple

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import SpanKind

__all__ = [
    "StoreOTLPSpanProcessor",
    "StoreTrafficFilter",
    "STORE_TRAFFIC_PATH_PREFIXES",
    "SUPPRESS_KEY",
    "is_instrumentation_suppressed",
]

logger = logging.getLogger(__name__)

SHUTDOWN_JOIN_TIMEOUT_SECONDS = 5.0

EXPORT_BATCH_SIZE = 512
"""Most spans sent in one OTLP request."""

EXPORT_LINGER_SECONDS = 1.0
"""Longest time a span waits in the queue before it is sent (bounds heartbeat staleness of long agents)."""

STORE_TRAFFIC_PATH_PREFIXES: Tuple[str, ...] = ("/v1/agl", "/v1/traces")
"""URL paths of the LightningStore's own HTTP API (REST and OTLP)."""

_MAX_IGNORED = 100_000


def _suppress_key() -> Any:
    """The context key that suppresses instrumentation (the SDK's own key when available)."""
    try:
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as key  # type: ignore[attr-defined]

        return key
    except ImportError:  # pragma: no cover - older SDKs
        return otel_context.create_key("suppress_instrumentation")


SUPPRESS_KEY = _suppress_key()
_SUPPRESS = SUPPRESS_KEY


def is_instrumentation_suppressed() -> bool:
    """True when the current OTel context asks instrumentations not to record (e.g. the store's own traffic)."""
    return bool(otel_context.get_value(SUPPRESS_KEY))


class StoreTrafficFilter:
    """Recognise spans describing the store's own HTTP traffic so tracers never record them.

    Web frameworks with native OpenTelemetry support (recent FastAPI versions) trace every request they serve
    through the *global* tracer provider. When a LightningStore server runs in the same process as a tracer, the
    requests that carry spans to the store would themselves become spans, which would be sent to the store again:
    an endless feedback loop. A SERVER span whose ``url.path`` (or ``http.target``) starts with one of
    :data:`STORE_TRAFFIC_PATH_PREFIXES` is ignored together with all its descendants.
    """

    def __init__(self) -> None:
        """Create an empty filter."""
        self._ignored: Set[int] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _is_store_request(span: Any) -> bool:
        if getattr(span, "kind", None) is not SpanKind.SERVER:
            return False
        attributes = getattr(span, "attributes", None) or {}
        path = attributes.get("url.path") or attributes.get("http.target") or attributes.get("http.route")
        return isinstance(path, str) and path.startswith(STORE_TRAFFIC_PATH_PREFIXES)

    def on_start(self, span: Any) -> None:
        """Classify a starting span (descendants of ignored spans are ignored too)."""
        context = getattr(span, "context", None)
        if context is None:
            return
        parent = getattr(span, "parent", None)
        with self._lock:
            ignored = self._is_store_request(span) or (parent is not None and parent.span_id in self._ignored)
            if ignored and len(self._ignored) < _MAX_IGNORED:
                self._ignored.add(context.span_id)

    def is_ignored_on_end(self, span: ReadableSpan) -> bool:
        """Whether an ending span must be ignored (forgets it: each span ends once)."""
        context = span.context
        if context is None:
            return False
        with self._lock:
            if context.span_id in self._ignored:
                self._ignored.discard(context.span_id)
                return True
        return False


class StoreOTLPSpanProcessor(SpanProcessor):
    """Export ended spans to the store through a ``LightningStoreOTLPExporter``, batched, without blocking the agent.

    ``on_end`` only queues the span. A worker thread sends the queued spans of one rollout attempt together in one
    OTLP request: as soon as :data:`EXPORT_BATCH_SIZE` spans are waiting, when the oldest one has waited
    :data:`EXPORT_LINGER_SECONDS` (so long-running agents still heartbeat regularly), or immediately when the trace
    context ends (:meth:`flush`, which waits at most :data:`STORE_WRITE_TIMEOUT_SECONDS`). One request per trace
    instead of one per span is what keeps the store server's CPU per span low. Each queued span remembers the
    rollout and attempt it was ended under and is dropped (with a warning; it stays in ``get_last_trace``) if the
    exporter has moved on to other ids, so late exports are never attributed to the wrong attempt.
    """

    def __init__(self, span_exporter: Any) -> None:
        """Wrap ``span_exporter`` (a ``LightningStoreOTLPExporter``)."""
        self.span_exporter = span_exporter
        self._queue: Deque[Tuple[ReadableSpan, Optional[str], Optional[str], float]] = collections.deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._flush_requested = 0
        self._thread: Optional[threading.Thread] = None
        self._shutdown = False
        self._traffic_filter = StoreTrafficFilter()

    def reset(self) -> None:
        """Called when a trace context starts (kept for API stability; there is no per-trace state)."""

    def on_start(self, span: SdkSpan, parent_context: Optional[otel_context.Context] = None) -> None:
        """Remember spans of the store's own HTTP traffic (never exported, to avoid feedback loops)."""
        self._traffic_filter.on_start(span)

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="otel-otlp-export", daemon=True)
            self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the span for export (never blocks)."""
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if self._traffic_filter.is_ignored_on_end(span):
            return
        exporter = self.span_exporter
        rollout_id = getattr(exporter, "rollout_id", None)
        attempt_id = getattr(exporter, "attempt_id", None)
        if (rollout_id is None or attempt_id is None) and exporter.should_bypass():
            return  # nothing to send outside a rollout
        with self._cond:
            if self._shutdown:
                return
            self._queue.append((span, rollout_id, attempt_id, time.monotonic()))
            self._in_flight += 1
            self._ensure_worker()
            if len(self._queue) >= EXPORT_BATCH_SIZE:
                self._cond.notify_all()

    def _next_batch(self) -> Optional[List[Tuple[ReadableSpan, Optional[str], Optional[str], float]]]:
        """Under the condition: wait until a batch is due, then pop the leading spans of one attempt."""
        while True:
            if self._queue:
                due = self._queue[0][3] + EXPORT_LINGER_SECONDS
                now = time.monotonic()
                if self._shutdown or self._flush_requested or len(self._queue) >= EXPORT_BATCH_SIZE or now >= due:
                    break
                self._cond.wait(due - now)
            elif self._shutdown:
                return None
            else:
                self._cond.wait()
        first = self._queue[0]
        batch: List[Tuple[ReadableSpan, Optional[str], Optional[str], float]] = []
        while self._queue and len(batch) < EXPORT_BATCH_SIZE:
            item = self._queue[0]
            if (item[1], item[2]) != (first[1], first[2]):
                break
            batch.append(self._queue.popleft())
        return batch

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
            if batch is None:
                return
            _, rollout_id, attempt_id, _ = batch[0]
            try:
                exporter = self.span_exporter
                if getattr(exporter, "rollout_id", None) != rollout_id or getattr(exporter, "attempt_id", None) != (
                    attempt_id
                ):
                    logger.warning(
                        "Dropping late OTLP export of %d span(s) (first %r): their trace context has ended.",
                        len(batch),
                        batch[0][0].name,
                    )
                else:
                    token = otel_context.attach(otel_context.set_value(_SUPPRESS, True))
                    try:
                        exporter.export(tuple(item[0] for item in batch))
                    finally:
                        otel_context.detach(token)
            except Exception:
                logger.exception("Exception while exporting %d span(s) over OTLP.", len(batch))
            finally:
                with self._cond:
                    self._in_flight -= len(batch)
                    self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Export everything queued now and wait up to ``timeout`` seconds for it; returns whether it drained."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flush_requested += 1
            self._cond.notify_all()
            try:
                while self._in_flight > 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._flush_requested -= 1
        return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (bounded) for queued exports."""
        return self.flush(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        """Stop the worker (after it drains, at most 5 s) and shut the exporter down."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(SHUTDOWN_JOIN_TIMEOUT_SECONDS)
        try:
            self.span_exporter.shutdown()
        except Exception:  # pragma: no cover
            logger.debug("OTLP exporter shutdown failed", exc_info=True)
