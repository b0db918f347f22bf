"""Adapter base classes: convert traces into training data."""

from __future__ import annotations

from typing import Generic, Sequence, TypeVar

from opentelemetry.sdk.trace import ReadableSpan

from rollouthub.types.tracer import Span

__all__ = ["Adapter", "OtelTraceAdapter", "TraceAdapter"]

T_from = TypeVar("T_from")
T_to = TypeVar("T_to")


class Adapter(Generic[T_from, T_to]):
    """Converts a source object into a target object; instances are callable (``adapter(x) == adapter.adapt(x)``)."""

    def __call__(self, source: T_from, /) -> T_to:
        """Alias of :meth:`adapt`."""
        return self.adapt(source)

    def adapt(self, source: T_from, /) -> T_to:
        """Convert ``source``; subclasses must override."""
        raise NotImplementedError(f"{type(self).__name__}.adapt is not implemented")


class OtelTraceAdapter(Adapter[Sequence[ReadableSpan], T_to], Generic[T_to]):
    """An adapter from OpenTelemetry SDK spans."""


class TraceAdapter(Adapter[Sequence[Span], T_to], Generic[T_to]):
    """An adapter from stored :class:`~rollouthub.types.tracer.Span` objects (what trainers and algorithms use)."""
