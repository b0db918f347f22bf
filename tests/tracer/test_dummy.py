"""``DummyTracer`` defaults."""

from __future__ import annotations

import time

import pytest

from rollouthub.tracer import DummyTracer
from rollouthub.tracer.dummy import DummySpanRecordingContext
from rollouthub.types import TraceStatus


def test_create_span_defaults() -> None:
    before = time.time()
    span = DummyTracer().create_span("my.span")
    assert span.name == "my.span"
    assert span.attributes == {}
    assert span.status.status_code == "OK"
    assert span.start_time == span.end_time
    assert span.start_time is not None and span.start_time >= before


def test_create_span_explicit_values() -> None:
    status = TraceStatus(status_code="ERROR", description="bad")
    span = DummyTracer().create_span("s", attributes={"a": 1}, timestamp=12.5, status=status)
    assert span.attributes == {"a": 1}
    assert span.start_time == span.end_time == 12.5
    assert span.status == status


def test_operation_context_records_block() -> None:
    with DummyTracer().operation_context("op", attributes={"k": "v"}, start_time=1.0, end_time=2.0) as ctx:
        ctx.record_attributes({"extra": 3})
    recorded = ctx.get_recorded_span()
    assert recorded.name == "op"
    assert recorded.attributes == {"k": "v", "extra": 3}
    assert (recorded.start_time, recorded.end_time) == (1.0, 2.0)
    assert recorded.status.status_code == "OK"


def test_operation_context_records_exception() -> None:
    with pytest.raises(ValueError, match="kaput"):
        with DummyTracer().operation_context("op") as ctx:
            raise ValueError("kaput")
    recorded = ctx.get_recorded_span()
    assert recorded.status.status_code == "ERROR"
    assert recorded.status.description == "kaput"
    assert recorded.attributes["exception.type"] == "ValueError"
    assert recorded.attributes["exception.message"] == "kaput"
    assert recorded.end_time is not None


def test_recorded_span_requires_finalisation() -> None:
    ctx = DummySpanRecordingContext("x")
    with pytest.raises(ValueError):
        ctx.get_recorded_span()
    ctx.record_status("ERROR", "why")
    ctx.finalize()
    assert ctx.get_recorded_span().status.description == "why"


def test_trace_context_not_supported() -> None:
    with pytest.raises(NotImplementedError):
        DummyTracer().trace_context()
