"""The proxy end to end in ``thread``/``asyncio`` mode: real store, real mock upstream, the OpenAI SDK as client."""

from __future__ import annotations

import ast
import asyncio
import json
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import aiohttp
import openai
import pytest

import rollouthub as agl
from rollouthub.emitter import emit_reward
from rollouthub.llm_proxy import LLMProxy
from rollouthub.semconv import POLICY_VERSION_ATTRIBUTE
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer, text_token_ids
from rollouthub.types import Span
from rollouthub.utils.server_launcher import pick_free_port

from .conftest import Upstream, model_list

MakeProxy = Callable[..., Any]


async def request(method: str, url: str, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body, headers=headers) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text


async def attempt(store: InMemoryLightningStore) -> Tuple[str, str]:
    rollout = await store.start_rollout({"task": 1})
    return rollout.rollout_id, rollout.attempt.attempt_id


def client(base_url: str, api_key: str = "dummy") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def by_name(spans: Any) -> Dict[str, Span]:
    return {span.name: span for span in spans}


async def test_chat_completion_under_rollout_prefix(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    resource = proxy.as_resource()
    response = await client(resource.get_base_url(rid, aid)).chat.completions.create(
        model="policy", messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    )
    assert response.choices[0].message.content == "echo: hello"
    upstream_body = mock_llm.requests[-1]["body"]
    assert upstream_body["model"] == "upstream-model" and upstream_body["return_token_ids"] is True

    spans = list(await store.query_spans(rid))
    named = by_name(spans)
    assert sorted(named) == ["Received Proxy Server Request", "litellm_request", "raw_gen_ai_request"]
    assert {s.sequence_id for s in spans} == {1} and len({s.trace_id for s in spans}) == 1
    root, llm, raw = named["Received Proxy Server Request"], named["litellm_request"], named["raw_gen_ai_request"]
    assert root.parent_id is None and llm.parent_id == root.span_id and raw.parent_id == llm.span_id
    headers = ast.literal_eval(llm.attributes["metadata.requester_custom_headers"])
    assert headers["x-rollout-id"] == rid and headers["x-attempt-id"] == aid and headers["x-sequence-id"] == "1"
    prompt_ids = text_token_ids("sys\nhello")
    answer_ids = text_token_ids("echo: hello")
    attrs = llm.attributes
    assert attrs["gen_ai.request.model"] == "policy" and attrs["gen_ai.response.model"] == "upstream-model"
    assert attrs["gen_ai.system"] == "hosted_vllm" and attrs["gen_ai.response.id"] == response.id
    assert (attrs["gen_ai.prompt.0.role"], attrs["gen_ai.prompt.1.content"]) == ("system", "hello")
    assert (attrs["gen_ai.completion.0.content"], attrs["gen_ai.completion.0.finish_reason"]) == ("echo: hello", "stop")
    assert attrs["gen_ai.usage.total_tokens"] == len(prompt_ids) + len(answer_ids)
    assert list(attrs["prompt_token_ids"]) == prompt_ids and list(attrs["response_token_ids"]) == answer_ids
    raw_attrs = raw.attributes
    assert raw_attrs["llm.hosted_vllm.id"] == response.id
    assert list(raw_attrs["llm.hosted_vllm.prompt_token_ids"]) == prompt_ids
    assert ast.literal_eval(raw_attrs["llm.hosted_vllm.choices"])[0]["token_ids"] == answer_ids
    assert ast.literal_eval(raw_attrs["llm.hosted_vllm.response_token_ids"]) == [answer_ids]
    assert raw_attrs["llm.hosted_vllm.return_token_ids"] is True

    # The agent's reward comes after the call (store-allocated sequence id): the adapter pairs them.
    reward = emit_reward(0.75, propagate=False)
    seq = await store.get_next_span_sequence_id(rid, aid)
    await store.add_span(Span.from_core_fields(reward, rollout_id=rid, attempt_id=aid, sequence_id=seq))
    triplets = agl.LlmProxyTraceToTriplet().adapt(list(await store.query_spans(rid)))
    assert [(t.prompt, t.response, t.reward, t.metadata) for t in triplets] == [
        ({"token_ids": prompt_ids}, {"token_ids": answer_ids}, 0.75, {"response_id": response.id})
    ]


async def test_unprefixed_calls_work_without_spans(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    for base in (proxy.endpoint, proxy.endpoint + "/v1"):
        response = await client(base).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "x"}]
        )
        assert response.choices[0].message.content == "echo: x"
    assert (await store.statistics()).get("total_spans", 0) == 0


