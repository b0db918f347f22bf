"""``store_url``: the runners and the algorithm use an existing ``rollouthub store`` server on PostgreSQL, with a
bearer token that travels to the runner actors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any, Dict

import pytest

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline
from rollouthub.execution.ray import RayExecutionStrategy
from rollouthub.store.client import LightningStoreClient
from rollouthub.utils.server_launcher import pick_free_port
from tests.store.sql_backends import drop_pg_schema, postgres_url

from .helpers import rollouts_and_workers

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)

TOKEN = "ray-test-token"


@agl.rollout
def quick_agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    return 1.0


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            with urllib.request.urlopen(url + "/v1/agl/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the store server did not come up"
        time.sleep(0.1)


def test_runners_use_a_postgres_store_server_with_a_token(local_ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    database = postgres_url()
    schema = f"rh_ray_{uuid.uuid4().hex[:10]}"
    port = pick_free_port("0.0.0.0")
    env = dict(os.environ, ROLLOUTHUB_API_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
    sep = "&" if "?" in database else "?"
    server = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--host", "0.0.0.0", "--port", str(port)]
        + ["--backend", f"{database}{sep}schema={schema}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    node = local_ray.util.get_node_ip_address()
    url = f"http://{node}:{port}"
    try:
        wait_healthy(url, server)
        monkeypatch.setenv("ROLLOUTHUB_API_TOKEN", TOKEN)  # the driver's token: its client and the runner actors'
        strategy = RayExecutionStrategy(n_runners=2, num_cpus_per_runner=0.5, store_url=url)
        trainer = agl.Trainer(
            algorithm=Baseline(span_verbosity="none"),
            strategy=strategy,
            initial_resources={"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")},
        )
        trainer.fit(quick_agent, train_dataset=[{"q": str(i)} for i in range(10)])

        rollouts, workers = asyncio.run(rollouts_and_workers(LightningStoreClient(url, api_token=TOKEN)))
        assert len(rollouts) == 10 and {r.status for r in rollouts} == {"succeeded"}
        assert len(asyncio.run(trainer.store.query_rollouts())) == 0  # the trainer's own store is not used
        assert {w.worker_id for w in workers} == {"Worker-0", "Worker-1"}
        assert {w.heartbeat_stats.get("node") for w in workers} == {node}
        # The server does require the token (the runners sent it).
        request = urllib.request.Request(url + "/v1/agl/rollouts")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
        asyncio.run(drop_pg_schema(database, schema))
