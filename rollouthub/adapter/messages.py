"""Spans → OpenAI chat-format conversations: ``TraceToMessages``.

Each LLM-call span (one carrying ``gen_ai.prompt``/``gen_ai.completion``/``gen_ai.request``/``gen_ai.response``
attributes) becomes one :class:`OpenAIMessages` record in the OpenAI fine-tuning JSONL schema. Tool calls made by the
model are read from the span's direct children carrying ``tool.*`` attributes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from rollouthub.types.tracer import Span

from .base import TraceAdapter

if TYPE_CHECKING:  # the OpenAI type package costs ~1 s to import; load it only when validating
    from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

__all__ = [
    "OpenAIMessages",
    "TraceToMessages",
    "LlmCallMessages",
    "trace_llm_calls",
    "group_genai_dict",
    "convert_to_openai_messages",
]

_ROLES_WITH_TOOL_CALL_ID = {"tool"}


class OpenAIMessages(TypedDict):
    """One conversation: chat messages plus the function tools that were available."""

    messages: List[ChatCompletionMessageParam]
    tools: Optional[List[ChatCompletionFunctionToolParam]]


class _RawLlmCall(TypedDict):
    prompt: List[Any]
    completion: List[Any]
    request: Dict[str, Any]
    response: Dict[str, Any]
    tools: List[Dict[str, Any]]


@functools.lru_cache(maxsize=1)
def _message_adapter() -> TypeAdapter[Any]:
    from openai.types.chat import ChatCompletionMessageParam

    return TypeAdapter(ChatCompletionMessageParam)


def _validated(message: Dict[str, Any]) -> ChatCompletionMessageParam:
    """Validate ``message`` against the OpenAI message union and return it as a plain dict.

    The validated copy is discarded because pydantic turns ``Iterable`` fields (e.g. ``tool_calls``) into lazy
    iterators.

    Raises:
        ValueError: If the message is not a valid OpenAI chat message.
    """
    _message_adapter().validate_python(message)
    return message  # type: ignore[return-value]


def group_genai_dict(data: Mapping[str, Any], prefix: str) -> Union[Dict[str, Any], List[Any]]:
    """Group flat ``prefix.*`` keys into nested lists/dicts.

    If any key below ``prefix`` starts with a numeric segment, the result is a list ordered by index (non-numeric
    keys at that level are ignored); otherwise a dict. Nested levels are grouped recursively.
    """
    dotted = prefix + "."
    below = {key[len(dotted) :]: value for key, value in data.items() if key.startswith(dotted)}
    if not below:
        return {}
    heads: Dict[str, List[str]] = {}
    for key in below:
        heads.setdefault(key.split(".", 1)[0], []).append(key)
    if any(head.isdigit() for head in heads):
        result: List[Any] = []
        for head in sorted((h for h in heads if h.isdigit()), key=int):
            result.append(below[head] if head in below else group_genai_dict(below, head))
        return result
    grouped: Dict[str, Any] = {}
    for head in heads:
        grouped[head] = below[head] if head in below else group_genai_dict(below, head)
    return grouped


def _tool_call_param(call_id: Any, name: Any, arguments: Any, call_type: Any = "function") -> Dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments) if arguments is not None else ""
    return {
        "id": call_id,
        "type": call_type or "function",
        "function": {"name": name, "arguments": arguments},
    }


def _prompt_message(entry: Mapping[str, Any]) -> ChatCompletionMessageParam:
    role = entry.get("role")
    if role == "assistant" and "tool_calls" in entry:
        raw_calls = entry["tool_calls"]
        calls = raw_calls if isinstance(raw_calls, list) else list(raw_calls.values()) if raw_calls else []
        message: Dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tool_call_param(c.get("id"), c.get("name"), c.get("arguments")) for c in calls],
        }
    else:
        message = {"role": role, "content": entry.get("content", "")}
        if role in _ROLES_WITH_TOOL_CALL_ID and "tool_call_id" in entry:
            message["tool_call_id"] = entry["tool_call_id"]
    return _validated(message)


def _tools_from_request(request: Mapping[str, Any]) -> Optional[List[ChatCompletionFunctionToolParam]]:
    functions = request.get("functions")
    if not functions:
        return None
    items = functions if isinstance(functions, list) else list(functions.values())
    tools: List[ChatCompletionFunctionToolParam] = []
    for function in items:
        parameters = function.get("parameters")
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": function.get("name"),
                    "description": function.get("description", ""),
                    "parameters": parameters,
                },
            }  # type: ignore[typeddict-item]
        )
    return tools


def _convert_call(
    call: Mapping[str, Any],
) -> tuple[
    List[ChatCompletionMessageParam], List[ChatCompletionMessageParam], Optional[List[ChatCompletionFunctionToolParam]]
]:
    """One grouped LLM call → (prompt messages, assistant response messages, available tools)."""
    prompt: List[ChatCompletionMessageParam] = [_prompt_message(entry) for entry in call.get("prompt") or []]
    tool_calls = [
        _tool_call_param(
            (tool.get("call") or {}).get("id"),
            tool.get("name"),
            tool.get("parameters"),
            (tool.get("call") or {}).get("type"),
        )
        for tool in call.get("tools") or []
    ]
    response: List[ChatCompletionMessageParam] = []
    for entry in call.get("completion") or []:
        if entry.get("role") != "assistant":
            continue
        message: Dict[str, Any] = {"role": "assistant", "content": entry.get("content")}
        if tool_calls:
            message["tool_calls"] = tool_calls
        response.append(_validated(message))
    return prompt, response, _tools_from_request(call.get("request") or {})


def convert_to_openai_messages(llm_calls: Iterable[Mapping[str, Any]]) -> Iterator[OpenAIMessages]:
    """Convert grouped LLM calls (``prompt``, ``completion``, ``request``, ``response``, ``tools``) to conversations.

    ``tools`` lists the grouped ``tool.*`` attributes of the call's tool-call child spans.
    """
    for call in llm_calls:
        prompt, response, tools = _convert_call(call)
        yield {"messages": prompt + response, "tools": tools}


def _group(attributes: Mapping[str, Any], prefix: str, expected: type, span: Span) -> Any:
    grouped = group_genai_dict(attributes, prefix)
    if not grouped:
        return expected()
    if not isinstance(grouped, expected):
        raise ValueError(
            f"Span {span.span_id} ({span.name}): {prefix} attributes must form a {expected.__name__}, got {grouped!r}"
        )
    return grouped


@dataclass
class LlmCallMessages:
    """One LLM call of a trace in chat format: what :class:`TraceToMessages` makes of it, split into the prompt and
    the model's answer, with the span it came from (for token usage, model, timing)."""

    span: Span
    prompt: List[ChatCompletionMessageParam]
    """The messages sent to the model."""
    response: List[ChatCompletionMessageParam]
    """The assistant message(s) the model answered, with the tool calls it made."""
    tools: Optional[List[ChatCompletionFunctionToolParam]]
    """The function tools offered to the model, or ``None``."""