async def test_sequence_id_is_allocated_at_request_start(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer, upstream: Upstream
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    upstream.gate = threading.Event()
    call = asyncio.create_task(
        client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "slow"}]
        )
    )
    try:
        assert await asyncio.to_thread(upstream.arrived.wait, 10)
        # The upstream is still working, yet the proxy already took sequence id 1: the next one is 2.
        assert await store.get_next_span_sequence_id(rid, aid) == 2
    finally:
        upstream.gate.set()
    await call
    assert {s.sequence_id for s in await store.query_spans(rid)} == {1}


async def test_streaming_is_converted_and_readable_by_the_sdk(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    text = "a fairly long question that will produce a reply split over several chunks"
    stream = await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": text}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == f"echo: {text}"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(content.encode())
    assert mock_llm.requests[-1]["body"]["stream"] is False and "stream_options" not in mock_llm.requests[-1]["body"]
    triplets = agl.LlmProxyTraceToTriplet().adapt(list(await store.query_spans(rid)))
    assert len(triplets) == 1 and triplets[0].response["token_ids"] == text_token_ids(content)


async def test_stream_passthrough_without_conversion(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm), middlewares=["rollout_attempt"])
    rid, aid = await attempt(store)
    stream = await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "streamed"}], stream=True
    )
    content = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert content == "echo: streamed" and mock_llm.requests[-1]["body"]["stream"] is True
    named = by_name(await store.query_spans(rid))  # written before the client saw the end of the stream
    assert named["litellm_request"].attributes["gen_ai.completion.0.content"] == content
    assert named["litellm_request"].attributes["llm.is_streaming"] is True
    triplets = agl.LlmProxyTraceToTriplet().adapt(list(named.values()))
    assert triplets[0].prompt["token_ids"] == text_token_ids("streamed")
    assert triplets[0].response["token_ids"] == text_token_ids(content)


async def test_tool_calls_are_recorded(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    tools: Any = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    response = await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "use a tool"}], tools=tools
    )
    assert response.choices[0].message.tool_calls[0].function.name == "lookup"  # type: ignore[index]
    spans = list(await store.query_spans(rid))
    llm = by_name(spans)["litellm_request"]
    assert llm.attributes["gen_ai.completion.0.tool_calls.0.name"] == "lookup"
    assert llm.attributes["gen_ai.request.functions.0.name"] == "lookup"
    tool_spans = [s for s in spans if s.name == "openai.tool_call"]
    assert len(tool_spans) == 1 and tool_spans[0].parent_id == llm.span_id
    conversations = agl.TraceToMessages().adapt(spans)
    assert conversations[0]["messages"][-1]["tool_calls"][0]["function"]["name"] == "lookup"  # type: ignore[typeddict-item]


async def test_completions_responses_and_embeddings(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm, provider="openai"))
    rid, aid = await attempt(store)
    sdk = client(proxy.as_resource(rid, aid).endpoint)
    completion = await sdk.completions.create(model="policy", prompt="complete me")
    assert completion.choices[0].text == "echo: complete me"
    responses = await sdk.responses.create(model="policy", input="respond")
    assert responses.output_text == "echo: respond"
    embedding = await sdk.embeddings.create(model="policy", input=["a", "bb"])
    assert [len(item.embedding) for item in embedding.data] == [4, 4]
    spans = list(await store.query_spans(rid))
    llm_spans = sorted((s for s in spans if s.name == "litellm_request"), key=lambda s: s.sequence_id)
    assert [s.sequence_id for s in llm_spans] == [1, 2, 3]
    assert llm_spans[0].attributes["gen_ai.completion.0.content"] == "echo: complete me"
    assert llm_spans[1].attributes["gen_ai.completion.0.content"] == "echo: respond"
    assert llm_spans[2].attributes["gen_ai.usage.prompt_tokens"] == 3
    raw = [s for s in spans if s.name == "raw_gen_ai_request" and s.sequence_id == 1][0]
    assert list(raw.attributes["llm.openai.prompt_token_ids"]) == text_token_ids("complete me")  # from the choice
    triplets = agl.LlmProxyTraceToTriplet().adapt(spans)  # litellm_request carries the ids whatever the provider
    assert [t.metadata["response_id"] for t in triplets] == [completion.id]


