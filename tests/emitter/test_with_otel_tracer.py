"""Emitters against the real ``OtelTracer``: spans reach the tracer's trace with the right structure."""

from __future__ import annotations

from typing import AsyncIterator

import pytest

from rollouthub.emitter import (
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    get_message_value,
    get_object_value,
    operation,
)
from rollouthub.tracer.otel import OtelTracer


@pytest.fixture
async def otel_tracer() -> AsyncIterator[OtelTracer]:
    tracer = OtelTracer()
    tracer.init_worker(0)
    try:
        yield tracer
    finally:
        tracer.teardown_worker(0)


async def test_emitted_spans_are_collected(otel_tracer: OtelTracer) -> None:
    async with otel_tracer.trace_context(name="test"):
        with operation(name="outer", step=1) as op:
            op.set_input(question="q")
            emit_reward(0.5)
            op.set_output("a")
        emit_message("hello")
        emit_object({"k": 1})
        emit_exception(ValueError("bad"))
    spans = otel_tracer.get_last_trace()
    by_name = {span.name: span for span in spans}
    assert set(by_name) >= {
        "agentlightning.operation",
        "agentlightning.annotation",
        "agentlightning.message",
        "agentlightning.object",
        "agentlightning.exception",
    }
    outer = by_name["agentlightning.operation"]
    reward_span = by_name["agentlightning.annotation"]
    assert reward_span.parent_id == outer.span_id  # emitted inside the operation → child span
    assert outer.attributes["agentlightning.operation.name"] == "outer"
    assert outer.attributes["step"] == 1
    assert outer.attributes["agentlightning.operation.input.question"] == "q"
    assert outer.attributes["agentlightning.operation.output"] == "a"
    assert outer.status.status_code != "ERROR"
    assert reward_span.status.status_code == "OK"
    assert by_name["agentlightning.message"].status.status_code == "UNSET"
    assert get_message_value(by_name["agentlightning.message"]) == "hello"
    assert get_object_value(by_name["agentlightning.object"]) == {"k": 1}
    assert by_name["agentlightning.exception"].attributes["exception.type"] == "ValueError"
    assert find_final_reward(spans) == 0.5


async def test_failed_operation_has_error_status(otel_tracer: OtelTracer) -> None:
    @operation
    def fail(x: int) -> None:
        raise RuntimeError("nope")

    async with otel_tracer.trace_context():
        with pytest.raises(RuntimeError):
            fail(3)
    (span,) = [s for s in otel_tracer.get_last_trace() if s.name == "agentlightning.operation"]
    assert span.status.status_code == "ERROR"
    (event,) = [e for e in span.events if e.name == "exception"]  # OTel records exceptions as span events
    assert event.attributes["exception.type"] == "RuntimeError"
    assert span.attributes["agentlightning.operation.input.x"] == 3
    assert span.attributes["agentlightning.operation.name"] == "fail"


async def test_emitters_fail_after_trace_context_closes(otel_tracer: OtelTracer) -> None:
    async with otel_tracer.trace_context():
        emit_reward(1.0)
    with pytest.raises(RuntimeError):
        emit_reward(1.0)
