"""Runners and the algorithm on other "hosts": network namespaces talking to two PostgreSQL-backed store servers
bound to a veth address with an API token -- nothing may assume loopback (advertised URLs, wake-ups, auth, OTLP).

Skipped only where network namespaces cannot be created (not root, no iproute2); CI runs it as root.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import List

import pytest

from rollouthub.testing.netns import namespaces_unavailable_reason, network_namespaces
from rollouthub.utils.server_launcher import pick_free_port
from tests.store.sql_backends import drop_pg_schema, postgres_url

ROOT = Path(__file__).resolve().parents[2]
COUNT = 8


def _start_server(backend: str, host: str, env: dict, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = pick_free_port(host)
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", backend, "--host", host, "--port", str(port)]
    proc = subprocess.Popen(cmd + ["--log-level", "WARNING"], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/v1/agl/health", timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the store server did not become healthy: " + log.read_text()[-3000:])


@pytest.mark.timeout(150)
def test_runners_and_algorithm_in_other_network_namespaces(tmp_path: Path) -> None:
    reason = namespaces_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    url = postgres_url()
    schema = f"rh_multihost_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in url else "?"
    backend = f"{url}{sep}schema={schema}&application_name=rh-multihost"
    token = uuid.uuid4().hex
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AGL_")}, "ROLLOUTHUB_API_TOKEN": token}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    procs: List[subprocess.Popen[bytes]] = []
    try:
        with network_namespaces(2) as (runner_host, algorithm_host):
            host = runner_host.gateway  # a veth address of the root namespace: the servers' only address
            servers = [_start_server(backend, host, env, tmp_path / f"server{i}.log") for i in range(2)]
            procs.extend(proc for proc, _ in servers)
            urls = [f"http://{host}:{port}" for _, port in servers]
            with socket.socket() as sock:  # not served on loopback
                assert sock.connect_ex(("127.0.0.1", servers[0][1])) != 0
            child = [sys.executable, "-m", "tests.execution._multihost_child"]
            for i, server_url in enumerate(urls):  # one runner per server
                log = (tmp_path / f"runner{i}.log").open("w")
                argv = runner_host.command([*child, "runner", server_url, str(i)])
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
            algorithm = subprocess.run(
                algorithm_host.command([*child, "algorithm", urls[0], urls[1], str(COUNT)]),
                capture_output=True,
                text=True,
                timeout=100,
                env=env,
                cwd=ROOT,
            )
            assert algorithm.returncode == 0, algorithm.stderr[-3000:]
            outcome = json.loads(algorithm.stdout.strip().splitlines()[-1])
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        import asyncio

        asyncio.run(drop_pg_schema(url, schema))
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
    assert outcome["unauthorized"] == [401, 401]
    assert outcome["statuses"] == ["succeeded"] * COUNT, logs
    assert outcome["spans"] == [3] * COUNT, logs  # OTLP exports from the runners' namespace, with the token
    assert len(outcome["workers"]) == 2  # both runner groups (one per server) claimed rollouts
