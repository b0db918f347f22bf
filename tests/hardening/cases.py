"""The adversarial request table: every hostile or edge-case request the suite sends, declared as data.

A :class:`Case` is one HTTP request (method, path with ``{rollout_id}``-style placeholders for the seeded ids, raw
query string, raw body, headers) and what the server must answer: the status code, a text the response body must
contain (usually the name of the offending field), and optionally texts it must not contain or a check of the
successful answer. :func:`build_cases` returns the whole table for one seeded server; it is the same for every
backend (the point: memory, SQLite and PostgreSQL answer identically).

Classes covered: malformed JSON, wrong types, unknown enums, NUL characters and lone surrogates in every kind of
string (bodies, object keys, query and path parameters, OTLP protobuf and OTLP JSON), integers outside the signed
64-bit range, non-finite numbers, nesting depth, huge ``limit``/``offset``, sequence-id overflow, compressed bombs and
unsupported encodings, bad protobuf and OTLP JSON, odd ids, injection-looking strings in filters and sort keys, path
traversal on the dashboard route, unknown routes and methods, malformed headers.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from rollouthub.store.domains import INT64_MAX, MAX_JSON_DEPTH, MAX_OFFSET, MAX_PAGE_SIZE, MAX_SEQUENCE_ID

from .live import legit_span

NUL = "\x00"
SURROGATE = "\ud800"
BODY_LIMIT = 256 * 1024
"""``max_body_bytes`` of the servers the table runs against (small, so that bombs stay cheap)."""

Check = Callable[[Any], Optional[str]]
"""Checks a successful JSON answer: ``None`` when fine, else what is wrong."""


@dataclass(frozen=True)
class Case:
    """One request of the table and the answer it must get."""

    name: str
    method: str
    path: str
    body: Optional[bytes] = None
    status: Union[int, Tuple[int, ...]] = 400
    names: Optional[str] = None
    """Text the response body must contain (the field, parameter or limit the error is about)."""
    headers: Tuple[Tuple[str, str], ...] = (("Content-Type", "application/json"),)
    query: str = ""
    must_not_contain: Tuple[str, ...] = ()
    check: Optional[Check] = None
    raw: bool = False
    """Send the request line and headers byte for byte over a socket (paths a client would normalise)."""

    def statuses(self) -> Tuple[int, ...]:
        """The acceptable status codes."""
        return self.status if isinstance(self.status, tuple) else (self.status,)


def j(value: Any) -> bytes:
    """JSON text of ``value``; NUL and lone surrogates come out as ``\\u0000`` / ``\\ud800`` escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` nested arrays around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_json(depth: int) -> bytes:
    """``depth`` nested arrays as JSON text (built as text: too deep for ``json.dumps``)."""
    return b"[" * depth + b"1" + b"]" * depth


def total_is(expected: int) -> Check:
    """A check that a paginated answer has ``total == expected``."""

    def check(payload: Any) -> Optional[str]:
        total = payload.get("total") if isinstance(payload, dict) else None
        return None if total == expected else f"expected total {expected}, got {total!r}"

    return check


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


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------


def _text_locations(ids: Dict[str, str]) -> List[Tuple[str, str, str, Callable[[str], Any], str]]:
    """``(label, method, path, body builder taking the hostile text, field the error must name)`` for every string of
    every JSON body."""
    rid, aid = ids["rollout_id"], ids["attempt_id"]

    def span(**changes: Any) -> Callable[[str], Any]:
        def build(text: str) -> Any:
            body = legit_span(rid, aid, sequence_id=7, span_id="00000000000000c1")
            for key, value in changes.items():
                body[key] = value(text) if callable(value) else value
            return body

        return build

    return [
        ("enqueue input", "POST", "/v1/agl/queues/rollouts/enqueue", lambda t: {"rollouts": [{"input": t}]}, "input"),
        (
            "enqueue nested input",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": {"q": ["ok", {"deep": t}]}}]},
            "deep",
        ),
        (
            "enqueue input key",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": {f"k{t}": 1}}]},
            "object key",
        ),
        (
            "enqueue metadata",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": 1, "metadata": {"m": t}}]},
            "metadata",
        ),
        (
            "enqueue resources_id",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": 1, "resources_id": t}]},
            "resources_id",
        ),
        ("start input", "POST", "/v1/agl/rollouts", lambda t: {"input": t}, "input"),
        ("start metadata key", "POST", "/v1/agl/rollouts", lambda t: {"input": 1, "metadata": {t: 1}}, "metadata"),
        ("start worker_id", "POST", "/v1/agl/rollouts", lambda t: {"input": 1, "worker_id": t}, "worker_id"),
        ("dequeue worker_id", "POST", "/v1/agl/queues/rollouts/dequeue", lambda t: {"worker_id": t}, "worker_id"),
        (
            "search rollout_id_contains",
            "POST",
            "/v1/agl/rollouts/search",
            lambda t: {"rollout_id_contains": t},
            "rollout_id_contains",
        ),
        ("search rollout_id_in", "POST", "/v1/agl/rollouts/search", lambda t: {"rollout_id_in": [t]}, "rollout_id_in"),
        ("update rollout input", "POST", f"/v1/agl/rollouts/{rid}", lambda t: {"input": {"a": t}}, "input"),
        ("update rollout metadata", "POST", f"/v1/agl/rollouts/{rid}", lambda t: {"metadata": {"a": t}}, "metadata"),
        (
            "update rollout resources_id",
            "POST",
            f"/v1/agl/rollouts/{rid}",
            lambda t: {"resources_id": t},
            "resources_id",
        ),
        (
            "start attempt worker_id",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts",
            lambda t: {"worker_id": t},
            "worker_id",
        ),
        (
            "update attempt worker_id",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/latest",
            lambda t: {"worker_id": t},
            "worker_id",
        ),
        (
            "update attempt metadata",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            lambda t: {"metadata": {"note": t}},
            "metadata",
        ),
        (
            "heartbeat stats value",
            "POST",
            "/v1/agl/workers/seed-worker",
            lambda t: {"heartbeat_stats": {"cpu": t}},
            "heartbeat_stats",
        ),
        (
            "heartbeat stats key",
            "POST",
            "/v1/agl/workers/seed-worker",
            lambda t: {"heartbeat_stats": {t: 1}},
            "heartbeat_stats",
        ),
        (
            "search workers worker_id_contains",
            "POST",
            "/v1/agl/workers/search",
            lambda t: {"worker_id_contains": t},
            "worker_id_contains",
        ),
        (
            "resources template",
            "POST",
            "/v1/agl/resources",
            lambda t: {"p": {"resource_type": "prompt_template", "template": t, "engine": "f-string"}},
            "template",
        ),
        (
            "resources name",
            "POST",
            "/v1/agl/resources",
            lambda t: {t: {"resource_type": "prompt_template", "template": "x", "engine": "f-string"}},
            "object key",
        ),
        (
            "resources llm sampling",
            "POST",
            "/v1/agl/resources",
            lambda t: {
                "llm": {"resource_type": "llm", "endpoint": "http://x", "model": "m", "sampling_parameters": {"s": t}}
            },
            "sampling_parameters",
        ),
        (
            "update resources endpoint",
            "POST",
            "/v1/agl/resources/res-hostile",
            lambda t: {"llm": {"resource_type": "llm", "endpoint": t, "model": "m"}},
            "endpoint",
        ),
        ("span name", "POST", "/v1/agl/spans", span(name=lambda t: t), "name"),
        ("span attribute value", "POST", "/v1/agl/spans", span(attributes=lambda t: {"a": t}), "attributes"),
        ("span attribute key", "POST", "/v1/agl/spans", span(attributes=lambda t: {t: "v"}), "attributes"),
        ("span attribute list", "POST", "/v1/agl/spans", span(attributes=lambda t: {"l": ["ok", t]}), "attributes"),
        (
            "span event name",
            "POST",
            "/v1/agl/spans",
            span(events=lambda t: [{"name": t, "attributes": {}, "timestamp": 1.0}]),
            "events",
        ),
        (
            "span resource attribute",
            "POST",
            "/v1/agl/spans",
            span(resource=lambda t: {"attributes": {"service.name": t}, "schema_url": ""}),
            "resource",
        ),
        (
            "span status description",
            "POST",
            "/v1/agl/spans",
            span(status=lambda t: {"status_code": "ERROR", "description": t}),
            "description",
        ),
        ("span trace_id", "POST", "/v1/agl/spans", span(trace_id=lambda t: t), "trace_id"),
        ("span parent_id", "POST", "/v1/agl/spans", span(parent_id=lambda t: t), "parent_id"),
        ("span extra field", "POST", "/v1/agl/spans", span(custom_extra=lambda t: {"x": t}), "custom_extra"),
        ("span rollout_id", "POST", "/v1/agl/spans", span(rollout_id=lambda t: t), "rollout_id"),
        (
            "search spans name_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "name_contains": t},
            "name_contains",
        ),
        (
            "search spans trace_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "trace_id_contains": t},
            "trace_id_contains",
        ),
        (
            "search spans span_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "span_id_contains": t},
            "span_id_contains",
        ),
        (
            "search spans parent_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "parent_id_contains": t},
            "parent_id_contains",
        ),
        ("search spans name", "POST", "/v1/agl/spans/search", lambda t: {"rollout_id": rid, "name": t}, "name"),
        ("search spans rollout_id", "POST", "/v1/agl/spans/search", lambda t: {"rollout_id": t}, "rollout_id"),
        (
            "search spans attempt_id",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "attempt_id": t},
            "attempt_id",
        ),
        (
            "next sequence id rollout",
            "POST",
            "/v1/agl/spans/next",
            lambda t: {"rollout_id": t, "attempt_id": aid},
            "rollout_id",
        ),
        (
            "next sequence id attempt",
            "POST",
            "/v1/agl/spans/next",
            lambda t: {"rollout_id": rid, "attempt_id": t},
            "attempt_id",
        ),
        (
            "wait rollout_ids",
            "POST",
            "/v1/agl/waits/rollouts",
            lambda t: {"rollout_ids": [t], "timeout": 0},
            "rollout_ids",
        ),
    ]


def _param_locations(ids: Dict[str, str]) -> List[Tuple[str, str, str, str, str]]:
    """``(label, method, path with {t} for the hostile text, query with {t}, parameter the error must name)``."""
    rid = ids["rollout_id"]
    return [
        (
            "GET rollouts rollout_id_contains",
            "GET",
            "/v1/agl/rollouts",
            "rollout_id_contains={t}",
            "rollout_id_contains",
        ),
        ("GET rollouts rollout_id_in", "GET", "/v1/agl/rollouts", "rollout_id_in={t}", "rollout_id_in"),
        ("GET workers worker_id_contains", "GET", "/v1/agl/workers", "worker_id_contains={t}", "worker_id_contains"),
        ("GET spans rollout_id", "GET", "/v1/agl/spans", "rollout_id={t}", "rollout_id"),
        ("GET spans name_contains", "GET", "/v1/agl/spans", f"rollout_id={rid}&name_contains={{t}}", "name_contains"),
        ("GET spans trace_id", "GET", "/v1/agl/spans", f"rollout_id={rid}&trace_id={{t}}", "trace_id"),
        (
            "GET resources resources_id_contains",
            "GET",
            "/v1/agl/resources",
            "resources_id_contains={t}",
            "resources_id_contains",
        ),
        ("GET resources resources_id", "GET", "/v1/agl/resources", "resources_id={t}", "resources_id"),
        ("GET rollout by id", "GET", "/v1/agl/rollouts/a{t}b", "", "rollout_id"),
        ("POST update rollout id", "POST", "/v1/agl/rollouts/a{t}b", "", "rollout_id"),
        ("GET attempts of rollout", "GET", "/v1/agl/rollouts/a{t}b/attempts", "", "rollout_id"),
        ("GET latest attempt", "GET", "/v1/agl/rollouts/a{t}b/attempts/latest", "", "rollout_id"),
        ("POST start attempt id", "POST", "/v1/agl/rollouts/a{t}b/attempts", "", "rollout_id"),
        ("POST update attempt rollout id", "POST", "/v1/agl/rollouts/a{t}b/attempts/latest", "", "rollout_id"),
        ("POST update attempt attempt id", "POST", f"/v1/agl/rollouts/{rid}/attempts/a{{t}}b", "", "attempt_id"),
        ("POST search attempts id", "POST", "/v1/agl/rollouts/a{t}b/attempts/search", "", "rollout_id"),
        ("GET worker by id", "GET", "/v1/agl/workers/a{t}b", "", "worker_id"),
        ("POST heartbeat id", "POST", "/v1/agl/workers/a{t}b", "", "worker_id"),
        ("GET resources by id", "GET", "/v1/agl/resources/a{t}b", "", "resources_id"),
        ("POST update resources id", "POST", "/v1/agl/resources/a{t}b", "", "resources_id"),
    ]


_PARAM_BODIES = {
    "POST update rollout id": b"{}",
    "POST start attempt id": b"{}",
    "POST update attempt rollout id": b'{"status": "running"}',
    "POST update attempt attempt id": b'{"status": "running"}',
    "POST search attempts id": b"{}",
    "POST heartbeat id": b"{}",
    "POST update resources id": j({"p": {"resource_type": "prompt_template", "template": "x", "engine": "f-string"}}),
}


def _text_cases(ids: Dict[str, str]) -> List[Case]:
    cases: List[Case] = []
    for label, method, path, build, names in _text_locations(ids):
        for kind, text in (("NUL", f"a{NUL}b"), ("surrogate", f"a{SURROGATE}b")):
            cases.append(Case(f"{kind} in {label}", method, path, j(build(text)), 400, names))
    for label, method, path, query, names in _param_locations(ids):
        body = _PARAM_BODIES.get(label)
        cases.append(
            Case(
                f"NUL in {label}",
                method,
                path.replace("{t}", "%00"),
                body,
                400,
                names,
                query=query.replace("{t}", quote("a\x00b")),
            )
        )
    return cases


def _number_cases(ids: Dict[str, str]) -> List[Case]:
    rid, aid = ids["rollout_id"], ids["attempt_id"]
    cases: List[Case] = []
    for seq, names in (
        (MAX_SEQUENCE_ID + 1, "sequence_id"),
        (INT64_MAX, "sequence_id"),
        (2**63, "sequence_id"),
        (2**70, "sequence_id"),
        (-(2**63) - 1, "sequence_id"),
    ):
        body = legit_span(rid, aid, sequence_id=seq, span_id="00000000000000d1")
        cases.append(Case(f"span sequence_id {seq}", "POST", "/v1/agl/spans", j(body), 400, names))
    searches = [
        ("/v1/agl/rollouts/search", {}),
        ("/v1/agl/workers/search", {}),
        ("/v1/agl/spans/search", {"rollout_id": rid}),
        (f"/v1/agl/rollouts/{rid}/attempts/search", {}),
    ]
    for path, base in searches:
        for key, value in (
            ("limit", 2**31),
            ("limit", MAX_PAGE_SIZE + 1),
            ("limit", 2**63),
            ("offset", MAX_OFFSET + 1),
            ("offset", 2**70),
        ):
            cases.append(Case(f"{path} {key}={value}", "POST", path, j({**base, key: value}), 400, key))
    for path, query in (
        ("/v1/agl/rollouts", ""),
        ("/v1/agl/workers", ""),
        ("/v1/agl/spans", f"rollout_id={rid}&"),
        ("/v1/agl/resources", ""),
        (f"/v1/agl/rollouts/{rid}/attempts", ""),
    ):
        for key, value in (("limit", 2**31), ("offset", 2**31), ("limit", 2**64)):
            cases.append(Case(f"GET {path} {key}={value}", "GET", path, None, 400, key, query=f"{query}{key}={value}"))
    for value in (2**31, MAX_PAGE_SIZE + 1, 2**63, 2**70):
        cases.append(
            Case(f"dequeue limit {value}", "POST", "/v1/agl/queues/rollouts/dequeue", j({"limit": value}), 400, "limit")
        )
    big = {
        "input 2^100": ("/v1/agl/rollouts", {"input": 2**100}, "input"),
        "metadata 2^64": ("/v1/agl/rollouts", {"input": 1, "metadata": {"n": 2**64}}, "metadata"),
        "max_attempts 2^70": ("/v1/agl/rollouts", {"input": 1, "config": {"max_attempts": 2**70}}, "max_attempts"),
        "heartbeat 2^64": ("/v1/agl/workers/seed-worker", {"heartbeat_stats": {"n": -(2**64)}}, "heartbeat_stats"),
        "span attribute 2^64": (
            "/v1/agl/spans",
            {**legit_span(rid, aid, sequence_id=8, span_id="00000000000000d2"), "attributes": {"n": 2**64}},
            "attributes",
        ),
    }
    for label, (path, body, names) in big.items():
        cases.append(Case(f"integer {label}", "POST", path, j(body), 400, names))
    non_finite = {
        "input NaN": ("/v1/agl/rollouts", b'{"input": NaN}', "input"),
        "metadata Infinity": ("/v1/agl/rollouts", b'{"input": 1, "metadata": {"x": Infinity}}', "metadata"),
        "input 1e400": ("/v1/agl/rollouts", b'{"input": [1e400]}', "input"),
        "config timeout NaN": (
            "/v1/agl/rollouts",
            b'{"input": 1, "config": {"timeout_seconds": NaN}}',
            "timeout_seconds",
        ),
        "heartbeat time Infinity": (
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            b'{"last_heartbeat_time": Infinity}',
            "last_heartbeat_time",
        ),
        "span start_time NaN": (
            "/v1/agl/spans",
            j(legit_span(rid, aid, sequence_id=9, span_id="00000000000000d3"))[:-1] + b', "start_time": NaN}',
            "start_time",
        ),
        "wait timeout -Infinity": (
            "/v1/agl/waits/rollouts",
            b'{"rollout_ids": ["x"], "timeout": -Infinity}',
            "timeout",
        ),
    }
    for label, (path, body, names) in non_finite.items():
        cases.append(Case(f"non-finite {label}", "POST", path, body, 400, names))
    return cases


def _depth_cases(ids: Dict[str, str]) -> List[Case]:
    rid, aid = ids["rollout_id"], ids["attempt_id"]
    over = MAX_JSON_DEPTH + 1
    span = legit_span(rid, aid, sequence_id=10, span_id="00000000000000e1")
    cases = [
        Case("depth limit input", "POST", "/v1/agl/rollouts", j({"input": nested(over)}), 400, "depth"),
        Case("depth 300 input", "POST", "/v1/agl/rollouts", j({"input": nested(300)}), 400, "depth"),
        Case("depth 5000 input", "POST", "/v1/agl/rollouts", b'{"input": ' + nested_json(5000) + b"}", 400),
        Case("depth 100000 input", "POST", "/v1/agl/rollouts", b'{"input": ' + nested_json(100_000) + b"}", 400),
        Case(
            "depth enqueue metadata",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            j({"rollouts": [{"input": 1, "metadata": {"m": nested(100)}}]}),
            400,
            "depth",
        ),
        Case(
            "depth heartbeat",
            "POST",
            "/v1/agl/workers/w-deep",
            j({"heartbeat_stats": {"s": nested(100)}}),
            400,
            "depth",
        ),
        Case(
            "depth update rollout", "POST", f"/v1/agl/rollouts/{rid}", j({"metadata": {"m": nested(200)}}), 400, "depth"
        ),
        Case("depth span extra", "POST", "/v1/agl/spans", j({**span, "extra_deep": nested(100)}), 400, "depth"),
        Case(
            "depth resources",
            "POST",
            "/v1/agl/resources",
            j(
                {
                    "llm": {
                        "resource_type": "llm",
                        "endpoint": "e",
                        "model": "m",
                        "sampling_parameters": {"d": nested(100)},
                    }
                }
            ),
            400,
            "depth",
        ),
        Case("depth top-level array", "POST", "/v1/agl/rollouts/search", nested_json(3000), (400, 422)),
        Case(
            "depth attempt metadata",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            j({"metadata": nested(70)}),
            (400, 422),
        ),
    ]
    allowed = nested(MAX_JSON_DEPTH - 2)  # body object + "input" array levels: exactly MAX_JSON_DEPTH
    cases.append(Case("depth at the limit is accepted", "POST", "/v1/agl/rollouts", j({"input": allowed}), 201))
    return cases


def _malformed_cases(ids: Dict[str, str]) -> List[Case]:
    rid = ids["rollout_id"]
    rows: List[Tuple[str, str, bytes, Union[int, Tuple[int, ...]], Optional[str]]] = [
        ("/v1/agl/rollouts", "not json", b"{not json", 422, None),
        ("/v1/agl/rollouts", "array body", b"[1, 2]", 422, None),
        ("/v1/agl/rollouts", "empty body", b"", 422, None),
        ("/v1/agl/rollouts", "unknown mode", b'{"input": 1, "mode": "bogus"}', 422, "mode"),
        ("/v1/agl/rollouts", "max_attempts 0", b'{"input": 1, "config": {"max_attempts": 0}}', 422, "max_attempts"),
        ("/v1/agl/rollouts", "metadata text", b'{"input": 1, "metadata": "text"}', 422, "metadata"),
        (
            "/v1/agl/rollouts",
            "metadata deep list",
            b'{"input": 1, "metadata": ' + nested_json(950) + b"}",
            (400, 422),
            None,
        ),
        (
            "/v1/agl/rollouts",
            "metadata deep list 500",
            b'{"input": 1, "metadata": ' + nested_json(500) + b"}",
            422,
            "metadata",
        ),
        ("/v1/agl/rollouts", "invalid utf-8", b'{"input": "\xff\xfe"}', 400, None),
        ("/v1/agl/rollouts", "truncated", b'{"input": "abc', 422, None),
        ("/v1/agl/rollouts", "trailing garbage", b'{"input": 1} xyz', 422, None),
        ("/v1/agl/rollouts", "duplicate keys", b'{"input": 1, "input": 2}', 201, None),
        ("/v1/agl/queues/rollouts/dequeue", "limit text", b'{"limit": "many"}', 422, "limit"),
        ("/v1/agl/queues/rollouts/dequeue", "limit float", b'{"limit": 1.5}', 422, "limit"),
        ("/v1/agl/queues/rollouts/dequeue", "negative timeout", b'{"timeout": -1}', 422, "timeout"),
        ("/v1/agl/queues/rollouts/dequeue", "timeout NaN", b'{"timeout": NaN}', 422, "timeout"),
        ("/v1/agl/queues/rollouts/dequeue", "limit NaN", b'{"limit": NaN}', 422, "limit"),
        ("/v1/agl/rollouts/search", "offset Infinity", b'{"offset": Infinity}', 422, "offset"),
        ("/v1/agl/queues/rollouts/enqueue", "missing input", b'{"rollouts": [{"mode": "train"}]}', 422, "input"),
        ("/v1/agl/queues/rollouts/enqueue", "rollouts not list", b'{"rollouts": {"input": 1}}', 422, "rollouts"),
        ("/v1/agl/rollouts/search", "unknown status", b'{"status_in": ["nope"]}', 422, "status_in"),
        ("/v1/agl/rollouts/search", "unknown sort order", b'{"sort_order": "sideways"}', 422, "sort_order"),
        ("/v1/agl/rollouts/search", "unknown filter logic", b'{"filter_logic": "xor"}', 422, "filter_logic"),
        ("/v1/agl/rollouts/search", "limit 0", b'{"limit": 0}', 400, "imit"),
        ("/v1/agl/rollouts/search", "offset -1", b'{"offset": -1}', 400, "ffset"),
        ("/v1/agl/workers/search", "workers limit float", b'{"limit": 1.5}', 422, "limit"),
        ("/v1/agl/workers/search", "unknown worker status", b'{"status_in": ["asleep"]}', 422, "status_in"),
        ("/v1/agl/spans/next", "rollout_id int", b'{"rollout_id": 1, "attempt_id": "a"}', 422, "rollout_id"),
        ("/v1/agl/waits/rollouts", "rollout_ids text", b'{"rollout_ids": "abc"}', 422, "rollout_ids"),
        ("/v1/agl/waits/rollouts", "timeout NaN literal", b'{"rollout_ids": ["x"], "timeout": NaN}', 400, "timeout"),
        ("/v1/agl/resources", "llm without endpoint", b'{"r": {"resource_type": "llm"}}', 422, "endpoint"),
        ("/v1/agl/resources", "unknown resource type", b'{"r": {"resource_type": "bogus"}}', 422, "resource_type"),
        ("/v1/agl/resources", "resources not object", b"[1]", 422, None),
        ("/v1/agl/spans", "span without attempt", b'{"rollout_id": "r"}', 422, "attempt_id"),
        (
            "/v1/agl/spans",
            "span status unknown",
            j({**legit_span(rid, "a"), "status": {"status_code": "MEH"}}),
            422,
            "status_code",
        ),
        (f"/v1/agl/rollouts/{rid}", "update status null", b'{"status": null}', 400, "status"),
        (f"/v1/agl/rollouts/{rid}", "update unknown status", b'{"status": "exploded"}', 422, "status"),
        (f"/v1/agl/rollouts/{rid}/attempts/latest", "attempt status unknown", b'{"status": "done"}', 422, "status"),
        (f"/v1/agl/rollouts/{rid}/attempts/latest", "attempt worker null", b'{"worker_id": null}', 400, "worker_id"),
        ("/v1/agl/workers/seed-worker", "heartbeat null", b'{"heartbeat_stats": null}', 400, "heartbeat_stats"),
        ("/v1/agl/workers/seed-worker", "heartbeat list", b'{"heartbeat_stats": [1]}', 422, "heartbeat_stats"),
    ]
    cases = [Case(f"malformed {label}", "POST", path, body, status, names) for path, label, body, status, names in rows]
    cases += [
        Case("query limit text", "GET", "/v1/agl/rollouts", None, 422, "limit", query="limit=ten"),
        Case("query unknown status", "GET", "/v1/agl/workers", None, 422, "status_in", query="status_in=asleep"),
        Case(
            "query filter logic",
            "GET",
            "/v1/agl/spans",
            None,
            422,
            "filter_logic",
            query="rollout_id=r&filter_logic=xor",
        ),
        Case("query offset float", "GET", "/v1/agl/resources", None, 422, "offset", query="offset=1e3"),
        Case("query spans without rollout", "GET", "/v1/agl/spans", None, 422, "rollout_id"),
        Case(
            "text/plain body",
            "POST",
            "/v1/agl/rollouts",
            b'{"input": 1}',
            (201, 422),
            headers=(("Content-Type", "text/plain"),),
        ),
        Case(
            "gzip-encoded REST body",
            "POST",
            "/v1/agl/rollouts",
            gzip.compress(b'{"input": 1}'),
            (400, 415, 422),
            headers=(("Content-Type", "application/json"), ("Content-Encoding", "gzip")),
        ),
    ]
    return cases


def _filter_injection_cases(ids: Dict[str, str]) -> List[Case]:
    rid = ids["rollout_id"]
    hostile = ["' OR '1'='1", "%", "_", "\\", "%' --", '"; DROP TABLE rollouts; --', "*", ".*", "$where", "[a-z]"]
    cases: List[Case] = []
    for text in hostile:
        cases.append(
            Case(
                f"rollout_id_contains {text!r}",
                "POST",
                "/v1/agl/rollouts/search",
                j({"rollout_id_contains": text}),
                200,
                check=total_is(0),
            )
        )
        cases.append(
            Case(
                f"span name_contains {text!r}",
                "POST",
                "/v1/agl/spans/search",
                j({"rollout_id": rid, "name_contains": text}),
                200,
                check=total_is(0),
            )
        )
    cases += [
        Case(
            "worker_id_contains %",
            "GET",
            "/v1/agl/workers",
            None,
            200,
            query="worker_id_contains=%25",
            check=total_is(0),
        ),
        Case(
            "resources_id_contains _",
            "GET",
            "/v1/agl/resources",
            None,
            200,
            query="resources_id_contains=_",
            check=total_is(0),
        ),
        Case(
            "rollout_id_in wildcard",
            "POST",
            "/v1/agl/rollouts/search",
            j({"rollout_id_in": ["%"]}),
            200,
            check=total_is(0),
        ),
        Case("spans of rollout %", "POST", "/v1/agl/spans/search", j({"rollout_id": "%"}), 200, check=total_is(0)),
    ]
    for sort_by in (
        "start_time; DROP TABLE rollouts",
        "rollout_id desc",
        "__class__",
        "input->>'x'",
        "1",
        "status) --",
    ):
        cases.append(
            Case(f"sort_by {sort_by!r}", "POST", "/v1/agl/rollouts/search", j({"sort_by": sort_by}), 400, "sort_by")
        )
    cases.append(
        Case(
            "spans sort_by injection",
            "GET",
            "/v1/agl/spans",
            None,
            400,
            "sort_by",
            query=f"rollout_id={rid}&sort_by=name%3B%20--",
        )
    )
    return cases


def _otlp_cases(ids: Dict[str, str]) -> List[Case]:
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


def _route_cases() -> List[Case]:
    rows: List[Tuple[str, str, Union[int, Tuple[int, ...]]]] = [
        ("DELETE", "/v1/agl/rollouts", 405),
        ("PUT", "/v1/agl/rollouts/x", 405),
        ("PATCH", "/v1/agl/workers/x", 405),
        ("GET", "/v1/agl/nope", 404),
        ("POST", "/v1/agl/health", 405),
        ("GET", "/v1/traces", (404, 405)),
        ("GET", "/v1/agl/queues/rollouts/dequeue", (404, 405)),
        ("GET", "/v1/agl/rollouts/x/attempts/y/z", 404),
        ("POST", "/v1/agl", (404, 405)),
        ("GET", "/v1/agl/", 404),
        ("OPTIONS", "/v1/agl/rollouts", 405),
        ("GET", "/v1/nothing", 404),
    ]
    return [Case(f"route {method} {path}", method, path, None, status, headers=()) for method, path, status in rows]


def _raw_cases() -> List[Case]:
    secret = ("root:", "import ", "def ")
    paths = [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets/../../../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2f..%2fetc%2fpasswd",
        "/assets/..%5c..%5c..%5cetc%5cpasswd",
        "/%2e%2e/store/server_app.py",
        "/assets/../../store/server_app.py",
        "//etc/passwd",
    ]
    cases = [
        Case(f"traversal {path}", "GET", path, None, (200, 404), headers=(), must_not_contain=secret, raw=True)
        for path in paths
    ]
    cases += [
        Case(
            "invalid content-length",
            "POST",
            "/v1/agl/rollouts",
            b'{"input": 1}',
            400,
            headers=(("Content-Type", "application/json"), ("Content-Length", "abc")),
            raw=True,
        ),
        Case(
            "content-length beyond the limit",
            "POST",
            "/v1/agl/rollouts",
            b"{}",
            413,
            "limit",
            headers=(("Content-Type", "application/json"), ("Content-Length", str(10**12))),
            raw=True,
        ),
        Case("NUL in the request line", "GET", "/v1/agl/rollouts/a\x00b", None, 400, headers=(), raw=True),
        Case("bad request line", "GET", "/v1/agl/health HTTP/1.1 extra", None, 400, headers=(), raw=True),
    ]
    return cases


def build_cases(ids: Dict[str, str]) -> List[Case]:
    """The whole table for a server seeded by :func:`tests.hardening.live.seed` (``ids`` are its ids)."""
    cases = (
        _text_cases(ids)
        + _number_cases(ids)
        + _depth_cases(ids)
        + _malformed_cases(ids)
        + _filter_injection_cases(ids)
        + _otlp_cases(ids)
        + _route_cases()
        + _raw_cases()
    )
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f"duplicate case names: {sorted(duplicates)}"
    return cases


def describe(cases: Sequence[Case]) -> Dict[str, int]:
    """How many cases of each status code the table expects (for the report)."""
    counts: Dict[str, int] = {}
    for case in cases:
        key = "/".join(str(s) for s in case.statuses())
        counts[key] = counts.get(key, 0) + 1
    return counts
