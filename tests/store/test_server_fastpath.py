"""The server's front door (``rollouthub.store.server_fastpath``) answers exactly like the FastAPI app behind it.

Most tests call ASGI apps in-process: the same request sequence is sent once through the front door
(``server.asgi_app``, what uvicorn serves) and once straight to the FastAPI app (``server.app``, which serves every route
itself), each on a fresh server with a fresh store, and the normalized responses (status, JSON body, relevant headers)
must be equal. Ids and timestamps are normalized because they differ between the two stores.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest
from fastapi import FastAPI

from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server_fastpath import (
    ADD_RESOURCES,
    ADD_SPAN,
    DEQUEUE,
    ENQUEUE,
    GET_LATEST_RESOURCES,
    GET_RESOURCES,
    GET_ROLLOUT,
    HEALTH,
    NEXT_SEQUENCE_ID,
    OTLP_TRACES,
    SEARCH_ATTEMPTS,
    SEARCH_ROLLOUTS,
    SEARCH_SPANS,
    START_ROLLOUT,
    UPDATE_ATTEMPT,
    UPDATE_RESOURCES,
    UPDATE_WORKER,
    WAIT_FOR_ROLLOUTS,
    FrontDoor,
    classify,
)
from rollouthub.utils.metrics import MetricsBackend

pytestmark = pytest.mark.timeout(60)

ID_RE = re.compile(r"\b(ro|at|rs)-[0-9a-f]{8,12}\b")
RELEVANT_HEADERS = ("content-type", "content-encoding", "www-authenticate", "vary", "allow")

# ---------------------------------------------------------------------------------------------------------------------
# In-process ASGI helpers
# ---------------------------------------------------------------------------------------------------------------------

Response = Tuple[int, Dict[str, str], bytes]


async def asgi_call(
    app: Any,
    method: str,
    path: str,
    body: Optional[bytes] = None,
    headers: Optional[Sequence[Tuple[str, str]]] = None,
    chunks: Optional[Sequence[bytes]] = None,
) -> Response:
    """Send one HTTP request to an ASGI app; the status, the response headers (lower-case) and the body."""
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or [])]
    if chunks is None:
        parts = [body or b""]
        if body is not None and not any(k == b"content-length" for k, _ in raw_headers):
            raw_headers.append((b"content-length", str(len(body)).encode()))
    else:
        parts = list(chunks)
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]
    path_only, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 4747),
        "state": {},
    }

    async def receive() -> Dict[str, Any]:
        if messages:
            return messages.pop(0)
        return {"type": "http.disconnect"}

    sent: List[Dict[str, Any]] = []

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    response_headers: Dict[str, str] = {}
    for key, value in start.get("headers", []):
        name = key.decode().lower()
        response_headers[name] = (response_headers[name] + ", " if name in response_headers else "") + value.decode()
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], response_headers, payload


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "<t>" if (k.endswith("_time") or k == "uptime") and isinstance(v, (int, float)) else _normalize(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, str):
        value = ID_RE.sub(lambda m: m.group(1) + "-<id>", value)
        return re.sub(r'File "[^"]+", line \d+.*', "<frame>", value)
    return value


def normalized(response: Response) -> Tuple[int, Dict[str, str], Any]:
    """Status, relevant headers and the JSON body with ids/timestamps replaced (raw bytes when not JSON)."""
    status, headers, body = response
    relevant = {k: ID_RE.sub("<id>", v) for k, v in headers.items() if k in RELEVANT_HEADERS or k.startswith("access-")}
    if headers.get("content-length") is not None:
        assert int(headers["content-length"]) == len(body)
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)  # the gzip header carries a timestamp
    try:
        parsed: Any = _normalize(json.loads(body)) if body else body
    except ValueError:
        parsed = body
    return status, relevant, parsed


class Recorder(MetricsBackend):
    """A metrics backend that keeps the ``agl.http.*`` observations (name and labels)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[str, Tuple[str, ...]]] = []

    def _on_register(self, definition: Any) -> None:
        pass

    def _record_counter(self, definition: Any, amount: float, values: Any) -> None:
        if definition.name.startswith("agl.http"):
            self.calls.append((definition.name, tuple(values)))

    def _record_histogram(self, definition: Any, value: float, values: Any) -> None:
        if definition.name.startswith("agl.http"):
            self.calls.append((definition.name, tuple(values)))


def make_server(**kwargs: Any) -> LightningStoreServer:
    """A server that is never started (requests are sent to its ASGI apps in-process)."""
    return LightningStoreServer(
        InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0),
        host="127.0.0.1",
        port=4747,
        launch_mode="asyncio",
        **kwargs,
    )


Call = Callable[..., Awaitable[Response]]


