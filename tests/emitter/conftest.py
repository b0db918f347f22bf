"""Fixtures for the emitter tests: a recording tracer installed as the active tracer."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, List, Optional

import pytest

from rollouthub.tracer.base import clear_active_tracer, get_active_tracer, set_active_tracer
from rollouthub.tracer.dummy import DummySpanRecordingContext, DummyTracer
from rollouthub.types.tracer import Attributes, SpanCoreFields, TraceStatus


class RecordingTracer(DummyTracer):
    """A ``DummyTracer`` that remembers every span it creates (zero-duration and operation spans)."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: List[SpanCoreFields] = []
        self.create_span_calls: List[dict] = []

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        self.create_span_calls.append({"name": name, "attributes": attributes, "status": status})
        span = super().create_span(name, attributes, timestamp, status)
        self.spans.append(span)
        return span

    @contextmanager
    def operation_context(  # type: ignore[override]
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[DummySpanRecordingContext]:
        context = super().operation_context(name, attributes, start_time, end_time)
        try:
            with context as recording:
                yield recording
        finally:
            self.spans.append(recording.get_recorded_span())


def _clear() -> None:
    while get_active_tracer() is not None:
        clear_active_tracer()


@pytest.fixture(autouse=True)
def _no_leaked_active_tracer() -> Iterator[None]:
    """Every test starts and ends without an active tracer."""
    _clear()
    yield
    _clear()


@pytest.fixture
def recording_tracer() -> Iterator[RecordingTracer]:
    """A :class:`RecordingTracer` set as the active tracer for the duration of the test."""
    tracer = RecordingTracer()
    set_active_tracer(tracer)
    try:
        yield tracer
    finally:
        _clear()
