"""Child process of ``test_plain_fit.py``: a plain ``Trainer.fit`` as a new user writes it.

``python _plain_fit_child.py <OpenAI base url> <n_runners> <n_rollouts>``: the default tracer, strategy and store,
the ``Baseline`` algorithm, an agent making one OpenAI call per rollout. Prints one JSON line with the rollout
statuses and the workers' last heartbeat stats.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Dict

import openai

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline

LLM_BASE_URL, N_RUNNERS, N_ROLLOUTS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


@agl.rollout
def agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    client = openai.OpenAI(base_url=LLM_BASE_URL, api_key="not-used")
    client.chat.completions.create(
        model="mock-model", messages=[{"role": "user", "content": prompt_template.format(**task)}]
    )
    return 1.0


async def summary(store: agl.LightningStore) -> Dict[str, Any]:
    return {
        "statuses": sorted(r.status for r in await store.query_rollouts()),
        "workers": {w.worker_id: w.heartbeat_stats for w in await store.query_workers()},
    }


if __name__ == "__main__":
    trainer = agl.Trainer(
        algorithm=Baseline(span_verbosity="none"),
        n_runners=N_RUNNERS,
        initial_resources={"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")},
    )
    trainer.fit(agent, train_dataset=[{"q": str(i)} for i in range(N_ROLLOUTS)])
    print("RESULT " + json.dumps(asyncio.run(summary(trainer.store))))
