"""``TraceToMessages`` and ``group_genai_dict``."""

from __future__ import annotations

import json

import pytest

from rollouthub.adapter import TraceToMessages
from rollouthub.adapter.messages import convert_to_openai_messages, group_genai_dict

from .helpers import make_span


def test_group_genai_dict_lists_and_dicts() -> None:
    data = {
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": "second",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "first",
        "gen_ai.prompt.extra": "ignored at list level",
        "gen_ai.request.model": "m",
        "gen_ai.request.functions.0.name": "f",
        "gen_ai.request.functions.0.parameters": "{}",
        "unrelated": 1,
    }
    assert group_genai_dict(data, "gen_ai.prompt") == [
        {"role": "system", "content": "first"},
        {"role": "user", "content": "second"},
    ]
    assert group_genai_dict(data, "gen_ai.request") == {
        "model": "m",
        "functions": [{"name": "f", "parameters": "{}"}],
    }
    assert group_genai_dict(data, "gen_ai.missing") == {}
    assert group_genai_dict({"p.10.x": 1, "p.2.x": 2}, "p") == [{"x": 2}, {"x": 1}]


def llm_call_span() -> list:
    weather_params = {"type": "object", "properties": {"city": {"type": "string"}}}
    llm = make_span(
        "openai.chat.completion",
        2,
        parent=1,
        attributes={
            "gen_ai.request.model": "m",
            "gen_ai.request.functions.0.name": "get_weather",
            "gen_ai.request.functions.0.description": "Weather lookup",
            "gen_ai.request.functions.0.parameters": json.dumps(weather_params),
            "gen_ai.request.functions.1.name": "noop",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are helpful.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Weather in Paris?",
            "gen_ai.prompt.2.role": "assistant",
            "gen_ai.prompt.2.tool_calls.0.id": "call-0",
            "gen_ai.prompt.2.tool_calls.0.name": "get_weather",
            "gen_ai.prompt.2.tool_calls.0.arguments": '{"city": "Rome"}',
            "gen_ai.prompt.3.role": "tool",
            "gen_ai.prompt.3.content": "sunny",
            "gen_ai.prompt.3.tool_call_id": "call-0",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "",
            "gen_ai.response.id": "resp-1",
        },
    )
    tool = make_span(
        "openai.tool_call",
        3,
        parent=2,
        attributes={
            "tool.name": "get_weather",
            "tool.parameters": '{"city": "Paris"}',
            "tool.call.id": "call-1",
            "tool.call.type": "function",
        },
    )
    unrelated_child = make_span("not-a-tool", 4, parent=2, attributes={"x": 1})
    return [make_span("root", 1), llm, tool, unrelated_child]


def test_trace_to_messages_with_tools_and_tool_calls() -> None:
    (conversation,) = TraceToMessages().adapt(llm_call_span())
    assert conversation["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call-0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call-0"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
    ]
    assert conversation["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather lookup",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "noop", "description": "", "parameters": None}},
    ]


def test_one_conversation_per_llm_call_in_order_without_tools() -> None:
    spans = [
        make_span("root", 1),
        make_span(
            "llm-a",
            2,
            parent=1,
            attributes={
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "a?",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "a!",
            },
        ),
        make_span("agentlightning.annotation", 3, parent=1, attributes={"agentlightning.reward.0.value": 1.0}),
        make_span(
            "llm-b",
            4,
            parent=1,
            attributes={
                "gen_ai.prompt.0.role": "user",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "b!",
                "gen_ai.completion.1.role": "tool",  # non-assistant completions are skipped
                "gen_ai.completion.1.content": "x",
            },
        ),
    ]
    conversations = TraceToMessages()(spans)
    assert conversations == [
        {"messages": [{"role": "user", "content": "a?"}, {"role": "assistant", "content": "a!"}], "tools": None},
        {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "b!"}], "tools": None},
    ]


def test_tool_call_id_dropped_for_roles_without_it() -> None:
    spans = [
        make_span(
            "llm",
            1,
            attributes={
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "x",
                "gen_ai.prompt.0.tool_call_id": "t",
            },
        )
    ]
    (conversation,) = TraceToMessages().adapt(spans)
    assert conversation["messages"] == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    "attributes",
    [
        {"gen_ai.prompt.role": "user"},  # prompt must be a list
        {"gen_ai.completion.content": "x"},  # completion must be a list
        {"gen_ai.request.0.model": "m"},  # request must be a dict
        {"gen_ai.response.0": "x"},  # response must be a dict
    ],
)
def test_wrong_shapes_raise(attributes: dict) -> None:
    with pytest.raises(ValueError):
        TraceToMessages().adapt([make_span("llm", 1, attributes=attributes)])


def test_tool_attributes_must_form_a_dict() -> None:
    spans = [
        make_span("llm", 1, attributes={"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "x"}),
        make_span("tool", 2, parent=1, attributes={"tool.0": "bad"}),
    ]
    with pytest.raises(ValueError):
        TraceToMessages().adapt(spans)


def test_invalid_role_is_rejected() -> None:
    spans = [make_span("llm", 1, attributes={"gen_ai.prompt.0.role": "wizard", "gen_ai.prompt.0.content": "x"})]
    with pytest.raises(ValueError):
        TraceToMessages().adapt(spans)


def test_spans_without_genai_attributes_produce_nothing() -> None:
    assert TraceToMessages().adapt([make_span("root", 1), make_span("child", 2, parent=1)]) == []


def test_convert_to_openai_messages_directly() -> None:
    calls = [
        {"prompt": [{"role": "user", "content": "q"}], "completion": [], "request": {}, "response": {}, "tools": []}
    ]
    assert list(convert_to_openai_messages(calls)) == [{"messages": [{"role": "user", "content": "q"}], "tools": None}]
