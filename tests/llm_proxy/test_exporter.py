"""``LightningSpanExporter``: subtree flushing, header validation, both store paths."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, List, Optional

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from rollouthub.llm_proxy import LightningSpanExporter
from rollouthub.llm_proxy.spans import TraceCollector
from rollouthub.store.base import LightningStoreCapabilities
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.utils.server_launcher import pick_free_port

HEADERS = "metadata.requester_custom_headers"


def request_spans(
    rollout_id: str, attempt_id: str, sequence: Any, extra: Optional[Dict[str, Any]] = None
) -> List[ReadableSpan]:
    """The three spans of one request (ended children first, like the engine), headers on the root only."""
    collector = TraceCollector()
    provider = TracerProvider()
    provider.add_span_processor(collector)
    tracer = provider.get_tracer("test")
    headers = {"x-rollout-id": rollout_id, "x-attempt-id": attempt_id, "x-sequence-id": sequence}
    root = tracer.start_span("root", attributes={HEADERS: str(headers), **(extra or {})})
    child = tracer.start_span("litellm_request", context=trace_api.set_span_in_context(root))
    grandchild = tracer.start_span("raw_gen_ai_request", context=trace_api.set_span_in_context(child))
    grandchild.end()
    child.end()
    root.end()
    return collector.pop(root.get_span_context().trace_id)


@pytest.fixture()
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore(thread_safe=True)


async def test_subtrees_wait_for_their_root(store: InMemoryLightningStore) -> None:
    rollout = await store.start_rollout({"x": 1})
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    exporter = LightningSpanExporter(_store=store)
    first = request_spans(rid, aid, "4")
    second = request_spans(rid, aid, "5")
    try:
        # Children of both requests arrive before any root: nothing can be written yet.
        assert await asyncio.to_thread(exporter.export, first[:2] + second[:2]) == SpanExportResult.SUCCESS
        assert exporter.buffered == 4 and list(await store.query_spans(rid)) == []
        assert await asyncio.to_thread(exporter.export, first[2:]) == SpanExportResult.SUCCESS
        stored = await store.query_spans(rid)
        assert sorted(s.name for s in stored) == ["litellm_request", "raw_gen_ai_request", "root"]
        assert {s.sequence_id for s in stored} == {4} and exporter.buffered == 2
        assert await asyncio.to_thread(exporter.export, second[2:]) == SpanExportResult.SUCCESS
        assert sorted(s.sequence_id for s in await store.query_spans(rid)) == [4, 4, 4, 5, 5, 5]
        assert exporter.buffered == 0
    finally:
        exporter.shutdown()


@pytest.mark.parametrize(
    ("sequence", "extra", "message"),
    [
        ("x", None, "non-decimal x-sequence-id"),
        (None, None, "non-decimal x-sequence-id"),
        ("1", {HEADERS: "{not python"}, "unparsable"),
        ("1", {HEADERS: ""}, "empty or non-string"),
    ],
)
async def test_invalid_headers_are_skipped(
    store: InMemoryLightningStore, sequence: Any, extra: Any, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = LightningSpanExporter(_store=store)
    spans = request_spans("ro-1", "at-1", sequence, extra)
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.exporter"):
        assert await exporter.export_async(spans) == SpanExportResult.SUCCESS
    assert message in caplog.text and exporter.buffered == 0


async def test_missing_store_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.exporter"):
        result = await asyncio.to_thread(LightningSpanExporter().export, request_spans("r", "a", "1"))
    assert result == SpanExportResult.SUCCESS and "No store is available" in caplog.text


async def test_otlp_path_through_the_store_server(store: InMemoryLightningStore) -> None:
    server = LightningStoreServer(store, host="127.0.0.1", port=pick_free_port())
    await server.start()
    try:
        rollout = await server.start_rollout({"x": 1})
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        exporter = LightningSpanExporter(_store=server)
        assert await exporter.export_async(request_spans(rid, aid, "7")) == SpanExportResult.SUCCESS
        assert await asyncio.to_thread(exporter.export, request_spans(rid, aid, "8")) == SpanExportResult.SUCCESS
        stored = await server.query_spans(rid)
        assert sorted(s.sequence_id for s in stored) == [7, 7, 7, 8, 8, 8]
        assert all(s.resource.attributes["agentlightning.rollout_id"] == rid for s in stored)
        assert len({s.trace_id for s in stored}) == 2
    finally:
        await server.stop()


class _UnreachableOtlpStore(InMemoryLightningStore):
    """A store whose OTLP endpoint is a free port nobody listens on."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self._port = port

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1/traces"


