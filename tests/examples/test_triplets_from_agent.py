"""Acceptance (issue 5): an agent calling the mock LLM three times and emitting a reward yields exactly three triplets.

The OpenAI SDK talks for real to :class:`MockOpenAIServer`; the native OpenAI instrumentation records the calls; the
runner writes the spans into a store (in-process, and a live ``rollouthub store`` server over OTLP); the triplet
adapter turns the stored spans into triplets carrying the prompts, responses, token ids and final reward.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

import openai
import pytest

from rollouthub.adapter import TracerTraceToTriplet
from rollouthub.emitter import emit_reward, find_final_reward
from rollouthub.instrumentation import instrument_openai, uninstrument_openai
from rollouthub.litagent import rollout
from rollouthub.runner import LitAgentRunner
from rollouthub.store import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer, last_user_message, store_process, text_token_ids
from rollouthub.tracer import AgentOpsTracer, OtelTracer, Tracer, clear_active_tracer, get_active_tracer
from rollouthub.types import LLM

pytestmark = pytest.mark.timeout(120)

QUESTIONS = ["What is 2+3?", "Double it.", "Subtract 4."]
ANSWERS = {"What is 2+3?": "5", "Double it.": "10", "Subtract 4.": "6"}
FINAL_REWARD = 0.8


def mock_reply(request: Dict[str, Any]) -> str:
    """Deterministic answers keyed by the last user message."""
    return ANSWERS.get(last_user_message(request), "?")


@rollout
async def three_step_agent(task: Dict[str, Any], llm: LLM) -> None:
    """Ask three chained questions, then emit a reward (1 step of arithmetic checking)."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0)
    messages: List[Any] = [{"role": "system", "content": task["system"]}]
    answers = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        response = await client.chat.completions.create(
            model=llm.model, messages=messages, extra_body={"return_token_ids": True}
        )
        answer = response.choices[0].message.content or ""
        answers.append(answer)
        messages.append({"role": "assistant", "content": answer})
    emit_reward(FINAL_REWARD if answers[-1] == "6" else 0.0)


@pytest.fixture(scope="module")
def llm_server() -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(reply=mock_reply) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_active_tracer() -> Iterator[None]:
    while get_active_tracer() is not None:
        clear_active_tracer()
    yield


@pytest.fixture(scope="module")
def store_server_url() -> Iterator[str]:
    with store_process() as url:
        yield url


def _make_tracer(kind: str) -> Tracer:
    if kind == "agentops":
        return AgentOpsTracer()  # falls back to OtelTracer + native OpenAI instrumentation without the extra
    return OtelTracer()


async def _run_agent(store: Any, tracer_kind: str, llm_server: MockOpenAIServer) -> List[Any]:
    if tracer_kind == "otel":
        instrument_openai()
    try:
        runner = LitAgentRunner(_make_tracer(tracer_kind), heartbeat_interval=0)
        with runner.run_context(agent=three_step_agent, store=store, worker_id=0):
            result = await runner.step(
                {"system": "You are a calculator."},
                resources={"main_llm": LLM(endpoint=llm_server.base_url, model="mock-calc")},
                mode="train",
            )
    finally:
        if tracer_kind == "otel":
            uninstrument_openai()
    assert result.status == "succeeded"
    return list(await store.query_spans(result.rollout_id))


def _check_triplets(spans: List[Any]) -> None:
    assert find_final_reward(spans) == FINAL_REWARD
    triplets = TracerTraceToTriplet().adapt(spans)
    assert len(triplets) == 3
    history: List[Dict[str, str]] = [{"role": "system", "content": "You are a calculator."}]
    for index, (triplet, question) in enumerate(zip(triplets, QUESTIONS, strict=True)):
        history.append({"role": "user", "content": question})
        raw_prompt = triplet.prompt["raw_content"]
        prompt_messages = [{"role": m["role"], "content": m["content"]} for m in raw_prompt]
        assert prompt_messages == history
        expected_answer = ANSWERS[question]
        assert triplet.response["raw_content"][0]["content"] == expected_answer
        assert triplet.response["token_ids"] == text_token_ids(expected_answer)
        assert triplet.prompt["token_ids"] == text_token_ids("\n".join(m["content"] for m in history))
        assert str(triplet.metadata["response_id"]).startswith("chatcmpl-")
        assert triplet.reward == (FINAL_REWARD if index == 2 else None)
        history.append({"role": "assistant", "content": expected_answer})
    assert len({t.metadata["response_id"] for t in triplets}) == 3


@pytest.mark.parametrize("tracer_kind", ["otel", "agentops"])
async def test_three_llm_calls_become_three_triplets_in_process(tracer_kind: str, llm_server: MockOpenAIServer) -> None:
    store = InMemoryLightningStore(thread_safe=True)
    spans = await _run_agent(store, tracer_kind, llm_server)
    _check_triplets(spans)


async def test_three_llm_calls_become_three_triplets_over_otlp(
    llm_server: MockOpenAIServer, store_server_url: str
) -> None:
    from rollouthub.store.client import LightningStoreClient

    client = LightningStoreClient(store_server_url)
    try:
        spans = await _run_agent(client, "otel", llm_server)
    finally:
        await client.close()
    for span in spans:
        assert span.resource.attributes["agentlightning.rollout_id"] == span.rollout_id
    _check_triplets(spans)
