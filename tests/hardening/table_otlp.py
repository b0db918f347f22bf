"""Table rows and payload builders for ``POST /v1/traces``: OTLP protobuf and JSON, compression bombs, encodings."""

from __future__ import annotations

import gzip
import zlib
from typing import Any, Dict, List, Optional

from rollouthub.store.domains import INT64_MAX

from .case import BODY_LIMIT, NUL, SURROGATE, Case, j, nested_json

# ---------------------------------------------------------------------------------------------------------------------
# OTLP payloads
# ---------------------------------------------------------------------------------------------------------------------

PROTOBUF = (("Content-Type", "application/x-protobuf"),)
OTLP_JSON = (("Content-Type", "application/json"),)


def otlp_request(
    rollout_id: str,
    attempt_id: str,
    *,
    name: str = "otlp-span",
    attributes: Optional[Dict[str, Any]] = None,
    resource_attributes: Optional[Dict[str, Any]] = None,
    event_name: Optional[str] = None,
    kvlist_depth: int = 0,
) -> bytes:
    """A serialized ``ExportTraceServiceRequest`` with one span of the given rollout attempt."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_attrs = {"agentlightning.rollout_id": rollout_id, "agentlightning.attempt_id": attempt_id}
    resource_attrs.update(resource_attributes or {})
    for key, value in resource_attrs.items():
        _set_attr(resource_spans.resource.attributes.add(), key, value)
    span = resource_spans.scope_spans.add().spans.add(name=name, trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.start_time_unix_nano = 1_000_000_000
    span.end_time_unix_nano = 2_000_000_000
    for key, value in (attributes or {}).items():
        _set_attr(span.attributes.add(), key, value)
    if event_name is not None:
        span.events.add(name=event_name, time_unix_nano=1_500_000_000)
    if kvlist_depth:
        attr = span.attributes.add()
        attr.key = "deep"
        value = attr.value
        for _ in range(kvlist_depth):
            inner = value.kvlist_value.values.add()
            inner.key = "k"
            value = inner.value
        value.string_value = "leaf"
    return bytes(request.SerializeToString())


def _set_attr(kv: Any, key: str, value: Any) -> None:
    kv.key = key
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = str(value)


def otlp_json(rollout_id: str, attempt_id: str, *, name: str = "otlp-span", attributes: Any = None) -> Dict[str, Any]:
    """An OTLP JSON export with one span of the given rollout attempt."""
    attrs = [{"key": key, "value": value} for key, value in (attributes or {}).items()]
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "agentlightning.rollout_id", "value": {"stringValue": rollout_id}},
                        {"key": "agentlightning.attempt_id", "value": {"stringValue": attempt_id}},
                    ]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "01" * 16,
                                "spanId": "02" * 8,
                                "name": name,
                                "startTimeUnixNano": "1000000000",
                                "endTimeUnixNano": "2000000000",
                                "attributes": attrs,
                            }
                        ]
                    }
                ],
            }
        ]
    }


def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of zeros that inflates to ``inflated`` bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\x00" * (1 << 20)
    parts: List[bytes] = []
    left = inflated
    while left > 0:
        part = chunk if left >= len(chunk) else chunk[:left]
        parts.append(compressor.compress(part))
        left -= len(part)
    parts.append(compressor.flush())
    return b"".join(parts)


def otlp_cases(ids: Dict[str, str]) -> List[Case]:
    """``POST /v1/traces``: hostile texts, sequence ids, bad protobuf/JSON, bombs, encodings."""
    rid, aid = ids["rollout_id"], ids["attempt_id"]
    gz = (("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip"))
    good = otlp_request(rid, aid)
    cases = [
        Case(
            "otlp NUL in span name",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, name=f"a{NUL}b"),
            400,
            "name",
            PROTOBUF,
        ),
        Case(
            "otlp NUL in attribute",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, attributes={"k": f"v{NUL}"}),
            400,
            "attributes",
            PROTOBUF,
        ),
        Case(
            "otlp NUL in attribute key",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, attributes={f"k{NUL}": "v"}),
            400,
            "attributes",
            PROTOBUF,
        ),
        Case(
            "otlp NUL in resource attribute",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, resource_attributes={"service.name": f"s{NUL}"}),
            400,
            "resource",
            PROTOBUF,
        ),
        Case(
            "otlp NUL in event name",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, event_name=f"e{NUL}"),
            400,
            "events",
            PROTOBUF,
        ),
        Case(
            "otlp NUL in rollout id",
            "POST",
            "/v1/traces",
            otlp_request(rid + NUL, aid),
            400,
            "rollout_id",
            PROTOBUF,
        ),
        Case(
            "otlp NUL gzip",
            "POST",
            "/v1/traces",
            gzip.compress(otlp_request(rid, aid, name=f"g{NUL}")),
            400,
            "name",
            gz,
        ),
        Case(
            "otlp sequence id 2^70 is ignored",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, attributes={"agentlightning.span_sequence_id": str(2**70)}),
            200,
            headers=PROTOBUF,
        ),
        Case(
            "otlp sequence id int64 max is ignored",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, attributes={"agentlightning.span_sequence_id": INT64_MAX}),
            200,
            headers=PROTOBUF,
        ),
        Case(
            "otlp sequence id text is ignored",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, attributes={"agentlightning.span_sequence_id": "abc"}),
            200,
            headers=PROTOBUF,
        ),
        Case("otlp truncated protobuf", "POST", "/v1/traces", good[:-3], 400, "parse", PROTOBUF),
        Case("otlp random bytes", "POST", "/v1/traces", bytes(range(256)) * 4, 400, "parse", PROTOBUF),
        Case(
            "otlp kvlist depth 500", "POST", "/v1/traces", otlp_request(rid, aid, kvlist_depth=500), 400, None, PROTOBUF
        ),
        Case(
            "otlp kvlist depth 90",
            "POST",
            "/v1/traces",
            otlp_request(rid, aid, kvlist_depth=90),
            (200, 400),
            None,
            PROTOBUF,
        ),
        Case("otlp corrupt gzip", "POST", "/v1/traces", b"not gzip at all", 400, "gzip", gz),
        Case("otlp truncated gzip", "POST", "/v1/traces", gzip.compress(good)[:-8], 400, "gzip", gz),
        Case("otlp gzip bomb", "POST", "/v1/traces", gzip_bomb(64 * BODY_LIMIT), 413, "limit", gz),
        Case("otlp gzip just over the limit", "POST", "/v1/traces", gzip_bomb(BODY_LIMIT + 1), 413, "limit", gz),
        Case("otlp gzip empty", "POST", "/v1/traces", gzip.compress(b""), 200, headers=gz),
        Case(
            "otlp deflate",
            "POST",
            "/v1/traces",
            zlib.compress(good),
            200,
            headers=(("Content-Type", "application/x-protobuf"), ("Content-Encoding", "deflate")),
        ),
        Case(
            "otlp deflate bomb",
            "POST",
            "/v1/traces",
            zlib.compress(b"\x00" * (8 * BODY_LIMIT), 9),
            413,
            "limit",
            (("Content-Type", "application/x-protobuf"), ("Content-Encoding", "deflate")),
        ),
        Case(
            "otlp brotli",
            "POST",
            "/v1/traces",
            good,
            415,
            "br",
            (("Content-Type", "application/x-protobuf"), ("Content-Encoding", "br")),
        ),
        Case(
            "otlp double gzip",
            "POST",
            "/v1/traces",
            gzip.compress(gzip.compress(good)),
            415,
            "gzip",
            (("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip, gzip")),
        ),
        Case("otlp no content type", "POST", "/v1/traces", good, 400, "Content-Type", ()),
        Case("otlp text/plain", "POST", "/v1/traces", good, 400, "Content-Type", (("Content-Type", "text/plain"),)),
        Case(
            "otlp unknown rollout",
            "POST",
            "/v1/traces",
            otlp_request("ro-missing", "at-missing"),
            400,
            "ro-missing",
            PROTOBUF,
        ),
        Case(
            "otlp json NUL name", "POST", "/v1/traces", j(otlp_json(rid, aid, name=f"x{NUL}")), 400, "name", OTLP_JSON
        ),
        Case(
            "otlp json surrogate name",
            "POST",
            "/v1/traces",
            j(otlp_json(rid, aid, name=f"x{SURROGATE}")),
            400,
            "name",
            OTLP_JSON,
        ),
        Case(
            "otlp json surrogate attribute",
            "POST",
            "/v1/traces",
            j(otlp_json(rid, aid, attributes={"k": {"stringValue": SURROGATE}})),
            400,
            None,
            OTLP_JSON,
        ),
        Case(
            "otlp json NUL attribute key",
            "POST",
            "/v1/traces",
            j(otlp_json(rid, aid, attributes={f"k{NUL}": {"stringValue": "v"}})),
            400,
            "attributes",
            OTLP_JSON,
        ),
        Case(
            "otlp json int overflow",
            "POST",
            "/v1/traces",
            j(otlp_json(rid, aid, attributes={"n": {"intValue": str(2**70)}})),
            400,
            None,
            OTLP_JSON,
        ),
        Case(
            "otlp json depth 1000",
            "POST",
            "/v1/traces",
            b'{"resourceSpans": ' + nested_json(1000) + b"}",
            400,
            "depth",
            OTLP_JSON,
        ),
        Case(
            "otlp json depth 100000",
            "POST",
            "/v1/traces",
            b'{"x": ' + nested_json(100_000) + b"}",
            400,
            None,
            OTLP_JSON,
        ),
        Case("otlp json not an object", "POST", "/v1/traces", b"[1]", 400, "object", OTLP_JSON),
        Case(
            "otlp json bad hex id",
            "POST",
            "/v1/traces",
            j({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}),
            400,
            "traceId",
            OTLP_JSON,
        ),
        Case("otlp json broken", "POST", "/v1/traces", b"{broken", 400, "JSON", OTLP_JSON),
        Case("otlp json NaN", "POST", "/v1/traces", b'{"resourceSpans": NaN}', 400, None, OTLP_JSON),
        Case("otlp metrics", "POST", "/v1/metrics", b"", 501, headers=PROTOBUF),
    ]
    return cases