def _span(rollout_id: str, attempt_id: str, sequence_id: int, span_id: str = "00000000000000a1") -> Dict[str, Any]:
    trace_id = "0" * 31 + "1"
    return {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": sequence_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": None,
        "name": f"s{sequence_id}",
        "status": {"status_code": "OK", "description": None},
        "attributes": {"k": "v", "n": 1.5, "ok": True, "tags": ["a", "b"]},
        "events": [],
        "links": [],
        "start_time": 1.0,
        "end_time": 2.0,
        "context": {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}},
        "parent": None,
        "resource": {"attributes": {}, "schema_url": ""},
    }


def _otlp_body(rollout_id: str, attempt_id: str) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    for key, value in (("agentlightning.rollout_id", rollout_id), ("agentlightning.attempt_id", attempt_id)):
        attribute = resource_spans.resource.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    span = resource_spans.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "otlp"
    span.start_time_unix_nano, span.end_time_unix_nano = 10**18, 10**18 + 5
    attribute = span.attributes.add()
    attribute.key, attribute.value.int_value = "n", 3
    return bytes(message.SerializeToString())


JSON_CT = [("Content-Type", "application/json")]


async def run_sequence(call: Call) -> List[Tuple[str, Any]]:
    """A request sequence touching every hot route with valid and invalid input; the labelled normalized responses."""
    out: List[Tuple[str, Any]] = []

    async def req(
        label: str, method: str, path: str, payload: Any = "__none__", *, data: Optional[bytes] = None, **kw: Any
    ) -> Any:
        headers = list(kw.pop("headers", []))
        if payload != "__none__":
            data = json.dumps(payload).encode()
            headers += JSON_CT
        response = await call(method, path, data, headers, **kw)
        out.append((f"{label}: {method} {ID_RE.sub('<id>', path)}", normalized(response)))
        try:
            return json.loads(response[2])
        except ValueError:
            return None

    api = "/v1/agl"
    await req("health", "GET", f"{api}/health")
    await req("health query", "GET", f"{api}/health?x=1")
    # resources
    llm = {"llm": {"resource_type": "llm", "endpoint": "http://x", "model": "m"}}
    added = await req("add resources", "POST", f"{api}/resources", llm)
    await req("bad discriminator", "POST", f"{api}/resources", {"llm": {"resource_type": "bogus"}})
    await req("null body", "POST", f"{api}/resources", None)
    await req("empty body", "POST", f"{api}/resources", data=b"")
    await req("empty dict", "POST", f"{api}/resources", {})
    await req("text/plain", "POST", f"{api}/resources", data=b"{}", headers=[("Content-Type", "text/plain")])
    await req("no content type", "POST", f"{api}/resources", data=b"{}")
    await req(
        "json+charset",
        "POST",
        f"{api}/resources",
        data=b"{}",
        headers=[("Content-Type", "application/json; charset=utf-8")],
    )
    await req("latest", "GET", f"{api}/resources/latest")
    resources_id = added["resources_id"]
    await req("by id", "GET", f"{api}/resources/{resources_id}")
    await req("unknown id", "GET", f"{api}/resources/nope")
    prompt = {"p": {"resource_type": "prompt_template", "template": "t", "engine": "f-string"}}
    await req("update resources", "POST", f"{api}/resources/{resources_id}", prompt)
    await req("create by id", "POST", f"{api}/resources/new-id", {})
    await req("POST resources/latest", "POST", f"{api}/resources/latest", {})
    await req("latest again", "GET", f"{api}/resources/latest")
    await req("trailing slash", "GET", f"{api}/resources/latest/")
    # queue
    await req("enqueue none", "POST", f"{api}/queues/rollouts/enqueue", {"rollouts": []})
    one = {"rollouts": [{"input": {"t": 1}, "mode": "train", "resources_id": resources_id}]}
    await req("enqueue one", "POST", f"{api}/queues/rollouts/enqueue", one)
    two = {"rollouts": [{"input": 2, "config": {"max_attempts": 2}, "metadata": {"a": 1}}, {"input": 3}]}
    await req("enqueue two", "POST", f"{api}/queues/rollouts/enqueue", two)
    await req("bad mode", "POST", f"{api}/queues/rollouts/enqueue", {"rollouts": [{"input": 2, "mode": "bad"}]})
    bad_config = {"rollouts": [{"input": 2, "config": {"max_attempts": 0}}]}
    await req("bad config", "POST", f"{api}/queues/rollouts/enqueue", bad_config)
    await req("missing field", "POST", f"{api}/queues/rollouts/enqueue", {})
    await req("whitespace", "POST", f"{api}/queues/rollouts/enqueue", data=b"  ", headers=JSON_CT)
    await req("bad json", "POST", f"{api}/queues/rollouts/enqueue", data=b'{"rollouts": [}', headers=JSON_CT)
    await req("dequeue no body", "POST", f"{api}/queues/rollouts/dequeue", data=b"")
    await req("dequeue null", "POST", f"{api}/queues/rollouts/dequeue", None)
    await req("dequeue limit 0", "POST", f"{api}/queues/rollouts/dequeue", {"limit": 0})
    await req("dequeue whitespace", "POST", f"{api}/queues/rollouts/dequeue", data=b"  ", headers=JSON_CT)
    jsonx = [("Content-Type", "application/jsonx")]
    await req("dequeue jsonx", "POST", f"{api}/queues/rollouts/dequeue", data=b'{"limit": 1}', headers=jsonx)
    await req("dequeue two", "POST", f"{api}/queues/rollouts/dequeue", {"limit": 2, "worker_id": "w1"})
    await req("dequeue bad limit", "POST", f"{api}/queues/rollouts/dequeue", {"limit": "x"})
    await req("dequeue empty queue", "POST", f"{api}/queues/rollouts/dequeue", {"limit": 1, "worker_id": "w3"})
    # rollouts
    body = {"input": {"q": 1}, "worker_id": "w2", "config": {"timeout_seconds": 5}}
    started = await req("start rollout", "POST", f"{api}/rollouts", body)
    await req("start bad mode", "POST", f"{api}/rollouts", {"input": 1, "mode": "nope"})
    await req("start missing input", "POST", f"{api}/rollouts", {})
    await req("start null input", "POST", f"{api}/rollouts?x=1", {"input": None})
    rollout_id, attempt_id = started["rollout_id"], started["attempt"]["attempt_id"]
    await req("get rollout", "GET", f"{api}/rollouts/{rollout_id}")
    await req("get unknown rollout", "GET", f"{api}/rollouts/ro-unknown")
    await req("get rollout 'search'", "GET", f"{api}/rollouts/search")
    await req("get rollout trailing slash", "GET", f"{api}/rollouts/{rollout_id}/")
    await req("search rollouts", "POST", f"{api}/rollouts/search", {})
    query = {"status_in": ["running"], "sort_by": "start_time", "sort_order": "desc", "limit": 5}
    await req("search running", "POST", f"{api}/rollouts/search", query)
    await req("search bad sort", "POST", f"{api}/rollouts/search", {"sort_by": "nope"})
    await req("search limit 0", "POST", f"{api}/rollouts/search", {"limit": 0})
    await req("search offset", "POST", f"{api}/rollouts/search", {"offset": -1})
    await req("search bad order", "POST", f"{api}/rollouts/search", {"sort_order": "up"})
    query = {"status_in": None, "rollout_id_in": [rollout_id]}
    await req("search explicit null", "POST", f"{api}/rollouts/search", query)
    await req("search or", "POST", f"{api}/rollouts/search", {"rollout_id_contains": "ro-", "filter_logic": "or"})
    # attempts
    await req("search attempts", "POST", f"{api}/rollouts/{rollout_id}/attempts/search", {})
    await req("search attempts bad sort", "POST", f"{api}/rollouts/{rollout_id}/attempts/search", {"sort_by": "x"})
    await req("search attempts unknown", "POST", f"{api}/rollouts/ro-unknown/attempts/search", {})
    update = {"status": "running", "metadata": {"x": 1}}
    await req("update attempt", "POST", f"{api}/rollouts/{rollout_id}/attempts/{attempt_id}", update)
    await req("update latest", "POST", f"{api}/rollouts/{rollout_id}/attempts/latest", {"last_heartbeat_time": 5.0})
    await req("update empty", "POST", f"{api}/rollouts/{rollout_id}/attempts/latest", {})
    await req("null status", "POST", f"{api}/rollouts/{rollout_id}/attempts/{attempt_id}", {"status": None})
    await req("bad status", "POST", f"{api}/rollouts/{rollout_id}/attempts/{attempt_id}", {"status": "bogus"})
    unknown_attempt = f"{api}/rollouts/{rollout_id}/attempts/at-missing"
    await req("unknown attempt", "POST", unknown_attempt, {"status": "running"})
    await req("unknown rollout", "POST", f"{api}/rollouts/ro-missing/attempts/latest", {"status": "running"})
    # spans
    await req("add span", "POST", f"{api}/spans", _span(rollout_id, attempt_id, 1))
    await req("duplicate span", "POST", f"{api}/spans", _span(rollout_id, attempt_id, 1))
    await req("span of unknown rollout", "POST", f"{api}/spans", _span("ro-missing", attempt_id, 2))
    incomplete = _span(rollout_id, attempt_id, 3)
    del incomplete["trace_id"]
    await req("span missing field", "POST", f"{api}/spans", incomplete)
    next_body = {"rollout_id": rollout_id, "attempt_id": attempt_id}
    await req("next sequence id", "POST", f"{api}/spans/next", next_body)
    await req("next missing field", "POST", f"{api}/spans/next", {"rollout_id": rollout_id})
    await req("search spans", "POST", f"{api}/spans/search", {"rollout_id": rollout_id})
    await req("search spans limit 0", "POST", f"{api}/spans/search", {"rollout_id": rollout_id, "limit": 0})
    await req("search spans bad logic", "POST", f"{api}/spans/search", {"rollout_id": rollout_id, "filter_logic": "x"})
    # workers
    await req("heartbeat", "POST", f"{api}/workers/w1", {"heartbeat_stats": {"cpu": 1}})
    await req("heartbeat no body", "POST", f"{api}/workers/w1", data=b"")
    await req("heartbeat null stats", "POST", f"{api}/workers/w1", {"heartbeat_stats": None})
    await req("heartbeat whitespace", "POST", f"{api}/workers/w1", data=b" ", headers=JSON_CT)
    await req("heartbeat list body", "POST", f"{api}/workers/w1", [1])
    await req("workers search", "POST", f"{api}/workers/search", {})
    # waits
    await req("finish", "POST", f"{api}/rollouts/{rollout_id}/attempts/latest", {"status": "succeeded"})
    await req("wait", "POST", f"{api}/waits/rollouts", {"rollout_ids": [rollout_id, "ro-missing"], "timeout": 0})
    await req("wait negative", "POST", f"{api}/waits/rollouts", {"rollout_ids": [rollout_id], "timeout": -1})
    nan = b'{"rollout_ids": [], "timeout": NaN}'
    await req("wait NaN", "POST", f"{api}/waits/rollouts", data=nan, headers=JSON_CT)
    inf = b'{"rollout_ids": [], "timeout": Infinity}'
    await req("wait inf", "POST", f"{api}/waits/rollouts", data=inf, headers=JSON_CT)
    await req(
        "wait 1e400", "POST", f"{api}/waits/rollouts", data=b'{"rollout_ids": [], "timeout": 1e400}', headers=JSON_CT
    )
    await req("wait missing", "POST", f"{api}/waits/rollouts", {"timeout": 0})
    await req("wait no timeout", "POST", f"{api}/waits/rollouts", {"rollout_ids": [rollout_id]})
    # OTLP
    otlp = _otlp_body(rollout_id, attempt_id)
    protobuf = [("Content-Type", "application/x-protobuf")]
    await req("otlp", "POST", "/v1/traces", data=otlp, headers=protobuf)
    gz = protobuf + [("Content-Encoding", "gzip"), ("Accept-Encoding", "gzip")]
    await req("otlp gzip", "POST", "/v1/traces", data=gzip.compress(otlp), headers=gz)
    await req("otlp corrupt", "POST", "/v1/traces", data=b"\xff\xff", headers=protobuf)
    await req("otlp bad type", "POST", "/v1/traces", data=b"{}", headers=[("Content-Type", "text/plain")])
    await req("otlp json", "POST", "/v1/traces", data=b'{"resourceSpans": []}', headers=JSON_CT)
    await req("otlp unknown rollout", "POST", "/v1/traces", data=_otlp_body("ro-missing", "at-x"), headers=protobuf)
    await req("spans after otlp", "POST", f"{api}/spans/search", {"rollout_id": rollout_id, "name": "otlp"})
    # not hot: FastAPI answers through the front door
    await req("statistics", "GET", f"{api}/statistics")
    await req("unknown route", "GET", f"{api}/nonexistent")
    await req("wrong method", "DELETE", f"{api}/spans")
    await req("HEAD health", "HEAD", f"{api}/health")
    await req("GET search", "GET", f"{api}/spans/search")
    return out


