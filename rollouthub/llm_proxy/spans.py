"""Spans of one proxied call, with the attribute schema of the reference's LiteLLM spans.

For every call attributed to a rollout the engine records, under one trace:

* ``Received Proxy Server Request`` — the root span of the request;
* ``litellm_request`` — ``gen_ai.*`` attributes (prompts, completions, tool calls, usage, model, response id) built
  by the same converters as the OpenAI SDK instrumentation (``rollouthub.instrumentation.openai``), plus
  ``prompt_token_ids`` / ``response_token_ids`` when the backend returned them, and ``openai.tool_call`` children
  for requested tool calls (read by ``TraceToMessages``);
* ``raw_gen_ai_request`` — provider-raw ``llm.<provider>.<key>`` attributes of the upstream request and response
  (e.g. ``llm.hosted_vllm.prompt_token_ids``, ``llm.hosted_vllm.choices`` with ``token_ids``,
  ``llm.hosted_vllm.response_token_ids``, ``llm.hosted_vllm.id``); structured values are Python-literal strings,
  as LiteLLM writes them.

Both carry ``rollouthub.policy_version`` (:data:`~rollouthub.semconv.POLICY_VERSION_ATTRIBUTE`) when the version of
the policy that served the call is known: from the local policy backend, or from the deployment's
``model_info.policy_version``.

Every span carries ``metadata.requester_custom_headers`` so that the :class:`LightningSpanExporter` can place it.

Two equivalent ways produce these spans: :func:`record_call_spans` through an SDK tracer (for stores written with
``add_many_spans``), and :class:`CallEncoder`, which writes them straight into the OTLP protobuf body sent to stores
that accept OTLP.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import Status, StatusCode

from rollouthub.instrumentation.openai import (
    TOOL_CALL_SPAN_NAME,
    _chat_response_attributes,
    _int_list,
    _record_tool_call_spans,
    _request_attributes,
    _responses_messages,
    _responses_response_attributes,
    _set,
    _text,
    _token_id_attributes,
    _usage_attributes,
    tool_call_attributes,
)
from rollouthub.semconv import POLICY_VERSION_ATTRIBUTE, LightningResourceAttributes

from .exporter import HEADERS_ATTRIBUTE, renew_lock_after_fork
from .models import Deployment

__all__ = [
    "ROOT_SPAN_NAME",
    "LLM_REQUEST_SPAN_NAME",
    "RAW_REQUEST_SPAN_NAME",
    "CallRecord",
    "CallEncoder",
    "TraceCollector",
    "record_call_spans",
]

ROOT_SPAN_NAME = "Received Proxy Server Request"
LLM_REQUEST_SPAN_NAME = "litellm_request"
RAW_REQUEST_SPAN_NAME = "raw_gen_ai_request"


@dataclass
class CallRecord:
    """Everything known about one proxied call once it finished."""

    kind: str
    route: str
    requested_model: str
    deployment: Deployment
    request: Dict[str, Any]
    payload: Dict[str, Any]
    headers: Dict[str, str]
    start_ns: int
    upstream_start_ns: int
    end_ns: int
    status_code: int = 200
    response: Optional[Dict[str, Any]] = None
    error: Optional[str] = None
    streaming: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)
    policy_version: Optional[int] = None


class TraceCollector(SpanProcessor):
    """Collect ended spans per trace so that the spans of one request can be handed to the exporter together."""

    def __init__(self) -> None:
        """Create an empty collector."""
        self._spans: Dict[int, List[ReadableSpan]] = {}
        self._lock = threading.Lock()
        renew_lock_after_fork(self, "_lock")

    def on_start(self, span: SdkSpan, parent_context: Optional[otel_context.Context] = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Remember the ended span under its trace id."""
        if span.context is None:
            return
        with self._lock:
            self._spans.setdefault(span.context.trace_id, []).append(span)

    def pop(self, trace_id: int) -> List[ReadableSpan]:
        """Remove and return the ended spans of a trace."""
        with self._lock:
            return self._spans.pop(trace_id, [])


# ---------------------------------------------------------------------------------------------------------------------
# gen_ai.* attributes per request kind
# ---------------------------------------------------------------------------------------------------------------------


