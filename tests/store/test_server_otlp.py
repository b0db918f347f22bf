"""OTLP/HTTP ingestion of the store server (protobuf, gzip, JSON, google.rpc.Status errors, span conversion) and the
client-side exporter."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server.otlp import export_otlp
from rollouthub.store.server.otlp_decode import (
    JSON_CT,
    PROTOBUF_CT,
    OTLPPayloadError,
    decode_spans,
    parse_otlp_traces,
    spans_from_proto,
)
from rollouthub.utils.otlp import LightningStoreOTLPExporter
from rollouthub.utils.server_launcher import pick_free_port

pytestmark = pytest.mark.timeout(60)


def _kv(container: Any, key: str, value: Any) -> None:
    attr = container.add()
    attr.key = key
    if isinstance(value, bool):
        attr.value.bool_value = value
    elif isinstance(value, int):
        attr.value.int_value = value
    elif isinstance(value, float):
        attr.value.double_value = value
    elif isinstance(value, bytes):
        attr.value.bytes_value = value
    else:
        attr.value.string_value = value


def _request(rollout_id: str, attempt_id: str, n: int = 2, seq: Any = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.schema_url = "https://schema"
    _kv(rs.resource.attributes, "agentlightning.rollout_id", rollout_id)
    _kv(rs.resource.attributes, "agentlightning.attempt_id", attempt_id)
    _kv(rs.resource.attributes, "service.name", "svc")
    scope = rs.scope_spans.add()
    for i in range(n):
        span = scope.spans.add()
        span.name = f"span-{i}"
        span.trace_id = bytes([1] * 16)
        span.span_id = bytes([i + 1] * 8)
        if i:
            span.parent_span_id = bytes([1] * 8)
        span.start_time_unix_nano = 1_700_000_000_000_000_000 + i
        span.end_time_unix_nano = 1_700_000_001_000_000_000
        span.status.code = 2 if i else 1
        span.status.message = "boom" if i else ""
        _kv(span.attributes, "str", "v")
        _kv(span.attributes, "flag", True)
        _kv(span.attributes, "num", 7)
        _kv(span.attributes, "ratio", 0.5)
        _kv(span.attributes, "raw", b"\x0a\x0b")
        arr = span.attributes.add()
        arr.key = "arr"
        arr.value.array_value.values.add().int_value = 1
        arr.value.array_value.values.add().string_value = "x"
        kvl = span.attributes.add()
        kvl.key = "kvl"
        inner = kvl.value.kvlist_value.values.add()
        inner.key = "a"
        inner.value.int_value = 1
        if seq is not None and i == 0:
            _kv(span.attributes, "agentlightning.span_sequence_id", seq)
        event = span.events.add()
        event.name = "ev"
        event.time_unix_nano = 1_700_000_000_500_000_000
        _kv(event.attributes, "e", 1)
        link = span.links.add()
        link.trace_id = bytes([2] * 16)
        link.span_id = bytes([3] * 8)
    return request


async def test_spans_from_proto_conversion() -> None:
    calls: list[list[tuple[str, str]]] = []

    async def issuer(pairs: Any) -> list[int]:
        calls.append(list(pairs))
        return [100 + i for i in range(len(pairs))]

    spans = await spans_from_proto(_request("ro-1", "at-1", seq="42"), issuer)
    assert calls == [[("ro-1", "at-1")]]  # one bulk call, only for the span without a sequence id
    first, second = spans
    assert (first.sequence_id, second.sequence_id) == (42, 100)
    assert first.trace_id == "01" * 16 and first.span_id == "01" * 8 and first.parent_id is None
    assert second.parent_id == "01" * 8
    assert first.status.status_code == "OK" and first.status.description is None
    assert second.status.status_code == "ERROR" and second.status.description == "boom"
    assert first.attributes["str"] == "v" and first.attributes["flag"] is True and first.attributes["num"] == 7
    # mixed arrays and key-value lists do not fit the span attribute type: they are kept as JSON text
    assert first.attributes["raw"] == "0a0b" and first.attributes["arr"] == '[1, "x"]'
    assert first.attributes["kvl"] == '{"a": 1}'

    assert first.start_time == pytest.approx(1_700_000_000.0)
    assert first.events[0].name == "ev" and first.events[0].timestamp == pytest.approx(1_700_000_000.5)
    assert first.links[0].context.trace_id == "02" * 16 and first.links[0].attributes is None
    assert first.resource.schema_url == "https://schema" and first.resource.attributes["service.name"] == "svc"
    assert first.context is not None and first.context.span_id == first.span_id and first.parent is None


def test_attribute_conversion_matches_the_generic_path() -> None:
    from rollouthub.store.server import otlp_decode as otlp

    request = _request("ro-1", "at-1", n=2)
    extra = request.resource_spans[0].scope_spans[0].spans[0].attributes.add()
    extra.key = "empty"  # an AnyValue without a value
    for span in request.resource_spans[0].scope_spans[0].spans:
        fast = otlp._attributes(span.attributes)
        generic = {kv.key: otlp._attribute_value(otlp._any_value(kv.value)) for kv in span.attributes}
        assert fast == generic
        assert [type(v) for v in fast.values()] == [type(v) for v in generic.values()]


async def test_export_otlp_without_a_web_framework() -> None:
    stored: list[Any] = []
    reads: list[int] = []

    async def read_body() -> bytes:
        reads.append(1)
        return bytes(_request("ro-1", "at-1", n=2, seq=5).SerializeToString())

    async def add_many(spans: Any) -> None:
        stored.extend(spans)

    async def issuer(pairs: Any) -> list[int]:
        return list(range(len(pairs)))

    result = await export_otlp(PROTOBUF_CT, None, "gzip, br", read_body, add_many, issuer)
    assert result.status_code == 200 and result.gzipped and result.media_type == PROTOBUF_CT
    assert gzip.decompress(result.body) == b"" and len(stored) == 2
    assert dict(result.raw_headers()) == {
        b"content-encoding": b"gzip",
        b"content-length": str(len(result.body)).encode(),
        b"content-type": PROTOBUF_CT.encode(),
    }
    # An unsupported content type is answered without reading the body.
    result = await export_otlp("text/plain", None, None, read_body, add_many, issuer)
    assert result.status_code == 400 and len(reads) == 1 and not result.gzipped
    assert "Unsupported Content-Type 'text/plain'" in Status.FromString(result.body).message

    async def reject(spans: Any) -> None:
        raise ValueError("no such rollout")

    result = await export_otlp(JSON_CT + "; charset=utf-8", None, None, read_body, reject, issuer)
    assert result.status_code == 400 and result.media_type == JSON_CT  # a protobuf body sent as JSON
    assert "Unable to parse OTLP traces payload" in json.loads(result.body)["message"]


async def test_span_level_ids_override_resource_and_skip_missing() -> None:
    request = _request("ro-res", "at-res", n=1)
    _kv(request.resource_spans[0].scope_spans[0].spans[0].attributes, "agentlightning.rollout_id", "ro-span")
    orphan = request.resource_spans.add()
    orphan.scope_spans.add().spans.add(name="orphan")

    async def issuer(pairs: Any) -> list[int]:
        return [1] * len(pairs)

    spans = await spans_from_proto(request, issuer)
    assert [(s.rollout_id, s.attempt_id) for s in spans] == [("ro-span", "at-res")]


async def test_bad_sequence_ids_are_reallocated() -> None:
    async def issuer(pairs: Any) -> list[int]:
        return [9] * len(pairs)

    for bad in ("abc", -3):
        spans = await spans_from_proto(_request("r", "a", n=1, seq=bad), issuer)
        assert spans[0].sequence_id == 9


def test_parse_errors() -> None:
    with pytest.raises(OTLPPayloadError, match="Unable to parse OTLP traces payload"):
        parse_otlp_traces(b"\xff\xff\xff", PROTOBUF_CT)
    with pytest.raises(OTLPPayloadError, match="decompress"):
        parse_otlp_traces(b"nope", PROTOBUF_CT, "gzip")
    assert parse_otlp_traces(b"", PROTOBUF_CT) == ExportTraceServiceRequest()
    data = _request("r", "a").SerializeToString()
    assert parse_otlp_traces(gzip.compress(data), PROTOBUF_CT, "GZIP") == _request("r", "a")


@pytest.fixture
async def server() -> AsyncIterator[LightningStoreServer]:
    srv = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port(), launch_mode="asyncio"
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def _post(server: LightningStoreServer, data: bytes, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.post(server.endpoint + "/v1/traces", data=data, headers=headers) as r:
            return r.status, await r.read(), r.headers


async def test_protobuf_export_end_to_end(server: LightningStoreServer) -> None:
    started = await server.start_rollout(input="x")
    data = _request(started.rollout_id, started.attempt.attempt_id).SerializeToString()
    status, body, headers = await _post(
        server, data, {"Content-Type": "application/x-protobuf; charset=binary", "Accept-Encoding": "identity"}
    )
    assert status == 200 and headers["content-type"] == PROTOBUF_CT
    assert ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()
    spans = await server.query_spans(started.rollout_id)
    assert [s.sequence_id for s in spans] == [1, 2]
    assert (await server.get_latest_attempt(started.rollout_id)).status == "running"  # type: ignore[union-attr]


async def test_gzip_request_and_response(server: LightningStoreServer) -> None:
    started = await server.start_rollout(input="x")
    data = gzip.compress(_request(started.rollout_id, started.attempt.attempt_id).SerializeToString())
    status, body, headers = await _post(
        server,
        data,
        {"Content-Type": PROTOBUF_CT, "Content-Encoding": "gzip", "Accept-Encoding": "deflate, gzip;q=0.5"},
    )
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == b""
    assert len(await server.query_spans(started.rollout_id)) == 2


async def test_json_export(server: LightningStoreServer) -> None:
    started = await server.start_rollout(input="x")
    payload = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "agentlightning.rollout_id", "value": {"stringValue": started.rollout_id}},
                        {"key": "agentlightning.attempt_id", "value": {"stringValue": started.attempt.attempt_id}},
                    ]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "json-span",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000001000000000",
                                "kind": 2,
                                "status": {"code": 1},
                                "attributes": [{"key": "n", "value": {"intValue": "3"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    status, body, headers = await _post(
        server, json.dumps(payload).encode(), {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    )
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == {}
    (span,) = await server.query_spans(started.rollout_id)
    assert span.name == "json-span" and span.trace_id == "5b8efff798038103d269b633813fc60c"
    assert span.span_id == "eee19b7ec3c1b174" and span.parent_id == "eee19b7ec3c1b173"
    assert span.attributes == {"n": 3} and span.status.status_code == "OK"

    status, body, headers = await _post(server, b"[1]", {"Content-Type": "application/json"})
    assert status == 400 and headers["content-type"] == "application/json"
    assert "must be an object" in json.loads(gzip.decompress(body))["message"]


async def test_error_status_bodies(server: LightningStoreServer) -> None:
    status, body, headers = await _post(server, b"x", {"Content-Type": "text/csv", "Accept-Encoding": "identity"})
    assert status == 400 and headers["content-type"] == PROTOBUF_CT
    assert Status.FromString(body).message == "Unsupported Content-Type 'text/csv', expected 'application/x-protobuf'"
    status, body, _ = await _post(server, b"\xff\xff", {"Content-Type": PROTOBUF_CT, "Accept-Encoding": "gzip"})
    assert status == 400
    assert Status.FromString(gzip.decompress(body)).message.startswith("Unable to parse OTLP traces payload")
    status, body, _ = await _post(server, b"", {"Content-Type": PROTOBUF_CT})
    assert status == 200  # an empty body is an empty request


async def test_exporter_against_live_server(server: LightningStoreServer) -> None:
    import asyncio

    from opentelemetry.sdk.trace import TracerProvider

    started = await server.start_rollout(input="x")
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(server.otlp_traces_endpoint(), started.rollout_id, started.attempt.attempt_id)
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("exported") as span:
        span.set_attribute("k", "v")
    for _ in range(2):  # the second copy is what the exporter sends when the store's answer to the first was lost
        assert (await asyncio.to_thread(exporter.export, [span])).name == "SUCCESS"
    (stored,) = await server.query_spans(started.rollout_id)  # a batch sent twice is stored once
    assert stored.name == "exported" and stored.attributes["k"] == "v"
    exporter.shutdown()


def test_ids_of_the_wrong_length_reject_their_span_and_empty_ids_stand_for_zeros() -> None:
    request = _request("ro-1", "at-1", n=4)
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = b""  # empty: all zeros (as the reference)
    spans[0].span_id = b""
    spans[1].trace_id = b"\x01" * 17
    spans[2].links[0].span_id = b"\x03" * 7
    rejected: list[str] = []
    decoded, missing = decode_spans(request, rejected)
    assert [span.name for span in decoded] == ["span-0", "span-3"] and len(missing) == 2
    assert decoded[0].trace_id == "0" * 32 and decoded[0].span_id == "0" * 16
    assert rejected == [
        "Invalid OTLP span 'span-1' (span_id 0202020202020202): trace_id has 17 bytes, expected 16",
        "Invalid OTLP span 'span-2' (span_id 0303030303030303): links[0].span_id has 7 bytes, expected 8",
    ]
    with pytest.raises(OTLPPayloadError, match="'span-1'.*trace_id has 17 bytes"):
        decode_spans(request)
