"""Span models: the persisted form of OpenTelemetry spans, and converters from the OpenTelemetry SDK.

OpenTelemetry is imported lazily inside the converters so that the data model itself has no
hard dependency on the SDK.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Protocol, Sequence, Union

from pydantic import BaseModel, ConfigDict

from rollouthub.semconv import AGL_VIRTUAL

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "AttributeValue",
    "Attributes",
    "TraceState",
    "StatusCode",
    "SpanContext",
    "TraceStatus",
    "Event",
    "Link",
    "OtelResource",
    "Span",
    "SpanCoreFields",
    "SpanNames",
    "SpanAttributeNames",
    "SpanLike",
    "SpanRecordingContext",
    "convert_timestamp",
]

AttributeValue = Union[str, bool, int, float, Sequence[str], Sequence[bool], Sequence[int], Sequence[float]]
Attributes = Dict[str, AttributeValue]
TraceState = Dict[str, str]
StatusCode = Literal["UNSET", "OK", "ERROR"]


def convert_timestamp(ts: Optional[float]) -> Optional[float]:
    """Normalise a timestamp to seconds: falsy -> None; values above 1e12 are nanoseconds."""
    if not ts:
        return None
    if ts > 1e12:
        return ts / 1_000_000_000
    return ts


def _format_trace_id(trace_id: int) -> str:
    return format(trace_id, "032x")


def _format_span_id(span_id: int) -> str:
    return format(span_id, "016x")


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@functools.lru_cache(maxsize=256)
def _class_attribute_names(cls: type) -> frozenset[str]:
    """Names ``dir(cls)`` lists, computed once per class (``dir`` alone cost ~5 µs of a ~25 µs span conversion)."""
    return frozenset(dir(cls))


def _extra_fields(src: Any, exclude: set[str], model_cls: type) -> Dict[str, Any]:
    """Copy JSON-serialisable public attributes of ``src`` that are not mapped and not class-level attributes."""
    extras: Dict[str, Any] = {}
    mock = sys.modules.get("unittest.mock")  # a mock's bookkeeping (_mock_*, method_calls, ...) is not span data
    if mock is not None and isinstance(src, mock.NonCallableMock):
        return extras
    try:
        names = vars(src)
    except TypeError:
        return extras
    src_type: Any = type(src)  # typed Any: mypy does not treat type objects as hashable for the cache
    cls_attrs = _class_attribute_names(src_type)
    for raw_name, value in names.items():
        name = raw_name.lstrip("_")
        if not name or name in exclude or raw_name in cls_attrs or name in cls_attrs:
            continue
        if name in model_cls.model_fields:  # type: ignore[attr-defined]
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        extras[name] = _json_safe(value)
    return extras


class SpanContext(BaseModel):
    """Identity of a span (hex ids) and its propagation state."""

    model_config = ConfigDict(extra="allow")

    trace_id: str
    span_id: str
    is_remote: bool
    trace_state: TraceState

    @classmethod
    def from_opentelemetry(cls, src: Any) -> SpanContext:
        """Convert an OpenTelemetry ``SpanContext``."""
        return cls(
            trace_id=_format_trace_id(src.trace_id),
            span_id=_format_span_id(src.span_id),
            is_remote=bool(src.is_remote),
            trace_state=dict(src.trace_state) if src.trace_state else {},
        )


class TraceStatus(BaseModel):
    """Span status code and optional description."""

    model_config = ConfigDict(extra="allow")

    status_code: StatusCode
    description: Optional[str] = None

    @classmethod
    def from_opentelemetry(cls, src: Any) -> TraceStatus:
        """Convert an OpenTelemetry ``Status``."""
        return cls(status_code=src.status_code.name, description=src.description)


class Event(BaseModel):
    """A timestamped event inside a span."""

    model_config = ConfigDict(extra="allow")

    name: str
    attributes: Attributes
    timestamp: Optional[float] = None

    @classmethod
    def from_opentelemetry(cls, src: Any) -> Event:
        """Convert an OpenTelemetry ``Event``."""
        return cls(
            name=src.name,
            attributes=dict(src.attributes) if src.attributes else {},
            timestamp=convert_timestamp(src.timestamp),
        )


class Link(BaseModel):
    """A link to another span."""

    model_config = ConfigDict(extra="allow")

    context: SpanContext
    attributes: Optional[Attributes] = None

    @classmethod
    def from_opentelemetry(cls, src: Any) -> Link:
        """Convert an OpenTelemetry ``Link``."""
        return cls(
            context=SpanContext.from_opentelemetry(src.context),
            attributes=dict(src.attributes) if src.attributes else None,
        )


class OtelResource(BaseModel):
    """The OpenTelemetry resource that produced a span (extra fields are ignored)."""

    attributes: Attributes
    schema_url: str

    @classmethod
    def from_opentelemetry(cls, src: Any) -> OtelResource:
        """Convert an OpenTelemetry ``Resource``."""
        return cls(
            attributes=dict(src.attributes) if src.attributes else {},
            schema_url=src.schema_url or "",
        )


class SpanCoreFields(BaseModel):
    """The essential fields of a span, as returned by emitters."""

    name: str
    status: TraceStatus
    attributes: Attributes
    start_time: Optional[float]
    end_time: Optional[float]


_SPAN_MAPPED = {
    "name",
    "context",
    "parent",
    "status",
    "attributes",
    "events",
    "links",
    "resource",
    "start_time",
    "end_time",
    "kind",
    "instrumentation_info",
    "instrumentation_scope",
    "span_processor",
    "rollout_id",
    "attempt_id",
    "trace_id",
    "span_id",
    "parent_id",
    "sequence_id",
    "limits",
    "record_exception",
    "set_status_on_exception",
    "sampler",
    "trace_config",
    "lock",
    "dropped_attributes",
    "dropped_events",
    "dropped_links",
    "end_on_exit",
}


class Span(BaseModel):
    """A span as persisted by the store. Extra fields are allowed and preserved."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    attempt_id: str
    sequence_id: int
    trace_id: str
    span_id: str
    parent_id: Optional[str]
    name: str
    status: TraceStatus
    attributes: Attributes
    events: List[Event]
    links: List[Link]
    start_time: Optional[float]
    end_time: Optional[float]
    context: Optional[SpanContext]
    parent: Optional[SpanContext]
    resource: OtelResource

    @classmethod
    def from_opentelemetry(cls, src: ReadableSpan, rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
        """Convert an OpenTelemetry SDK ``ReadableSpan`` bound to a rollout attempt.

        Only the public span API is read (``get_span_context()``, ``parent``, ``name``, ``status``, ...), so
        duck-typed spans and mocks convert too; a missing span context gives all-zero ids and ``context=None``.
        """
        get_span_context = getattr(src, "get_span_context", None)
        ctx = get_span_context() if callable(get_span_context) else getattr(src, "context", None)
        parent = src.parent
        extras = _extra_fields(src, _SPAN_MAPPED, cls)
        return cls(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            trace_id=_format_trace_id(ctx.trace_id) if ctx is not None else "0" * 32,
            span_id=_format_span_id(ctx.span_id) if ctx is not None else "0" * 16,
            parent_id=_format_span_id(parent.span_id) if parent is not None else None,
            name=src.name,
            status=TraceStatus.from_opentelemetry(src.status),
            attributes=dict(src.attributes) if src.attributes else {},  # type: ignore[arg-type]
            events=[Event.from_opentelemetry(e) for e in src.events],
            links=[Link.from_opentelemetry(link) for link in src.links],
            start_time=convert_timestamp(src.start_time),
            end_time=convert_timestamp(src.end_time),
            context=SpanContext.from_opentelemetry(ctx) if ctx is not None else None,
            parent=SpanContext.from_opentelemetry(parent) if parent is not None else None,
            resource=OtelResource.from_opentelemetry(src.resource),
            **extras,
        )

    @classmethod
    def from_attributes(
        cls,
        *,
        attributes: Attributes,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        sequence_id: Optional[int] = None,
        name: Optional[str] = None,
        trace_id: Optional[str] = None,
        span_id: Optional[str] = None,
        parent_id: Optional[str] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
        resource: Optional[OtelResource] = None,
        status: Optional[TraceStatus] = None,
    ) -> Span:
        """Build a synthetic span; missing ids are freshly generated OpenTelemetry ids."""
        if trace_id is None or span_id is None:
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

            generator = RandomIdGenerator()
            trace_id = trace_id if trace_id is not None else _format_trace_id(generator.generate_trace_id())
            span_id = span_id if span_id is not None else _format_span_id(generator.generate_span_id())
        return cls(
            rollout_id=rollout_id if rollout_id is not None else "",
            attempt_id=attempt_id if attempt_id is not None else "",
            sequence_id=sequence_id if sequence_id is not None else 0,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=name if name is not None else AGL_VIRTUAL,
            status=status if status is not None else TraceStatus(status_code="OK"),
            attributes=attributes,
            events=[],
            links=[],
            start_time=start_time,
            end_time=end_time,
            context=SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False, trace_state={}),
            parent=(
                SpanContext(trace_id=trace_id, span_id=parent_id, is_remote=False, trace_state={})
                if parent_id is not None
                else None
            ),
            resource=resource if resource is not None else OtelResource(attributes={}, schema_url=""),
        )

    @classmethod
    def from_core_fields(
        cls,
        core: SpanCoreFields,
        *,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        sequence_id: Optional[int] = None,
    ) -> Span:
        """Build a span from emitter core fields (``start_time`` defaults to now)."""
        return cls.from_attributes(
            attributes=core.attributes,
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            name=core.name,
            status=core.status,
            start_time=core.start_time or time.time(),
            end_time=core.end_time,
        )


class SpanNames(str, Enum):
    """Deprecated span-name enum kept for compatibility."""

    REWARD = "agentlightning.reward"
    MESSAGE = "agentlightning.message"
    OBJECT = "agentlightning.object"
    EXCEPTION = "agentlightning.exception"
    VIRTUAL = "agentlightning.virtual"
    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"


class SpanAttributeNames(str, Enum):
    """Deprecated attribute-name enum kept for compatibility."""

    MESSAGE = "message"
    OBJECT = "object"


class SpanRecordingContext(Protocol):
    """Handle for an in-progress operation span."""

    def record_exception(self, exception: BaseException) -> None:
        """Record an exception on the span."""

    def record_attributes(self, attributes: Attributes) -> None:
        """Record attributes on the span."""

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None:
        """Record the span status."""

    def get_recorded_span(self) -> SpanCoreFields:
        """Return what was recorded so far."""
        ...


SpanLike = Union["ReadableSpan", Span]
