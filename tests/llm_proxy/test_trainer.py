"""``Trainer(llm_proxy=...)`` end to end: the algorithm publishes the proxy, agents call it, triplets come back."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import openai
import pytest

import rollouthub as agl
from rollouthub.algorithm.utils import with_llm_proxy, with_store
from rollouthub.llm_proxy import LLMProxy
from rollouthub.store.base import LightningStore
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.threading import LightningStoreThreaded
from rollouthub.testing import MockOpenAIServer, text_token_ids
from rollouthub.utils.server_launcher import pick_free_port

from .conftest import model_list

pytestmark = pytest.mark.timeout(120)

TASKS = [{"question": "one"}, {"question": "two"}]
FAST_RUNNER = {"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.05}


@agl.rollout
def proxy_agent(task: Dict[str, Any], llm: agl.LLM) -> float:
    """Ask the proxied model; reward 1 when it echoes the question."""
    sdk = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy", max_retries=0)
    response = sdk.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
    return 1.0 if response.choices[0].message.content == f"echo: {task['question']}" else 0.0


class ProxyAlgorithm(agl.Algorithm):
    """Publish the proxy as the agents' LLM, run one rollout per task and adapt each trace."""

    def __init__(self) -> None:
        self.triplets: Dict[str, List[agl.Triplet]] = {}
        self.statuses: List[str] = []
        self.proxy_running: Optional[bool] = None
        self.store_type: Optional[type] = None

    @with_llm_proxy(required=True)
    @with_store
    async def run(  # type: ignore[override]
        self, store: LightningStore, llm_proxy: LLMProxy, train_dataset: Any = None, val_dataset: Any = None
    ) -> None:
        self.proxy_running = llm_proxy.is_running()
        self.store_type = type(llm_proxy.get_store())
        resources = await store.add_resources({"llm": llm_proxy.as_resource()})
        rollouts = [
            await store.enqueue_rollout(input=task, mode="train", resources_id=resources.resources_id)
            for task in train_dataset
        ]
        finished = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=60)
        adapter = self.get_adapter()
        for rollout in finished:
            self.statuses.append(rollout.status)
            self.triplets[rollout.input["question"]] = adapter.adapt(list(await store.query_spans(rollout.rollout_id)))


def check(algorithm: ProxyAlgorithm) -> None:
    assert algorithm.proxy_running is True and algorithm.statuses == ["succeeded", "succeeded"]
    for question, triplets in algorithm.triplets.items():
        assert len(triplets) == 1
        assert triplets[0].prompt["token_ids"] == text_token_ids(question)
        assert triplets[0].response["token_ids"] == text_token_ids(f"echo: {question}")
        assert triplets[0].reward == 1.0


def test_trainer_client_server_with_an_mp_proxy(mock_llm: MockOpenAIServer) -> None:
    algorithm = ProxyAlgorithm()
    proxy = LLMProxy(host="127.0.0.1", model_list=model_list(mock_llm))
    trainer = agl.Trainer(
        algorithm=algorithm,
        llm_proxy=proxy,
        adapter=agl.LlmProxyTraceToTriplet(),
        tracer=agl.OtelTracer(),
        runner=FAST_RUNNER,
        n_runners=1,
        port=pick_free_port(),
    )
    assert trainer.llm_proxy is proxy
    trainer.fit(proxy_agent, TASKS)
    check(algorithm)
    assert algorithm.store_type is LightningStoreServer  # the strategy's store (zero-copy): mp mode is allowed
    assert not proxy.is_running()  # with_llm_proxy stopped the proxy it started


def test_trainer_shared_memory_with_a_thread_proxy_from_a_dict(mock_llm: MockOpenAIServer) -> None:
    algorithm = ProxyAlgorithm()
    trainer = agl.Trainer(
        algorithm=algorithm,
        llm_proxy={"host": "127.0.0.1", "launch_mode": "thread", "model_list": model_list(mock_llm)},
        adapter=agl.LlmProxyTraceToTriplet(),
        tracer=agl.OtelTracer(),
        runner=FAST_RUNNER,
        strategy={"type": "shm", "main_thread": "algorithm"},
    )
    assert isinstance(trainer.llm_proxy, LLMProxy) and trainer.llm_proxy.get_store() is trainer.store
    trainer.fit(proxy_agent, TASKS)
    check(algorithm)
    assert algorithm.store_type is LightningStoreThreaded