def _completions_attributes(record: CallRecord) -> Tuple[Dict[str, Any], List[Any]]:
    request, response = record.request, record.response or {}
    attrs = _request_attributes(request, [], streaming=record.streaming)
    prompt = request.get("prompt")
    prompts = prompt if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else [prompt]
    for i, text in enumerate(prompts):
        _set(attrs, f"gen_ai.prompt.{i}.role", "user")
        _set(attrs, f"gen_ai.prompt.{i}.content", text if isinstance(text, str) else _text(text))
    _set(attrs, "gen_ai.response.id", response.get("id"))
    _set(attrs, "gen_ai.response.model", response.get("model"))
    choices = [c for c in response.get("choices") or [] if isinstance(c, dict)]
    for i, choice in enumerate(choices):
        index = choice.get("index", i)
        _set(attrs, f"gen_ai.completion.{index}.role", "assistant")
        _set(attrs, f"gen_ai.completion.{index}.content", choice.get("text"))
        _set(attrs, f"gen_ai.completion.{index}.finish_reason", choice.get("finish_reason"))
    _usage_attributes(attrs, response.get("usage"))
    first = choices[0] if choices else None
    _token_id_attributes(attrs, response, first)
    if "prompt_token_ids" not in attrs and first is not None:
        ids = _int_list(first.get("prompt_token_ids"))
        if ids is not None:
            attrs["prompt_token_ids"] = ids
    return attrs, []


def _anthropic_text(content: Any) -> Optional[str]:
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "".join(str(b.get("text") or "") for b in content)
    return _text(content)


def _anthropic_tool_calls(content: Any) -> List[Dict[str, Any]]:
    return [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input") or {})},
        }
        for block in content or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]


def _messages_attributes(record: CallRecord) -> Tuple[Dict[str, Any], List[Any]]:
    request, response = record.request, record.response or {}
    messages: List[Dict[str, Any]] = []
    if request.get("system") is not None:
        messages.append({"role": "system", "content": _anthropic_text(request.get("system"))})
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        entry: Dict[str, Any] = {"role": message.get("role"), "content": _anthropic_text(content)}
        calls = _anthropic_tool_calls(content if isinstance(content, list) else [])
        if calls:
            entry["tool_calls"] = calls
        messages.append(entry)
    attrs = _request_attributes(request, messages, streaming=record.streaming)
    for i, tool in enumerate(request.get("tools") or []):
        if isinstance(tool, dict) and "input_schema" in tool:
            attrs[f"gen_ai.request.functions.{i}.parameters"] = json.dumps(tool["input_schema"], default=str)
    content = response.get("content") or []
    tool_calls = _anthropic_tool_calls(content)
    texts = [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    _set(attrs, "gen_ai.response.id", response.get("id"))
    _set(attrs, "gen_ai.response.model", response.get("model"))
    _set(attrs, "gen_ai.completion.0.role", response.get("role") or "assistant")
    _set(attrs, "gen_ai.completion.0.content", "".join(texts))
    _set(attrs, "gen_ai.completion.0.finish_reason", response.get("stop_reason"))
    for j, call in enumerate(tool_calls):
        _set(attrs, f"gen_ai.completion.0.tool_calls.{j}.id", call["id"])
        _set(attrs, f"gen_ai.completion.0.tool_calls.{j}.name", call["function"]["name"])
        _set(attrs, f"gen_ai.completion.0.tool_calls.{j}.arguments", call["function"]["arguments"])
    usage = response.get("usage")
    if isinstance(usage, dict):
        _usage_attributes(attrs, usage)
        inputs, outputs = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(inputs, int) and isinstance(outputs, int):
            attrs["gen_ai.usage.total_tokens"] = inputs + outputs
    return attrs, tool_calls


def genai_attributes(record: CallRecord) -> Tuple[Dict[str, Any], List[Any]]:
    """``gen_ai.*`` (and token-id) attributes of the ``litellm_request`` span, and the requested tool calls."""
    request, response = record.request, record.response
    if record.kind == "chat":
        attrs = _request_attributes(request, list(request.get("messages") or []), streaming=record.streaming)
        tool_calls: List[Any] = []
        if response is not None:
            response_attrs, tool_calls = _chat_response_attributes(response)
            attrs.update(response_attrs)
    elif record.kind == "completions":
        attrs, tool_calls = _completions_attributes(record)
    elif record.kind == "responses":
        attrs = _request_attributes(request, _responses_messages(request), streaming=record.streaming)
        tool_calls = []
        if response is not None:
            response_attrs, tool_calls = _responses_response_attributes(response)
            attrs.update(response_attrs)
    elif record.kind == "messages":
        attrs, tool_calls = _messages_attributes(record)
    else:  # embeddings
        attrs, tool_calls = {}, []
        _set(attrs, "gen_ai.request.model", request.get("model"))
        if response is not None:
            _set(attrs, "gen_ai.response.model", response.get("model"))
            _usage_attributes(attrs, response.get("usage"))
    attrs["gen_ai.system"] = record.deployment.provider
    attrs["gen_ai.request.model"] = record.requested_model
    return attrs, tool_calls


# ---------------------------------------------------------------------------------------------------------------------
# llm.<provider>.* attributes
# ---------------------------------------------------------------------------------------------------------------------


def _llm_span_attributes(record: CallRecord, call_attrs: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Any]]:
    """The attributes of a call's LLM-request span (the GenAI ones, the call's own, streaming, upstream model,
    error) and the tool calls the model asked for -- the same for the SDK path and the direct OTLP path."""
    llm_attrs, tool_calls = genai_attributes(record)
    llm_attrs.update(call_attrs)
    llm_attrs["llm.is_streaming"] = record.streaming
    llm_attrs["llm.upstream_model"] = record.payload.get("model") or record.deployment.upstream_model
    if record.error is not None:
        llm_attrs["error.message"] = record.error
    return llm_attrs, tool_calls


