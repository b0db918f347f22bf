"""Message emitter: free-text log lines recorded as ``agentlightning.message`` spans."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from rollouthub.semconv import AGL_MESSAGE, LightningSpanAttributes

from ._common import prepare_extra_attributes, resolve_tracer

__all__ = ["emit_message", "get_message_value"]


def emit_message(message: str, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> None:
    """Emit an ``agentlightning.message`` span whose ``agentlightning.message.body`` is ``message``.

    Args:
        message: The text to record.
        attributes: Extra attributes (flattened with leaf lists kept, sanitised, merged over the emitter's keys).
        propagate: When false, nothing is exported.

    Raises:
        TypeError: If ``message`` is not a string.
        RuntimeError: If ``propagate`` is true and no tracer is active.
    """
    if not isinstance(message, str):
        raise TypeError(f"Message must be a string, got {type(message).__name__}")
    span_attributes = {LightningSpanAttributes.MESSAGE_BODY.value: message, **prepare_extra_attributes(attributes)}
    tracer = resolve_tracer(propagate)
    tracer.create_span(AGL_MESSAGE, attributes=span_attributes)


def get_message_value(span: Any) -> Optional[str]:
    """Return the message body of a span (``None`` if absent).

    Raises:
        TypeError: If the body is not a string.
    """
    attributes = getattr(span, "attributes", None) or {}
    body = attributes.get(LightningSpanAttributes.MESSAGE_BODY.value)
    if body is None:
        return None
    if not isinstance(body, str):
        raise TypeError(f"Message body must be a string, got {type(body).__name__}")
    return body
