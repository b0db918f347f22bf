"""Ctrl+C or SIGTERM in the driver of a ``ray`` run removes every runner actor of the run and leaves the cluster
running (the driver connected to an existing one); with ``store_url``, the run's unfinished rollouts are cancelled
in that store server."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest

from rollouthub.store.client import LightningStoreClient
from rollouthub.utils.server_launcher import pick_free_port

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)

CHILD = Path(__file__).with_name("_interrupted_ray_fit_child.py")


def actor_alive(ray: Any, name: str) -> bool:
    try:
        ray.get_actor(name, namespace="rollouthub")
    except ValueError:
        return False
    return True


def interrupt_child(ray: Any, sig: int, store_url: Optional[str] = None) -> Tuple[List[str], str]:
    """Run the child's fit on the test's cluster, interrupt it with ``sig`` once both runners run; returns the
    names of its runner actors and its stderr (after asserting it failed and its strategy removed them)."""
    address = ray.get_runtime_context().gcs_address
    args = [sys.executable, str(CHILD), address] + ([store_url] if store_url else [])
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the algorithm runs (or the child ends: an empty line)
        assert line.startswith("RUN "), process.communicate(timeout=60)[1][-3000:]
        names = [f"rollouthub-{line.split()[1]}-runner-{i}" for i in range(2)]
        for name in names:  # both runner actors answer: they are executing the rollouts
            ray.get(ray.get_actor(name, namespace="rollouthub").node_ip.remote(), timeout=60)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0, stderr[-3000:]  # an interrupted fit never ends as if it had finished
    assert "KeyboardInterrupt received; stopping the Ray runners" in stderr, stderr[-3000:]  # removed by the strategy
    return names, stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_driver_removes_its_actors(local_ray: Any, sig: int) -> None:
    names, _ = interrupt_child(local_ray, sig)
    deadline = time.monotonic() + 30
    while any(actor_alive(local_ray, name) for name in names):
        assert time.monotonic() < deadline, "runner actors still alive after the interrupted run"
        time.sleep(0.2)
    assert local_ray.is_initialized() and local_ray.cluster_resources().get("CPU") == 4  # the cluster is left as found


def test_interrupted_run_with_store_url_cancels_its_rollouts_in_that_store(local_ray: Any, tmp_path: Path) -> None:
    port = pick_free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--host", "127.0.0.1", "--port", str(port)]
        + ["--backend", str(tmp_path / "store.db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[1][-3000:]
            try:
                with urllib.request.urlopen(url + "/v1/agl/health", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the store server did not come up"
                time.sleep(0.1)
        _, stderr = interrupt_child(local_ray, signal.SIGINT, store_url=url)
        assert "cancelled 4 unfinished rollout(s) of this run" in stderr, stderr[-3000:]

        async def statuses() -> List[str]:
            client = LightningStoreClient(url)
            try:
                return [r.status for r in await client.query_rollouts()]
            finally:
                await client.close()

        assert asyncio.run(statuses()) == ["cancelled"] * 4  # in the server the run used, not the trainer's store
    finally:
        server.terminate()
        server.wait(timeout=30)
