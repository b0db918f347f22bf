"""Property-based fuzzing of the store server on every backend (schemathesis + hypothesis), over real HTTP.

* Every operation of the server's own OpenAPI document -- ``POST /v1/traces`` included, whose document declares
  protobuf and JSON bodies and a ``Content-Encoding`` header (bodies are then really compressed) -- gets positive
  (schema-conforming) and negative (schema-violating) generated requests.
* Structured OTLP exports (random texts with NUL characters, every ``AnyValue`` kind, NaN/infinite doubles, 64-bit
  integers, nested key-value lists, random ids and sequence ids), sent plain, gzip- or deflate-compressed, sometimes
  truncated.

The server must never answer with a 5xx (except the documented 501 of the unsupported OTLP signals) and must stay
healthy; SQL stores run with a pool of one connection.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
import zlib
from typing import Any, Dict, List

import pytest

schemathesis = pytest.importorskip("schemathesis")
requests = pytest.importorskip("requests")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from .live import BACKENDS, Live, live_server  # noqa: E402

pytestmark = pytest.mark.timeout(240)

EXAMPLES_PER_MODE = 8
MIN_REQUESTS = 350
OTLP_EXAMPLES = 120
BODY_LIMIT = 64 * 1024


@schemathesis.serializer("application/x-protobuf")
def _protobuf_body(ctx: Any, value: Any) -> bytes:
    """Generated ``format: binary`` bodies are sent as they are."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8", errors="surrogatepass")


def _tame(case: Any) -> Any:
    """Keep generated requests from blocking; compress OTLP bodies the way their ``Content-Encoding`` says."""
    if case.operation.path.endswith("/waits/rollouts") and isinstance(case.body, dict):
        case.body["timeout"] = 0
    return case


def _compress(case: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    headers = kwargs.get("headers") or {}
    encoding = next((value for key, value in headers.items() if key.lower() == "content-encoding"), None)
    data = kwargs.get("data")
    if case.operation.path == "/v1/traces" and isinstance(data, (bytes, str)) and encoding in ("gzip", "deflate"):
        raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
        kwargs["data"] = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    return kwargs


def _intentional_501(case: Any, status: int) -> bool:
    """OTLP metrics/logs/profiles are documented as 501 Not Implemented."""
    return status == 501 and case.operation.path in ("/v1/metrics", "/v1/logs", "/v1/development/profiles")


def _fuzz_schema(schema_dict: Dict[str, Any], base_url: str) -> Dict[str, Any]:
    schema = schemathesis.openapi.from_dict(schema_dict)
    operations = [result.ok() for result in schema.get_all_operations()]
    session = requests.Session()
    failures: List[str] = []
    counter = {"requests": 0, "traces": 0}
    lock = threading.Lock()
    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES_PER_MODE,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                case = _tame(case)
                kwargs = _compress(case, case.as_transport_kwargs(base_url=base_url))
                response = session.request(**kwargs, timeout=30)
                with lock:
                    counter["requests"] += 1
                    counter["traces"] += case.operation.path == "/v1/traces"
                if response.status_code >= 500 and not _intentional_501(case, response.status_code):
                    failures.append(
                        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}\n"
                        f"  body={case.body!r:.300} query={case.query!r} headers={case.headers!r}"
                    )

            try:
                check()
            except Unsatisfiable:
                pass  # e.g. no negative variant exists for a parameter-less operation
    return {"failures": failures, "operations": len(operations), **counter}


def _health(live: Live) -> int:
    return int(requests.get(live.endpoint + "/v1/agl/health", timeout=10).status_code)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_5xx_for_generated_requests(backend: str) -> None:
    async with live_server(backend, max_body_bytes=BODY_LIMIT) as live:
        started = time.monotonic()
        result = await asyncio.to_thread(_fuzz_schema, live.server.app.openapi(), live.endpoint)
        elapsed = time.monotonic() - started
        assert await asyncio.to_thread(_health, live) == 200
    print(f"fuzz[{backend}]: {result['requests']} requests over {result['operations']} operations in {elapsed:.1f} s")
    assert not result["failures"], "\n".join(result["failures"][:20])
    assert result["operations"] >= 30
    assert result["requests"] >= MIN_REQUESTS, result
    assert result["traces"] >= 2 * EXAMPLES_PER_MODE - 4, result


