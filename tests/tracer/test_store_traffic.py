"""The store's own HTTP traffic is never traced back into the store (no OTLP feedback loop)."""

from __future__ import annotations

import socket

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from rollouthub.store import InMemoryLightningStore
from rollouthub.tracer import OtelTracer
from rollouthub.tracer.otel import LightningSpanProcessor

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_filter_ignores_store_requests_and_their_children() -> None:
    processor = LightningSpanProcessor()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("fastapi")
    with processor:
        with tracer.start_as_current_span(
            "POST /v1/traces", kind=SpanKind.SERVER, attributes={"url.path": "/v1/traces"}
        ):
            with tracer.start_as_current_span("fastapi.endpoint"):
                pass
        with tracer.start_as_current_span(
            "GET /v1/agl/rollouts", kind=SpanKind.SERVER, attributes={"url.path": "/v1/agl/rollouts"}
        ):
            pass
        with tracer.start_as_current_span("GET /app", kind=SpanKind.SERVER, attributes={"url.path": "/app"}):
            with tracer.start_as_current_span("user.child"):
                pass
        with tracer.start_as_current_span("client call", kind=SpanKind.CLIENT, attributes={"url.path": "/v1/traces"}):
            pass
    assert [s.name for s in processor.spans()] == ["user.child", "GET /app", "client call"]


async def test_in_process_store_server_does_not_feed_back() -> None:
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.store.client_server import LightningStoreServer

    port = _free_port()
    tracer = OtelTracer()
    tracer.init_worker(0)  # the tracer provider exists before the server serves requests
    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=port)
    await server.start()
    client = LightningStoreClient(f"http://127.0.0.1:{port}")
    try:
        rollout = await client.start_rollout(input="x")
        tracer.init_worker(0, client)
        async with tracer.trace_context(rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id):
            tracer.create_span("one")
            tracer.create_span("two")
        spans = await client.query_spans(rollout.rollout_id)
        assert sorted(s.name for s in spans) == ["one", "two"]
        assert [s.name for s in tracer.get_last_trace()] == ["one", "two"]
    finally:
        await client.close()
        await server.stop()
