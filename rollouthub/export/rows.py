"""Rows of the export formats, built from one rollout and the spans of its attempt (pure functions, no I/O).

Everything derived from spans goes through the adapters: chat messages come from
:func:`rollouthub.adapter.messages.trace_llm_calls` (what :class:`~rollouthub.adapter.TraceToMessages` returns, and
what the dashboard's conversation view shows), triplets from :class:`~rollouthub.adapter.TracerTraceToTriplet`,
trajectories from :func:`rollouthub.adapter.build_trajectories`, final rewards from
:func:`rollouthub.emitter.find_final_reward`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from rollouthub.adapter.messages import LlmCallMessages, trace_llm_calls
from rollouthub.adapter.triplet import TracerTraceToTriplet
from rollouthub.emitter.reward import find_final_reward
from rollouthub.types import Rollout, Span, Trajectories

from .selection import TripletFields

__all__ = [
    "DEFAULT_LLM_CALL_MATCH",
    "Conversation",
    "conversations",
    "rollout_ids",
    "messages_rows",
    "triplet_rows",
    "trajectory_rows",
    "reward_row",
    "conversation_view",
    "final_reward",
    "message_key",
]

DEFAULT_LLM_CALL_MATCH = r"openai\.chat\.completion|litellm_request"
"""LLM-call span names for triplets: the OpenAI instrumentation's spans and the LLM proxy's request spans (a call seen
by both has one response id and is counted once)."""

Message = Dict[str, Any]


@dataclass
class Conversation:
    """LLM calls of a rollout that continue one another, merged into one chat."""

    messages: List[Message]
    tools: Optional[List[Dict[str, Any]]]
    span_ids: List[str]


def message_key(message: Mapping[str, Any]) -> Tuple[Any, ...]:
    """What identifies a message when a later call repeats it in its prompt (representations of ``content`` and tool
    calls vary slightly between a completion and the next request)."""
    calls = message.get("tool_calls") or []
    return (
        message.get("role"),
        message.get("content") or "",
        tuple(((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments")) for c in calls),
        message.get("tool_call_id"),
    )


def _merge_tools(
    a: Optional[List[Dict[str, Any]]], b: Optional[List[Dict[str, Any]]]
) -> Optional[List[Dict[str, Any]]]:
    if not b:
        return a
    if not a:
        return list(b)
    names = {(tool.get("function") or {}).get("name") for tool in a}
    return a + [tool for tool in b if (tool.get("function") or {}).get("name") not in names]


def conversations(calls: Sequence[LlmCallMessages]) -> List[Conversation]:
    """Merge LLM calls into conversations: a call whose prompt starts with the whole conversation so far (a multi-turn
    agent re-sending its history) extends it; any other call starts a new conversation. Most agents give one."""
    result: List[Conversation] = []
    for call in calls:
        full = [dict(m) for m in [*call.prompt, *call.response]]
        current = result[-1] if result else None
        if current is not None and len(call.prompt) >= len(current.messages):
            if [message_key(m) for m in call.prompt[: len(current.messages)]] == [
                message_key(m) for m in current.messages
            ]:
                current.messages = full
                current.tools = _merge_tools(current.tools, call.tools)  # type: ignore[arg-type]
                current.span_ids.append(call.span.span_id)
                continue
        result.append(Conversation(full, list(call.tools) if call.tools else None, [call.span.span_id]))  # type: ignore[arg-type]
    return result


def final_reward(spans: Sequence[Span]) -> Optional[float]:
    """The rollout's final reward: the reward of the last span (by sequence id) that carries one."""
    return find_final_reward(sorted(spans, key=lambda s: s.sequence_id))


def rollout_ids(rollout: Rollout, attempt_id: Optional[str]) -> Dict[str, Any]:
    """The identifying columns every per-rollout row starts with."""
    return {
        "rollout_id": rollout.rollout_id,
        "attempt_id": attempt_id,
        "resources_id": rollout.resources_id,
        "mode": rollout.mode,
    }


