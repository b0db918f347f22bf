"""The tracer's local ``Span`` copy of an ended span equals a span built and validated field by field."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link as OtelLink
from opentelemetry.trace import Status, StatusCode, TraceState

from rollouthub.tracer.otel import LightningSpanProcessor
from rollouthub.types import Span
from rollouthub.types.tracer import Event, Link, OtelResource, SpanContext, TraceStatus

ATTRIBUTES: Dict[str, Any] = {
    "str": "text",
    "int": 7,
    "float": 2.5,
    "bool": True,
    "strs": ("a", "b"),
    "ints": (1, 2, 3),
    "floats": (0.5, 1.5),
    "bools": (True, False),
    "empty": (),
}


def _context(ctx: Any) -> SpanContext:
    return SpanContext(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        is_remote=ctx.is_remote,
        trace_state=dict(ctx.trace_state),
    )


def _expected(span: Any, sequence_id: int) -> Span:
    """The span rebuilt from the SDK span's public API, one field at a time, with full validation."""
    ctx = span.get_span_context()
    return Span(
        rollout_id="rollout-dummy",
        attempt_id="attempt-dummy",
        sequence_id=sequence_id,
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(span.parent.span_id, "016x") if span.parent is not None else None,
        name=span.name,
        status=TraceStatus(status_code=span.status.status_code.name, description=span.status.description),
        attributes=dict(span.attributes),
        events=[
            Event(name=event.name, attributes=dict(event.attributes), timestamp=event.timestamp / 1_000_000_000)
            for event in span.events
        ],
        links=[Link(context=_context(link.context), attributes=dict(link.attributes)) for link in span.links],
        start_time=span.start_time / 1_000_000_000,
        end_time=span.end_time / 1_000_000_000,
        context=_context(ctx),
        parent=_context(span.parent) if span.parent is not None else None,
        resource=OtelResource(attributes=dict(span.resource.attributes), schema_url=span.resource.schema_url),
    )


def _assert_same(actual: Any, expected: Any) -> None:
    """Equal values, equal types and equal field sets, recursively through nested models and sequences."""
    assert type(actual) is type(expected)
    if isinstance(expected, (Span, SpanContext, TraceStatus, Event, Link, OtelResource)):
        assert actual.model_fields_set == expected.model_fields_set
        assert actual.model_extra == expected.model_extra
        for name in type(expected).model_fields:
            _assert_same(getattr(actual, name), getattr(expected, name))
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key, value in expected.items():
            _assert_same(actual[key], value)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for item, value in zip(actual, expected, strict=True):
            _assert_same(item, value)
    else:
        assert actual == expected


def test_local_copy_equals_validated_span_field_by_field() -> None:
    processor = LightningSpanProcessor(disable_store_submission=True)
    resource = Resource.create({"service.name": "span-copy", "deployment.count": 3}, schema_url="https://schema/1")
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(processor)
    exporter = InMemorySpanExporter()  # receives the very SDK spans the processor copied
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("span-copy")
    link_target = trace_api.SpanContext(
        trace_id=0x1234, span_id=0x5678, is_remote=True, trace_state=TraceState([("vendor", "value")])
    )
    try:
        with processor:
            with tracer.start_as_current_span("parent", attributes={"level": 0}):
                with tracer.start_as_current_span(
                    "child", attributes=ATTRIBUTES, links=[OtelLink(link_target, {"why": "retry", "n": (1, 2)})]
                ) as child:
                    child.add_event("first", {"k": "v", "nums": (1.0, 2.0)}, timestamp=1_700_000_000_123_456_789)
                    child.add_event("bare")
                    child.set_status(Status(StatusCode.ERROR, "it failed"))
            spans: List[Span] = processor.spans()
    finally:
        provider.shutdown()

    assert [span.name for span in spans] == ["child", "parent"]
    child_span, parent_span = spans
    assert child_span.parent == parent_span.context and child_span.links and len(child_span.events) == 2
    assert child_span.status.status_code == "ERROR" and child_span.resource.attributes["service.name"] == "span-copy"
    # Rebuild each copy from the SDK span it was made of, with validation, and compare field by field.
    sdk_spans = {span.name: span for span in exporter.get_finished_spans()}
    for sequence_id, span in enumerate(spans):
        expected = _expected(sdk_spans[span.name], sequence_id)
        _assert_same(span, expected)
        assert span == expected
        assert span.model_dump_json() == expected.model_dump_json()


def test_extra_public_fields_of_a_duck_typed_span_are_kept_for_every_instance() -> None:
    """Class attribute names are looked up once per class; instance fields still become extras every time."""

    class DuckSpan(SimpleNamespace):
        kind_hint = "class-level, never an extra"

    def duck(marker: str) -> DuckSpan:
        return DuckSpan(
            name="duck",
            context=None,
            parent=None,
            status=Status(StatusCode.OK),
            attributes={"a": 1},
            events=[],
            links=[],
            start_time=1.5,
            end_time=2.5,
            resource=Resource.create({}),
            marker=marker,
            kind_hint="instance value shadowed by the class attribute",
        )

    first = Span.from_opentelemetry(duck("one"), "r", "a", 0)  # type: ignore[arg-type]
    second = Span.from_opentelemetry(duck("two"), "r", "a", 1)  # type: ignore[arg-type]
    assert first.model_extra == {"marker": "one"}
    assert second.model_extra == {"marker": "two"}
    assert first.trace_id == "0" * 32 and first.context is None and second.start_time == 1.5