async def test_otlp_failure_is_reported() -> None:
    exporter = LightningSpanExporter(_store=_UnreachableOtlpStore(pick_free_port()))
    assert await exporter.export_async(request_spans("r", "a", "1")) == SpanExportResult.FAILURE
    assert await asyncio.to_thread(exporter.export, request_spans("r", "a", "1")) == SpanExportResult.FAILURE


async def test_concurrent_otlp_writes_are_group_committed(store: InMemoryLightningStore) -> None:
    """Concurrent writers share OTLP requests, and each returns only once its own spans are stored."""
    import aiohttp

    server = LightningStoreServer(store, host="127.0.0.1", port=pick_free_port())
    await server.start()
    requests: List[str] = []

    async def on_request_start(session: Any, context: Any, params: aiohttp.TraceRequestStartParams) -> None:
        requests.append(str(params.url))

    trace_config = aiohttp.TraceConfig()
    trace_config.on_request_start.append(on_request_start)
    session = aiohttp.ClientSession(trace_configs=[trace_config])
    try:
        rollouts = [await server.start_rollout({"i": i}) for i in range(4)]
        exporter = LightningSpanExporter(_store=server)

        async def write(index: int) -> bool:
            rollout = rollouts[index % 4]
            rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
            result = await exporter.export_async(request_spans(rid, aid, str(index + 1)), session=session)
            stored = await server.query_spans(rid)
            return result == SpanExportResult.SUCCESS and sum(s.sequence_id == index + 1 for s in stored) == 3

        assert all(await asyncio.gather(*(write(i) for i in range(24))))
        assert 1 <= len(requests) < 24  # grouped: fewer requests than writers
        for rollout in rollouts:
            stored = await server.query_spans(rollout.rollout_id)
            assert len(stored) == 18
            assert {s.resource.attributes["agentlightning.rollout_id"] for s in stored} == {rollout.rollout_id}
            assert {s.resource.attributes["agentlightning.attempt_id"] for s in stored} == {rollout.attempt.attempt_id}
            by_sequence: Dict[int, set[str]] = {}
            for span in stored:
                by_sequence.setdefault(span.sequence_id, set()).add(span.trace_id)
            assert all(len(traces) == 1 for traces in by_sequence.values())  # one request subtree per sequence id
    finally:
        await session.close()
        await server.stop()


async def test_a_failed_group_commit_fails_every_writer() -> None:
    exporter = LightningSpanExporter(_store=_UnreachableOtlpStore(pick_free_port()))
    results = await asyncio.gather(*(exporter.export_async(request_spans("r", "a", str(i))) for i in range(8)))
    assert results == [SpanExportResult.FAILURE] * 8


async def test_group_committed_otlp_spans_equal_the_direct_conversion() -> None:
    """Subtrees stored through the batched OTLP path equal what ``add_many_spans`` would store for them."""
    from rollouthub.types import Span

    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port())
    await server.start()
    try:
        rollout = await server.start_rollout({"x": 1})
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        subtrees = [
            request_spans(rid, aid, str(i), {"gen_ai.prompt.0.content": f"q{i}", "n": i, "ids": [1, 2, i]})
            for i in range(1, 6)
        ]
        expected = [
            Span.from_opentelemetry(span, rollout_id=rid, attempt_id=aid, sequence_id=i)
            for i, spans in enumerate(subtrees, start=1)
            for span in spans
        ]
        exporter = LightningSpanExporter()
        results = await asyncio.gather(*(exporter.export_async(spans, store=server) for spans in subtrees))
        assert results == [SpanExportResult.SUCCESS] * 5

        def content(span: Span) -> Any:
            return (
                span.sequence_id,
                span.trace_id,
                span.span_id,
                span.parent_id,
                span.name,
                span.status,
                {k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()},  # OTel keeps tuples
                span.start_time,
                span.end_time,
            )

        stored = sorted(map(content, await server.query_spans(rid)), key=repr)
        want = sorted(map(content, expected), key=repr)
        assert len(stored) == 15 and stored == want
    finally:
        await server.stop()
