"""The proxy in its default ``mp`` mode: a forked server writing spans over OTLP to a store server or client."""

from __future__ import annotations

from typing import Any, AsyncIterator

import openai
import pytest

import rollouthub as agl
from rollouthub.llm_proxy import LLMProxy
from rollouthub.store.client import LightningStoreClient
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer, text_token_ids
from rollouthub.utils.server_launcher import pick_free_port

from .conftest import model_list


@pytest.fixture()
async def server() -> AsyncIterator[LightningStoreServer]:
    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port())
    await server.start()
    yield server
    await server.stop()


async def run_calls(proxy: LLMProxy, store: Any, n_calls: int) -> Any:
    rollout = await store.start_rollout({"task": "mp"})
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    base = proxy.as_resource().get_base_url(rid, aid)
    sdk = openai.AsyncOpenAI(base_url=base, api_key="dummy", max_retries=0)
    ids = []
    for i in range(n_calls):
        response = await sdk.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"q{i}"}])
        ids.append(response.id)
    return rid, ids


async def test_mp_mode_with_a_store_server(server: LightningStoreServer, mock_llm: MockOpenAIServer) -> None:
    proxy = LLMProxy(host="127.0.0.1", store=server, model_list=model_list(mock_llm))
    await proxy.start()
    try:
        rid, ids = await run_calls(proxy, server, 2)
    finally:
        await proxy.stop()
    assert not proxy.is_running()
    spans = list(await server.query_spans(rid))
    assert sorted(s.sequence_id for s in spans) == [1, 1, 1, 2, 2, 2]
    assert {s.resource.attributes["agentlightning.span_sequence_id"] for s in spans} == {1, 2}  # stamped for OTLP
    triplets = agl.LlmProxyTraceToTriplet().adapt(spans)
    assert [t.metadata["response_id"] for t in triplets] == ids
    assert triplets[1].prompt["token_ids"] == text_token_ids("q1")


async def test_mp_mode_with_a_client_and_two_workers(server: LightningStoreServer, mock_llm: MockOpenAIServer) -> None:
    client = LightningStoreClient(server.endpoint)
    proxy = LLMProxy(host="127.0.0.1", store=client, model_list=model_list(mock_llm), num_workers=2)
    await proxy.start()
    try:
        rid, ids = await run_calls(proxy, client, 3)
    finally:
        await proxy.stop()
        await client.close()
    spans = list(await server.query_spans(rid))
    assert sorted({s.sequence_id for s in spans}) == [1, 2, 3] and len(spans) == 9
    assert [t.metadata["response_id"] for t in agl.LlmProxyTraceToTriplet().adapt(spans)] == ids
