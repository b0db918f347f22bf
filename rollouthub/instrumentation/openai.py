"""Native instrumentation of the OpenAI Python SDK (no AgentOps needed).

Patches ``chat.completions.create`` and ``responses.create`` of the sync and async clients (including streaming)
so that every call becomes an OpenTelemetry span with the attribute schema the adapters read:

* span ``openai.chat.completion`` (chat) or ``openai.responses.create`` (Responses API);
* ``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.request.streaming``, other ``gen_ai.request.*`` sampling
  parameters, ``gen_ai.request.functions.<i>.name/description/parameters``;
* ``gen_ai.prompt.<i>.role/content/tool_call_id`` (+ ``tool_calls.<j>.id/name/arguments`` for assistant turns);
* ``gen_ai.response.id``, ``gen_ai.response.model``, ``gen_ai.completion.<i>.role/content/finish_reason``
  (+ ``tool_calls.<j>.*``), ``gen_ai.usage.prompt_tokens/completion_tokens/total_tokens``;
* ``prompt_token_ids`` / ``response_token_ids`` when the server returns them (``return_token_ids``), and
  ``logprobs.content`` / ``logprobs.refusal`` (JSON) when present.

Tool calls requested by the model are also recorded as zero-duration child spans named ``openai.tool_call`` with
``tool.name``, ``tool.parameters``, ``tool.call.id`` and ``tool.call.type`` (read by ``TraceToMessages``).

Spans go to the active tracer's provider when it is an :class:`~rollouthub.tracer.otel.OtelTracer`, else to the
global OpenTelemetry provider. Calls made while instrumentation is suppressed are not traced.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from rollouthub.utils.log_once import log_once

__all__ = [
    "CHAT_SPAN_NAME",
    "RESPONSES_SPAN_NAME",
    "TOOL_CALL_SPAN_NAME",
    "instrument_openai",
    "uninstrument_openai",
    "is_openai_instrumented",
    "acquire_native_openai",
    "release_native_openai",
    "chat_token_id_attributes",
]

logger = logging.getLogger(__name__)

CHAT_SPAN_NAME = "openai.chat.completion"
RESPONSES_SPAN_NAME = "openai.responses.create"
TOOL_CALL_SPAN_NAME = "openai.tool_call"
_SCOPE = "rollouthub.instrumentation.openai"

_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "n",
    "stop",
    "user",
)

_originals: Dict[Tuple[Any, str], Any] = {}
_patch_lock = threading.Lock()
_holders = 0
"""How many :func:`acquire_native_openai` references (tracers, ``instrument_all``) keep the patches applied."""
_holders_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------------


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from a dict or an object (including pydantic extra fields)."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    value = getattr(obj, key, None)
    if value is not None:
        return value
    extra = getattr(obj, "model_extra", None)
    if isinstance(extra, dict) and key in extra:
        return extra[key]
    return default


def _given(value: Any) -> bool:
    """False for ``None`` and OpenAI's ``NOT_GIVEN`` / ``omit`` sentinels."""
    if value is None:
        return False
    return type(value).__name__ not in ("NotGiven", "Omit")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _text(value: Any) -> Optional[str]:
    """A message content as an attribute string (lists of parts are JSON-encoded)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), default=str)


def _int_list(value: Any) -> Optional[List[int]]:
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return [int(v) for v in value]
    return None


def _otel_tracer() -> trace_api.Tracer:
    """Tracer of the active rollouthub tracer's provider, else of the global provider."""
    from rollouthub.tracer.base import get_active_tracer

    active = get_active_tracer()
    provider = getattr(active, "tracer_provider", None)
    if provider is not None:
        return provider.get_tracer(_SCOPE)
    return trace_api.get_tracer(_SCOPE)


def _suppressed() -> bool:
    from rollouthub.tracer.otlp_export import is_instrumentation_suppressed

    return is_instrumentation_suppressed()


def _set(attrs: Dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, (str, bool, int, float)):
        attrs[key] = value
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        attrs[key] = list(value)
    else:
        attrs[key] = json.dumps(_jsonable(value), default=str)


