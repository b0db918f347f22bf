"""ClientServerExecutionStrategy: env resolution, real processes, escalation, exit codes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from typing import Any, List

import pytest

from rollouthub.execution import ClientServerExecutionStrategy
from rollouthub.execution.events import ExecutionEvent
from rollouthub.store.memory import InMemoryLightningStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_env_resolution_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    s = ClientServerExecutionStrategy()
    assert (s.role, s.server_host, s.server_port, s.managed_store) == ("both", "localhost", 4747, True)
    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    monkeypatch.setenv("AGL_SERVER_HOST", "10.0.0.1")
    monkeypatch.setenv("AGL_SERVER_PORT", "9999")
    monkeypatch.setenv("AGL_MANAGED_STORE", "false")
    s = ClientServerExecutionStrategy(n_runners=3)
    assert (s.role, s.server_host, s.server_port, s.managed_store, s.n_runners) == (
        "runner",
        "10.0.0.1",
        9999,
        False,
        3,
    )
    assert ClientServerExecutionStrategy(role="algorithm", server_port=1).server_port == 1
    monkeypatch.setenv("AGL_SERVER_PORT", "abc")
    with pytest.raises(ValueError, match="AGL_SERVER_PORT"):
        ClientServerExecutionStrategy()
    monkeypatch.delenv("AGL_SERVER_PORT")
    monkeypatch.setenv("AGL_CURRENT_ROLE", "bogus")
    with pytest.raises(ValueError):
        ClientServerExecutionStrategy()
    monkeypatch.delenv("AGL_CURRENT_ROLE")
    with pytest.raises(ValueError):
        ClientServerExecutionStrategy(main_process="runner", n_runners=2)
    with pytest.raises(ValueError):
        ClientServerExecutionStrategy(main_process="runner", role="algorithm")
    with pytest.raises(ValueError):
        ClientServerExecutionStrategy(main_process="nope")  # type: ignore[arg-type]
    assert ClientServerExecutionStrategy.alias == "cs"


# -- bundles (module level so that they can be pickled) -------------------------------------------------------------

N_ROLLOUTS = 6


async def enqueue_and_wait(store: Any, event: ExecutionEvent) -> None:
    assert type(store).__name__ == "LightningStoreServer"
    ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(N_ROLLOUTS)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0.5)
        if len(done) == len(ids):
            return
    raise TimeoutError("rollouts did not finish")


async def serve_rollouts(store: Any, worker_id: int, event: ExecutionEvent) -> None:
    assert type(store).__name__ == "LightningStoreClient"
    while not event.is_set():
        claimed = await store.dequeue_rollout(worker_id=f"Worker-{worker_id}")
        if claimed is None:
            await asyncio.sleep(0.02)
            continue
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")


async def quick_algorithm(store: Any, event: ExecutionEvent) -> None:
    await asyncio.sleep(0.2)


async def failing_runner(store: Any, worker_id: int, event: ExecutionEvent) -> None:
    raise RuntimeError("runner failed on purpose")


async def stubborn_runner(store: Any, worker_id: int, event: ExecutionEvent) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ignores the event and SIGINT; SIGTERM ends it
    while True:
        time.sleep(0.05)


def test_both_roles_with_real_server_and_runner_processes() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    strategy = ClientServerExecutionStrategy(n_runners=2, server_host="127.0.0.1", server_port=_free_port())
    strategy.execute(enqueue_and_wait, serve_rollouts, store)

    async def check() -> None:
        rollouts = await store.query_rollouts()
        assert len(rollouts) == N_ROLLOUTS and {r.status for r in rollouts} == {"succeeded"}
        attempts = [a for r in rollouts for a in await store.query_attempts(r.rollout_id)]
        assert {a.worker_id for a in attempts} <= {"Worker-0", "Worker-1"}

    asyncio.run(check())


def test_failing_runner_exit_code_raises() -> None:
    strategy = ClientServerExecutionStrategy(
        n_runners=1, server_host="127.0.0.1", server_port=_free_port(), graceful_timeout=5
    )
    with pytest.raises(RuntimeError, match="unexpected exit codes"):
        strategy.execute(quick_algorithm, failing_runner, InMemoryLightningStore(thread_safe=True))


def test_escalation_terminates_stubborn_runner() -> None:
    strategy = ClientServerExecutionStrategy(
        n_runners=1,
        server_host="127.0.0.1",
        server_port=_free_port(),
        graceful_timeout=0.3,
        terminate_timeout=2,
    )
    start = time.monotonic()
    strategy.execute(quick_algorithm, stubborn_runner, InMemoryLightningStore(thread_safe=True))  # -15 is allowed
    assert time.monotonic() - start < 10


def test_escalation_exit_code_not_allowed() -> None:
    strategy = ClientServerExecutionStrategy(
        n_runners=1,
        server_host="127.0.0.1",
        server_port=_free_port(),
        graceful_timeout=0.3,
        terminate_timeout=2,
        allowed_exit_codes=(0,),
    )
    with pytest.raises(RuntimeError, match="-15"):
        strategy.execute(quick_algorithm, stubborn_runner, InMemoryLightningStore(thread_safe=True))


def test_algorithm_role_unmanaged_uses_store_as_is() -> None:
    store = InMemoryLightningStore()
    seen: List[Any] = []

    async def algorithm(s: Any, event: ExecutionEvent) -> None:
        seen.append(s)

    async def runner(s: Any, worker_id: int, event: ExecutionEvent) -> None:  # pragma: no cover - not called
        raise AssertionError

    ClientServerExecutionStrategy(role="algorithm", managed_store=False).execute(algorithm, runner, store)
    assert seen == [store]


def test_unmanaged_log_names_the_store_used_not_the_unused_port(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 (point 8): the quickstart's log named port 4747 while its runners used the store on another port."""
    from rollouthub.store.client import LightningStoreClient

    store = LightningStoreClient("http://127.0.0.1:45123")
    caplog.set_level(logging.INFO, logger="rollouthub.execution.client_server")

    async def algorithm(s: Any, event: ExecutionEvent) -> None:
        pass

    async def runner(s: Any, worker_id: int, event: ExecutionEvent) -> None:  # pragma: no cover - not called
        raise AssertionError

    ClientServerExecutionStrategy(role="algorithm", managed_store=False).execute(algorithm, runner, store)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Executing with")]
    assert "http://127.0.0.1:45123" in line and "4747" not in line, line
    managed = repr(ClientServerExecutionStrategy(role="algorithm", server_port=4848))
    assert "server=localhost:4848" in managed


def test_runner_role_single_runner_in_process_unmanaged() -> None:
    store = InMemoryLightningStore()
    seen: List[Any] = []

    async def algorithm(s: Any, event: ExecutionEvent) -> None:  # pragma: no cover - not called
        raise AssertionError

    async def runner(s: Any, worker_id: int, event: ExecutionEvent) -> None:
        seen.append((s, worker_id, os.getpid()))

    ClientServerExecutionStrategy(role="runner", managed_store=False).execute(algorithm, runner, store)
    assert seen == [(store, 0, os.getpid())]


async def serve_until_stopped(store: Any, worker_id: int, event: ExecutionEvent) -> None:
    await serve_rollouts(store, worker_id, event)


def test_main_process_runner_stops_when_algorithm_finishes() -> None:
    """main_process="runner": the algorithm (and server) run in a child; its completion stops the local runner."""
    strategy = ClientServerExecutionStrategy(
        main_process="runner", server_host="127.0.0.1", server_port=_free_port(), graceful_timeout=5
    )
    start = time.monotonic()
    strategy.execute(enqueue_and_wait, serve_until_stopped, InMemoryLightningStore(thread_safe=True))
    assert time.monotonic() - start < 30