def messages_rows(rollout: Rollout, attempt_id: Optional[str], spans: Sequence[Span]) -> List[Dict[str, Any]]:
    """``messages`` rows: one per conversation (one per rollout for most agents), in the OpenAI chat fine-tuning
    layout (``messages`` with tool calls, ``tools``) plus ids, the rollout input and its final reward."""
    reward = final_reward(spans)
    return [
        {
            **rollout_ids(rollout, attempt_id),
            "status": rollout.status,
            "input": rollout.input,
            "conversation": index,
            "messages": conversation.messages,
            "tools": conversation.tools,
            "reward": reward,
        }
        for index, conversation in enumerate(conversations(trace_llm_calls(spans)))
    ]


def _chat_message(raw: Any) -> Message:
    if not isinstance(raw, Mapping):
        return {"role": "user", "content": raw if isinstance(raw, str) else json.dumps(raw)}
    message: Message = {"role": raw.get("role") or "user", "content": raw.get("content")}
    calls = _as_list(raw.get("tool_calls"))
    if calls:
        message["tool_calls"] = [_tool_call(call) for call in calls]
    for key in ("tool_call_id", "name"):
        if raw.get(key) is not None:
            message[key] = raw[key]
    return message


def _tool_call(raw: Any) -> Dict[str, Any]:
    """A recorded tool call (flat ``id``/``name``/``arguments`` attributes) in the OpenAI chat layout."""
    if not isinstance(raw, Mapping):
        return {"id": None, "type": "function", "function": {"name": None, "arguments": json.dumps(raw)}}
    function: Mapping[str, Any] = raw["function"] if isinstance(raw.get("function"), Mapping) else raw
    arguments = function.get("arguments")
    return {
        "id": raw.get("id"),
        "type": raw.get("type") or "function",
        "function": {
            "name": function.get("name"),
            "arguments": arguments if isinstance(arguments, str) or arguments is None else json.dumps(arguments),
        },
    }


def _as_list(raw: Any) -> List[Any]:
    if isinstance(raw, list):
        return raw
    if isinstance(raw, Mapping) and raw and all(str(k).isdigit() for k in raw):
        return [raw[k] for k in sorted(raw, key=lambda k: int(k))]
    if raw in (None, {}, []):
        return []
    return [raw]


def _response_text(raw: Any) -> str:
    parts: List[str] = []
    for item in _as_list(raw):
        content = item.get("content") if isinstance(item, Mapping) else item
        if content is None:
            continue
        parts.append(content if isinstance(content, str) else json.dumps(content))
    return "".join(parts)


def _completion(raw: Any) -> List[Message]:
    """The answer of an LLM call as TRL's conversational completion: a list holding the assistant message (text and
    tool calls of the first choice; an empty text when the call recorded none)."""
    choices = _as_list(raw)
    message = _chat_message(choices[0]) if choices else {"role": "assistant", "content": ""}
    message["role"] = "assistant"
    if message.get("content") is None and not message.get("tool_calls"):
        message["content"] = ""
    return [message]


