"""Replaying a complete (non-streaming) response as a synthetic event stream.

Used by :class:`~rollouthub.llm_proxy.middleware.StreamConversionMiddleware`: the upstream is always asked for a
non-streaming response (so token ids and usage are complete), and ``stream: true`` clients get the same content as
server-sent events.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["split_text", "openai_stream_events", "anthropic_stream_events"]

OPENAI_CONTENT_CHUNK = 28
OPENAI_ARGUMENTS_CHUNK = 40
ANTHROPIC_WORDS_PER_DELTA = 5
ANTHROPIC_JSON_CHUNK = 20


def split_text(text: str, size: int) -> List[str]:
    """Cut ``text`` into pieces of at most ``size`` characters, each ending after a space when possible."""
    pieces: List[str] = []
    rest = text
    while rest:
        if len(rest) <= size:
            pieces.append(rest)
            break
        cut = rest.rfind(" ", 0, size)
        end = cut + 1 if cut > 0 else size
        pieces.append(rest[:end])
        rest = rest[end:]
    return pieces


def _data(event: Dict[str, Any]) -> str:
    return f"data: {json.dumps(event)}\n\n"


def openai_stream_events(response: Dict[str, Any], *, include_usage: bool = False) -> List[str]:
    """SSE lines replaying a chat completion (first choice) as ``chat.completion.chunk`` events, then ``[DONE]``.

    A role chunk, content deltas of about 28 characters, for each tool call an announcing chunk followed by
    40-character argument chunks, a final chunk with ``finish_reason``, optionally a usage chunk
    (``stream_options.include_usage``), and ``data: [DONE]``. Raises ``ValueError`` on malformed responses.

    Token ids travel as vLLM sends them: the response's ``prompt_token_ids`` on the first chunk, the choice's
    ``token_ids`` (all of them) and ``logprobs`` on the final chunk.
    """
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("The chat completion has no choices to replay.")
    choice = choices[0]
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise ValueError("The chat completion's message is not an object.")
    base = {
        "id": f"chatcmpl-{int(time.time())}",
        "object": "chat.completion.chunk",
        "created": response.get("created") if isinstance(response.get("created"), int) else int(time.time()),
        "model": response.get("model"),
    }

    def chunk(delta: Dict[str, Any], finish_reason: Optional[str] = None) -> Dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    events = [chunk({"role": message.get("role") or "assistant"})]
    if isinstance(response.get("prompt_token_ids"), list):
        events[0]["prompt_token_ids"] = response["prompt_token_ids"]
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        events.extend(chunk({"reasoning_content": piece}) for piece in split_text(reasoning, OPENAI_CONTENT_CHUNK))
    content = message.get("content")
    if isinstance(content, str):
        events.extend(chunk({"content": piece}) for piece in split_text(content, OPENAI_CONTENT_CHUNK))
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise ValueError("tool_calls is not a list.")
    for index, call in enumerate(tool_calls):
        function = call.get("function") or {}
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.get("id"),
                            "type": call.get("type") or "function",
                            "function": {"name": function.get("name"), "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        for start in range(0, len(arguments), OPENAI_ARGUMENTS_CHUNK):
            piece = arguments[start : start + OPENAI_ARGUMENTS_CHUNK]
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    finish_reason = choice.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
    events.append(chunk({}, finish_reason))
    for key in ("token_ids", "logprobs"):
        if choice.get(key) is not None:
            events[-1]["choices"][0][key] = choice[key]
    if include_usage and isinstance(response.get("usage"), dict):
        events.append({**base, "choices": [], "usage": response["usage"]})
    return [_data(event) for event in events] + ["data: [DONE]\n\n"]


def _word_groups(text: str) -> List[str]:
    words = text.split(" ")
    groups = [
        " ".join(words[i : i + ANTHROPIC_WORDS_PER_DELTA]) for i in range(0, len(words), ANTHROPIC_WORDS_PER_DELTA)
    ]
    return [group + " " for group in groups[:-1]] + groups[-1:] if text else []


def anthropic_stream_events(message: Dict[str, Any]) -> List[str]:
    """``event:``/``data:`` lines replaying an Anthropic Messages response.

    ``message_start`` (empty content), ``ping``, per content block ``content_block_start`` / deltas
    (``text_delta`` in groups of 5 words, ``input_json_delta`` in 20-character pieces) / ``content_block_stop``,
    ``message_delta`` (``stop_reason``, default ``end_turn``, and output tokens) and ``message_stop``.
    Raises ``ValueError`` on malformed messages.
    """
    content = message.get("content")
    if message.get("type", "message") != "message" or not isinstance(content, list):
        raise ValueError("Not an Anthropic message.")
    events: List[Tuple[str, Dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise ValueError("Content blocks must be objects.")
        block_type = block.get("type")
        deltas: List[Dict[str, Any]] = []
        if block_type == "text":
            start: Dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": group} for group in _word_groups(str(block.get("text") or ""))]
        elif block_type == "tool_use":
            start = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}
            encoded = json.dumps(block.get("input") or {})
            deltas = [
                {"type": "input_json_delta", "partial_json": encoded[i : i + ANTHROPIC_JSON_CHUNK]}
                for i in range(0, len(encoded), ANTHROPIC_JSON_CHUNK)
            ]
        elif block_type == "thinking":
            start = {"type": "thinking", "thinking": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": group}
                for group in _word_groups(str(block.get("thinking") or ""))
            ]
            if block.get("signature"):
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            start = block
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}) for delta in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    usage: Dict[str, Any] = message["usage"] if isinstance(message.get("usage"), dict) else {}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": message.get("stop_reason") or "end_turn",
                    "stop_sequence": message.get("stop_sequence"),
                },
                "usage": {"output_tokens": int(usage.get("output_tokens") or 0)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]