def trace_llm_calls(source: Sequence[Span]) -> List[LlmCallMessages]:
    """The LLM-call spans of a trace (one carrying ``gen_ai.prompt``/``completion``/``request``/``response``
    attributes), in span order, converted to chat messages; tool calls are read from each call's direct children
    carrying ``tool.*`` attributes.

    Raises:
        ValueError: If ``gen_ai.prompt``/``gen_ai.completion`` do not group into lists,
            ``gen_ai.request``/``gen_ai.response`` into dicts, or ``tool.*`` into a dict.
    """
    spans = list(source)
    calls: List[LlmCallMessages] = []
    for span in spans:
        attributes = span.attributes
        prompt = _group(attributes, "gen_ai.prompt", list, span)
        completion = _group(attributes, "gen_ai.completion", list, span)
        request = _group(attributes, "gen_ai.request", dict, span)
        response = _group(attributes, "gen_ai.response", dict, span)
        if not (prompt or completion or request or response):
            continue
        tools: List[Dict[str, Any]] = []
        for child in spans:
            if child.parent_id != span.span_id:
                continue
            tool = group_genai_dict(child.attributes, "tool")
            if not tool:
                continue
            if not isinstance(tool, dict):
                raise ValueError(f"Span {child.span_id}: tool attributes must form a dict, got {tool!r}")
            tools.append(tool)
        raw: _RawLlmCall = {
            "prompt": prompt,
            "completion": completion,
            "request": request,
            "response": response,
            "tools": tools,
        }
        prompt_messages, response_messages, offered = _convert_call(raw)
        calls.append(LlmCallMessages(span, prompt_messages, response_messages, offered))
    return calls


class TraceToMessages(TraceAdapter[List[OpenAIMessages]]):
    """Convert the LLM-call spans of a trace into OpenAI chat conversations (one per call, in span order)."""

    def adapt(self, source: Sequence[Span], /) -> List[OpenAIMessages]:
        """Convert spans into conversations (see :func:`trace_llm_calls`).

        Raises:
            ValueError: If ``gen_ai.prompt``/``gen_ai.completion`` do not group into lists,
                ``gen_ai.request``/``gen_ai.response`` into dicts, or ``tool.*`` into a dict.
        """
        return [{"messages": call.prompt + call.response, "tools": call.tools} for call in trace_llm_calls(source)]
