"""Issue 17 item 5: a managed runner starts at once and relies on the client's health-probe schedule.

The reference starts the runner immediately; rollouthub used to block it (silently, up to 60 s) until the store
server answered its health check. These tests run the runner side of ``ClientServerExecutionStrategy`` (role
``runner``, in this process) against a port where a real ``rollouthub store`` process starts only later.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Dict, List, Optional

import pytest

from rollouthub import ClientServerExecutionStrategy, LightningStoreClient, LitAgent, OtelTracer, PromptTemplate
from rollouthub.runner import LitAgentRunner
from rollouthub.testing import store_process
from rollouthub.utils.server_launcher import pick_free_port

POLL_INTERVAL = 10.0
"""The runner's poll interval: a runner that slept it out after a failed dequeue would miss the bounds below."""


class _Agent(LitAgent[Dict[str, Any]]):
    def rollout(self, task: Dict[str, Any], resources: Any, rollout: Any) -> float:
        return 1.0


class _RunnerSide:
    """``strategy.execute`` (role ``runner``) in a thread; records when the runner bundle starts and its event."""

    def __init__(self, port: int) -> None:
        self.strategy = ClientServerExecutionStrategy(
            role="runner", server_host="127.0.0.1", server_port=port, n_runners=1, managed_store=True
        )
        self.started = threading.Event()
        self.event: Optional[Any] = None
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="runner-side", daemon=True)

    async def _bundle(self, store: Any, worker_id: int, event: Any) -> None:
        self.event = event
        self.started.set()
        runner: LitAgentRunner[Any] = LitAgentRunner(tracer=OtelTracer(), poll_interval=POLL_INTERVAL)
        runner.init(agent=_Agent())
        runner.init_worker(worker_id, store)
        try:
            await runner.iter(event=event)
        finally:
            runner.teardown_worker(worker_id)
            runner.teardown()

    def _run(self) -> None:
        try:
            self.strategy.execute(None, self._bundle, None)  # type: ignore[arg-type]
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.errors.append(exc)

    def stop(self, within: float) -> float:
        """Set the runner's stop event; returns how long the runner side took to finish (at most ``within``)."""
        assert self.event is not None
        begin = time.monotonic()
        self.event.set()
        self.thread.join(within)
        return time.monotonic() - begin


def _wait_until_retrying(side: _RunnerSide, caplog: pytest.LogCaptureFixture) -> None:
    """The runner started although nothing listens on the port, and its client is retrying (and says so)."""
    assert side.started.wait(10), "the runner did not start while the store server was down"
    deadline = time.monotonic() + 10
    while "is not reachable yet" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "is not reachable yet" in caplog.text


def test_runner_starts_at_once_and_claims_as_soon_as_a_late_server_is_up(caplog: pytest.LogCaptureFixture) -> None:
    port = pick_free_port()
    side = _RunnerSide(port)
    with caplog.at_level(logging.INFO, logger="rollouthub.store.client"):
        side.thread.start()
        _wait_until_retrying(side, caplog)

        with store_process(port) as url:
            up = time.monotonic()

            async def enqueue_and_wait() -> str:
                client = LightningStoreClient(url)
                try:
                    await client.update_resources("r1", {"prompt": PromptTemplate(template="t", engine="f-string")})
                    rollout = await client.enqueue_rollout({"n": 1})
                    while time.monotonic() - up < 30:
                        done = await client.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.1)
                        if done:
                            return done[0].status
                    return "not finished"
                finally:
                    await client.close()

            status = asyncio.run(enqueue_and_wait())
            elapsed = time.monotonic() - up
            assert status == "succeeded"
            # Claimed on the health-probe schedule (0.1, 0.2, 0.5 s, ...), not after sleeping out the poll interval.
            assert elapsed < POLL_INTERVAL / 2, f"the runner took {elapsed:.1f}s to claim after the server came up"
            assert side.stop(within=10) < 5
    assert not side.thread.is_alive()
    assert side.errors == []


def test_runner_waiting_for_a_server_stops_promptly(caplog: pytest.LogCaptureFixture) -> None:
    side = _RunnerSide(pick_free_port())  # no server ever starts on this port
    with caplog.at_level(logging.INFO, logger="rollouthub.store.client"):
        side.thread.start()
        _wait_until_retrying(side, caplog)
        assert side.stop(within=10) < 2.0
    assert not side.thread.is_alive()
    assert side.errors == []
