"""Object emitter: arbitrary values recorded as ``agentlightning.object`` spans."""

from __future__ import annotations

import base64
import json
from typing import Any, Dict, Mapping, Optional

from rollouthub.semconv import AGL_OBJECT, LightningSpanAttributes
from rollouthub.types.tracer import SpanCoreFields, TraceStatus
from rollouthub.utils.otel import full_qualified_name

from ._common import prepare_extra_attributes, resolve_tracer

__all__ = ["emit_object", "encode_object", "get_object_value"]

_TYPE = LightningSpanAttributes.OBJECT_TYPE.value
_LITERAL = LightningSpanAttributes.OBJECT_LITERAL.value
_JSON = LightningSpanAttributes.OBJECT_JSON.value


def encode_object(obj: Any) -> Dict[str, Any]:
    """Encode a value as object attributes.

    str/int/float/bool → type name + ``str(obj)`` literal; bytes → ``"bytes"`` + base64 literal; anything else →
    fully qualified type name + JSON.

    Raises:
        RuntimeError: If the value is not JSON-serialisable.
    """
    if isinstance(obj, (str, int, float, bool)):
        return {_TYPE: type(obj).__name__, _LITERAL: str(obj)}
    if isinstance(obj, bytes):
        return {_TYPE: "bytes", _LITERAL: base64.b64encode(obj).decode("ascii")}
    try:
        serialised = json.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise RuntimeError(f"Object of type {type(obj).__name__} is not JSON-serialisable: {exc}") from exc
    return {_TYPE: full_qualified_name(type(obj)), _JSON: serialised}


def emit_object(obj: Any, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> SpanCoreFields:
    """Emit an ``agentlightning.object`` span carrying :func:`encode_object` of ``obj``.

    Args:
        obj: The value to record.
        attributes: Extra attributes (flattened with leaf lists kept, sanitised, merged over the emitter's keys).
        propagate: When false, nothing is exported.

    Raises:
        RuntimeError: If the value cannot be encoded, or ``propagate`` is true and no tracer is active.
    """
    span_attributes = {**encode_object(obj), **prepare_extra_attributes(attributes)}
    tracer = resolve_tracer(propagate)
    return tracer.create_span(AGL_OBJECT, attributes=span_attributes, status=TraceStatus(status_code="OK"))


def get_object_value(span: Any) -> Any:
    """Decode the object recorded on a span (``None`` if the span has no object attributes).

    Raises:
        RuntimeError: If the JSON is invalid, or the literal's type is unknown or cannot be decoded.
    """
    attributes = getattr(span, "attributes", None) or {}
    if _JSON in attributes:
        try:
            return json.loads(attributes[_JSON])
        except (TypeError, ValueError) as exc:
            raise RuntimeError(f"Invalid JSON in {_JSON}: {exc}") from exc
    if _LITERAL not in attributes:
        return None
    literal = attributes[_LITERAL]
    type_name = attributes.get(_TYPE)
    try:
        if type_name == "str":
            return str(literal)
        if type_name == "int":
            return int(literal)
        if type_name == "float":
            return float(literal)
        if type_name == "bool":
            return str(literal).lower() == "true"
        if type_name == "bytes":
            return base64.b64decode(literal)
    except (TypeError, ValueError) as exc:
        raise RuntimeError(f"Cannot decode object literal {literal!r} of type {type_name!r}: {exc}") from exc
    raise RuntimeError(f"Unknown object type {type_name!r}")