async def _compare(**server_kwargs: Any) -> Tuple[List[Any], List[Any]]:
    front, plain = make_server(**server_kwargs), make_server(**server_kwargs)
    assert isinstance(front.asgi_app, FrontDoor)

    async def via_front_door(method: str, path: str, data: Optional[bytes], headers: Any, **kw: Any) -> Response:
        return await asgi_call(front.asgi_app, method, path, data, headers, **kw)

    async def via_app(method: str, path: str, data: Optional[bytes], headers: Any, **kw: Any) -> Response:
        return await asgi_call(plain.app, method, path, data, headers, **kw)

    return await run_sequence(via_front_door), await run_sequence(via_app)


def _assert_same(got: List[Any], expected: List[Any]) -> None:
    assert [label for label, _ in got] == [label for label, _ in expected]
    for (label, response), (_, reference) in zip(got, expected, strict=True):
        assert response == reference, label


# ---------------------------------------------------------------------------------------------------------------------
# Equivalence with the FastAPI app
# ---------------------------------------------------------------------------------------------------------------------


async def test_every_hot_route_answers_like_the_app() -> None:
    got, expected = await _compare()
    _assert_same(got, expected)
    statuses = {label.split(":")[0]: response[0] for label, response in got}
    # sanity: both success and error paths were exercised
    assert statuses["add span"] == 201 and statuses["span of unknown rollout"] == 400
    assert statuses["span missing field"] == 422 and statuses["dequeue whitespace"] == 422
    assert statuses["null status"] == 400 and statuses["wait negative"] == 400