def _tool_call_parts(call: Any) -> Tuple[Optional[str], Optional[str], Optional[str], str]:
    """(id, name, arguments, type) of a tool call in chat or Responses format."""
    function = _get(call, "function")
    if function is not None:
        return _get(call, "id"), _get(function, "name"), _get(function, "arguments"), _get(call, "type") or "function"
    return (
        _get(call, "call_id") or _get(call, "id"),
        _get(call, "name"),
        _get(call, "arguments"),
        "function",
    )


def _set_tool_calls(attrs: Dict[str, Any], prefix: str, calls: Any) -> None:
    for j, call in enumerate(calls or []):
        call_id, name, arguments, _ = _tool_call_parts(call)
        _set(attrs, f"{prefix}.tool_calls.{j}.id", call_id)
        _set(attrs, f"{prefix}.tool_calls.{j}.name", name)
        _set(attrs, f"{prefix}.tool_calls.{j}.arguments", arguments)


def _request_attributes(kwargs: Dict[str, Any], messages: List[Any], *, streaming: bool) -> Dict[str, Any]:
    attrs: Dict[str, Any] = {"gen_ai.system": "openai", "gen_ai.request.streaming": streaming}
    _set(attrs, "gen_ai.request.model", kwargs.get("model") if _given(kwargs.get("model")) else None)
    for key in _SAMPLING_KEYS:
        value = kwargs.get(key)
        if _given(value):
            _set(attrs, f"gen_ai.request.{key}", value)
    tools = kwargs.get("tools") if _given(kwargs.get("tools")) else kwargs.get("functions")
    if _given(tools):
        for i, tool in enumerate(tools or []):
            function = _get(tool, "function") or tool
            _set(attrs, f"gen_ai.request.functions.{i}.name", _get(function, "name"))
            _set(attrs, f"gen_ai.request.functions.{i}.description", _get(function, "description"))
            parameters = _get(function, "parameters")
            if parameters is not None:
                attrs[f"gen_ai.request.functions.{i}.parameters"] = json.dumps(_jsonable(parameters), default=str)
    for i, message in enumerate(messages):
        prefix = f"gen_ai.prompt.{i}"
        _set(attrs, f"{prefix}.role", _get(message, "role"))
        _set(attrs, f"{prefix}.content", _text(_get(message, "content")))
        _set(attrs, f"{prefix}.tool_call_id", _get(message, "tool_call_id"))
        _set_tool_calls(attrs, prefix, _get(message, "tool_calls"))
    return attrs


