"""The wire format of the local policy backend: chat-completion requests in, vLLM-shaped responses out.

No torch here: :func:`parse_chat_request` checks a request at the edge (every unsupported or malformed field is an
HTTP 400 in the OpenAI error shape naming it) and :func:`chat_completion_body` renders generated sequences as vLLM's
OpenAI-compatible server does with ``return_token_ids``: ``prompt_token_ids`` at the top level, ``token_ids`` and
``logprobs.content`` per choice, ``usage``, ``finish_reason`` (``"stop"`` or ``"length"``) and ``stop_reason``.
See ``docs/llm-proxy.md`` ("A local policy behind the proxy").
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "LocalRequestError",
    "SamplingParams",
    "ChatRequest",
    "SequenceOutput",
    "MAX_TOP_LOGPROBS",
    "parse_chat_request",
    "chat_completion_body",
]

MAX_TOP_LOGPROBS = 20
"""The most alternatives ``top_logprobs`` may ask for (OpenAI's limit)."""

MAX_STOP_SEQUENCES = 16
"""The most ``stop`` strings one request may give."""

_LOGPROB_FLOOR = -9999.0
"""Written instead of ``-inf`` (JSON has no infinity), as vLLM does."""

_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "stop_token_ids",
    "seed",
    "n",
    "logprobs",
    "top_logprobs",
)
_OTHER_KEYS = (
    "model",
    "messages",
    "stream",
    "stream_options",
    "return_token_ids",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "user",
    "metadata",
    "store",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "response_format",
)
_RESERVED_TEMPLATE_KEYS = frozenset({"conversation", "tools", "add_generation_prompt", "tokenize", "return_dict"})
SUPPORTED_KEYS = frozenset(_SAMPLING_KEYS + _OTHER_KEYS)
"""Request fields the local backend accepts; any other field is rejected with HTTP 400."""