async def test_anthropic_messages(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    models: Any = [
        {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_base": mock_llm.endpoint}}
    ]
    proxy = await make_proxy(store=store, model_list=models)
    rid, aid = await attempt(store)
    url = proxy.as_resource(rid, aid).endpoint + "/v1/messages"
    body = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "bonjour"}]}
    status, message = await request("POST", url, body)
    assert status == 200 and message["content"] == [{"type": "text", "text": "echo: bonjour"}]
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={**body, "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = await response.text()
    names = [line[len("event: ") :] for line in raw.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-1] == "message_stop" and "content_block_delta" in names
    assert mock_llm.requests[-1]["body"]["stream"] is False and mock_llm.requests[-1]["path"] == "/v1/messages"
    llm = [s for s in await store.query_spans(rid) if s.name == "litellm_request"]
    assert [s.attributes["gen_ai.completion.0.content"] for s in llm] == ["echo: bonjour"] * 2
    assert llm[0].attributes["gen_ai.usage.total_tokens"] == len("bonjour") + len("echo: bonjour")
    status, error = await request("POST", proxy.endpoint + "/v1/chat/completions", {"model": "claude", "messages": []})
    assert status == 400 and "does not translate" in error["error"]["message"]


async def test_errors_use_the_openai_shape(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer, upstream: Upstream
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    sdk = client(proxy.as_resource(rid, aid).endpoint)
    with pytest.raises(openai.BadRequestError, match="Invalid model name passed in model=nope"):
        await sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    upstream.failures = [422]
    with pytest.raises(openai.UnprocessableEntityError, match="upstream is unhappy") as info:
        await sdk.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 422
    url = proxy.endpoint + "/v1/chat/completions"
    assert (await request("POST", url, "not an object"))[0] == 400
    status, body = await request("POST", url, {"messages": []})
    assert status == 400 and body["error"]["param"] == "model" and body["error"]["type"] == "invalid_request_error"
    # The failed (attributed) upstream call is recorded with an error status.
    llm = [s for s in await store.query_spans(rid) if s.name == "litellm_request"]
    assert len(llm) == 1 and llm[0].status.status_code == "ERROR"
    assert (
        by_name(await store.query_spans(rid))["Received Proxy Server Request"].attributes["http.response.status_code"]
        == 422
    )


async def test_retries_and_connection_errors(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer, upstream: Upstream
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm), num_retries=2)
    upstream.failures = [500, 503]
    response = await client(proxy.endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "retry"}]
    )
    assert response.choices[0].message.content == "echo: retry" and len(mock_llm.requests) == 3
    upstream.failures = [500, 500, 500]
    with pytest.raises(openai.InternalServerError):
        await client(proxy.endpoint).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "x"}]
        )
    dead: Any = [
        {
            "model_name": "dead",
            "litellm_params": {"model": "openai/x", "api_base": f"http://127.0.0.1:{pick_free_port()}/v1"},
        }
    ]
    broken = await make_proxy(store=store, model_list=dead, num_retries=1)
    status, body = await request("POST", broken.endpoint + "/v1/chat/completions", {"model": "dead", "messages": []})
    assert status == 502 and body["error"]["type"] == "api_connection_error"


async def test_mock_response_master_key_and_payload_callbacks(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    models: Any = [
        {"model_name": "canned", "litellm_params": {"model": "openai/whatever", "mock_response": "canned answer"}},
        *model_list(mock_llm),
    ]
    proxy = await make_proxy(
        store=store,
        model_list=models,
        callbacks=["logprobs", "opentelemetry"],
        litellm_config={"general_settings": {"master_key": "sk-proxy"}},
    )
    with pytest.raises(openai.AuthenticationError):
        await client(proxy.endpoint, api_key="wrong").chat.completions.create(model="canned", messages=[])
    key = proxy.as_resource(model="canned").api_key
    assert key == "sk-proxy"
    rid, aid = await attempt(store)
    sdk = client(proxy.as_resource(rid, aid, model="canned").endpoint, api_key=key)
    response = await sdk.chat.completions.create(model="canned", messages=[{"role": "user", "content": "hi"}])
    assert response.choices[0].message.content == "canned answer" and not mock_llm.requests
    stream = await sdk.chat.completions.create(model="canned", messages=[], stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "canned answer"
    await sdk.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}])
    body = mock_llm.requests[-1]["body"]
    assert body["logprobs"] == 1 and "return_token_ids" not in body
    assert len([s for s in await store.query_spans(rid) if s.name == "litellm_request"]) == 3