async def test_valid_requests_do_not_reach_the_app() -> None:
    """The front door serves hot requests itself; only unusual ones (FastAPI's 422s) and other routes reach the app."""
    server = make_server()
    door = server.asgi_app
    app_calls: List[str] = []
    inner = door.app

    async def spy(scope: Any, receive: Any, send: Any) -> None:
        app_calls.append(scope["path"])
        await inner(scope, receive, send)

    door.app = spy
    reached: List[bool] = []

    async def call(method: str, path: str, data: Optional[bytes], headers: Any, **kw: Any) -> Response:
        before = len(app_calls)
        response = await asgi_call(door, method, path, data, headers, **kw)
        reached.append(len(app_calls) > before)
        return response

    results = await run_sequence(call)
    not_hot = {"statistics", "unknown route", "wrong method", "HEAD health", "GET search", "trailing slash"}
    not_hot |= {"get rollout trailing slash", "workers search", "dequeue null"}  # a JSON null body is replayed too
    for (label, (status, _, _)), went_to_app in zip(results, reached, strict=True):
        name = label.split(":")[0]
        assert went_to_app == (status == 422 or name in not_hot), label


async def test_same_answers_with_a_token() -> None:
    token = [("Authorization", "Bearer tok")]

    async def with_token(call: Call) -> List[Any]:
        async def authed(method: str, path: str, data: Optional[bytes], headers: Any, **kw: Any) -> Response:
            return await call(method, path, data, list(headers) + token, **kw)

        return await run_sequence(authed)

    front, plain = make_server(api_token="tok"), make_server(api_token="tok")
    got = await with_token(lambda m, p, d, h, **kw: asgi_call(front.asgi_app, m, p, d, h, **kw))
    expected = await with_token(lambda m, p, d, h, **kw: asgi_call(plain.app, m, p, d, h, **kw))
    _assert_same(got, expected)


