"""What a runner's heartbeats tell a reader (the dashboard): the interval, and a last heartbeat when it stops."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict

import pytest

from rollouthub.execution.events import ThreadingEvent
from rollouthub.litagent import LitAgent
from rollouthub.runner import LitAgentRunner
from rollouthub.runner.agent import STOPPED_HEARTBEAT_TIMEOUT_SECONDS
from rollouthub.store import InMemoryLightningStore
from rollouthub.tracer import OtelTracer
from rollouthub.types import PromptTemplate

pytestmark = pytest.mark.timeout(60)


class OneAgent(LitAgent[Any]):
    """Returns a reward of 1.0 for every task."""

    def training_rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        return 1.0


async def _stats(store: InMemoryLightningStore, worker_id: str) -> Dict[str, Any]:
    worker = await store.get_worker_by_id(worker_id)
    return dict(worker.heartbeat_stats or {}) if worker is not None else {}


async def _eventually(store: InMemoryLightningStore, worker_id: str, key: str, timeout: float = 10.0) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        stats = await _stats(store, worker_id)
        if key in stats:
            return stats
        assert time.monotonic() < deadline, f"no heartbeat with {key!r}: {stats}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("launch_mode", ["thread", "asyncio"])
async def test_heartbeats_carry_the_interval_and_a_last_one_says_stopped(launch_mode: Any) -> None:
    store = InMemoryLightningStore(thread_safe=True)
    await store.add_resources({"prompt": PromptTemplate(template="{q}", engine="f-string")})
    await store.enqueue_rollout(input={"q": "x"}, mode="train")
    runner = LitAgentRunner(
        OtelTracer(), poll_interval=0.05, heartbeat_interval=0.2, interval_jitter=0.0, heartbeat_launch_mode=launch_mode
    )
    event = ThreadingEvent()
    with runner.run_context(agent=OneAgent(), store=store, worker_id=3):
        task = asyncio.create_task(runner.iter(event=event))
        running = await _eventually(store, "Worker-3", "cpu_usage_pct")
        assert running["heartbeat_interval"] == 0.2
        assert "runner_state" not in running
        event.set()
        await asyncio.wait_for(task, timeout=10)
    stopped = await _stats(store, "Worker-3")
    assert stopped["runner_state"] == "stopped"
    assert stopped["heartbeat_interval"] == 0.2
    assert "cpu_usage_pct" in stopped  # the last snapshot taken stays readable


async def test_runner_with_max_rollouts_says_stopped_when_done() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    await store.add_resources({"prompt": PromptTemplate(template="{q}", engine="f-string")})
    await store.enqueue_rollout(input={"q": "x"}, mode="train")
    runner = LitAgentRunner(OtelTracer(), max_rollouts=1, poll_interval=0.05, heartbeat_interval=5.0)
    with runner.run_context(agent=OneAgent(), store=store, worker_id=0):
        await asyncio.wait_for(runner.iter(), timeout=20)
    assert (await _stats(store, "Worker-0"))["runner_state"] == "stopped"


class HangingHeartbeatStore(InMemoryLightningStore):
    """A store whose heartbeats never get an answer (a server that stopped responding)."""

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = None) -> Any:  # type: ignore[override]
        await asyncio.Event().wait()


@pytest.mark.parametrize("launch_mode", ["thread", "asyncio"])
async def test_last_heartbeat_is_bounded_in_time(launch_mode: Any, caplog: pytest.LogCaptureFixture) -> None:
    store = HangingHeartbeatStore(thread_safe=True)
    runner = LitAgentRunner(
        OtelTracer(), poll_interval=0.05, heartbeat_interval=0.2, interval_jitter=0.0, heartbeat_launch_mode=launch_mode
    )
    event = ThreadingEvent()
    event.set()  # stop at once: only the last heartbeat has to go out
    with caplog.at_level(logging.WARNING, logger="rollouthub.runner.agent"):
        with runner.run_context(agent=OneAgent(), store=store, worker_id=1):
            started = time.monotonic()
            await asyncio.wait_for(runner.iter(event=event), timeout=STOPPED_HEARTBEAT_TIMEOUT_SECONDS + 10)
            elapsed = time.monotonic() - started
    assert elapsed >= STOPPED_HEARTBEAT_TIMEOUT_SECONDS * 0.9
    assert "last heartbeat (runner stopped) timed out" in caplog.text