def _responses_messages(kwargs: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Normalise Responses API ``instructions`` + ``input`` into chat-style messages."""
    messages: List[Dict[str, Any]] = []
    instructions = kwargs.get("instructions")
    if _given(instructions) and isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    raw = kwargs.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif _given(raw):
        for item in raw or []:
            item_type = _get(item, "type")
            if item_type == "function_call_output":
                messages.append(
                    {"role": "tool", "content": _get(item, "output"), "tool_call_id": _get(item, "call_id")}
                )
            elif item_type == "function_call":
                messages.append({"role": "assistant", "content": None, "tool_calls": [item]})
            elif _get(item, "role") is not None:
                content = _get(item, "content")
                if isinstance(content, list):
                    texts = [_get(part, "text") for part in content]
                    if texts and all(isinstance(t, str) for t in texts):
                        content = "".join(texts)
                messages.append({"role": _get(item, "role"), "content": content})
    return messages


def _token_id_attributes(attrs: Dict[str, Any], response: Any, first_choice: Any) -> None:
    prompt_ids = _int_list(_get(response, "prompt_token_ids"))
    if prompt_ids is not None:
        attrs["prompt_token_ids"] = prompt_ids
    response_ids = None
    nested = _get(response, "response_token_ids")
    if isinstance(nested, (list, tuple)) and nested:
        response_ids = _int_list(nested[0]) if isinstance(nested[0], (list, tuple)) else _int_list(nested)
    if response_ids is None and first_choice is not None:
        response_ids = _int_list(_get(first_choice, "token_ids"))
        if response_ids is None:
            provider_fields = _get(first_choice, "provider_specific_fields")
            response_ids = _int_list(_get(provider_fields, "token_ids"))
    if response_ids is not None:
        attrs["response_token_ids"] = response_ids
    logprobs = _get(first_choice, "logprobs") if first_choice is not None else None
    if logprobs is not None:
        for key in ("content", "refusal"):
            value = _get(logprobs, key)
            if value is not None:
                attrs[f"logprobs.{key}"] = json.dumps(_jsonable(value), default=str)


def chat_token_id_attributes(response: Any) -> Dict[str, Any]:
    """``prompt_token_ids``, ``response_token_ids`` and ``logprobs.*`` attributes of a chat completion.

    ``with_raw_response`` results are parsed first. Used by the AgentOps patches so that AgentOps' chat spans carry
    the same token-id attributes as the native instrumentation's.
    """
    response = _unwrap_raw(response)
    attrs: Dict[str, Any] = {}
    choices = list(_get(response, "choices") or [])
    _token_id_attributes(attrs, response, choices[0] if choices else None)
    return attrs


def _usage_attributes(attrs: Dict[str, Any], usage: Any) -> None:
    if usage is None:
        return
    prompt = _get(usage, "prompt_tokens", _get(usage, "input_tokens"))
    completion = _get(usage, "completion_tokens", _get(usage, "output_tokens"))
    _set(attrs, "gen_ai.usage.prompt_tokens", prompt)
    _set(attrs, "gen_ai.usage.completion_tokens", completion)
    _set(attrs, "gen_ai.usage.total_tokens", _get(usage, "total_tokens"))


def _chat_response_attributes(response: Any) -> Tuple[Dict[str, Any], List[Any]]:
    """Attributes of a ``ChatCompletion`` and the tool calls of its first choice."""
    attrs: Dict[str, Any] = {}
    _set(attrs, "gen_ai.response.id", _get(response, "id"))
    _set(attrs, "gen_ai.response.model", _get(response, "model"))
    choices = list(_get(response, "choices") or [])
    tool_calls: List[Any] = []
    for i, choice in enumerate(choices):
        index = _get(choice, "index", i)
        message = _get(choice, "message") or {}
        prefix = f"gen_ai.completion.{index}"
        _set(attrs, f"{prefix}.role", _get(message, "role") or "assistant")
        _set(attrs, f"{prefix}.content", _text(_get(message, "content")))
        _set(attrs, f"{prefix}.finish_reason", _get(choice, "finish_reason"))
        calls = list(_get(message, "tool_calls") or [])
        _set_tool_calls(attrs, prefix, calls)
        if i == 0:
            tool_calls = calls
    _usage_attributes(attrs, _get(response, "usage"))
    _token_id_attributes(attrs, response, choices[0] if choices else None)
    return attrs, tool_calls


def _responses_response_attributes(response: Any) -> Tuple[Dict[str, Any], List[Any]]:
    """Attributes of a Responses API ``Response`` and its function calls."""
    attrs: Dict[str, Any] = {}
    _set(attrs, "gen_ai.response.id", _get(response, "id"))
    _set(attrs, "gen_ai.response.model", _get(response, "model"))
    texts: List[str] = []
    tool_calls: List[Any] = []
    for item in _get(response, "output") or []:
        item_type = _get(item, "type")
        if item_type == "message":
            for part in _get(item, "content") or []:
                text = _get(part, "text")
                if isinstance(text, str):
                    texts.append(text)
        elif item_type == "function_call":
            tool_calls.append(item)
    _set(attrs, "gen_ai.completion.0.role", "assistant")
    _set(attrs, "gen_ai.completion.0.content", "".join(texts))
    status = _get(response, "status")
    _set(
        attrs,
        "gen_ai.completion.0.finish_reason",
        "tool_calls" if tool_calls else ("stop" if status == "completed" else status),
    )
    _set_tool_calls(attrs, "gen_ai.completion.0", tool_calls)
    _usage_attributes(attrs, _get(response, "usage"))
    _token_id_attributes(attrs, response, None)
    return attrs, tool_calls


def tool_call_attributes(call: Any) -> Dict[str, Any]:
    """The attributes of the span of one tool call the model asked for (``tool.name``, ``tool.parameters``,
    ``tool.call.id``, ``tool.call.type``; unset parts left out)."""
    call_id, name, arguments, call_type = _tool_call_parts(call)
    attrs: Dict[str, Any] = {}
    _set(attrs, "tool.name", name)
    _set(attrs, "tool.parameters", arguments)
    _set(attrs, "tool.call.id", call_id)
    _set(attrs, "tool.call.type", call_type)
    return attrs


def _record_tool_call_spans(tracer: trace_api.Tracer, parent: trace_api.Span, tool_calls: List[Any]) -> None:
    if not tool_calls:
        return
    ctx = trace_api.set_span_in_context(parent)
    for call in tool_calls:
        child = tracer.start_span(TOOL_CALL_SPAN_NAME, context=ctx, attributes=tool_call_attributes(call))
        child.end()


def _unwrap_raw(result: Any) -> Any:
    """Parse ``with_raw_response`` results; other wrappers are returned unchanged."""
    if type(result).__name__ == "LegacyAPIResponse" and hasattr(result, "parse"):
        try:
            return result.parse()
        except Exception:  # pragma: no cover - defensive
            return None
    return result


def _finish(tracer: trace_api.Tracer, span: trace_api.Span, attrs: Dict[str, Any], tool_calls: List[Any]) -> None:
    span.set_attributes(attrs)
    _record_tool_call_spans(tracer, span, tool_calls)
    span.set_status(Status(StatusCode.OK))
    span.end()


def _fail(span: trace_api.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.end()


# ---------------------------------------------------------------------------------------------------------------------
# Streaming accumulation
# ---------------------------------------------------------------------------------------------------------------------


class _ChatStreamAccumulator:
    """Rebuilds a ``ChatCompletion``-like dict from streamed chunks."""

    def __init__(self) -> None:
        self.id: Optional[str] = None
        self.model: Optional[str] = None
        self.usage: Any = None
        self.prompt_token_ids: Optional[List[int]] = None
        self.choices: Dict[int, Dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        self.id = self.id or _get(chunk, "id")
        self.model = self.model or _get(chunk, "model")
        if _get(chunk, "usage") is not None:
            self.usage = _get(chunk, "usage")
        prompt_ids = _int_list(_get(chunk, "prompt_token_ids"))
        if prompt_ids is not None:
            self.prompt_token_ids = prompt_ids
        for choice in _get(chunk, "choices") or []:
            index = _get(choice, "index", 0)
            state = self.choices.setdefault(
                index, {"role": None, "content": [], "finish_reason": None, "tool_calls": {}, "token_ids": []}
            )
            delta = _get(choice, "delta") or {}
            state["role"] = state["role"] or _get(delta, "role")
            content = _get(delta, "content")
            if isinstance(content, str):
                state["content"].append(content)
            if _get(choice, "finish_reason") is not None:
                state["finish_reason"] = _get(choice, "finish_reason")
            ids = _int_list(_get(choice, "token_ids"))
            if ids:
                state["token_ids"].extend(ids)
            for call in _get(delta, "tool_calls") or []:
                slot = state["tool_calls"].setdefault(
                    _get(call, "index", 0), {"id": None, "type": "function", "name": None, "arguments": []}
                )
                slot["id"] = slot["id"] or _get(call, "id")
                function = _get(call, "function") or {}
                slot["name"] = slot["name"] or _get(function, "name")
                if isinstance(_get(function, "arguments"), str):
                    slot["arguments"].append(_get(function, "arguments"))

    def build(self) -> Dict[str, Any]:
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            calls = [
                {
                    "id": c["id"],
                    "type": c["type"],
                    "function": {"name": c["name"], "arguments": "".join(c["arguments"])},
                }
                for _, c in sorted(state["tool_calls"].items())
            ]
            message: Dict[str, Any] = {"role": state["role"] or "assistant", "content": "".join(state["content"])}
            if calls:
                message["tool_calls"] = calls
            choice: Dict[str, Any] = {"index": index, "message": message, "finish_reason": state["finish_reason"]}
            if state["token_ids"]:
                choice["token_ids"] = state["token_ids"]
            choices.append(choice)
        result: Dict[str, Any] = {"id": self.id, "model": self.model, "choices": choices, "usage": self.usage}
        if self.prompt_token_ids is not None:
            result["prompt_token_ids"] = self.prompt_token_ids
        return result


class _ResponsesStreamAccumulator:
    """Keeps the final ``Response`` of a streamed Responses API call."""

    def __init__(self) -> None:
        self.response: Any = None
        self.text: List[str] = []

    def add(self, event: Any) -> None:
        event_type = _get(event, "type")
        if event_type in ("response.completed", "response.incomplete", "response.failed", "response.created"):
            self.response = _get(event, "response") or self.response
        elif event_type == "response.output_text.delta" and isinstance(_get(event, "delta"), str):
            self.text.append(_get(event, "delta"))

    def build(self) -> Any:
        if self.response is not None and _get(self.response, "output"):
            return self.response
        return {
            "id": _get(self.response, "id"),
            "model": _get(self.response, "model"),
            "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "".join(self.text)}]}],
            "usage": _get(self.response, "usage"),
        }


class _StreamProxy:
    """Wraps an OpenAI ``Stream``/``AsyncStream``: records chunks and ends the span when the stream finishes."""

    def __init__(self, stream: Any, span: trace_api.Span, tracer: trace_api.Tracer, accumulator: Any, kind: str):
        self._stream = stream
        self._span = span
        self._tracer = tracer
        self._acc = accumulator
        self._kind = kind
        self._done = False
        self._lock = threading.Lock()

    def _finalize(self, exc: Optional[BaseException] = None) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        if exc is not None:
            _fail(self._span, exc)
            return
        built = self._acc.build()
        extract = _chat_response_attributes if self._kind == "chat" else _responses_response_attributes
        attrs, tool_calls = extract(built)
        _finish(self._tracer, self._span, attrs, tool_calls)

    # sync protocol
    def __iter__(self) -> _StreamProxy:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._stream)
        except StopIteration:
            self._finalize()
            raise
        except Exception as exc:
            self._finalize(exc)
            raise
        self._acc.add(item)
        return item

    def __enter__(self) -> _StreamProxy:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
        finally:
            self._finalize()

    # async protocol
    def __aiter__(self) -> _StreamProxy:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._stream.__anext__()
        except StopAsyncIteration:
            self._finalize()
            raise
        except Exception as exc:
            self._finalize(exc)
            raise
        self._acc.add(item)
        return item

    async def __aenter__(self) -> _StreamProxy:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                result = close()
                if hasattr(result, "__await__"):
                    await result
        finally:
            self._finalize()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# ---------------------------------------------------------------------------------------------------------------------
# Wrappers
# ---------------------------------------------------------------------------------------------------------------------


def _start(kind: str, kwargs: Dict[str, Any]) -> Tuple[trace_api.Tracer, trace_api.Span, bool]:
    streaming = bool(kwargs.get("stream")) and _given(kwargs.get("stream"))
    if kind == "chat":
        messages = list(kwargs.get("messages") or []) if _given(kwargs.get("messages")) else []
        name = CHAT_SPAN_NAME
    else:
        messages = _responses_messages(kwargs)
        name = RESPONSES_SPAN_NAME
    tracer = _otel_tracer()
    span = tracer.start_span(
        name, kind=SpanKind.CLIENT, attributes=_request_attributes(kwargs, messages, streaming=streaming)
    )
    return tracer, span, streaming


def _handle_result(kind: str, tracer: trace_api.Tracer, span: trace_api.Span, streaming: bool, result: Any) -> Any:
    if streaming and type(result).__name__ in ("Stream", "AsyncStream"):
        accumulator = _ChatStreamAccumulator() if kind == "chat" else _ResponsesStreamAccumulator()
        return _StreamProxy(result, span, tracer, accumulator, kind)
    parsed = _unwrap_raw(result)
    extract = _chat_response_attributes if kind == "chat" else _responses_response_attributes
    try:
        attrs, tool_calls = extract(parsed) if parsed is not None else ({}, [])
    except Exception:  # pragma: no cover - never break the caller because of tracing
        logger.exception("Failed to extract OpenAI response attributes")
        attrs, tool_calls = {}, []
    _finish(tracer, span, attrs, tool_calls)
    return result


def _wrap_sync(original: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _suppressed():
            return original(self, *args, **kwargs)
        tracer, span, streaming = _start(kind, kwargs)
        token = otel_context.attach(trace_api.set_span_in_context(span))
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            _fail(span, exc)
            raise
        finally:
            otel_context.detach(token)
        return _handle_result(kind, tracer, span, streaming, result)

    wrapper.__rollouthub_wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _wrap_async(original: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _suppressed():
            return await original(self, *args, **kwargs)
        tracer, span, streaming = _start(kind, kwargs)
        token = otel_context.attach(trace_api.set_span_in_context(span))
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            _fail(span, exc)
            raise
        finally:
            otel_context.detach(token)
        return _handle_result(kind, tracer, span, streaming, result)

    wrapper.__rollouthub_wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _targets() -> List[Tuple[Any, str, str, bool]]:
    """(class, attribute, kind, is_async) for every patchable OpenAI resource method."""
    targets: List[Tuple[Any, str, str, bool]] = []
    try:
        from openai.resources.chat.completions import AsyncCompletions, Completions

        targets += [(Completions, "create", "chat", False), (AsyncCompletions, "create", "chat", True)]
    except ImportError:  # pragma: no cover - very old SDKs
        pass
    try:
        from openai.resources.responses import AsyncResponses, Responses

        targets += [(Responses, "create", "responses", False), (AsyncResponses, "create", "responses", True)]
    except ImportError:  # pragma: no cover - SDKs without the Responses API
        pass
    return targets


def preload_openai() -> None:
    """Import ``openai`` and the resource modules :func:`instrument_openai` patches, patching nothing (see
    :func:`rollouthub.instrumentation.preload_instrumentation`); a no-op when ``openai`` is not installed."""
    try:
        import openai  # noqa: F401
    except ImportError:
        return
    _targets()


def acquire_native_openai() -> bool:
    """Apply the instrumentation for one more user; returns whether this caller holds a reference.

    Reference-counted with :func:`release_native_openai` (tracers, ``instrument_all``): the patches stay while any
    holder needs them. When the user applied :func:`instrument_openai` directly, no reference is taken and a release
    never removes the user's patches; ``False`` is also returned when ``openai`` is not installed.
    """
    global _holders
    with _holders_lock:
        if _holders == 0 and is_openai_instrumented():
            return False  # applied by the user: theirs to remove
        if not (is_openai_instrumented() or instrument_openai(quiet=True)):
            return False
        _holders += 1
        return True


def release_native_openai() -> None:
    """Drop one reference taken by :func:`acquire_native_openai`; the last one removes the patches."""
    global _holders
    with _holders_lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            uninstrument_openai()


def instrument_openai(*, quiet: bool = False) -> bool:
    """Patch the OpenAI SDK (idempotent). Returns False when ``openai`` is not installed (a warning, or a debug line
    when ``quiet``)."""
    try:
        import openai  # noqa: F401
    except ImportError:
        level = logging.DEBUG if quiet else logging.WARNING
        log_once(logger, level, f"instrumentation.openai.missing.{level}", "openai is not installed; not traced.")
        return False
    with _patch_lock:
        for cls, attr, kind, is_async in _targets():
            key = (cls, attr)
            if key in _originals:
                continue
            original = cls.__dict__.get(attr) or getattr(cls, attr)
            _originals[key] = original
            setattr(cls, attr, (_wrap_async if is_async else _wrap_sync)(original, kind))
    return True


def uninstrument_openai() -> None:
    """Restore the original OpenAI SDK methods (whoever holds a reference: the count starts again from zero)."""
    global _holders
    _holders = 0
    with _patch_lock:
        for (cls, attr), original in list(_originals.items()):
            setattr(cls, attr, original)
        _originals.clear()


def is_openai_instrumented() -> bool:
    """Whether :func:`instrument_openai` is currently in effect."""
    return bool(_originals)