async def test_same_answers_with_cors() -> None:
    origin = [("Origin", "http://a.example")]
    kwargs = {"cors_allow_origins": ["http://a.example"]}

    async def with_origin(server: LightningStoreServer, app: Any) -> List[Any]:
        async def call(method: str, path: str, data: Optional[bytes], headers: Any, **kw: Any) -> Response:
            return await asgi_call(app, method, path, data, list(headers) + origin, **kw)

        return await run_sequence(call)

    front, plain = make_server(**kwargs), make_server(**kwargs)
    got = await with_origin(front, front.asgi_app)
    expected = await with_origin(plain, plain.app)
    _assert_same(got, expected)
    by_label = {label.split(":")[0]: response for label, response in got}
    assert by_label["add span"][1]["access-control-allow-origin"] == "http://a.example"
    # Application errors are mapped outside CORS, in the front door as in the app.
    assert "access-control-allow-origin" not in by_label["span of unknown rollout"][1]


async def test_cors_preflight_goes_to_the_app() -> None:
    server = make_server(cors_allow_origins=["*"])
    headers = [("Origin", "http://b.example"), ("Access-Control-Request-Method", "POST")]
    status, response_headers, _ = await asgi_call(server.asgi_app, "OPTIONS", "/v1/agl/spans", headers=headers)
    reference = await asgi_call(make_server(cors_allow_origins=["*"]).app, "OPTIONS", "/v1/agl/spans", headers=headers)
    assert status == reference[0] == 200
    assert response_headers == reference[1]
    assert response_headers["access-control-allow-origin"] == "http://b.example"  # credentials: the origin echoed


