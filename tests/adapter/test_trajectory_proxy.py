"""Trajectories of agents that call a real LLM proxy on a port, in front of a mock upstream whose token ids have the
prefix property of a chat template (``MockOpenAIServer(tokenization="chat_template")``); the agent's side is traced
too, so every call is recorded twice (proxy and OpenAI instrumentation) and must count once."""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Dict, Iterator, List, Tuple

import openai
import pytest

from rollouthub.adapter import build_trajectories, input_group_id
from rollouthub.emitter import emit_reward
from rollouthub.export import ExportSelection, iter_export_rows
from rollouthub.llm_proxy import LLMProxy
from rollouthub.llm_proxy import proxy as proxy_module
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer, mock_logprob, render_answer, text_token_ids
from rollouthub.tracer import OtelTracer

from .helpers import instrumented_tracer

pytestmark = pytest.mark.timeout(120)

CITIES = ["Paris", "Rome"]
WEATHER = {"Paris": "sunny", "Rome": "rainy"}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SYSTEM = {"role": "system", "content": "You look up the weather."}
USER = {"role": "user", "content": "Weather in Paris and Rome?"}


def tool_call(city: str) -> Dict[str, Any]:
    return {
        "id": f"call-{city}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'},
    }


def reply(request: Dict[str, Any]) -> Any:
    """One tool call per city not looked up yet, then the answer."""
    done = [m for m in request["messages"] if m["role"] == "tool"]
    if len(done) < len(CITIES):
        return {"content": None, "tool_calls": [tool_call(CITIES[len(done)])]}
    return "Paris is sunny, Rome is rainy."


@pytest.fixture()
def upstream() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(reply=reply, tokenization="chat_template") as server:
        yield server


@pytest.fixture()
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore(thread_safe=True)


@pytest.fixture()
async def proxy(store: InMemoryLightningStore, upstream: MockOpenAIServer) -> AsyncIterator[LLMProxy]:
    llm_proxy = LLMProxy(
        host="127.0.0.1",
        launch_mode="thread",
        store=store,
        model_list=[
            {
                "model_name": "policy",
                "litellm_params": {"model": "hosted_vllm/upstream", "api_base": upstream.base_url},
            }
        ],
        callbacks=["return_token_ids", "logprobs", "opentelemetry"],
    )
    await llm_proxy.start()
    try:
        yield llm_proxy
    finally:
        await llm_proxy.stop()
        proxy_module._active_proxy = None


@pytest.fixture()
def tracer(store: InMemoryLightningStore) -> Iterator[OtelTracer]:
    """The agent's side: the OpenAI SDK instrumented, spans written to ``store``."""
    with instrumented_tracer(store) as otel:
        yield otel


async def run_tool_agent(client: openai.AsyncOpenAI, rewrite_history: bool = False) -> List[Any]:
    """Look up each city with the tool, then answer; with ``rewrite_history`` the agent replaces its tool-call turns
    by a plain summary before calling again (a re-templated conversation). Returns the messages of each call."""
    messages: List[Any] = [SYSTEM, USER]
    sent: List[Any] = []
    while True:
        sent.append(list(messages))
        completion = await client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])  # type: ignore[list-item]
        message = completion.choices[0].message
        if not message.tool_calls:
            return sent
        call = message.tool_calls[0]
        city = json.loads(call.function.arguments)["city"]  # type: ignore[union-attr]
        if rewrite_history:
            messages = [*messages, {"role": "assistant", "content": f"I looked up {city}."}]
        else:
            messages = [*messages, {"role": "assistant", "content": None, "tool_calls": [tool_call(city)]}]
        messages = [*messages, {"role": "tool", "tool_call_id": call.id, "content": WEATHER[city]}]


async def started_attempt(store: InMemoryLightningStore) -> Tuple[Any, str, str]:
    rollout = await store.start_rollout({"question": USER["content"]})
    return rollout, rollout.rollout_id, rollout.attempt.attempt_id


