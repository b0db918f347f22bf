"""``OtelTracer`` keeps rollouthub's native OpenAI instrumentation applied while a worker is initialised."""

from __future__ import annotations

import openai
import pytest

from rollouthub.instrumentation import (
    AGENTOPS_INSTALLED,
    instrument_openai,
    is_openai_instrumented,
    uninstrument_openai,
)
from rollouthub.instrumentation.openai import CHAT_SPAN_NAME
from rollouthub.store import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer
from rollouthub.tracer import AgentOpsTracer, OtelTracer


@pytest.fixture(autouse=True)
def _not_instrumented() -> None:
    uninstrument_openai()


async def test_openai_calls_become_spans_of_the_rollout() -> None:
    store = InMemoryLightningStore()
    rollout = await store.start_rollout(input={})
    tracer = OtelTracer()
    with MockOpenAIServer("hello") as llm, tracer.lifespan(store):
        assert is_openai_instrumented()
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="dummy", max_retries=0)
        async with tracer.trace_context(rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.close()
    assert not is_openai_instrumented()  # removed with the worker
    [span] = await store.query_spans(rollout.rollout_id)
    assert span.name == CHAT_SPAN_NAME
    assert span.attributes["gen_ai.prompt.0.content"] == "hi"
    assert span.attributes["gen_ai.completion.0.content"] == "hello"


def test_opt_out() -> None:
    with OtelTracer(instrument_openai=False).lifespan():
        assert not is_openai_instrumented()


def test_overlapping_tracers_share_the_instrumentation() -> None:
    first, second = OtelTracer(), OtelTracer()
    first.init_worker(0)
    second.init_worker(1)
    first.teardown_worker(0)
    assert is_openai_instrumented()  # the second tracer still relies on it
    second.teardown_worker(1)
    assert not is_openai_instrumented()


def test_instrumentation_the_user_applied_is_left_alone() -> None:
    instrument_openai()
    with OtelTracer().lifespan():
        assert is_openai_instrumented()
    assert is_openai_instrumented()
    uninstrument_openai()


@pytest.mark.skipif(AGENTOPS_INSTALLED, reason="with AgentOps installed, AgentOps instruments OpenAI")
def test_agentops_fallback_instruments_once() -> None:
    tracer = AgentOpsTracer()
    with tracer.lifespan():
        assert tracer.is_fallback and is_openai_instrumented()
    assert not is_openai_instrumented()