class LocalRequestError(Exception):
    """A request the local backend answers with an error status (``str()`` is the one-line message).

    Args:
        status: the HTTP status (400 for invalid requests, 429 while weights change, 503 when closed).
        message: what is wrong, naming the field.
        param: the offending request field (``None`` when not about one field).
        error_type: the OpenAI error ``type``.
        headers: extra response headers (``Retry-After`` on 429).
    """

    def __init__(
        self,
        status: int,
        message: str,
        param: Optional[str] = None,
        error_type: str = "invalid_request_error",
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type
        self.headers = dict(headers or {})

    def body(self) -> Dict[str, Any]:
        """The OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {"message": self.message, "type": self.error_type, "param": self.param, "code": str(self.status)}
        }


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request's sequences (the request's fields, checked).

    ``temperature`` 0 is greedy decoding; ``top_k`` 0 and ``top_p`` 1 disable those filters; ``max_tokens`` ``None``
    means the backend's default (bounded by the model's context).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: Optional[int] = None
    stop: Tuple[str, ...] = ()
    stop_token_ids: Tuple[int, ...] = ()
    seed: Optional[int] = None
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def greedy(self) -> bool:
        """Whether the most likely token is always taken (temperature 0)."""
        return self.temperature == 0.0

    @property
    def logprob_temperature(self) -> float:
        """The temperature the served log-probs are computed at: the request's, or 1 for greedy decoding."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat-completion request."""

    model: str
    messages: List[Dict[str, Any]]
    sampling: SamplingParams
    tools: Optional[List[Dict[str, Any]]] = None
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    return_token_ids: bool = False


def _bad(param: str, message: str) -> LocalRequestError:
    return LocalRequestError(400, f"'{param}' {message}", param=param)


def _given(payload: Mapping[str, Any], key: str) -> bool:
    return payload.get(key) is not None


def _int(payload: Mapping[str, Any], key: str, default: int, minimum: int, maximum: Optional[int] = None) -> int:
    value = payload.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise _bad(key, f"must be {bound}, got {value}")
    return value


def _float(payload: Mapping[str, Any], key: str, default: float) -> float:
    value = payload.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(key, f"must be a finite number, got {value!r}")
    return float(value)


def _max_tokens(payload: Mapping[str, Any]) -> Optional[int]:
    new = payload.get("max_completion_tokens")
    old = payload.get("max_tokens")
    if new is not None and old is not None and new != old:
        raise _bad("max_completion_tokens", f"({new!r}) and 'max_tokens' ({old!r}) disagree; give one of them")
    key = "max_completion_tokens" if new is not None else "max_tokens"
    if payload.get(key) is None:
        return None
    return _int(payload, key, 0, 1)


def _stop(payload: Mapping[str, Any]) -> Tuple[str, ...]:
    value = payload.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise _bad("stop", "must be a non-empty string or a list of non-empty strings")
    if len(items) > MAX_STOP_SEQUENCES:
        raise _bad("stop", f"may hold at most {MAX_STOP_SEQUENCES} strings, got {len(items)}")
    return tuple(items)


def _stop_token_ids(payload: Mapping[str, Any]) -> Tuple[int, ...]:
    value = payload.get("stop_token_ids")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise _bad("stop_token_ids", "must be a list of token ids (integers >= 0)")
    return tuple(value)


def _logprobs(payload: Mapping[str, Any]) -> Tuple[bool, int]:
    value = payload.get("logprobs")
    if value is None:
        enabled = False
    elif isinstance(value, bool):
        enabled = value
    elif isinstance(value, int) and value in (0, 1):  # the proxy's "logprobs" callback sends 1
        enabled = bool(value)
    else:
        raise _bad("logprobs", f"must be a boolean, got {value!r}")
    top = _int(payload, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if top and not enabled:
        raise _bad("top_logprobs", "needs 'logprobs': true")
    return enabled, top


def _sampling(payload: Mapping[str, Any], max_n: int) -> SamplingParams:
    temperature = _float(payload, "temperature", 1.0)
    if temperature < 0:
        raise _bad("temperature", f"must be >= 0, got {temperature}")
    top_p = _float(payload, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise _bad("top_p", f"must be in (0, 1], got {top_p}")
    top_k = payload.get("top_k")
    top_k = 0 if top_k == -1 else _int(payload, "top_k", 0, 0)  # vLLM spells "no top-k" -1
    seed = payload.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise _bad("seed", f"must be an integer in [0, 2**63), got {seed!r}")
    logprobs, top_logprobs = _logprobs(payload)
    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_tokens=_max_tokens(payload),
        stop=_stop(payload),
        stop_token_ids=_stop_token_ids(payload),
        seed=seed,
        n=_int(payload, "n", 1, 1, max_n),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )


def _content_text(index: int, content: Any) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    param = f"messages[{index}].content"
    if not isinstance(content, list):
        raise _bad(param, "must be a string or a list of text parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise _bad(param, "holds a part that is not text; the local backend serves text-only models")
        texts.append(part["text"])
    return "".join(texts)


def _messages(payload: Mapping[str, Any]) -> List[Dict[str, Any]]:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of messages")
    normalised = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{index}]", "must be an object with a string 'role'")
        normalised.append({**message, "content": _content_text(index, message.get("content"))})
    return normalised


def _check_neutral_fields(payload: Mapping[str, Any]) -> None:
    """Fields accepted only with the value that changes nothing (the backend implements no other)."""
    for key in ("frequency_penalty", "presence_penalty"):
        if _given(payload, key) and _float(payload, key, 0.0) != 0.0:
            raise _bad(key, "is not supported by the local backend (only 0)")
    if payload.get("logit_bias"):
        raise _bad("logit_bias", "is not supported by the local backend")
    response_format = payload.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise _bad("response_format", "is not supported by the local backend (only {'type': 'text'})")
    tool_choice = payload.get("tool_choice")
    if tool_choice is not None and tool_choice not in ("auto", "none"):
        raise _bad("tool_choice", "may only be 'auto' or 'none' (the local backend does not force tool calls)")
    for key in ("stream", "return_token_ids", "parallel_tool_calls", "store"):
        if _given(payload, key) and not isinstance(payload[key], bool):
            raise _bad(key, f"must be a boolean, got {payload[key]!r}")


def parse_chat_request(payload: Mapping[str, Any], *, max_n: int) -> ChatRequest:
    """Check a chat-completion body; :class:`LocalRequestError` (HTTP 400, naming the field) when it is not served.

    ``max_n`` bounds ``n`` (one request's sequences are generated in one batch).
    """
    unknown = sorted(key for key in payload if key not in SUPPORTED_KEYS and payload[key] is not None)
    if unknown:
        raise _bad(unknown[0], "is not supported by the local backend")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "is required")
    _check_neutral_fields(payload)
    tools = payload.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise _bad("tools", "must be a list of tool objects")
    template_kwargs = payload.get("chat_template_kwargs")
    if template_kwargs is not None and not isinstance(template_kwargs, dict):
        raise _bad("chat_template_kwargs", "must be an object")
    reserved = sorted(set(template_kwargs or {}) & _RESERVED_TEMPLATE_KEYS)
    if reserved:
        raise _bad("chat_template_kwargs", f"may not set {reserved[0]!r} (the backend sets it)")
    return ChatRequest(
        model=model,
        messages=_messages(payload),
        sampling=_sampling(payload, max_n),
        tools=tools or None,
        chat_template_kwargs=dict(template_kwargs or {}),
        return_token_ids=payload.get("return_token_ids") is True,
    )


@dataclass
class SequenceOutput:
    """One generated sequence.

    ``token_ids`` are every sampled token, including the end-of-sequence token (or stop token) that ended it;
    ``logprobs[i]`` is the log-probability of ``token_ids[i]``; ``top_logprobs[i]`` the ``(token id, log-prob)``
    alternatives at that position, most likely first; ``text`` the answer without special tokens, cut before a
    matched stop string; ``stop_reason`` the matched stop string or stop token id (``None`` for end-of-sequence
    and length).
    """

    token_ids: List[int]
    logprobs: List[float]
    top_logprobs: List[List[Tuple[int, float]]]
    text: str
    finish_reason: str
    stop_reason: Union[None, int, str] = None


def _finite(logprob: float) -> float:
    return logprob if logprob > _LOGPROB_FLOOR else _LOGPROB_FLOOR


def _logprob_entry(token: str, logprob: float) -> Dict[str, Any]:
    return {"token": token, "logprob": _finite(logprob), "bytes": list(token.encode("utf-8"))}


def _logprobs_content(output: SequenceOutput, token_text: Callable[[int], str]) -> List[Dict[str, Any]]:
    content = []
    for token_id, logprob, alternatives in zip(output.token_ids, output.logprobs, output.top_logprobs, strict=True):
        entry = _logprob_entry(token_text(token_id), logprob)
        entry["top_logprobs"] = [_logprob_entry(token_text(other), value) for other, value in alternatives]
        content.append(entry)
    return content


def chat_completion_body(
    request: ChatRequest,
    *,
    model: str,
    prompt_ids: Sequence[int],
    outputs: Sequence[SequenceOutput],
    token_text: Callable[[int], str],
) -> Dict[str, Any]:
    """A ``chat.completion`` in vLLM's shape for ``outputs`` (one per choice); ``token_text(id)`` spells a token."""
    choices = []
    for index, output in enumerate(outputs):
        choice: Dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": output.text, "tool_calls": []},
            "logprobs": ({"content": _logprobs_content(output, token_text)} if request.sampling.logprobs else None),
            "finish_reason": output.finish_reason,
            "stop_reason": output.stop_reason,
        }
        if request.return_token_ids:
            choice["token_ids"] = list(output.token_ids)
        choices.append(choice)
    completion_tokens = sum(len(output.token_ids) for output in outputs)
    body: Dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
    }
    if request.return_token_ids:
        body["prompt_token_ids"] = list(prompt_ids)
    return body
