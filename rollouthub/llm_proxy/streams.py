"""Parsing passed-through upstream event streams back into complete responses (for the spans of streamed calls).

Streams are only passed through when stream conversion is disabled (or for routes it does not cover, such as text
completions and the Responses API); the chat accumulator is the one of the OpenAI SDK instrumentation.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Protocol

from rollouthub.instrumentation.openai import _ChatStreamAccumulator, _int_list, _ResponsesStreamAccumulator

__all__ = ["SSEParser", "StreamAccumulator", "stream_accumulator"]


class StreamAccumulator(Protocol):
    """Rebuilds a response from stream events."""

    def add(self, event: Any) -> None:
        """Consume one decoded event."""

    def build(self) -> Any:
        """The response rebuilt so far."""


class SSEParser:
    """Incremental server-sent-events parser yielding the JSON ``data`` payloads (``[DONE]`` is skipped)."""

    def __init__(self) -> None:
        """Start with an empty buffer."""
        self._buffer = b""

    def feed(self, chunk: bytes) -> List[Dict[str, Any]]:
        """Add bytes; return the JSON objects of the events completed by them."""
        self._buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        events: List[Dict[str, Any]] = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            data = b"\n".join(line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")).strip()
            if not data or data == b"[DONE]":
                continue
            try:
                decoded = json.loads(data)
            except ValueError:
                continue
            if isinstance(decoded, dict):
                events.append(decoded)
        return events


class _CompletionsAccumulator:
    """Rebuilds a text completion from streamed chunks."""

    def __init__(self) -> None:
        """Start empty."""
        self.response: Dict[str, Any] = {}
        self.choices: Dict[int, Dict[str, Any]] = {}

    def add(self, event: Any) -> None:
        """Consume one ``text_completion`` chunk."""
        for key in ("id", "model", "created", "object"):
            self.response.setdefault(key, event.get(key))
        if event.get("usage") is not None:
            self.response["usage"] = event["usage"]
        ids = _int_list(event.get("prompt_token_ids"))
        if ids is not None:
            self.response["prompt_token_ids"] = ids
        for choice in event.get("choices") or []:
            state = self.choices.setdefault(int(choice.get("index", 0)), {"text": [], "token_ids": []})
            if isinstance(choice.get("text"), str):
                state["text"].append(choice["text"])
            if choice.get("finish_reason") is not None:
                state["finish_reason"] = choice["finish_reason"]
            state["token_ids"].extend(_int_list(choice.get("token_ids")) or [])
            prompt_ids = _int_list(choice.get("prompt_token_ids"))
            if prompt_ids is not None:
                state["prompt_token_ids"] = prompt_ids

    def build(self) -> Dict[str, Any]:
        """The completion rebuilt so far."""
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            choice: Dict[str, Any] = {"index": index, "text": "".join(state["text"])}
            choice["finish_reason"] = state.get("finish_reason")
            if state["token_ids"]:
                choice["token_ids"] = state["token_ids"]
            if "prompt_token_ids" in state:
                choice["prompt_token_ids"] = state["prompt_token_ids"]
            choices.append(choice)
        return {**{k: v for k, v in self.response.items() if v is not None}, "choices": choices}


class _MessagesAccumulator:
    """Rebuilds an Anthropic message from its stream events."""

    def __init__(self) -> None:
        """Start empty."""
        self.message: Dict[str, Any] = {}
        self.blocks: Dict[int, Dict[str, Any]] = {}
        self.partial_json: Dict[int, List[str]] = {}

    def add(self, event: Any) -> None:
        """Consume one Anthropic stream event."""
        kind = event.get("type")
        index = int(event.get("index", 0) or 0)
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self.blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            delta, block = event["delta"], self.blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
            elif delta.get("type") == "input_json_delta":
                self.partial_json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.message.update({k: v for k, v in delta.items() if v is not None})
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.message["usage"] = {**(self.message.get("usage") or {}), **usage}

    def build(self) -> Dict[str, Any]:
        """The message rebuilt so far."""
        content = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if index in self.partial_json:
                try:
                    block["input"] = json.loads("".join(self.partial_json[index]) or "{}")
                except ValueError:
                    block["input"] = "".join(self.partial_json[index])
            content.append(block)
        return {**self.message, "content": content}


class _NoAccumulator:
    """For routes without streams (embeddings)."""

    def add(self, event: Any) -> None:
        """Ignore the event."""

    def build(self) -> Optional[Dict[str, Any]]:
        """Nothing to rebuild."""
        return None


def stream_accumulator(kind: str) -> StreamAccumulator:
    """The accumulator for a request kind (``chat``, ``completions``, ``responses``, ``messages``)."""
    if kind == "chat":
        return _ChatStreamAccumulator()
    if kind == "completions":
        return _CompletionsAccumulator()
    if kind == "responses":
        return _ResponsesStreamAccumulator()
    if kind == "messages":
        return _MessagesAccumulator()
    return _NoAccumulator()
