"""Child process of ``test_agentops_default_trainer``: code written for Agent Lightning v0.3, run unchanged.

``python _agentops_trainer_child.py <store url> <OpenAI base url> <n_runners>`` trains with the default tracer (no
``tracer=``) against an external store server, then prints one JSON line: the final rollout statuses and the spans
the store holds for each rollout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Dict, List

import openai

import rollouthub as agl

STORE_URL, LLM_BASE_URL, N_RUNNERS = sys.argv[1], sys.argv[2], int(sys.argv[3])
QUESTIONS = ["2 + 2?", "3 * 3?", "10 - 7?", "6 / 2?"][:N_RUNNERS]
result: Dict[str, Any] = {}


class ChatAgent(agl.LitAgent[Dict[str, str]]):
    def rollout(self, task: Dict[str, str], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        prompt = resources["prompt"].format(question=task["question"])  # type: ignore[union-attr]
        client = openai.OpenAI(base_url=LLM_BASE_URL, api_key="not-used")
        client.chat.completions.create(
            model="mock-model",
            messages=[{"role": "user", "content": prompt}],
            extra_body={"return_token_ids": True},
        )
        return 1.0


@agl.algo
async def one_round(*, store: agl.LightningStore, train_dataset: Any = None, val_dataset: Any = None) -> None:
    await store.update_resources(
        "prompts-v1", {"prompt": agl.PromptTemplate(template="Q: {question}", engine="f-string")}
    )
    rollouts = [await store.enqueue_rollout({"question": q}) for q in QUESTIONS]
    ids = [r.rollout_id for r in rollouts]
    deadline = time.monotonic() + 60
    finished: List[agl.Rollout] = []
    while time.monotonic() < deadline:
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        if len(finished) == len(ids):
            break
        await asyncio.sleep(0.1)
    result["statuses"] = {r.rollout_id: r.status for r in finished}
    result["spans"] = {rid: [s.model_dump(mode="json") for s in await store.query_spans(rid)] for rid in ids}


trainer = agl.Trainer(
    store=agl.LightningStoreClient(STORE_URL),
    n_runners=N_RUNNERS,
    algorithm=one_round,
    strategy={"type": "cs", "managed_store": False},
)
result["tracer"] = type(trainer.tracer).__name__
trainer.fit(ChatAgent())
print("RESULT " + json.dumps(result))
