"""Child process of ``test_ray_interruption.py``: a ``Trainer.fit`` on the ``ray`` strategy, connected to the test's
cluster, that the test interrupts.

``python _interrupted_ray_fit_child.py <ray address> [<store url>]``: prints ``RUN <run id>`` once the algorithm runs
(the runners' actors are ``rollouthub-<run id>-runner-<i>``), then waits for rollouts that take long. With a store
URL, the run uses that ``rollouthub store`` server (``store_url``) instead of the trainer's store.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Dict

import rollouthub as agl
from rollouthub.algorithm import algo
from rollouthub.execution.ray import RayExecutionStrategy

ADDRESS = sys.argv[1]
STORE_URL = sys.argv[2] if len(sys.argv) > 2 else None


@agl.rollout
def slow_agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    time.sleep(60)
    return 1.0


strategy = RayExecutionStrategy(
    address=ADDRESS, n_runners=2, num_cpus_per_runner=0.5, graceful_timeout=2.0, store_url=STORE_URL
)


@algo
async def long_run(*, store: Any) -> None:
    await store.add_resources({"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")})
    ids = [(await store.enqueue_rollout(input={"q": str(i)})).rollout_id for i in range(4)]
    print(f"RUN {strategy.run_id}", flush=True)
    while len(await store.wait_for_rollouts(rollout_ids=ids, timeout=0)) < len(ids):  # a client only polls
        await asyncio.sleep(0.2)


if __name__ == "__main__":
    agl.Trainer(algorithm=long_run, strategy=strategy).fit(slow_agent)