def raw_value(value: Any) -> Any:
    """An attribute value as LiteLLM records raw fields: primitives and homogeneous lists as-is, else ``str()``."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and value:
        for kind in (str, bool, int, float):
            if all(type(item) is kind for item in value):
                return list(value)
    return str(value)


def raw_attributes(record: CallRecord) -> Dict[str, Any]:
    """``llm.<provider>.<key>`` attributes of the upstream payload and response (response keys win)."""
    prefix = f"llm.{record.deployment.provider}"
    attrs: Dict[str, Any] = {}
    for source in (record.payload, record.response or {}):
        for key, value in source.items():
            if value is not None:
                attrs[f"{prefix}.{key}"] = raw_value(value)
    response = record.response or {}
    choices = [c for c in response.get("choices") or [] if isinstance(c, dict)]
    token_ids = [c.get("token_ids") for c in choices]
    if "response_token_ids" not in response and token_ids and all(_int_list(ids) is not None for ids in token_ids):
        attrs[f"{prefix}.response_token_ids"] = str([list(ids) for ids in token_ids])  # type: ignore[arg-type]
    if "prompt_token_ids" not in response and choices and _int_list(choices[0].get("prompt_token_ids")) is not None:
        attrs[f"{prefix}.prompt_token_ids"] = list(choices[0]["prompt_token_ids"])
    return attrs


# ---------------------------------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------------------------------


def record_call_spans(tracer: trace_api.Tracer, collector: TraceCollector, record: CallRecord) -> List[ReadableSpan]:
    """Create and end the spans of ``record`` with ``tracer``; returns them (collected by ``collector``)."""
    headers_attr = {HEADERS_ATTRIBUTE: str(record.headers)}
    call_attrs: Dict[str, Any] = dict(headers_attr)  # on the LLM-call spans
    if record.policy_version is not None:
        call_attrs[POLICY_VERSION_ATTRIBUTE] = record.policy_version
    ok = record.error is None and 200 <= record.status_code < 300
    status = Status(StatusCode.OK) if ok else Status(StatusCode.ERROR, record.error or f"HTTP {record.status_code}")
    root = tracer.start_span(
        ROOT_SPAN_NAME,
        context=otel_context.Context(),
        start_time=record.start_ns,
        attributes={
            **headers_attr,
            "llm_proxy.route": record.route,
            "http.response.status_code": record.status_code,
        },
    )
    trace_id = root.get_span_context().trace_id
    try:
        llm_attrs, tool_calls = _llm_span_attributes(record, call_attrs)
        llm = tracer.start_span(
            LLM_REQUEST_SPAN_NAME,
            context=trace_api.set_span_in_context(root),
            start_time=record.start_ns,
            attributes=llm_attrs,
        )
        raw = tracer.start_span(
            RAW_REQUEST_SPAN_NAME,
            context=trace_api.set_span_in_context(llm),
            start_time=record.upstream_start_ns,
            attributes={**raw_attributes(record), **call_attrs},
        )
        raw.set_status(status)
        raw.end(end_time=record.end_ns)
        if ok:
            _record_tool_call_spans(tracer, llm, tool_calls)
        llm.set_status(status)
        llm.end(end_time=record.end_ns)
    finally:
        root.set_status(status)
        root.end(end_time=record.end_ns)
    return collector.pop(trace_id)


# ---------------------------------------------------------------------------------------------------------------------
# Direct OTLP encoding (what the exporter sends to a store that accepts OTLP)
# ---------------------------------------------------------------------------------------------------------------------

_PRIMITIVES = frozenset((str, bool, int, float))
# a span without a remote parent, as the OTLP encoder flags it
_FLAGS = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK


def _is_plain(value: Any) -> bool:
    """Whether the SDK keeps an attribute value as it is: a primitive, or a list/tuple of primitives."""
    kind = type(value)
    if kind in _PRIMITIVES:
        return True
    return (kind is list or kind is tuple) and all(type(item) in _PRIMITIVES for item in value)


def _any_value(value: Any) -> AnyValue:
    """An attribute value (already cleaned: a primitive, ``None`` or a sequence of those) as an OTLP ``AnyValue``."""
    kind = type(value)
    if kind is str:
        return AnyValue(string_value=value)
    if kind is int:
        return AnyValue(int_value=value)
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Mapping):
        return AnyValue(kvlist_value=KeyValueList(values=_key_values({str(k): v for k, v in value.items()})))
    return AnyValue(array_value=ArrayValue(values=[_any_value(item) for item in value]))


def _key_values(attributes: Mapping[str, Any]) -> List[KeyValue]:
    return [KeyValue(key=key, value=_any_value(value)) for key, value in attributes.items()]


def _random_id(bits: int) -> int:
    """A non-zero random id, as the SDK's ``RandomIdGenerator`` draws it."""
    value = random.getrandbits(bits)
    while value == 0:
        value = random.getrandbits(bits)
    return value