# ---------------------------------------------------------------------------------------------------------------------
# Auth, body limit, errors, metrics, logging
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/v1/agl/workers/w"),
        ("POST", "/v1/agl/queues/rollouts/enqueue"),
        ("POST", "/v1/agl/resources"),
        ("GET", "/v1/agl/resources/latest"),
        ("GET", "/v1/agl/rollouts/ro-1"),
        ("POST", "/v1/agl/waits/rollouts"),
        ("POST", "/v1/traces"),
    ],
)
async def test_auth_through_the_front_door(method: str, path: str) -> None:
    server = make_server(api_token="tok")
    for headers, detail in (([], "Missing bearer token"), ([("Authorization", "Bearer nope")], "Invalid bearer token")):
        status, response_headers, body = await asgi_call(server.asgi_app, method, path, b"{}", headers + JSON_CT)
        assert status == 401 and json.loads(body) == {"detail": detail}
        assert response_headers["www-authenticate"] == "Bearer"
    status, _, body = await asgi_call(server.asgi_app, "GET", "/v1/agl/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}


async def test_body_limit_through_the_front_door() -> None:
    server = make_server(max_body_bytes=300)
    big = json.dumps({"input": "x" * 400}).encode()
    status, _, body = await asgi_call(server.asgi_app, "POST", "/v1/agl/rollouts", big, JSON_CT)
    assert status == 413 and json.loads(body) == {"detail": "Request body too large (limit 300 bytes)"}
    # streamed (no Content-Length): counted while reading, for the REST routes and OTLP alike
    chunks = [b'{"input": "', b"y" * 200, b"y" * 200, b'"}']
    status, _, body = await asgi_call(server.asgi_app, "POST", "/v1/agl/rollouts", headers=JSON_CT, chunks=chunks)
    assert status == 413 and "too large" in json.loads(body)["detail"]
    protobuf = [("Content-Type", "application/x-protobuf")]
    status, _, _ = await asgi_call(server.asgi_app, "POST", "/v1/traces", headers=protobuf, chunks=[b"\x00" * 200] * 3)
    assert status == 413
    # small streamed bodies are fine
    chunks = [b'{"heartbeat_stats"', b': {"a": 1}}']
    status, _, body = await asgi_call(server.asgi_app, "POST", "/v1/agl/workers/w", headers=JSON_CT, chunks=chunks)
    assert status == 200 and json.loads(body)["heartbeat_stats"] == {"a": 1}
    # a declared length over the limit is rejected even for GET routes, a malformed one with 400
    headers = [("Content-Length", "100000")]
    assert (await asgi_call(server.asgi_app, "GET", "/v1/agl/health", headers=headers))[0] == 413
    headers = [("Content-Length", "abc")]
    status, _, body = await asgi_call(server.asgi_app, "GET", "/v1/agl/resources/latest", headers=headers)
    assert status == 400 and json.loads(body) == {"detail": "Invalid Content-Length header"}


async def test_client_disconnect_before_the_body_is_replayed_to_the_app() -> None:
    """A disconnect instead of the body: the app gets the (empty) body read so far, then the disconnect."""
    server = make_server()
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    for path, expected in (("/v1/agl/workers/w", 200), ("/v1/agl/spans", 422)):
        sent.clear()
        scope = {"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b"", "root_path": ""}
        await server.asgi_app(scope, receive, send)
        assert sent[0]["status"] == expected


class _Boom(RuntimeError):
    pass


async def test_unexpected_store_errors_are_mapped_like_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    server = make_server()

    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise _Boom("kaput")

    monkeypatch.setattr(server.store, "update_worker", boom)
    status, headers, body = await asgi_call(server.asgi_app, "POST", "/v1/agl/workers/w", b"", [])
    payload = json.loads(body)
    assert status == 500 and headers["content-type"] == "application/json"
    assert payload["detail"] == "Internal server error" and payload["error_type"] == "_Boom"
    assert "kaput" in payload["traceback"]
    reference = await asgi_call(server.app, "POST", "/v1/agl/workers/w", b"", [])
    assert reference[0] == 500 and json.loads(reference[2])["error_type"] == "_Boom"

    async def type_error(*args: Any, **kwargs: Any) -> Any:
        raise TypeError()

    monkeypatch.setattr(server.store, "update_worker", type_error)
    status, _, body = await asgi_call(server.asgi_app, "POST", "/v1/agl/workers/w", b"", [])
    assert (status, json.loads(body)) == (400, {"detail": "TypeError", "error_type": "TypeError"})


async def test_unexpected_otlp_errors_answer_a_plain_500_and_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    server = make_server()
    rollout = await server.start_rollout(input=1)

    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise _Boom("kaput")

    monkeypatch.setattr(server.store, "add_many_spans_assigning_ids", boom)
    sent: List[Dict[str, Any]] = []
    messages = [{"type": "http.request", "body": _otlp_body(rollout.rollout_id, rollout.attempt.attempt_id)}]

    async def receive() -> Dict[str, Any]:
        return messages.pop(0)

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/traces",
        "headers": [(b"content-type", b"application/x-protobuf")],
    }
    with pytest.raises(_Boom):
        await server.asgi_app(scope, receive, send)
    assert sent[0]["status"] == 500 and sent[1]["body"] == b"Internal Server Error"


async def test_metrics_match_the_app() -> None:
    front_tracker, app_tracker = Recorder(), Recorder()
    front, plain = make_server(tracker=front_tracker), make_server(tracker=app_tracker)
    await run_sequence(lambda m, p, d, h, **kw: asgi_call(front.asgi_app, m, p, d, h, **kw))
    await run_sequence(lambda m, p, d, h, **kw: asgi_call(plain.app, m, p, d, h, **kw))
    assert sorted(front_tracker.calls) == sorted(app_tracker.calls)
    counted = {labels for name, labels in front_tracker.calls if name == "agl.http.total"}
    assert ("/v1/agl/workers/{worker_id}", "POST", "200") in counted
    assert ("/v1/agl/spans", "POST", "ValueError") in counted  # store errors: the exception class, as in the app
    assert ("/v1/agl/spans", "POST", "422") in counted  # replayed through the app: counted once
    assert ("/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}", "POST", "200") in counted
    # Auth failures and 413s are recorded too.
    secured = make_server(tracker=Recorder(), api_token="tok", max_body_bytes=10)
    await asgi_call(secured.asgi_app, "POST", "/v1/agl/workers/w", b"{}", JSON_CT)
    await asgi_call(
        secured.asgi_app, "POST", "/v1/agl/workers/w", b"{}" * 10, JSON_CT + [("Authorization", "Bearer tok")]
    )
    statuses = [labels[2] for name, labels in secured._tracker.calls if name == "agl.http.total"]
    assert statuses == ["401", "413"]


async def test_debug_timing_log(caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()
    with caplog.at_level(logging.DEBUG, logger="rollouthub.store.server"):
        await asgi_call(server.asgi_app, "POST", "/v1/agl/workers/w9", b"", [])
        await asgi_call(server.asgi_app, "POST", "/v1/agl/spans", b'{"x": 1}', JSON_CT)  # replayed: logged once
    lines = [r.getMessage() for r in caplog.records if " in " in r.getMessage() and " ms" in r.getMessage()]
    assert any('"POST /v1/agl/workers/w9 HTTP/1.1" 200 in' in line for line in lines)
    assert sum('"POST /v1/agl/spans HTTP/1.1" 422 in' in line for line in lines) == 1
    assert all(line.startswith("127.0.0.1:50000 - ") for line in lines)


async def test_store_rejections_are_logged_like_the_app(caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()
    with caplog.at_level(logging.INFO, logger="rollouthub.store.server"):
        body = json.dumps({"status": "running"}).encode()
        status, _, _ = await asgi_call(server.asgi_app, "POST", "/v1/agl/rollouts/ro-x/attempts/latest", body, JSON_CT)
    assert status == 400
    assert any(
        r.getMessage().startswith("Rejected POST /v1/agl/rollouts/ro-x/attempts/latest: ValueError")
        for r in caplog.records
    )


# ---------------------------------------------------------------------------------------------------------------------
# Wiring and classification
# ---------------------------------------------------------------------------------------------------------------------


def test_server_wiring() -> None:
    server = make_server()
    assert isinstance(server.app, FastAPI) and isinstance(server.asgi_app, FrontDoor)
    assert server.server_launcher.app is server.asgi_app
    assert server.asgi_app.app is server.app
    assert "/v1/agl/workers/{worker_id}" in server.app.openapi()["paths"]


@pytest.mark.parametrize(
    "method,path,expected",
    [
        ("GET", "/v1/agl/health", (HEALTH, ())),
        ("POST", "/v1/agl/health", None),
        ("HEAD", "/v1/agl/health", None),
        ("POST", "/v1/traces", (OTLP_TRACES, ())),
        ("GET", "/v1/traces", None),
        ("POST", "/v1/agl/queues/rollouts/enqueue", (ENQUEUE, ())),
        ("POST", "/v1/agl/queues/rollouts/dequeue", (DEQUEUE, ())),
        ("POST", "/v1/agl/rollouts", (START_ROLLOUT, ())),
        ("GET", "/v1/agl/rollouts", None),
        ("POST", "/v1/agl/rollouts/search", (SEARCH_ROLLOUTS, ())),
        ("GET", "/v1/agl/rollouts/search", (GET_ROLLOUT, ("search",))),
        ("GET", "/v1/agl/rollouts/ro-1", (GET_ROLLOUT, ("ro-1",))),
        ("POST", "/v1/agl/rollouts/ro-1", None),
        ("GET", "/v1/agl/rollouts/", None),
        ("GET", "/v1/agl/rollouts/ro-1/", None),
        ("POST", "/v1/agl/rollouts/ro-1/attempts", None),
        ("POST", "/v1/agl/rollouts/ro-1/attempts/search", (SEARCH_ATTEMPTS, ("ro-1",))),
        ("POST", "/v1/agl/rollouts/ro-1/attempts/latest", (UPDATE_ATTEMPT, ("ro-1", "latest"))),
        ("POST", "/v1/agl/rollouts/ro-1/attempts/at-1", (UPDATE_ATTEMPT, ("ro-1", "at-1"))),
        ("POST", "/v1/agl/rollouts//attempts/at-1", None),
        ("POST", "/v1/agl/rollouts/ro-1/attempts/", None),
        ("GET", "/v1/agl/rollouts/ro-1/attempts/latest", None),
        ("POST", "/v1/agl/workers/w-1", (UPDATE_WORKER, ("w-1",))),
        ("POST", "/v1/agl/workers/search", None),
        ("POST", "/v1/agl/workers/", None),
        ("GET", "/v1/agl/workers/w-1", None),
        ("POST", "/v1/agl/resources", (ADD_RESOURCES, ())),
        ("GET", "/v1/agl/resources", None),
        ("GET", "/v1/agl/resources/latest", (GET_LATEST_RESOURCES, ())),
        ("POST", "/v1/agl/resources/latest", (UPDATE_RESOURCES, ("latest",))),
        ("GET", "/v1/agl/resources/rs-1", (GET_RESOURCES, ("rs-1",))),
        ("POST", "/v1/agl/resources/rs-1", (UPDATE_RESOURCES, ("rs-1",))),
        ("POST", "/v1/agl/spans", (ADD_SPAN, ())),
        ("GET", "/v1/agl/spans", None),
        ("POST", "/v1/agl/spans/search", (SEARCH_SPANS, ())),
        ("POST", "/v1/agl/spans/next", (NEXT_SEQUENCE_ID, ())),
        ("POST", "/v1/agl/waits/rollouts", (WAIT_FOR_ROLLOUTS, ())),
        ("GET", "/v1/agl/statistics", None),
        ("GET", "/v1/agl/", None),
        ("GET", "/", None),
        ("GET", "/v1/agl", None),
    ],
)
def test_classify(method: str, path: str, expected: Any) -> None:
    assert classify(method, path) == expected


def test_hot_routes_match_fastapi_routing() -> None:
    """Every path the front door serves is routed by FastAPI to the handler of the same operation."""
    from starlette.routing import Match

    server = make_server()
    handlers = {
        ENQUEUE: "enqueue_rollouts",
        DEQUEUE: "dequeue_rollouts",
        START_ROLLOUT: "start_rollout",
        SEARCH_ROLLOUTS: "search_rollouts",
        GET_ROLLOUT: "get_rollout_by_id",
        SEARCH_ATTEMPTS: "search_attempts",
        UPDATE_ATTEMPT: "update_attempt",
        UPDATE_WORKER: "update_worker",
        ADD_RESOURCES: "add_resources",
        UPDATE_RESOURCES: "update_resources",
        GET_LATEST_RESOURCES: "get_latest_resources",
        GET_RESOURCES: "get_resources_by_id",
        ADD_SPAN: "add_span",
        SEARCH_SPANS: "search_spans",
        NEXT_SEQUENCE_ID: "get_next_span_sequence_id",
        WAIT_FOR_ROLLOUTS: "wait_for_rollouts",
        HEALTH: "health",
        OTLP_TRACES: "otlp_traces",
    }
    samples = [
        ("POST", "/v1/agl/queues/rollouts/enqueue"),
        ("POST", "/v1/agl/queues/rollouts/dequeue"),
        ("POST", "/v1/agl/rollouts"),
        ("POST", "/v1/agl/rollouts/search"),
        ("GET", "/v1/agl/rollouts/search"),
        ("GET", "/v1/agl/rollouts/x"),
        ("POST", "/v1/agl/rollouts/x/attempts/search"),
        ("POST", "/v1/agl/rollouts/search/attempts/latest"),
        ("POST", "/v1/agl/workers/latest"),
        ("POST", "/v1/agl/resources"),
        ("POST", "/v1/agl/resources/latest"),
        ("GET", "/v1/agl/resources/latest"),
        ("GET", "/v1/agl/resources/search"),
        ("POST", "/v1/agl/spans"),
        ("POST", "/v1/agl/spans/search"),
        ("POST", "/v1/agl/spans/next"),
        ("POST", "/v1/agl/waits/rollouts"),
        ("GET", "/v1/agl/health"),
        ("POST", "/v1/traces"),
    ]
    for method, path in samples:
        match = classify(method, path)
        assert match is not None, path
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        full = [route for route in server.app.router.routes if route.matches(scope)[0] == Match.FULL]
        assert full and full[0].name == handlers[match[0]], (method, path, full[0].name if full else None)
        child_scope = full[0].matches(scope)[1]
        assert tuple(child_scope.get("path_params", {}).values()) == match[1], path
