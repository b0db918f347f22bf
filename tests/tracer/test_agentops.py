"""``AgentOpsTracer`` without the optional ``agentops`` extra: the documented fallback."""

from __future__ import annotations

import logging

import pytest

from rollouthub.instrumentation import AGENTOPS_INSTALLED, is_openai_instrumented, uninstrument_openai
from rollouthub.tracer import AgentOpsTracer, OtelTracer, get_active_tracer
from rollouthub.tracer.agentops import AGENTOPS_MISSING_MESSAGE
from rollouthub.utils.log_once import forget_logged_once

pytestmark = pytest.mark.skipif(AGENTOPS_INSTALLED, reason="exercises the fallback used when agentops is missing")


async def test_fallback_to_otel_with_native_openai_instrumentation(caplog: pytest.LogCaptureFixture) -> None:
    uninstrument_openai()
    forget_logged_once()  # the notice is said once per process: make this test independent of the others
    tracer = AgentOpsTracer()
    assert isinstance(tracer, OtelTracer)
    with caplog.at_level(logging.WARNING):
        with tracer.lifespan():
            assert tracer.is_fallback
            assert is_openai_instrumented()
            async with tracer.trace_context("t"):
                assert get_active_tracer() is tracer
                tracer.create_span("inside")
            assert [s.name for s in tracer.get_last_trace()] == ["inside"]
            assert tracer.get_langchain_handler() is None
        assert not is_openai_instrumented()
    assert AGENTOPS_MISSING_MESSAGE in caplog.text
    assert "pip install 'rollouthub[agentops]'" in AGENTOPS_MISSING_MESSAGE


def test_unmanaged_flags_warn_and_skip_instrumentation(caplog: pytest.LogCaptureFixture) -> None:
    uninstrument_openai()
    with caplog.at_level(logging.WARNING):
        tracer = AgentOpsTracer(agentops_managed=False, instrument_managed=False)
        with tracer.lifespan():
            assert not is_openai_instrumented()
    assert "agentops_managed=False" in caplog.text
    assert "instrument_managed=False" in caplog.text
