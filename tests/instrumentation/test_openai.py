"""Native OpenAI SDK instrumentation: the SDK talks for real to the mock server and spans carry the adapter schema."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List

import openai
import pytest

from rollouthub.instrumentation import (
    AGENTOPS_INSTALLED,
    OPENAI_INSTALLED,
    instrument_all,
    instrument_openai,
    is_openai_instrumented,
    uninstrument_all,
    uninstrument_openai,
)
from rollouthub.instrumentation.openai import CHAT_SPAN_NAME, RESPONSES_SPAN_NAME, TOOL_CALL_SPAN_NAME
from rollouthub.testing import MockOpenAIServer, last_user_message, text_token_ids
from rollouthub.tracer import OtelTracer, clear_active_tracer, get_active_tracer
from rollouthub.types import Span


def _reply(request: Dict[str, Any]) -> Any:
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return f"tool said {messages[-1]['content']}"
    user = last_user_message(request)
    if user == "call the tool":
        return {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        }
    if user == "boom":
        return {"content": "", "finish_reason": "length"}
    return f"reply to {user}"


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(reply=_reply) as srv:
        yield srv


@pytest.fixture()
def tracer() -> Iterator[OtelTracer]:
    while get_active_tracer() is not None:
        clear_active_tracer()
    instrument_openai()
    otel_tracer = OtelTracer()
    with otel_tracer.lifespan():
        yield otel_tracer
    uninstrument_openai()


def _llm_spans(spans: List[Span], name: str = CHAT_SPAN_NAME) -> List[Span]:
    return [s for s in spans if s.name == name]


async def test_sync_chat_completion_span_schema(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        client.chat.completions.create(
            model="mock-llm",
            messages=[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "ping"}],
            temperature=0.3,
            extra_body={"return_token_ids": True},
        )
    [span] = _llm_spans(tracer.get_last_trace())
    attrs = span.attributes
    assert attrs["gen_ai.system"] == "openai"
    assert attrs["gen_ai.request.model"] == "mock-llm"
    assert attrs["gen_ai.request.streaming"] is False
    assert attrs["gen_ai.request.temperature"] == 0.3
    assert (attrs["gen_ai.prompt.0.role"], attrs["gen_ai.prompt.0.content"]) == ("system", "You are terse.")
    assert (attrs["gen_ai.prompt.1.role"], attrs["gen_ai.prompt.1.content"]) == ("user", "ping")
    assert str(attrs["gen_ai.response.id"]).startswith("chatcmpl-")
    assert attrs["gen_ai.response.model"] == "mock-llm"
    assert attrs["gen_ai.completion.0.role"] == "assistant"
    assert attrs["gen_ai.completion.0.content"] == "reply to ping"
    assert attrs["gen_ai.completion.0.finish_reason"] == "stop"
    assert attrs["gen_ai.usage.completion_tokens"] == len("reply to ping")
    assert (
        attrs["gen_ai.usage.total_tokens"]
        == attrs["gen_ai.usage.prompt_tokens"] + attrs["gen_ai.usage.completion_tokens"]
    )  # type: ignore[operator]
    assert list(attrs["prompt_token_ids"]) == text_token_ids("You are terse.\nping")  # type: ignore[arg-type]
    assert list(attrs["response_token_ids"]) == text_token_ids("reply to ping")  # type: ignore[arg-type]
    assert span.status.status_code == "OK"


async def test_no_token_ids_unless_returned(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    [span] = _llm_spans(tracer.get_last_trace())
    assert "prompt_token_ids" not in span.attributes and "response_token_ids" not in span.attributes


async def test_async_and_streaming_chat(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    sync_client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "async"}])
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "astream"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"return_token_ids": True},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks
        with sync_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "sstream"}], stream=True
        ) as sync_stream:
            text = "".join(c.choices[0].delta.content or "" for c in sync_stream if c.choices)
        assert text == "reply to sstream"
    spans = _llm_spans(tracer.get_last_trace())
    by_prompt = {s.attributes["gen_ai.prompt.0.content"]: s for s in spans}
    assert set(by_prompt) == {"async", "astream", "sstream"}
    assert by_prompt["async"].attributes["gen_ai.completion.0.content"] == "reply to async"
    streamed = by_prompt["astream"].attributes
    assert streamed["gen_ai.request.streaming"] is True
    assert streamed["gen_ai.completion.0.content"] == "reply to astream"
    assert streamed["gen_ai.completion.0.finish_reason"] == "stop"
    assert streamed["gen_ai.usage.completion_tokens"] == len("reply to astream")
    assert list(streamed["response_token_ids"]) == text_token_ids("reply to astream")  # type: ignore[arg-type]
    assert list(streamed["prompt_token_ids"]) == text_token_ids("astream")  # type: ignore[arg-type]
    assert by_prompt["sstream"].attributes["gen_ai.completion.0.content"] == "reply to sstream"


async def test_tool_calls_and_function_schema(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather by city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    async with tracer.trace_context():
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "call the tool"}], tools=tools
        )
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        client.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "call the tool"},
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ],
            tools=tools,
        )
    spans = tracer.get_last_trace()
    llm = _llm_spans(spans)
    assert len(llm) == 2
    first_attrs = llm[0].attributes
    assert first_attrs["gen_ai.request.functions.0.name"] == "get_weather"
    assert first_attrs["gen_ai.request.functions.0.description"] == "Weather by city"
    assert json.loads(str(first_attrs["gen_ai.request.functions.0.parameters"]))["type"] == "object"
    assert first_attrs["gen_ai.completion.0.finish_reason"] == "tool_calls"
    assert first_attrs["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"
    [tool_span] = [s for s in spans if s.name == TOOL_CALL_SPAN_NAME]
    assert tool_span.parent_id == llm[0].span_id
    assert tool_span.attributes["tool.name"] == "get_weather"
    assert tool_span.attributes["tool.parameters"] == '{"city": "Oslo"}'
    assert (tool_span.attributes["tool.call.id"], tool_span.attributes["tool.call.type"]) == ("call_7", "function")
    second_attrs = llm[1].attributes
    assert second_attrs["gen_ai.prompt.1.tool_calls.0.id"] == "call_7"
    assert second_attrs["gen_ai.prompt.2.role"] == "tool"
    assert second_attrs["gen_ai.prompt.2.tool_call_id"] == "call_7"


async def test_responses_api_sync_async_streaming(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    aclient = openai.AsyncOpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        client.responses.create(model="m", input="r-sync", instructions="be kind")
        await aclient.responses.create(model="m", input=[{"role": "user", "content": "r-async"}])
        for _ in client.responses.create(model="m", input="r-stream", stream=True):
            pass
    spans = _llm_spans(tracer.get_last_trace(), RESPONSES_SPAN_NAME)
    assert len(spans) == 3
    by_user = {s.attributes.get("gen_ai.prompt.1.content", s.attributes["gen_ai.prompt.0.content"]): s for s in spans}
    sync_attrs = by_user["r-sync"].attributes
    assert (sync_attrs["gen_ai.prompt.0.role"], sync_attrs["gen_ai.prompt.0.content"]) == ("system", "be kind")
    assert sync_attrs["gen_ai.completion.0.content"] == "reply to r-sync"
    assert str(sync_attrs["gen_ai.response.id"]).startswith("resp_")
    assert by_user["r-async"].attributes["gen_ai.completion.0.content"] == "reply to r-async"
    streamed = by_user["r-stream"].attributes
    assert streamed["gen_ai.request.streaming"] is True
    assert streamed["gen_ai.completion.0.content"] == "reply to r-stream"
    assert streamed["gen_ai.usage.completion_tokens"] == len("reply to r-stream")


async def test_errors_are_recorded(tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="dummy", max_retries=0, timeout=2)
    async with tracer.trace_context():
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    [span] = _llm_spans(tracer.get_last_trace())
    assert span.status.status_code == "ERROR"
    assert any(event.name == "exception" for event in span.events)


async def test_with_raw_response_is_traced(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "raw"}])
        assert raw.parse().choices[0].message.content == "reply to raw"
    [span] = _llm_spans(tracer.get_last_trace())
    assert span.attributes["gen_ai.completion.0.content"] == "reply to raw"


async def test_uninstrument_restores_sdk(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    assert is_openai_instrumented()
    uninstrument_openai()
    assert not is_openai_instrumented()
    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "quiet"}])
    assert _llm_spans(tracer.get_last_trace()) == []
    instrument_openai()
    instrument_openai()  # idempotent
    async with tracer.trace_context():
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "loud"}])
    assert len(_llm_spans(tracer.get_last_trace())) == 1


def test_instrument_all_uses_native_openai_without_agentops() -> None:
    assert OPENAI_INSTALLED
    if AGENTOPS_INSTALLED:  # pragma: no cover - depends on the optional extra
        pytest.skip("agentops installed: instrument_all uses AgentOps instead")
    uninstrument_openai()
    instrument_all()
    try:
        assert is_openai_instrumented()
    finally:
        uninstrument_all()
    assert not is_openai_instrumented()


async def test_suppressed_context_is_not_traced(server: MockOpenAIServer, tracer: OtelTracer) -> None:
    from opentelemetry import context as otel_context

    from rollouthub.tracer.otel import _SUPPRESS

    client = openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    async with tracer.trace_context():
        token = otel_context.attach(otel_context.set_value(_SUPPRESS, True))
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hidden"}])
        finally:
            otel_context.detach(token)
    assert _llm_spans(tracer.get_last_trace()) == []


def test_instrument_all_is_reference_counted() -> None:
    if AGENTOPS_INSTALLED:  # pragma: no cover - depends on the optional extra
        pytest.skip("agentops installed: instrument_all uses AgentOps instead")
    uninstrument_openai()
    instrument_all()
    instrument_all()
    uninstrument_all()
    assert is_openai_instrumented()  # another user still relies on it
    uninstrument_all()
    assert not is_openai_instrumented()
    instrument_openai()  # applied directly by the user: instrument_all/uninstrument_all leave it alone
    instrument_all()
    uninstrument_all()
    assert is_openai_instrumented()
    uninstrument_openai()
