"""Two input-domain gaps, closed the same way on every backend (memory, SQLite, PostgreSQL), over real HTTP.

* ``sort_by`` on a field that has no order (an object, a list, ``Any``: ``config``, ``metadata``, ``input``,
  ``attributes``, ``heartbeat_stats``, ``resources``) is a 400 naming the field -- byte-identical on every backend --
  instead of sorting JSON text (SQL) or failing inside Python's comparison (memory).
* An OTLP span whose trace id or span id has the wrong length (protobuf or OTLP JSON) is counted in the response's
  ``partial_success`` with a message naming the span; it is not stored, and the valid spans of the same export are.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import aiohttp
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from .cases import otlp_json, otlp_request
from .live import BACKENDS, Live, live_server

pytestmark = pytest.mark.timeout(120)

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def _sort_requests(rollout_id: str) -> List[Tuple[str, str, str, Any]]:
    """``(field, method, path, body or query)`` for every search route and a field of its model without an order."""
    return [
        ("config", "POST", "/v1/agl/rollouts/search", {"sort_by": "config"}),
        ("metadata", "GET", "/v1/agl/rollouts", {"sort_by": "metadata"}),
        ("input", "POST", "/v1/agl/rollouts/search", {"sort_by": "input", "sort_order": "desc"}),
        ("metadata", "GET", f"/v1/agl/rollouts/{rollout_id}/attempts", {"sort_by": "metadata"}),
        ("attributes", "POST", "/v1/agl/spans/search", {"rollout_id": rollout_id, "sort_by": "attributes"}),
        ("events", "GET", "/v1/agl/spans", {"rollout_id": rollout_id, "sort_by": "events"}),
        ("status", "GET", "/v1/agl/spans", {"rollout_id": rollout_id, "sort_by": "status"}),
        ("heartbeat_stats", "POST", "/v1/agl/workers/search", {"sort_by": "heartbeat_stats"}),
        ("resources", "GET", "/v1/agl/resources", {"sort_by": "resources"}),
    ]


async def test_sort_by_a_field_without_an_order_is_the_same_400_on_every_backend() -> None:
    answers: Dict[str, List[Tuple[str, int, Dict[str, Any]]]] = {}
    for backend in BACKENDS:
        async with live_server(backend) as live, aiohttp.ClientSession() as session:
            got = []
            for field, method, path, payload in _sort_requests(live.ids["rollout_id"]):
                kwargs: Dict[str, Any] = {"json": payload} if method == "POST" else {"params": payload}
                async with session.request(method, live.endpoint + path, **kwargs) as r:
                    body = await r.json()
                    got.append((field, r.status, body))
            answers[backend] = [(field, status, body) for field, status, body in got]
            # Sortable fields still sort on the same server.
            async with session.get(live.endpoint + "/v1/agl/rollouts", params={"sort_by": "start_time"}) as r:
                assert r.status == 200 and (await r.json())["total"] == 1
    memory = answers["memory"]
    for field, status, body in memory:
        assert status == 400, (field, body)
        assert body["detail"].startswith(f"Invalid sort_by: {field}, field has no order on "), body
        assert "sortable fields are: " in body["detail"]
    assert answers["sqlite"] == memory
    assert answers["postgres"] == memory


def _with_bad_ids(request_bytes: bytes) -> Tuple[bytes, List[str]]:
    """The export of ``otlp_request`` plus three spans whose ids have wrong lengths; their names."""
    request = ExportTraceServiceRequest.FromString(request_bytes)
    spans = request.resource_spans[0].scope_spans[0].spans
    good = spans[0]
    bad_names = []
    for name, field, value in (
        ("short-trace", "trace_id", b"\x0a\x0b\x0c"),
        ("long-span", "span_id", b"\x05" * 9),
        ("short-parent", "parent_span_id", b"\x06" * 4),
    ):
        bad = spans.add()
        bad.CopyFrom(good)
        bad.name = name
        bad.span_id = bytes([len(bad_names) + 7]) * 8
        setattr(bad, field, value)
        bad_names.append(name)
    return bytes(request.SerializeToString()), bad_names


async def _stored_names(live: Live) -> List[str]:
    async with aiohttp.ClientSession() as session:
        body = {"rollout_id": live.ids["rollout_id"]}
        async with session.post(live.endpoint + "/v1/agl/spans/search", json=body) as r:
            assert r.status == 200
            return [span["name"] for span in (await r.json())["items"]]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_otlp_protobuf_spans_with_wrong_id_lengths_are_reported_and_the_others_stored(backend: str) -> None:
    async with live_server(backend) as live, aiohttp.ClientSession() as session:
        rid, aid = live.ids["rollout_id"], live.ids["attempt_id"]
        body, bad_names = _with_bad_ids(otlp_request(rid, aid, name="good"))
        async with session.post(live.endpoint + "/v1/traces", data=body, headers=PROTOBUF) as r:
            assert r.status == 200
            answer = ExportTraceServiceResponse.FromString(await r.read())
        assert answer.partial_success.rejected_spans == 3
        message = answer.partial_success.error_message
        assert "'short-trace'" in message and "trace_id has 3 bytes, expected 16" in message
        assert "(and 2 more rejected span(s))" in message
        stored = await _stored_names(live)
        assert "good" in stored and not set(bad_names) & set(stored)

        # Each kind of bad id alone (with no valid span beside it) is a 400 naming the span and the id.
        for name, expected in (
            ("long-span", "span_id has 9 bytes, expected 8"),
            ("short-parent", "parent_span_id has 4 bytes, expected 8"),
        ):
            request = ExportTraceServiceRequest.FromString(body)
            spans = request.resource_spans[0].scope_spans[0].spans
            keep = [span for span in spans if span.name == name]
            del spans[:]
            spans.extend(keep)
            async with session.post(
                live.endpoint + "/v1/traces", data=request.SerializeToString(), headers=PROTOBUF
            ) as r:
                assert r.status == 400
                status = Status.FromString(await r.read())
            assert f"'{name}'" in status.message and expected in status.message
        assert not set(bad_names) & set(await _stored_names(live))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_otlp_json_spans_with_wrong_id_lengths_are_reported_and_the_others_stored(backend: str) -> None:
    async with live_server(backend) as live, aiohttp.ClientSession() as session:
        rid, aid = live.ids["rollout_id"], live.ids["attempt_id"]
        export = otlp_json(rid, aid, name="good-json")
        spans = export["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans.append({**spans[0], "name": "short-trace-json", "traceId": "abcdef", "spanId": "07" * 8})
        spans.append({**spans[0], "name": "link-json", "spanId": "08" * 8, "links": [{"traceId": "01" * 17}]})
        async with session.post(live.endpoint + "/v1/traces", data=json.dumps(export), headers=JSON) as r:
            assert r.status == 200
            answer = await r.json()
        assert answer["partialSuccess"]["rejectedSpans"] == "2"
        message = answer["partialSuccess"]["errorMessage"]
        assert message.startswith(
            "Invalid OTLP span 'short-trace-json' (span_id 0707070707070707): trace_id has 3 bytes"
        )
        assert message.endswith(" (and 1 more rejected span(s))")

        # Ids that are no hex at all (an odd number of digits, other characters) reject their span the same way.
        export = otlp_json(rid, aid, name="good-json-2")
        spans = export["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans[0]["spanId"] = "09" * 8  # not a duplicate of the first export's span
        spans.append({**spans[0], "name": "odd-json", "traceId": "abc"})
        spans.append({**spans[0], "name": "not-hex-json", "spanId": "08" * 8, "parentSpanId": "zz" * 8})
        async with session.post(live.endpoint + "/v1/traces", data=json.dumps(export), headers=JSON) as r:
            assert r.status == 200
            answer = await r.json()
        assert answer["partialSuccess"]["rejectedSpans"] == "2"
        message = answer["partialSuccess"]["errorMessage"]
        assert (
            message == "Invalid OTLP span 'odd-json': traceId is not a hex string: 'abc' (and 1 more rejected span(s))"
        )
        stored = await _stored_names(live)
        assert "good-json" in stored and "good-json-2" in stored
        assert not {"short-trace-json", "link-json", "odd-json", "not-hex-json"} & set(stored)