async def test_a_multi_turn_tool_agent_gives_one_sample_with_the_tool_tokens_masked(
    store: InMemoryLightningStore, proxy: LLMProxy, upstream: MockOpenAIServer, tracer: OtelTracer
) -> None:
    rollout, rid, aid = await started_attempt(store)
    base_url = proxy.as_resource().get_base_url(rid, aid)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="dummy", max_retries=0) as client:
        async with tracer.trace_context("tool-agent", rollout_id=rid, attempt_id=aid):
            await run_tool_agent(client)
            emit_reward(1.0)
    await store.update_attempt(rid, aid, status="succeeded")
    spans = list(await store.query_spans(rid, aid))
    assert (
        sum(s.name == "litellm_request" for s in spans) == sum(s.name == "openai.chat.completion" for s in spans) == 3
    )

    result = build_trajectories(spans, rollout=rollout)
    assert (result.calls, result.duplicate_spans) == (3, 3)  # each call seen by the proxy and by the agent
    assert result.counts() == {"duplicate call spans": 3}
    [sample] = result.samples

    # What the upstream answered, call by call (its requests are the prompts as the proxy forwarded them).
    requests = [r["body"] for r in upstream.requests]
    assert [r["logprobs"] for r in requests] == [1, 1, 1] and all(r["return_token_ids"] for r in requests)
    answers = [text_token_ids(render_answer(None, [tool_call(city)])) for city in CITIES]
    answers.append(text_token_ids(render_answer("Paris is sunny, Rome is rainy.")))
    tool_turns = [text_token_ids(f"<|tool|>{WEATHER[city]}<|end|><|assistant|>") for city in CITIES]
    expected_ids: List[int] = []
    expected_mask: List[int] = []
    expected_logprobs: List[float] = []
    for index, answer in enumerate(answers):
        expected_ids += answer
        expected_mask += [1] * len(answer)
        expected_logprobs += [mock_logprob(token, position) for position, token in enumerate(answer)]
        if index < len(tool_turns):
            expected_ids += tool_turns[index]
            expected_mask += [0] * len(tool_turns[index])
            expected_logprobs += [0.0] * len(tool_turns[index])
    assert bytes(sample.prompt_ids).decode() == (
        "<|system|>You look up the weather.<|end|><|user|>Weather in Paris and Rome?<|end|><|assistant|>"
    )
    assert sample.response_ids == expected_ids
    assert sample.response_mask == expected_mask  # 0 exactly on the spliced tool turns
    assert sample.response_logprobs == expected_logprobs  # the served values, aligned with the tokens
    assert bytes(t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m == 0).decode() == (
        "<|tool|>sunny<|end|><|assistant|><|tool|>rainy<|end|><|assistant|>"
    )
    # The whole sequence is the last call's prompt plus its answer: what a trainer scores in one forward pass.
    last_prompt = [s for s in spans if s.name == "litellm_request"][-1].attributes["prompt_token_ids"]
    assert sample.prompt_ids + sample.response_ids == list(last_prompt) + answers[-1]
    assert [end - start for start, end in sample.call_ranges] == [len(a) for a in answers]
    assert sample.call_rewards == [None, None, 1.0] and sample.reward == 1.0
    assert sample.input_id == input_group_id({"question": USER["content"]}) and sample.policy_version is None

    # The transition level: one sample per call, each prompt as served.
    transitions = build_trajectories(spans, level="transition").samples
    assert [t.response_ids for t in transitions] == answers
    assert all(t.response_mask == [1] * len(t.response_ids) for t in transitions)
    assert [bytes(t.prompt_ids).decode().count("<|tool|>") for t in transitions] == [0, 1, 2]

    # The export reads the same samples from the store.
    rows = [row async for row in iter_export_rows(store, "trajectories", ExportSelection(rollout_id_in=[rid]))]
    assert [(row["response_ids"], row["response_mask"], row["response_logprobs"]) for row in rows] == [
        (sample.response_ids, sample.response_mask, sample.response_logprobs)
    ]
    assert rows[0]["status"] == "succeeded" and rows[0]["level"] == "trajectory" and rows[0]["sample"] == 0


async def test_a_re_templated_conversation_is_a_mismatch_not_merged(
    store: InMemoryLightningStore, proxy: LLMProxy, caplog: pytest.LogCaptureFixture
) -> None:
    rollout, rid, aid = await started_attempt(store)
    async with openai.AsyncOpenAI(
        base_url=proxy.as_resource().get_base_url(rid, aid), api_key="dummy", max_retries=0
    ) as client:
        await run_tool_agent(client, rewrite_history=True)
    spans = list(await store.query_spans(rid, aid))
    with caplog.at_level(logging.WARNING, logger="rollouthub.adapter.trajectory"):
        result = build_trajectories(spans, rollout=rollout)
    assert result.calls == 3 and len(result.samples) == 3  # every call rewrote what came before it
    prompts = [
        list(s.attributes["prompt_token_ids"])
        for s in sorted(spans, key=lambda s: s.sequence_id)
        if s.name == "litellm_request"
    ]
    assert [s.prompt_ids for s in result.samples] == prompts
    first_prompt = prompts[0]
    # The second call's prompt shows "I looked up Paris." where the first call's answer (its tool call) was.
    mismatch = result.mismatches[0]
    assert (mismatch.call_index, mismatch.position) == (1, len(first_prompt))
    assert (mismatch.expected, mismatch.found) == (ord("<"), ord("I"))
    assert f"LLM call 1 (span {mismatch.span_id}) does not continue the trajectory" in caplog.text
    assert f"differ at position {len(first_prompt)} (expected 60, found 73)" in caplog.text
    assert len(result.mismatches) == 2 and result.counts() == {"prompt mismatches": 2}