def triplet_rows(
    rollout: Rollout,
    attempt_id: Optional[str],
    spans: Sequence[Span],
    adapter: Optional[TracerTraceToTriplet] = None,
    fields: TripletFields = "completion",
) -> List[Dict[str, Any]]:
    """``triplets`` rows: one per LLM call (``step`` 0, 1, ...), with the prompt as chat messages, the answer, the
    token ids when the call recorded them (``null`` otherwise), the reward matched to the call and the rollout's final
    reward. Calls without a recorded prompt give no row (no trainer accepts an empty prompt).

    ``fields="completion"`` (default): TRL's prompt-completion names -- ``completion`` is a list with the assistant
    message (text and tool calls), token ids in ``prompt_token_ids`` / ``completion_token_ids``.
    ``fields="response"``: the answer as text in ``response``, token ids in ``prompt_token_ids`` /
    ``response_token_ids``.
    """
    adapter = adapter or TracerTraceToTriplet(llm_call_match=DEFAULT_LLM_CALL_MATCH)
    triplets = adapter.adapt(list(spans))
    reward = final_reward(spans)
    rows: List[Dict[str, Any]] = []
    for step, triplet in enumerate(triplets):
        prompt = triplet.prompt if isinstance(triplet.prompt, Mapping) else {}
        response = triplet.response if isinstance(triplet.response, Mapping) else {}
        messages = [_chat_message(m) for m in _as_list(prompt.get("raw_content"))]
        if not messages:
            continue
        metadata = triplet.metadata
        request = metadata.get("request") if isinstance(metadata.get("request"), Mapping) else {}
        answer = metadata.get("response") if isinstance(metadata.get("response"), Mapping) else {}
        if fields == "completion":
            output = {
                "completion": _completion(response.get("raw_content")),
                "prompt_token_ids": prompt.get("token_ids") or None,
                "completion_token_ids": response.get("token_ids") or None,
            }
        else:
            output = {
                "response": _response_text(response.get("raw_content")),
                "prompt_token_ids": prompt.get("token_ids") or None,
                "response_token_ids": response.get("token_ids") or None,
            }
        rows.append(
            {
                **rollout_ids(rollout, attempt_id),
                "step": step,
                "prompt": messages,
                **output,
                "reward": triplet.reward,
                "final_reward": reward,
                "response_id": metadata.get("response_id"),
                "model": answer.get("model") or request.get("model"),  # type: ignore[union-attr]
            }
        )
    return rows


def trajectory_rows(rollout: Rollout, attempt_id: Optional[str], trajectories: Trajectories) -> List[Dict[str, Any]]:
    """``trajectories`` rows: one per sample of :func:`rollouthub.adapter.build_trajectories` (``sample`` 0, 1, ...),
    with the rollout's ids, mode and status."""
    return [
        {
            **rollout_ids(rollout, attempt_id),
            "status": rollout.status,
            "level": trajectories.level,
            "sample": sample.index,
            **sample.model_dump(mode="json", exclude={"rollout_id", "attempt_id", "resources_id", "index"}),
        }
        for sample in trajectories.samples
    ]


def reward_row(rollout: Rollout, attempt_id: Optional[str], reward: Optional[float]) -> Dict[str, Any]:
    """``rewards`` row: ids, status, times and final reward of one rollout."""
    return {
        **rollout_ids(rollout, attempt_id),
        "status": rollout.status,
        "start_time": rollout.start_time,
        "end_time": rollout.end_time,
        "reward": reward,
    }


def _usage(attributes: Mapping[str, Any], *keys: str) -> Optional[int]:
    for key in keys:
        value = attributes.get(f"gen_ai.usage.{key}")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def conversation_view(rollout: Rollout, attempt_id: Optional[str], spans: Sequence[Span]) -> Dict[str, Any]:
    """What the dashboard shows for one rollout: its LLM calls (prompt, response, tool calls, token counts, model,
    timing), the merged conversations (exactly the ``messages`` export rows) and the final reward."""
    calls = trace_llm_calls(spans)
    items: List[Dict[str, Any]] = []
    for call in calls:
        attributes = call.span.attributes
        items.append(
            {
                "span_id": call.span.span_id,
                "name": call.span.name,
                "model": attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model"),
                "start_time": call.span.start_time,
                "end_time": call.span.end_time,
                "prompt_tokens": _usage(attributes, "prompt_tokens", "input_tokens"),
                "completion_tokens": _usage(attributes, "completion_tokens", "output_tokens"),
                "total_tokens": _usage(attributes, "total_tokens"),
                "prompt": call.prompt,
                "response": call.response,
                "tools": call.tools,
            }
        )
    return {
        **rollout_ids(rollout, attempt_id),
        "status": rollout.status,
        "input": rollout.input,
        "reward": final_reward(spans),
        "calls": items,
        "conversations": [
            {"messages": c.messages, "tools": c.tools, "span_ids": c.span_ids} for c in conversations(calls)
        ],
    }
