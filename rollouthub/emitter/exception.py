"""Exception emitter: ``agentlightning.exception`` spans with OpenTelemetry exception attributes."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from rollouthub.semconv import AGL_EXCEPTION
from rollouthub.types.tracer import TraceStatus
from rollouthub.utils.otel import format_exception_attributes

from ._common import prepare_extra_attributes, resolve_tracer

__all__ = ["emit_exception"]


def emit_exception(
    exception: BaseException, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True
) -> None:
    """Emit an ``agentlightning.exception`` span describing ``exception`` (the span itself has status OK).

    Args:
        exception: The exception to record (type, message, escaped flag and stack trace).
        attributes: Extra attributes (flattened with leaf lists kept, sanitised, merged over the emitter's keys).
        propagate: When false, nothing is exported.

    Raises:
        TypeError: If ``exception`` is not a ``BaseException``.
        RuntimeError: If ``propagate`` is true and no tracer is active.
    """
    if not isinstance(exception, BaseException):
        raise TypeError(f"Expected an exception, got {type(exception).__name__}")
    span_attributes = {**format_exception_attributes(exception), **prepare_extra_attributes(attributes)}
    tracer = resolve_tracer(propagate)
    tracer.create_span(AGL_EXCEPTION, attributes=span_attributes, status=TraceStatus(status_code="OK"))
