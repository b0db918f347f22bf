"""The direct OTLP encoding of a call's spans equals the SDK tracer + OTLP encoder path, field by field."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import SpanLimits
from opentelemetry.sdk.trace.export import SpanExportResult

from rollouthub.llm_proxy.callbacks import TRACER_NAME, LightningOpenTelemetry
from rollouthub.llm_proxy.exporter import LightningSpanExporter
from rollouthub.llm_proxy.models import Deployment
from rollouthub.llm_proxy.spans import CallEncoder, CallRecord, record_call_spans
from rollouthub.store.memory import InMemoryLightningStore

IDS = ("ro-1", "at-1", 7)
HEADERS = {"x-rollout-id": IDS[0], "x-attempt-id": IDS[1], "x-sequence-id": str(IDS[2])}
TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
    {"id": "call_2", "type": "function", "function": {"name": "mul", "arguments": '{"b": 2}'}},
]


def make_record(kind: str, *, error: Optional[str] = None, status: int = 200, **changes: Any) -> CallRecord:
    """A finished call of ``kind`` with the request/response shapes the engine records."""
    provider = "anthropic" if kind == "messages" else "hosted_vllm"
    deployment = Deployment("m", provider, "Qwen/Qwen2.5", "http://127.0.0.1:1/v1", policy_version=3)
    request: Dict[str, Any]
    response: Dict[str, Any]
    if kind == "chat":
        request = {"model": "m", "messages": [{"role": "user", "content": "add"}], "temperature": 0.5, "tools": []}
        message = {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}
        response = {
            "id": "chatcmpl-1",
            "model": "Qwen/Qwen2.5",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls", "token_ids": [4, 5]}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            "nested": {"a": [1, "x"]},
        }
    elif kind == "completions":
        request = {"model": "m", "prompt": ["hello", "world"], "max_tokens": 4}
        response = {
            "id": "cmpl-1",
            "model": "Qwen/Qwen2.5",
            "choices": [{"index": 0, "text": "hi", "finish_reason": "stop", "prompt_token_ids": [9], "token_ids": [8]}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    elif kind == "messages":
        request = {"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}
        response = {
            "id": "msg_1",
            "model": "claude",
            "role": "assistant",
            "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "tu_1", "name": "f", "input": {}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 4, "output_tokens": 2},
        }
    elif kind == "responses":
        request = {"model": "m", "input": "hi", "instructions": "be brief"}
        response = {
            "id": "resp_1",
            "model": "Qwen/Qwen2.5",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
        }
    else:
        request = {"model": "m", "input": ["a", "b"]}
        response = {"model": "Qwen/Qwen2.5", "data": [], "usage": {"prompt_tokens": 2, "total_tokens": 2}}
    now = time.time_ns()
    record = CallRecord(
        kind=kind,
        route=f"/v1/{kind}",
        requested_model="m",
        deployment=deployment,
        request=request,
        payload={**request, "model": "Qwen/Qwen2.5", "logprobs": 1, "skip": None},
        headers=dict(HEADERS),
        start_ns=now - 5_000_000,
        upstream_start_ns=now - 4_000_000,
        end_ns=now,
        status_code=status,
        response=None if error is not None else response,
        error=error,
        policy_version=3,
    )
    for name, value in changes.items():
        setattr(record, name, value)
    return record


def sdk_body(otel: LightningOpenTelemetry, record: CallRecord) -> ExportTraceServiceRequest:
    """The body the exporter sends for the spans recorded through the SDK tracer."""
    spans = record_call_spans(otel.tracer, otel.collector, record)
    target = (InMemoryLightningStore(), *IDS)
    return ExportTraceServiceRequest.FromString(LightningSpanExporter._otlp_body([(target, spans)]))


def normalised(request: ExportTraceServiceRequest) -> Dict[str, Any]:
    """The request as a dict with trace/span ids replaced by their order of appearance and tool-call span times
    (taken from the clock when each path ends them) removed."""
    data = MessageToDict(request)
    ids: Dict[str, str] = {}
    traces: Dict[str, str] = {}
    spans: List[Dict[str, Any]] = [s for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    for span in spans:
        ids.setdefault(span["spanId"], f"span-{len(ids)}")
    for span in spans:
        span["traceId"] = traces.setdefault(span["traceId"], f"trace-{len(traces)}")
        span["spanId"] = ids[span["spanId"]]
        if "parentSpanId" in span:
            span["parentSpanId"] = ids.get(span["parentSpanId"], "outside")
        if span["name"] == "openai.tool_call":
            assert int(span.pop("startTimeUnixNano")) <= int(span.pop("endTimeUnixNano"))
    return data


@pytest.mark.parametrize(
    "record",
    [
        make_record("chat"),
        make_record("chat", streaming=True, policy_version=None),
        make_record("chat", error="upstream failed", status=502),
        make_record("chat", status=429, error=None),
        make_record("completions"),
        make_record("messages"),
        make_record("responses"),
        make_record("embeddings"),
        # more attributes than the SDK's default limit of 128 per span: the oldest are dropped and counted
        make_record(
            "chat", request={"model": "m", "messages": [{"role": "user", "content": f"m{i}"} for i in range(90)]}
        ),
    ],
    ids=[
        "chat",
        "chat-stream",
        "chat-error",
        "chat-429",
        "completions",
        "messages",
        "responses",
        "embeddings",
        "limit",
    ],
)
def test_direct_encoding_equals_sdk_path(record: CallRecord) -> None:
    otel = LightningOpenTelemetry()
    try:
        old = sdk_body(otel, record)
        new = ExportTraceServiceRequest.FromString(otel.encoder.encode(record, *IDS))
    finally:
        otel.shutdown()
    expected, actual = normalised(old), normalised(new)
    old_spans = expected["resourceSpans"][0]["scopeSpans"][0]["spans"]
    new_spans = actual["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [s["name"] for s in new_spans] == [s["name"] for s in old_spans]
    for old_span, new_span in zip(old_spans, new_spans, strict=True):  # field by field, for a readable failure
        for key in sorted(set(old_span) | set(new_span)):
            assert new_span.get(key) == old_span.get(key), (old_span["name"], key)
    assert actual == expected  # resource, scope, schema urls and everything else
    assert new.resource_spans[0].scope_spans[0].scope.name == TRACER_NAME
    # ids are real ids: one 16-byte trace id shared by every span, distinct 8-byte span ids
    spans = new.resource_spans[0].scope_spans[0].spans
    assert len({s.trace_id for s in spans}) == 1 and len(spans[0].trace_id) == 16
    assert len({s.span_id for s in spans}) == len(spans) and all(len(s.span_id) == 8 for s in spans)
    if record.kind == "chat" and record.error is None and record.status_code == 200:
        assert len(spans) == 5  # raw, two tool calls, llm, root
    if record.request.get("messages") and len(record.request["messages"]) == 90:
        assert any(s.dropped_attributes_count > 0 for s in spans)


def test_attribute_length_limit_is_applied_like_the_sdk() -> None:
    record = make_record("chat")
    otel = LightningOpenTelemetry()
    try:
        old = normalised(sdk_body(otel, record))
    finally:
        otel.shutdown()
    limited = CallEncoder(otel.tracer_provider.resource, TRACER_NAME, SpanLimits(max_span_attribute_length=5))
    new = normalised(ExportTraceServiceRequest.FromString(limited.encode(record, *IDS)))
    values = [a["value"] for s in new["resourceSpans"][0]["scopeSpans"][0]["spans"] for a in s["attributes"]]
    assert all(len(v["stringValue"]) <= 5 for v in values if "stringValue" in v)
    assert new != old


def test_concatenated_bodies_are_one_request() -> None:
    otel = LightningOpenTelemetry()
    try:
        first = otel.encoder.encode(make_record("chat"), "ro-1", "at-1", 1)
        second = otel.encoder.encode(make_record("completions"), "ro-2", "at-2", 2)
    finally:
        otel.shutdown()
    joined = ExportTraceServiceRequest.FromString(first + second)
    assert len(joined.resource_spans) == 2
    sequence = [
        kv.value.int_value for rs in joined.resource_spans for kv in rs.resource.attributes if kv.value.int_value
    ]
    assert sequence == [1, 2]


def test_a_batch_of_subtrees_is_one_request_with_each_subtrees_ids() -> None:
    otel = LightningOpenTelemetry()
    try:
        first = record_call_spans(otel.tracer, otel.collector, make_record("chat"))
        second = record_call_spans(otel.tracer, otel.collector, make_record("completions"))
    finally:
        otel.shutdown()
    store = InMemoryLightningStore()
    body = LightningSpanExporter._otlp_body([((store, "ro-1", "at-1", 1), first), ((store, "ro-2", "at-2", 2), second)])

    request = ExportTraceServiceRequest.FromString(body)
    stamped = [
        {kv.key: MessageToDict(kv.value) for kv in rs.resource.attributes if kv.key.startswith("agentlightning.")}
        for rs in request.resource_spans
    ]
    assert [len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans] == [len(first), len(second)]
    assert [(s["agentlightning.rollout_id"], s["agentlightning.span_sequence_id"]) for s in stamped] == [
        ({"stringValue": "ro-1"}, {"intValue": "1"}),
        ({"stringValue": "ro-2"}, {"intValue": "2"}),
    ]


async def test_spans_stored_through_the_server_equal_the_sdk_path() -> None:
    """End to end: what the store keeps from the direct path equals what it keeps from the SDK path."""
    import asyncio
    from functools import partial

    from rollouthub.semconv import LightningResourceAttributes
    from rollouthub.store.client_server import LightningStoreServer
    from rollouthub.types import Span
    from rollouthub.utils.server_launcher import pick_free_port

    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port())
    await server.start()
    otel = LightningOpenTelemetry()
    try:
        rollout = await server.start_rollout({"x": 1})
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        records = []
        for sequence in (1, 2):
            record = make_record("chat")
            record.headers = {"x-rollout-id": rid, "x-attempt-id": aid, "x-sequence-id": str(sequence)}
            records.append(record)
        records[1].start_ns, records[1].upstream_start_ns, records[1].end_ns = (
            records[0].start_ns,
            records[0].upstream_start_ns,
            records[0].end_ns,
        )
        old = otel.exporter.export_async(record_call_spans(otel.tracer, otel.collector, records[0]), store=server)
        new = otel.exporter.export_encoded_async(
            records[1].headers, partial(otel.encoder.encode, records[1]), store=server
        )
        assert await asyncio.gather(old, new) == [SpanExportResult.SUCCESS] * 2
        stored = await server.query_spans(rid)
    finally:
        otel.shutdown()
        await server.stop()

    def content(spans: List[Span]) -> List[Dict[str, Any]]:
        names = {span.span_id: span.name for span in spans}
        rows = []
        for span in spans:
            row = span.model_dump(exclude={"sequence_id", "trace_id", "span_id", "parent_id", "context", "parent"})
            row["parent"] = names.get(span.parent_id) if span.parent_id else None
            row["attributes"].pop("metadata.requester_custom_headers", None)
            row["resource"]["attributes"].pop(LightningResourceAttributes.SPAN_SEQUENCE_ID.value)
            if span.name == "openai.tool_call":
                del row["start_time"], row["end_time"]
            rows.append(row)
        return sorted(rows, key=repr)

    by_sequence = {1: [s for s in stored if s.sequence_id == 1], 2: [s for s in stored if s.sequence_id == 2]}
    assert len(by_sequence[1]) == len(by_sequence[2]) == 5
    assert content(by_sequence[2]) == content(by_sequence[1])
