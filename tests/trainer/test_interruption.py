"""An interrupted ``Trainer.fit`` (issue 29, items 3 and 4): SIGTERM or Ctrl+C stops every runner process, cancels
the rollouts the run enqueued and no runner finished, and is re-raised (never returns as if the run had finished)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

import psutil
import pytest

from rollouthub.trainer.interruption import UNFINISHED_STATUSES
from rollouthub.utils.server_launcher import pick_free_port

CHILD = Path(__file__).with_name("_interrupted_fit_child.py")
N_RUNNERS = 2


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds (``AssertionError`` after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_fit_with_running_rollouts(
    tmp_path: Path, strategy: str = "cs"
) -> Tuple[subprocess.Popen[str], List[int], Path]:
    """Start the child fit and wait until every runner executes a rollout; returns it, its process tree, the db."""
    db, markers = tmp_path / "run.db", tmp_path / "markers"
    markers.mkdir()
    cmd = [sys.executable, str(CHILD), str(db), str(markers), str(N_RUNNERS), str(pick_free_port()), strategy]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def runners_busy() -> bool:
        assert process.poll() is None, process.communicate()[1][-3000:]
        return len(list(markers.iterdir())) >= N_RUNNERS

    wait_until(runners_busy, 60, "both runners to start a rollout")
    tree = [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
    assert len(tree) >= (N_RUNNERS if strategy == "cs" else 0), tree
    return process, tree, db


def statuses(db: Path) -> List[str]:
    """The rollout statuses in the SQLite file (opened alone: no other connection)."""
    with sqlite3.connect(db) as conn:
        return sorted(row[0] for row in conn.execute("SELECT status FROM rollouts"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "sig, code, name", [(signal.SIGTERM, 143, "Terminated"), (signal.SIGINT, 130, "KeyboardInterrupt")]
)
def test_an_interrupted_fit_stops_its_runners_and_cancels_its_rollouts(
    tmp_path: Path, sig: signal.Signals, code: int, name: str
) -> None:
    process, tree, db = start_fit_with_running_rollouts(tmp_path)
    try:
        os.kill(process.pid, sig)  # the main process alone, as `kill`, docker stop or a process manager do
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr[-3000:]
    assert stdout.strip() == f"INTERRUPTED {name}" and "FINISHED" not in stdout
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "cancelled" in stderr and "so that no later run executes them" in stderr
    wait_until(lambda: all(gone(pid) for pid in tree), 5, f"the runner processes {tree} to stop")
    found = statuses(db)
    assert found and not set(found) & set(UNFINISHED_STATUSES), found
    assert "cancelled" in found, found


@pytest.mark.timeout(120)
def test_the_shared_memory_strategy_cancels_the_rollouts_of_an_interrupted_fit_too(tmp_path: Path) -> None:
    process, _, db = start_fit_with_running_rollouts(tmp_path, "shm")
    try:
        os.kill(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143 and stdout.strip() == "INTERRUPTED Terminated", stderr[-3000:]
    found = statuses(db)
    assert "cancelled" in found and not set(found) & set(UNFINISHED_STATUSES), found


def test_cancel_new_unfinished_leaves_earlier_and_finished_rollouts_alone() -> None:
    from rollouthub.store.memory import InMemoryLightningStore
    from rollouthub.trainer.interruption import cancel_new_unfinished, unfinished_rollout_ids

    async def scenario() -> None:
        store = InMemoryLightningStore()
        earlier = await store.enqueue_rollout(input={"n": 0})
        before = await unfinished_rollout_ids(store)
        queued = await store.enqueue_rollout(input={"n": 1})
        running = await store.enqueue_rollout(input={"n": 2})
        done = await store.enqueue_rollout(input={"n": 3})
        await store.dequeue_rollout()  # `earlier` starts running
        await store.update_rollout(done.rollout_id, status="succeeded")
        await store.update_rollout(running.rollout_id, status="running")
        cancelled = await cancel_new_unfinished(store, before)
        assert sorted(cancelled) == sorted([queued.rollout_id, running.rollout_id])
        by_id = {r.rollout_id: r.status for r in (await store.query_rollouts()).items}
        assert by_id == {
            earlier.rollout_id: "preparing",
            queued.rollout_id: "cancelled",
            running.rollout_id: "cancelled",
            done.rollout_id: "succeeded",
        }

    asyncio.run(scenario())