# ---------------------------------------------------------------------------------------------------------------------
# Structured OTLP exports
# ---------------------------------------------------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
_scalar_values = st.one_of(
    st.builds(lambda v: ("string_value", v), _text),
    st.builds(lambda v: ("bool_value", v), st.booleans()),
    st.builds(lambda v: ("int_value", v), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.builds(lambda v: ("double_value", v), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(lambda v: ("bytes_value", v), st.binary(max_size=8)),
)
_values = st.recursive(
    _scalar_values,
    lambda children: st.one_of(
        st.builds(lambda items: ("array_value", items), st.lists(children, max_size=3)),
        st.builds(lambda items: ("kvlist_value", items), st.lists(st.tuples(_text, children), max_size=3)),
    ),
    max_leaves=12,
)
_attributes = st.lists(st.tuples(_text, _values), max_size=5)


def _set_value(target: Any, value: Any) -> None:
    kind, payload = value
    if kind == "array_value":
        target.array_value.SetInParent()
        for item in payload:
            _set_value(target.array_value.values.add(), item)
    elif kind == "kvlist_value":
        target.kvlist_value.SetInParent()
        for key, item in payload:
            kv = target.kvlist_value.values.add()
            kv.key = key
            _set_value(kv.value, item)
    else:
        setattr(target, kind, payload)


def _add_attributes(container: Any, attributes: Any) -> None:
    for key, value in attributes:
        kv = container.add()
        kv.key = key
        _set_value(kv.value, value)


@st.composite
def _exports(draw: Any, ids: Dict[str, str]) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        resource_spans = request.resource_spans.add()
        known = draw(st.booleans())
        rollout_id = ids["rollout_id"] if known else draw(_text)
        attempt_id = ids["attempt_id"] if known else draw(_text)
        _add_attributes(
            resource_spans.resource.attributes,
            [("agentlightning.rollout_id", ("string_value", rollout_id))]
            + [("agentlightning.attempt_id", ("string_value", attempt_id))]
            + draw(_attributes),
        )
        for _ in range(draw(st.integers(0, 3))):
            span = resource_spans.scope_spans.add().spans.add()
            span.name = draw(_text)
            span.trace_id = draw(st.binary(max_size=17))
            span.span_id = draw(st.binary(max_size=9))
            span.parent_span_id = draw(st.binary(max_size=9))
            span.start_time_unix_nano = draw(st.integers(0, 2**64 - 1))
            span.end_time_unix_nano = draw(st.integers(0, 2**64 - 1))
            span.status.code = draw(st.sampled_from([0, 1, 2]))
            span.status.message = draw(_text)
            sequence = draw(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), _text))
            if sequence is not None:
                value = ("int_value", sequence) if isinstance(sequence, int) else ("string_value", sequence)
                _add_attributes(span.attributes, [("agentlightning.span_sequence_id", value)])
            _add_attributes(span.attributes, draw(_attributes))
            for _ in range(draw(st.integers(0, 2))):
                event = span.events.add(name=draw(_text), time_unix_nano=draw(st.integers(0, 2**64 - 1)))
                _add_attributes(event.attributes, draw(_attributes))
    body = bytes(request.SerializeToString())
    encoding = draw(st.sampled_from(["identity", "gzip", "deflate"]))
    if encoding == "gzip":
        body = gzip.compress(body)
    elif encoding == "deflate":
        body = zlib.compress(body)
    if draw(st.integers(0, 9)) == 0 and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    return body, encoding


def _fuzz_otlp(live: Live) -> List[str]:
    session = requests.Session()
    failures: List[str] = []

    @settings(
        max_examples=OTLP_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(export=_exports(live.ids))
    def check(export: Any) -> None:
        body, encoding = export
        response = session.post(
            live.endpoint + "/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": encoding},
            timeout=30,
        )
        if response.status_code not in (200, 400, 413, 415):
            failures.append(
                f"{response.status_code} for a {len(body)}-byte {encoding} body: {response.content[:300]!r}"
            )

    check()
    return failures


@pytest.mark.parametrize("backend", BACKENDS)
async def test_generated_otlp_exports_never_fail_the_server(backend: str) -> None:
    async with live_server(backend, max_body_bytes=BODY_LIMIT) as live:
        failures = await asyncio.to_thread(_fuzz_otlp, live)
        assert await asyncio.to_thread(_health, live) == 200
    assert not failures, "\n".join(failures[:20])
