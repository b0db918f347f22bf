"""No orphans (issue 29, item 3): the runner processes of the client-server strategy never outlive the process that
started them, even when it is SIGKILLed and can clean up nothing (the runners get SIGTERM on their parent's death)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.trainer.test_interruption import gone, start_fit_with_running_rollouts, wait_until


@pytest.mark.timeout(120)
def test_runners_stop_when_the_trainer_process_is_killed(tmp_path: Path) -> None:
    process, tree, _ = start_fit_with_running_rollouts(tmp_path)
    try:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        wait_until(lambda: all(gone(pid) for pid in tree), 5, f"the runner processes {tree} to stop")
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.mark.timeout(120)
def test_local_runners_never_use_another_server_that_holds_the_port(tmp_path: Path) -> None:
    """Another store already serves the strategy's port: the algorithm side cannot bind and the run fails, and its
    runners -- started first -- never claim that store's rollouts (they wait for their own server's nonce)."""
    import json
    import subprocess
    import sys
    import urllib.request

    from rollouthub.utils.server_launcher import pick_free_port
    from tests.trainer.test_interruption import CHILD

    port = pick_free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--backend", "memory", "--port", str(port)],
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1/agl"

    def get(path: str) -> dict:  # type: ignore[type-arg]
        with urllib.request.urlopen(base + path, timeout=2) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def serving() -> bool:
        try:
            return get("/health")["status"] == "ok"
        except OSError:
            return False

    try:
        wait_until(serving, 60, "the other store")
        request = urllib.request.Request(
            base + "/queues/rollouts/enqueue",
            data=b'{"rollouts": [{"input": "theirs"}]}',
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            theirs = json.loads(response.read())[0]["rollout_id"]
        (tmp_path / "markers").mkdir()
        run = subprocess.run(
            [sys.executable, str(CHILD), str(tmp_path / "run.db"), str(tmp_path / "markers"), "2", str(port)],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert run.returncode == 1 and "address already in use" in run.stderr, run.stderr[-3000:]
        assert get(f"/rollouts/{theirs}")["status"] == "queuing", run.stderr[-6000:]  # never claimed
        assert get("/workers")["items"] == []  # no runner ever talked to it
        assert not list((tmp_path / "markers").iterdir())
    finally:
        other.terminate()
        other.wait(30)
