"""A policy served through a real LLMProxy on a real port by the local backend, traced into a real store."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable, Dict, List, Tuple

import aiohttp
import openai
import pytest

from rollouthub.llm_proxy import LLMProxy
from rollouthub.semconv import POLICY_VERSION_ATTRIBUTE
from rollouthub.store.memory import InMemoryLightningStore
from tests.train_stack import TRAIN_ONLY

from .test_proxy import attempt, by_name, client, request
from .tiny_policy import gated, lively_tiny_lm, mean_abs_difference, teacher_forced_logprobs

pytestmark = TRAIN_ONLY

MakeProxy = Callable[..., Any]
ENTRY: Any = {"model_name": "policy", "litellm_params": {"model": "local/tiny"}}
CALLBACKS = ["return_token_ids", "logprobs", "opentelemetry"]
QUESTIONS = ["hi", "what is 2 + 2?", "name a colour", "count to three", "say yes", "and no"]


def messages(content: str) -> List[Dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]


def make_backend(model: Any = None, **options: Any) -> Any:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend

    lively, tokenizer = lively_tiny_lm(seed=0)
    options = {"max_tokens": 12, "batch_window_s": 0.2, **options}
    return LocalPolicyBackend(lively if model is None else model, tokenizer, **options)


@pytest.fixture()
async def backend() -> AsyncIterator[Any]:
    served = make_backend()
    yield served
    served.close()


@pytest.fixture()
async def proxy(make_proxy: MakeProxy, store: InMemoryLightningStore, backend: Any) -> LLMProxy:
    return await make_proxy(  # type: ignore[no-any-return]
        store=store, model_list=[ENTRY], local_backends={"tiny": backend}, callbacks=CALLBACKS
    )


async def call(proxy: LLMProxy, store: InMemoryLightningStore, content: str, **fields: Any) -> Tuple[Any, str]:
    rid, aid = await attempt(store)
    response = await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
        model="policy", messages=messages(content), **fields
    )
    return response, rid


def span_logprobs(attributes: Dict[str, Any]) -> List[float]:
    return [entry["logprob"] for entry in json.loads(attributes["logprobs.content"])]


async def test_answers_in_vllm_shape_and_spans_carry_token_ids_logprobs_and_the_policy_version(
    proxy: LLMProxy, store: InMemoryLightningStore, backend: Any
) -> None:
    response, rid = await call(proxy, store, "hi", temperature=0.7, seed=3, logprobs=True, top_logprobs=2)
    prompt_ids = response.model_extra["prompt_token_ids"]
    choice = response.choices[0]
    ids = choice.model_extra["token_ids"]
    tokenizer = backend.tokenizer
    assert prompt_ids == tokenizer.encode("<|system|>Be brief.<|end|><|user|>hi<|end|><|assistant|>")
    assert response.model == "tiny" and choice.finish_reason in ("stop", "length") and ids
    assert response.usage.prompt_tokens == len(prompt_ids) and response.usage.completion_tokens == len(ids)
    content = choice.logprobs.content
    assert [entry.token for entry in content] == [tokenizer.decode([i]) for i in ids]
    assert all(entry.bytes == list(entry.token.encode()) and len(entry.top_logprobs) == 2 for entry in content)
    if choice.finish_reason == "stop":
        assert ids[-1] == tokenizer.eos_token_id and choice.message.content == tokenizer.decode(ids[:-1])

    named = by_name(await store.query_spans(rid))
    llm, raw = named["litellm_request"].attributes, named["raw_gen_ai_request"].attributes
    assert list(llm["prompt_token_ids"]) == prompt_ids and list(llm["response_token_ids"]) == ids
    assert span_logprobs(llm) == [entry.logprob for entry in content]
    assert llm[POLICY_VERSION_ATTRIBUTE] == 0 and raw[POLICY_VERSION_ATTRIBUTE] == 0
    assert POLICY_VERSION_ATTRIBUTE not in named["Received Proxy Server Request"].attributes
    assert llm["gen_ai.system"] == "local" and list(raw["llm.local.prompt_token_ids"]) == prompt_ids
    # what the trainer will do with the span: recompute the log-probs of the sampled tokens at the same temperature
    recomputed = teacher_forced_logprobs(backend.model, prompt_ids, ids, temperature=0.7)
    assert mean_abs_difference(recomputed, span_logprobs(llm)) < 1e-4


async def test_concurrent_calls_are_batched_and_answer_as_one_by_one(
    make_proxy: MakeProxy, store: InMemoryLightningStore
) -> None:
    slow = gated(lively_tiny_lm(seed=0)[0])
    backend = make_backend(slow)
    proxy = await make_proxy(store=store, model_list=[ENTRY], local_backends={"tiny": backend}, callbacks=CALLBACKS)
    try:
        slow.gate.set()
        alone = [(await call(proxy, store, q, temperature=0))[0] for q in QUESTIONS]
        assert backend.stats().max_batch_size == 1
        slow.gate.clear()
        slow.entered.clear()
        together = asyncio.gather(*(call(proxy, store, q, temperature=0) for q in QUESTIONS))
        assert await asyncio.to_thread(slow.entered.wait, 30)  # a first batch is generating (held at the gate)
        for _ in range(600):  # until every call has reached the backend (at most 30 s)
            if backend.calls_in_flight == len(QUESTIONS):
                break
            await asyncio.wait([together], timeout=0.05)
        slow.gate.set()
        answers = await together
        assert backend.stats().max_batch_size > 1  # the calls queued behind the first batch went together
        for single, (batched, rid) in zip(alone, answers, strict=True):
            ids = batched.choices[0].model_extra["token_ids"]
            assert ids == single.choices[0].model_extra["token_ids"]
            llm = by_name(await store.query_spans(rid))["litellm_request"].attributes
            recomputed = teacher_forced_logprobs(slow.inner, list(llm["prompt_token_ids"]), ids, temperature=0)
            assert mean_abs_difference(recomputed, span_logprobs(llm)) < 1e-4
    finally:
        slow.gate.set()
        backend.close()


async def test_streaming_sends_the_token_ids(proxy: LLMProxy, store: InMemoryLightningStore) -> None:
    complete, _ = await call(proxy, store, "hi", temperature=0)
    rid, aid = await attempt(store)
    stream = await client(proxy.as_resource(rid, aid).endpoint).chat.completions.create(
        model="policy", messages=messages("hi"), temperature=0, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == complete.choices[0].message.content
    assert chunks[0].model_extra["prompt_token_ids"] == complete.model_extra["prompt_token_ids"]
    final = chunks[-1].choices[0]
    assert final.finish_reason == complete.choices[0].finish_reason
    assert final.model_extra["token_ids"] == complete.choices[0].model_extra["token_ids"]
    llm = by_name(await store.query_spans(rid))["litellm_request"].attributes
    assert list(llm["response_token_ids"]) == final.model_extra["token_ids"] and llm[POLICY_VERSION_ATTRIBUTE] == 0


async def test_unsupported_requests_are_a_400_naming_the_field(proxy: LLMProxy, store: InMemoryLightningStore) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await call(proxy, store, "hi", extra_body={"best_of": 2})
    assert info.value.body["param"] == "best_of" and "'best_of'" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="top_p"):
        await call(proxy, store, "hi", top_p=0)
    status, body = await request("POST", f"{proxy.endpoint}/v1/completions", {"model": "policy", "prompt": "x"})
    assert status == 400 and "chat completions only" in body["error"]["message"]


async def test_weight_update_holds_new_calls_with_429_then_serves_the_new_policy(
    make_proxy: MakeProxy, store: InMemoryLightningStore
) -> None:
    slow = gated(lively_tiny_lm(seed=0)[0])
    backend = make_backend(slow, retry_after_s=0.2)
    proxy = await make_proxy(store=store, model_list=[ENTRY], local_backends={"tiny": backend}, callbacks=CALLBACKS)
    new_model, _ = lively_tiny_lm(seed=1)
    release = asyncio.Event()
    try:
        in_flight = asyncio.ensure_future(call(proxy, store, "hi", temperature=0))
        assert await asyncio.to_thread(slow.entered.wait, 30)

        async def update() -> None:
            async with backend.weight_update(timeout=60):
                backend.set_model(new_model)
                await release.wait()

        updating = asyncio.ensure_future(update())
        for _ in range(1000):  # the update takes the hold at its first step
            if backend.holding:
                break
            await asyncio.sleep(0)
        assert backend.holding
        rid, aid = await attempt(store)
        url = f"{proxy.as_resource(rid, aid).endpoint}/v1/chat/completions"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"model": "policy", "messages": messages("hi")}) as response:
                assert response.status == 429 and (await response.json())["error"]["type"] == "rate_limit_error"
                assert (response.headers["Retry-After"], response.headers["retry-after-ms"]) == ("1", "200")
        assert not updating.done()  # still waiting for the call in flight
        slow.gate.set()
        old, old_rid = await in_flight  # the call in flight finishes, on the old weights
        # an OpenAI SDK client retries the 429 (honouring retry-after-ms) until the hold is released
        retried = asyncio.ensure_future(
            openai.AsyncOpenAI(
                base_url=proxy.as_resource(rid, aid).endpoint, api_key="x", max_retries=20
            ).chat.completions.create(model="policy", messages=messages("hi"), temperature=0)
        )
        refused = backend.stats().refused
        for _ in range(600):  # until the SDK's call has been refused once (at most 30 s)
            if backend.stats().refused > refused:
                break
            await asyncio.wait([retried], timeout=0.05)
        assert backend.stats().refused > refused and not retried.done()
        release.set()
        await updating
        new = await retried
        assert backend.policy_version == 1
        old_ids, new_ids = old.choices[0].model_extra["token_ids"], new.choices[0].model_extra["token_ids"]
        assert old_ids != new_ids  # the new weights answer differently
        versions = {
            span.name: span.attributes.get(POLICY_VERSION_ATTRIBUTE)
            for span in await store.query_spans(old_rid)
            if span.name == "litellm_request"
        }
        assert versions == {"litellm_request": 0}
        new_spans = [s for s in await store.query_spans(rid) if s.name == "litellm_request"]
        assert [s.status.status_code for s in new_spans].count("ERROR") == len(new_spans) - 1  # the 429s
        served = [s for s in new_spans if s.status.status_code != "ERROR"]
        assert served[0].attributes[POLICY_VERSION_ATTRIBUTE] == 1
        assert list(served[0].attributes["response_token_ids"]) == new_ids
    finally:
        slow.gate.set()
        release.set()
        backend.close()


async def test_asyncio_launch_mode(make_proxy: MakeProxy, backend: Any) -> None:
    store = InMemoryLightningStore()  # async-safe: the proxy shares the caller's loop
    proxy = await make_proxy(store=store, model_list=[ENTRY], local_backends={"tiny": backend}, launch_mode="asyncio")
    response, rid = await call(proxy, store, "hi", max_tokens=3)
    assert len(response.choices[0].model_extra["token_ids"]) <= 3
    llm = by_name(await store.query_spans(rid))["litellm_request"].attributes
    assert llm[POLICY_VERSION_ATTRIBUTE] == 0 and "logprobs.content" not in llm  # no "logprobs" callback here
