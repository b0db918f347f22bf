"""Which files make up a SQLite store (issue 29, item 2): after a clean stop of ``rollouthub store`` (SIGTERM or
SIGINT) the ``.db`` file copied alone -- without ``-wal``/``-shm`` -- holds every write the server acknowledged."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List

import pytest

from rollouthub.store.client import LightningStoreClient
from rollouthub.utils.server_launcher import pick_free_port

pytestmark = pytest.mark.timeout(120)


def _wait_healthy(process: subprocess.Popen[bytes], port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, process.communicate()[1].decode()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=0.5):
                return
        except OSError:
            assert time.monotonic() < deadline, "the store server did not answer"
            time.sleep(0.02)


async def _write(url: str, n: int) -> List[str]:
    """``n`` rollouts, an attempt and a span for each, through the HTTP client; the ids the server acknowledged."""
    from tests.store.helpers import make_span

    client = LightningStoreClient(url)
    try:
        ids = []
        for i in range(n):
            attempted = await client.start_rollout(input={"i": i})
            await client.add_span(make_span(attempted.rollout_id, attempted.attempt.attempt_id, sequence_id=1))
            await client.update_rollout(attempted.rollout_id, status="succeeded")
            ids.append(attempted.rollout_id)
        return ids
    finally:
        await client.close()


@pytest.mark.parametrize(
    "sig, n_workers", [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2)], ids=["term", "int", "term-2w"]
)
def test_the_db_file_alone_holds_every_acknowledged_write(tmp_path: Path, sig: signal.Signals, n_workers: int) -> None:
    db = tmp_path / "w.db"
    port = pick_free_port()
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", f"sqlite:///{db}", "--port", str(port)]
    cmd += ["--n-workers", str(n_workers)]
    env = {k: v for k, v in os.environ.items() if k not in ("ROLLOUTHUB_API_TOKEN", "PROMETHEUS_MULTIPROC_DIR")}
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        _wait_healthy(process, port)
        acknowledged = asyncio.run(_write(f"http://127.0.0.1:{port}", 25))
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert "Traceback" not in stderr.decode()
    assert not (tmp_path / "w.db-wal").exists() or (tmp_path / "w.db-wal").stat().st_size == 0

    alone = tmp_path / "copy"
    alone.mkdir()
    shutil.copy(db, alone / "w.db")  # what users do: copy or upload the database file
    with sqlite3.connect(alone / "w.db") as conn:
        rows = dict(conn.execute("SELECT rollout_id, status FROM rollouts").fetchall())
        spans = conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0]
    assert sorted(rows) == sorted(acknowledged)
    assert set(rows.values()) == {"succeeded"} and spans == len(acknowledged)
