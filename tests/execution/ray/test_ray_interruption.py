"""Ctrl+C or SIGTERM in the driver of a ``ray`` run removes every runner actor of the run and leaves the cluster
running (the driver connected to an existing one)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)

CHILD = Path(__file__).with_name("_interrupted_ray_fit_child.py")


def actor_alive(ray: Any, name: str) -> bool:
    try:
        ray.get_actor(name, namespace="rollouthub")
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_driver_removes_its_actors(local_ray: Any, sig: int) -> None:
    address = local_ray.get_runtime_context().gcs_address
    process = subprocess.Popen(
        [sys.executable, str(CHILD), address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the algorithm runs (or the child ends: an empty line)
        assert line.startswith("RUN "), process.communicate(timeout=60)[1][-3000:]
        names = [f"rollouthub-{line.split()[1]}-runner-{i}" for i in range(2)]
        for name in names:  # both runner actors answer: they are executing the rollouts
            local_ray.get(local_ray.get_actor(name, namespace="rollouthub").node_ip.remote(), timeout=60)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0, stderr[-3000:]  # an interrupted fit never ends as if it had finished
    assert "KeyboardInterrupt received; stopping the Ray runners" in stderr, stderr[-3000:]  # removed by the strategy
    deadline = time.monotonic() + 30
    while any(actor_alive(local_ray, name) for name in names):
        assert time.monotonic() < deadline, "runner actors still alive after the interrupted run"
        time.sleep(0.2)
    assert local_ray.is_initialized() and local_ray.cluster_resources().get("CPU") == 4  # the cluster is left as found
