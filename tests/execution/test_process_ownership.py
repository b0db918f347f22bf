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
