"""Child processes of the multi-host test, run inside network namespaces (``python -m tests.execution._multihost_child``).

* ``runner <store url> <worker id>``: a ``LitAgentRunner`` (OpenTelemetry tracer, spans exported over OTLP to its
  server) until SIGTERM; the agent opens two spans and emits a reward.
* ``algorithm <server A url> <server B url> <count>``: enqueue ``count`` rollouts on server A, wait for them on
  server B, read their spans back from A; print the outcome as one JSON object.

The API token comes from ``$ROLLOUTHUB_API_TOKEN``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any, Dict, List

import aiohttp

SPANS_PER_ROLLOUT = 3  # two agent spans and the reward's span
AGENT_SECONDS = 0.3


def make_agent() -> Any:
    from opentelemetry import trace

    from rollouthub.emitter import emit_reward
    from rollouthub.litagent import rollout

    async def multihost_agent(task: str, llm: Any) -> None:
        tracer = trace.get_tracer("tests.multihost")
        with tracer.start_as_current_span("plan") as span:
            span.set_attribute("task", task)
            with tracer.start_as_current_span("act"):
                # Longer than a runner's poll interval (0.2 s): while one runner works on a rollout, the other polls
                # and claims the next, so both runners get work however fast a rollout is otherwise.
                await asyncio.sleep(AGENT_SECONDS)
        emit_reward(1.5)

    return rollout(multihost_agent)


async def run_runner(url: str, worker_id: int) -> None:
    from rollouthub.execution.events import ThreadingEvent
    from rollouthub.runner import LitAgentRunner
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.tracer.otel import OtelTracer

    event = ThreadingEvent()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, event.set)
    store = LightningStoreClient(url)
    runner: Any = LitAgentRunner(OtelTracer(), poll_interval=0.2, heartbeat_interval=1.0, interval_jitter=0.0)
    runner.init(agent=make_agent())
    runner.init_worker(worker_id, store)
    try:
        await runner.iter(event=event)
    finally:
        runner.teardown_worker(worker_id)
        runner.teardown()
        await store.close()


async def run_algorithm(url_a: str, url_b: str, count: int) -> Dict[str, Any]:
    from rollouthub.store.client import LightningStoreClient

    a, b = LightningStoreClient(url_a), LightningStoreClient(url_b)
    unauthorized: List[int] = []
    async with aiohttp.ClientSession() as session:
        for url in (url_a, url_b):
            async with session.get(url + "/v1/agl/statistics") as response:  # no token
                unauthorized.append(response.status)
    try:
        from rollouthub.types import LLM

        await a.add_resources({"llm": LLM(endpoint="http://model.invalid/v1", model="multihost-model")})
        rollouts = await a.enqueue_many_rollouts([{"input": f"task-{i}"} for i in range(count)])  # type: ignore[list-item]
        ids = [r.rollout_id for r in rollouts]
        finished: Dict[str, Any] = {}
        deadline = asyncio.get_running_loop().time() + 40
        while len(finished) < count and asyncio.get_running_loop().time() < deadline:
            for rollout in await b.wait_for_rollouts(rollout_ids=[i for i in ids if i not in finished], timeout=0.1):
                finished[rollout.rollout_id] = rollout
        spans = {rid: len(await a.query_spans(rid, "latest")) for rid in finished}
        workers = sorted({w.worker_id for w in await a.query_workers()})
    finally:
        await a.close()
        await b.close()
    return {
        "statuses": sorted(r.status for r in finished.values()),
        "spans": sorted(spans.values()),
        "unauthorized": unauthorized,
        "workers": workers,
    }


def main(argv: List[str]) -> None:
    if argv[0] == "runner":
        asyncio.run(run_runner(argv[1], int(argv[2])))
    elif argv[0] == "algorithm":
        print(json.dumps(asyncio.run(run_algorithm(argv[1], argv[2], int(argv[3])))), flush=True)
    else:
        raise SystemExit(f"unknown role {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
