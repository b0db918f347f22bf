"""Backend-free tracer compatible with the emitter API."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, AsyncContextManager, Iterator, List, Optional

from rollouthub.types.tracer import Attributes, Span, SpanCoreFields, StatusCode, TraceStatus

from .base import Tracer

__all__ = ["DummyTracer", "DummySpanRecordingContext"]


def _exception_attributes(exc: BaseException) -> Attributes:
    """Local equivalent of ``format_exception_attributes`` (avoids a dependency cycle with ``utils.otel``)."""
    import traceback

    attrs: Attributes = {
        "exception.type": type(exc).__name__,
        "exception.message": str(exc),
        "exception.escaped": True,
    }
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if stack.strip():
        attrs["exception.stacktrace"] = stack
    return attrs


class DummySpanRecordingContext:
    """In-memory :class:`~rollouthub.types.tracer.SpanRecordingContext` that never exports anything."""

    def __init__(self, name: str, attributes: Optional[Attributes] = None, start_time: Optional[float] = None) -> None:
        """Start recording a span named ``name`` (start defaults to now, status OK)."""
        self.name = name
        self.attributes: Attributes = dict(attributes or {})
        self.start_time: float = start_time if start_time is not None else time.time()
        self.end_time: Optional[float] = None
        self.status = TraceStatus(status_code="OK")

    def record_exception(self, exception: BaseException) -> None:
        """Mark the span as failed (status ERROR with the message) and merge the exception attributes."""
        self.record_status("ERROR", str(exception))
        self.attributes.update(_exception_attributes(exception))

    def record_attributes(self, attributes: Attributes) -> None:
        """Merge ``attributes`` into the span."""
        self.attributes.update(attributes)

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None:
        """Set the span status."""
        self.status = TraceStatus(status_code=status_code, description=description)

    def finalize(self, end_time: Optional[float] = None) -> None:
        """End the span at ``end_time`` (default now)."""
        self.end_time = end_time if end_time is not None else time.time()

    def get_recorded_span(self) -> SpanCoreFields:
        """Return the recorded span; raises ``ValueError`` before the span has been finalised."""
        if self.end_time is None:
            raise ValueError("The span has not been finalized yet.")
        return SpanCoreFields(
            name=self.name,
            status=self.status,
            attributes=dict(self.attributes),
            start_time=self.start_time,
            end_time=self.end_time,
        )


class DummyTracer(Tracer):
    """A tracer that builds span descriptions without any backend; it never touches a store."""

    def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Any = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncContextManager[Any]:
        """Not supported by the dummy tracer."""
        raise NotImplementedError("DummyTracer does not support trace_context.")

    def get_last_trace(self) -> List[Span]:
        """Not supported by the dummy tracer."""
        raise NotImplementedError("DummyTracer does not collect traces.")

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        """Return a zero-duration span description (start = end = ``timestamp`` or now, status default OK)."""
        ts = timestamp if timestamp is not None else time.time()
        return SpanCoreFields(
            name=name,
            status=status if status is not None else TraceStatus(status_code="OK"),
            attributes=dict(attributes or {}),
            start_time=ts,
            end_time=ts,
        )

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[DummySpanRecordingContext]:
        """Record the block as a span; exceptions are recorded (status ERROR) and re-raised."""
        ctx = DummySpanRecordingContext(name, attributes, start_time)
        try:
            yield ctx
        except BaseException as exc:
            ctx.record_exception(exc)
            raise
        finally:
            ctx.finalize(end_time)
