"""Adapters on spans produced for real: the OpenAI SDK talks to the mock server through the native instrumentation."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List

import openai
import pytest

from rollouthub.adapter import TracerTraceToTriplet, TraceToMessages
from rollouthub.emitter import emit_reward
from rollouthub.testing import MockOpenAIServer, last_user_message
from rollouthub.tracer import OtelTracer
from rollouthub.types.tracer import Span

from .helpers import instrumented_tracer

pytestmark = pytest.mark.timeout(60)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Look up the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL = {
    "id": "call-42",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
}


def reply(request: Dict[str, Any]) -> Any:
    if request["messages"][-1]["role"] == "tool":
        return "It is sunny in Paris."
    if last_user_message(request) == "Weather in Paris?":
        return {"content": None, "tool_calls": [TOOL_CALL]}
    return "?"


@pytest.fixture(scope="module")
def llm_server() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(reply=reply) as server:
        yield server


@pytest.fixture
def traced() -> Iterator[OtelTracer]:
    with instrumented_tracer() as tracer:
        yield tracer


async def run_tool_conversation(tracer: OtelTracer, server: MockOpenAIServer) -> List[Span]:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    messages: List[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    async with client, tracer.trace_context(name="tool-agent"):
        first = await client.chat.completions.create(model="mock-model", messages=messages, tools=[WEATHER_TOOL])
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},  # type: ignore[union-attr]
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
        await client.chat.completions.create(model="mock-model", messages=messages, tools=[WEATHER_TOOL])
        emit_reward(1.0)
    return tracer.get_last_trace()


async def test_trace_to_messages_on_instrumented_calls(traced: OtelTracer, llm_server: MockOpenAIServer) -> None:
    spans = await run_tool_conversation(traced, llm_server)
    conversations = TraceToMessages().adapt(spans)
    assert len(conversations) == 2
    first, second = conversations
    expected_tool_call = {
        "id": "call-42",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    assert first["messages"][0] == {"role": "user", "content": "Weather in Paris?"}
    assert first["messages"][-1]["role"] == "assistant"
    assert first["messages"][-1]["tool_calls"] == [expected_tool_call]  # type: ignore[typeddict-item]
    assert first["tools"] is not None
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert first["tools"][0]["function"]["parameters"] == WEATHER_TOOL["function"]["parameters"]  # type: ignore[index]
    roles = [message["role"] for message in second["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert second["messages"][1]["tool_calls"][0]["id"] == "call-42"  # type: ignore[typeddict-item]
    assert second["messages"][2] == {"role": "tool", "content": "sunny", "tool_call_id": "call-42"}
    assert second["messages"][3] == {"role": "assistant", "content": "It is sunny in Paris."}


async def test_triplets_on_instrumented_calls(traced: OtelTracer, llm_server: MockOpenAIServer) -> None:
    spans = await run_tool_conversation(traced, llm_server)
    triplets = TracerTraceToTriplet().adapt(spans)
    assert len(triplets) == 2
    assert [t.reward for t in triplets] == [None, 1.0]
    assert triplets[0].prompt["raw_content"][0] == {"role": "user", "content": "Weather in Paris?"}
    assert triplets[1].response["raw_content"][0]["content"] == "It is sunny in Paris."
    assert all(t.metadata["response_id"].startswith("chatcmpl-") for t in triplets)
    assert triplets[0].metadata["request"]["model"] == "mock-model"