class CallEncoder:
    """Encode the spans of proxied calls into OTLP/HTTP bodies for the store, without an SDK tracer.

    :meth:`encode` produces the same OTLP message as :func:`record_call_spans` followed by the OpenTelemetry OTLP
    encoder, for the spans stamped with the call's rollout, attempt and sequence id: the same spans in the same order
    (``raw_gen_ai_request``, the ``openai.tool_call`` children, ``litellm_request``, the root), with the same names,
    kinds, times, attributes (cleaned and limited by the SDK's ``BoundedAttributes`` rules under the same
    ``SpanLimits``), statuses, parent links, span flags, instrumentation scope and resource (the tracer provider's
    resource with the three ids added). Only the random trace and span ids differ.

    Args:
        resource: the resource the spans would have had from the tracer provider (before the ids are stamped).
        scope_name: the instrumentation scope's name (the name the SDK tracer was obtained with).
        limits: attribute limits applied as the SDK applies them to span attributes (default: from the environment,
            as a ``TracerProvider`` created without limits reads them).
    """

    def __init__(self, resource: Resource, scope_name: str, limits: Optional[SpanLimits] = None) -> None:
        """Prepare the per-process parts of every body (resource attributes, scope)."""
        limits = limits if limits is not None else SpanLimits()
        self._max_attributes = limits.max_span_attributes
        self._max_length = limits.max_span_attribute_length
        self._resource_attributes = dict(resource.attributes)
        self._schema_url = resource.schema_url
        self._scope = InstrumentationScope(name=scope_name)

    def _attributes(self, attributes: Dict[str, Any]) -> Tuple[List[KeyValue], int]:
        """(encoded attributes, dropped count) after the SDK's cleaning and count/length limits."""
        simple = self._max_length is None and all(map(_is_plain, attributes.values()))
        if simple and (self._max_attributes is None or len(attributes) <= self._max_attributes):
            return _key_values(attributes), 0  # nothing the SDK would change
        bounded = BoundedAttributes(self._max_attributes, attributes, immutable=False, max_value_len=self._max_length)
        return _key_values(bounded), bounded.dropped

    def _span(
        self,
        name: str,
        trace_id: bytes,
        span_id: int,
        parent_id: Optional[int],
        start_ns: int,
        end_ns: int,
        attributes: Dict[str, Any],
        status: Optional[PbStatus],
    ) -> PbSpan:
        encoded, dropped = self._attributes(attributes)
        return PbSpan(
            trace_id=trace_id,
            span_id=span_id.to_bytes(8, "big"),
            trace_state="",
            parent_span_id=parent_id.to_bytes(8, "big") if parent_id is not None else b"",
            name=name,
            kind=PbSpan.SpanKind.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start_ns,
            end_time_unix_nano=end_ns,
            attributes=encoded,
            dropped_attributes_count=dropped,
            status=status if status is not None else PbStatus(),
            flags=_FLAGS,
        )

    def encode(self, record: CallRecord, rollout_id: str, attempt_id: str, sequence_id: int) -> bytes:
        """The serialised ``ExportTraceServiceRequest`` carrying the spans of ``record`` in one resource stamped with
        ``rollout_id``, ``attempt_id`` and ``sequence_id``.

        Serialised requests concatenate into one valid request (repeated fields merge), so bodies of several calls
        can be sent together by joining their bytes.
        """
        headers_attr = {HEADERS_ATTRIBUTE: str(record.headers)}
        call_attrs: Dict[str, Any] = dict(headers_attr)
        if record.policy_version is not None:
            call_attrs[POLICY_VERSION_ATTRIBUTE] = record.policy_version
        ok = record.error is None and 200 <= record.status_code < 300
        status = (
            PbStatus(code=PbStatus.StatusCode.STATUS_CODE_OK)
            if ok
            else PbStatus(
                code=PbStatus.StatusCode.STATUS_CODE_ERROR, message=record.error or f"HTTP {record.status_code}"
            )
        )
        trace_id = _random_id(128).to_bytes(16, "big")
        root_id, llm_id, raw_id = _random_id(64), _random_id(64), _random_id(64)

        llm_attrs, tool_calls = _llm_span_attributes(record, call_attrs)

        spans = [
            self._span(
                RAW_REQUEST_SPAN_NAME,
                trace_id,
                raw_id,
                llm_id,
                record.upstream_start_ns,
                record.end_ns,
                {**raw_attributes(record), **call_attrs},
                status,
            )
        ]
        if ok:
            for call in tool_calls:
                now = time.time_ns()
                attrs = tool_call_attributes(call)
                spans.append(self._span(TOOL_CALL_SPAN_NAME, trace_id, _random_id(64), llm_id, now, now, attrs, None))
        spans.append(
            self._span(
                LLM_REQUEST_SPAN_NAME, trace_id, llm_id, root_id, record.start_ns, record.end_ns, llm_attrs, status
            )
        )
        root_attrs = {**headers_attr, "llm_proxy.route": record.route, "http.response.status_code": record.status_code}
        spans.append(
            self._span(ROOT_SPAN_NAME, trace_id, root_id, None, record.start_ns, record.end_ns, root_attrs, status)
        )

        resource = dict(self._resource_attributes)
        resource[LightningResourceAttributes.ROLLOUT_ID.value] = rollout_id
        resource[LightningResourceAttributes.ATTEMPT_ID.value] = attempt_id
        resource[LightningResourceAttributes.SPAN_SEQUENCE_ID.value] = sequence_id
        request = ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(
                    resource=PbResource(attributes=_key_values(resource)),
                    scope_spans=[ScopeSpans(scope=self._scope, spans=spans)],
                    schema_url=self._schema_url,
                )
            ]
        )
        return request.SerializeToString()
