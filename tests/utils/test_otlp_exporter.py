"""The client-side OTLP exporter (``rollouthub.utils.otlp``) against a real HTTP server on a local port."""

from __future__ import annotations

import http.server
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from rollouthub.utils.otlp import (
    AGL_ATTEMPT_ID,
    AGL_ROLLOUT_ID,
    LightningStoreOTLPExporter,
    stamp_resource_attributes,
)


@dataclass
class Capture:
    """What the capture server received, and what it answers next."""

    url: str
    requests: List[Tuple[str, Dict[str, str], bytes]] = field(default_factory=list)
    connections: List[Any] = field(default_factory=list)
    answers: List[Tuple[int, bytes]] = field(default_factory=list)  # consumed first (0: no answer); then 200, empty

    def resources(self, index: int = -1) -> List[Dict[str, Any]]:
        """The resource attributes of each ResourceSpans of request ``index``."""
        request = ExportTraceServiceRequest.FromString(self.requests[index][2])
        return [
            {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in rs.resource.attributes}
            for rs in request.resource_spans
        ]


@pytest.fixture
def capture() -> Iterator[Capture]:
    """An HTTP/1.1 server (kept-alive connections) recording every POST."""
    server: http.server.ThreadingHTTPServer
    state: Dict[str, Capture] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            state["capture"].connections.append(self.client_address)
            super().setup()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got = state["capture"]
            got.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, answer = got.answers.pop(0) if got.answers else (200, b"")
            if status == 0:  # read the request, then close the connection without an answer
                self.close_connection = True
                return
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["capture"] = Capture(url=f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["capture"]
    finally:
        server.shutdown()
        server.server_close()


def _span(name: str, resource: Resource, span_id: int = 1) -> ReadableSpan:
    context = SpanContext(1, span_id, is_remote=False, trace_flags=TraceFlags(1))
    return ReadableSpan(name=name, context=context, resource=resource, start_time=1, end_time=2)


def test_without_ids_nothing_is_sent(capture: Capture) -> None:
    exporter = LightningStoreOTLPExporter(endpoint=capture.url)
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.SUCCESS
    assert capture.requests == [] and exporter.endpoint == capture.url
    exporter.shutdown()


def test_store_exports_carry_the_ids_on_every_resource_and_leave_the_spans_alone(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROLLOUTHUB_API_TOKEN", raising=False)
    exporter = LightningStoreOTLPExporter(endpoint="http://original:4318/v1/traces")
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1", api_token="tok")
    assert (exporter.endpoint, exporter.rollout_id, exporter.attempt_id) == (capture.url, "ro-1", "at-1")
    bare = Resource({"service.name": "agent"})
    stale = Resource({AGL_ROLLOUT_ID: "ro-0", AGL_ATTEMPT_ID: "at-0", "host": "h"})
    spans = [_span("a", bare, 1), _span("b", bare, 2), _span("c", stale, 3)]
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    [(path, headers, _)] = capture.requests
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/x-protobuf" and headers["authorization"] == "Bearer tok"
    assert sorted(capture.resources(), key=len) == [
        {"service.name": "agent", AGL_ROLLOUT_ID: "ro-1", AGL_ATTEMPT_ID: "at-1"},
        {AGL_ROLLOUT_ID: "ro-1", AGL_ATTEMPT_ID: "at-1", "host": "h"},
    ]
    assert dict(bare.attributes) == {"service.name": "agent"}  # the SDK's resources are not changed
    assert spans[2].resource.attributes[AGL_ROLLOUT_ID] == "ro-0"

    exporter.disable_store_otlp()
    assert (exporter.endpoint, exporter.rollout_id, exporter.attempt_id) == (
        "http://original:4318/v1/traces",
        None,
        None,
    )
    assert exporter.export(spans) is SpanExportResult.SUCCESS and len(capture.requests) == 1  # bypassed again
    exporter.enable_store_otlp(capture.url, "ro-2", "at-2")  # no token given, none in the environment
    assert exporter.export(spans[:1]) is SpanExportResult.SUCCESS
    assert "authorization" not in capture.requests[-1][1]
    exporter.shutdown()


def test_the_token_comes_from_the_environment_when_not_given(capture: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUTHUB_API_TOKEN", "from-env")
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.SUCCESS
    assert capture.requests[0][1]["authorization"] == "Bearer from-env"
    exporter.shutdown()


def test_one_connection_is_kept_alive_across_batches(capture: Capture) -> None:
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    for batch in range(3):
        assert exporter.export([_span(f"s{batch}", Resource({}), batch + 1)]) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert len(capture.requests) == 3
    assert len(capture.connections) == 1  # one kept-alive connection per exporter (per process), not one per batch


def test_a_busy_store_is_asked_again_and_an_error_is_a_failure(capture: Capture) -> None:
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    capture.answers[:] = [(503, b""), (502, b"")]
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.SUCCESS
    assert len(capture.requests) == 3  # two transient answers, then stored
    capture.answers[:] = [(500, b"")]
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.FAILURE
    assert len(capture.requests) == 4  # an error is not sent again
    capture.answers[:] = [(503, b"")] * 4
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.FAILURE
    assert len(capture.requests) == 8  # the first try and three more
    exporter.shutdown()


def test_a_lost_answer_is_sent_once_more_on_a_new_connection(capture: Capture) -> None:
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    capture.answers[:] = [(0, b"")]
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.SUCCESS
    assert len(capture.requests) == 2 and len(capture.connections) == 2
    capture.answers[:] = [(0, b""), (0, b"")]
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.FAILURE  # once more, not again
    assert len(capture.requests) == 4
    exporter.shutdown()


def test_an_unreachable_store_is_a_failure_not_an_exception() -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    exporter = LightningStoreOTLPExporter(timeout=2)
    exporter.enable_store_otlp(f"http://127.0.0.1:{port}/v1/traces", "ro-1", "at-1")
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.FAILURE
    exporter.shutdown()


def test_rejected_spans_are_logged(capture: Capture, caplog: pytest.LogCaptureFixture) -> None:
    answer = ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = 1
    answer.partial_success.error_message = "Invalid OTLP span 's'"
    capture.answers[:] = [(200, answer.SerializeToString())]
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    with caplog.at_level(logging.WARNING, logger="rollouthub.utils.otlp"):
        assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.SUCCESS
    assert "rejected 1 span(s): Invalid OTLP span 's'" in caplog.text
    exporter.shutdown()


def test_after_shutdown_nothing_is_sent(capture: Capture) -> None:
    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(capture.url, "ro-1", "at-1")
    exporter.shutdown()
    assert exporter.export([_span("s", Resource({}))]) is SpanExportResult.FAILURE
    assert capture.requests == []


def test_a_subclass_that_does_not_bypass_exports_to_its_own_endpoint_without_ids(capture: Capture) -> None:
    class Forwarding(LightningStoreOTLPExporter):
        def should_bypass(self) -> bool:
            return False

    exporter = Forwarding(endpoint=capture.url)
    assert exporter.export([_span("s", Resource({"service.name": "x"}))]) is SpanExportResult.SUCCESS
    assert capture.resources() == [{"service.name": "x"}]  # OpenTelemetry's own export: no ids added
    exporter.shutdown()


def test_the_default_endpoint_follows_opentelemetry_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert LightningStoreOTLPExporter().endpoint == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:1/x")
    assert LightningStoreOTLPExporter().endpoint == "http://traces:1/x"
    assert LightningStoreOTLPExporter("http://given:2/y").endpoint == "http://given:2/y"


def test_stamping_replaces_keys_and_adds_the_missing_ones() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans([_span("a", Resource({"k": "old", "keep": "x"}), 1), _span("b", Resource({}), 2)])
    stamp_resource_attributes(request, {"k": "new", "seq": 7})
    found = [
        {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in rs.resource.attributes}
        for rs in request.resource_spans
    ]
    assert sorted(found, key=len) == [{"k": "new", "seq": 7}, {"k": "new", "keep": "x", "seq": 7}]
