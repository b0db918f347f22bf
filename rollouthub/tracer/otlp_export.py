"""Span-processor helpers for the store OTLP path: bounded-wait export and store-traffic filtering."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Deque, Optional, Set, Tuple

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import SpanKind

__all__ = ["StoreOTLPSpanProcessor", "StoreTrafficFilter", "STORE_TRAFFIC_PATH_PREFIXES", "SUPPRESS_KEY"]

logger = logging.getLogger(__name__)

SHUTDOWN_JOIN_TIMEOUT_SECONDS = 5.0

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


def _write_timeout() -> float:
    """``rollouthub.tracer.otel.STORE_WRITE_TIMEOUT_SECONDS`` read at call time (so it can be patched)."""
    from . import otel

    return float(otel.STORE_WRITE_TIMEOUT_SECONDS)


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
    """Export each ended span through a ``LightningStoreOTLPExporter`` without ever blocking for long.

    Behaves like OpenTelemetry's ``SimpleSpanProcessor`` (one export per span, in order) but the export runs on a
    worker thread and ``on_end`` waits at most :data:`STORE_WRITE_TIMEOUT_SECONDS`. After a timeout the processor
    is *degraded* until :meth:`reset` (the next trace context): further spans are queued without waiting, so an
    unreachable store costs the agent at most one timeout per trace. Each queued span remembers the rollout and
    attempt it was ended under and is dropped (with a warning; it stays in ``get_last_trace``) if the exporter has
    moved on to other ids, so late exports are never attributed to the wrong attempt.
    """

    def __init__(self, span_exporter: Any) -> None:
        """Wrap ``span_exporter`` (a ``LightningStoreOTLPExporter``)."""
        self.span_exporter = span_exporter
        self._queue: Deque[Tuple[ReadableSpan, Optional[str], Optional[str], threading.Event]] = collections.deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._thread: Optional[threading.Thread] = None
        self._degraded = False
        self._shutdown = False
        self._traffic_filter = StoreTrafficFilter()

    def reset(self) -> None:
        """Leave degraded mode (called when a trace context starts)."""
        self._degraded = False

    def on_start(self, span: SdkSpan, parent_context: Optional[otel_context.Context] = None) -> None:
        """Remember spans of the store's own HTTP traffic (never exported, to avoid feedback loops)."""
        self._traffic_filter.on_start(span)

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="otel-otlp-export", daemon=True)
            self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the span for export and wait (bounded) for the export to finish."""
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if self._traffic_filter.is_ignored_on_end(span):
            return
        exporter = self.span_exporter
        rollout_id = getattr(exporter, "rollout_id", None)
        attempt_id = getattr(exporter, "attempt_id", None)
        if (rollout_id is None or attempt_id is None) and exporter.should_bypass():
            return  # nothing to send outside a rollout
        done = threading.Event()
        with self._cond:
            if self._shutdown:
                return
            self._queue.append((span, rollout_id, attempt_id, done))
            self._in_flight += 1
            self._ensure_worker()
            self._cond.notify_all()
        if self._degraded:
            return
        if not done.wait(_write_timeout()):
            self._degraded = True
            logger.warning(
                "Exporting span %r to the store over OTLP took more than %.1fs; not waiting for further exports "
                "in this trace.",
                span.name,
                _write_timeout(),
            )

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._shutdown:
                    self._cond.wait()
                if not self._queue:
                    return
                span, rollout_id, attempt_id, done = self._queue.popleft()
            try:
                exporter = self.span_exporter
                if getattr(exporter, "rollout_id", None) != rollout_id or getattr(exporter, "attempt_id", None) != (
                    attempt_id
                ):
                    logger.warning("Dropping late OTLP export of span %r: its trace context has ended.", span.name)
                else:
                    token = otel_context.attach(otel_context.set_value(_SUPPRESS, True))
                    try:
                        exporter.export((span,))
                    finally:
                        otel_context.detach(token)
            except Exception:
                logger.exception("Exception while exporting span %r over OTLP.", span.name)
            finally:
                done.set()
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every queued span was exported; returns whether it drained."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._in_flight > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
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