async def test_no_opentelemetry_callback_means_no_spans(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm), callbacks=["return_token_ids"])
    rid, aid = await attempt(store)
    await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(model="policy", messages=[])
    assert list(await store.query_spans(rid)) == [] and await store.get_next_span_sequence_id(rid, aid) == 2


async def test_models_and_health_routes(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    dead = {
        "model_name": "dead",
        "litellm_params": {"model": "openai/x", "api_base": f"http://127.0.0.1:{pick_free_port()}/v1"},
    }
    proxy = await make_proxy(store=store, model_list=[*model_list(mock_llm), dead])
    models = await client(proxy.endpoint).models.list()
    assert [m.id for m in models.data] == ["policy", "dead"]
    assert (await request("GET", proxy.endpoint + "/models"))[1]["data"][0]["id"] == "policy"
    assert (await request("GET", proxy.endpoint + "/v1/models/policy"))[1]["id"] == "policy"
    assert (await request("GET", proxy.endpoint + "/v1/models/unknown"))[0] == 404
    assert (await request("GET", proxy.endpoint + "/health")) == (
        200,
        {"status": "healthy", "models": ["policy", "dead"]},
    )
    assert (await request("GET", proxy.endpoint + "/health/liveliness")) == (200, "I'm alive!")
    assert (await request("GET", proxy.endpoint + "/health/readiness"))[0] == 200
    status, probe = await request("GET", proxy.endpoint + "/health?probe=true")
    assert (status, probe["healthy_count"], probe["unhealthy_count"]) == (200, 1, 1)
    assert probe["unhealthy_endpoints"][0]["model"] == "dead"
    rid, aid = await attempt(store)
    assert (await request("GET", proxy.as_resource(rid, aid, model="policy").endpoint + "/v1/models"))[0] == 200


async def test_restart_on_a_new_port_with_a_new_model_list(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    proxy: LLMProxy = await make_proxy(store=store, model_list=model_list(mock_llm, name="v1"))
    old = proxy.endpoint
    await proxy.restart()  # same port
    assert proxy.endpoint == old and proxy.is_running()
    proxy.update_model_list(model_list(mock_llm, name="v2"))
    new_port = pick_free_port()
    await proxy.restart(_port=new_port)
    assert proxy.endpoint.endswith(f":{new_port}") and proxy.as_resource().model == "v2"
    with pytest.raises(aiohttp.ClientConnectionError):
        await request("GET", old + "/health")
    response = await client(proxy.endpoint).chat.completions.create(
        model="v2", messages=[{"role": "user", "content": "n"}]
    )
    assert response.choices[0].message.content == "echo: n"
    with pytest.raises(openai.BadRequestError):
        await client(proxy.endpoint).chat.completions.create(model="v1", messages=[])


async def test_policy_version_from_model_info_is_on_the_call_spans(
    make_proxy: MakeProxy, store: InMemoryLightningStore, mock_llm: MockOpenAIServer
) -> None:
    """A vLLM server behind the proxy: the version comes from the deployment's model_info, bumped by the algorithm."""
    entry = {**model_list(mock_llm)[0], "model_info": {"policy_version": 3}}
    proxy: LLMProxy = await make_proxy(store=store, model_list=[entry])

    async def versions() -> Dict[str, Any]:
        rid, aid = await attempt(store)
        await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "v"}]
        )
        return {span.name: span.attributes.get(POLICY_VERSION_ATTRIBUTE) for span in await store.query_spans(rid)}

    assert await versions() == {"Received Proxy Server Request": None, "litellm_request": 3, "raw_gen_ai_request": 3}
    proxy.update_model_list([{**entry, "model_info": {"policy_version": 4}}])
    await proxy.restart()
    assert (await versions())["litellm_request"] == 4
    proxy.update_model_list(model_list(mock_llm))
    await proxy.restart()
    assert set((await versions()).values()) == {None}


async def test_asyncio_mode_with_an_async_safe_store(make_proxy: MakeProxy, mock_llm: MockOpenAIServer) -> None:
    store = InMemoryLightningStore()  # async-safe, not thread-safe: fine in the caller's loop
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm), launch_mode="asyncio")
    rid, aid = await attempt(store)
    await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(model="policy", messages=[])
    assert len(list(await store.query_spans(rid))) == 3
    await proxy.stop()
    assert not proxy.is_running()
