"""The quickstart's processes and files (issue 29, items 1-4): SIGTERM to its main process alone leaves no process
behind, exits 143 and leaves a ``.db`` that holds, alone, every rollout the store acknowledged; a port held by another
store fails the run with one line and sends it nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional, Set

import psutil
import pytest

from rollouthub.trainer.interruption import UNFINISHED_STATUSES
from rollouthub.utils.server_launcher import pick_free_port
from tests.quickstart.helpers import Running, quickstart_env, run_quickstart, wait_until

DB = "rollouthub-quickstart.db"


def _total_rollouts(store_url: str) -> Optional[int]:
    try:
        with urllib.request.urlopen(f"{store_url}/v1/agl/rollouts?limit=1", timeout=2) as response:
            return int(json.loads(response.read())["total"])
    except OSError:
        return None


def _alive(pids: Set[int]) -> Set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _store_url(run: Running) -> Optional[str]:
    line = run.line_with("store server: ")
    return line.split("store server: ", 1)[1].split()[0] if line else None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", ["3s-after-start", "mid-run", "keep-serving"])
def test_sigterm_to_the_main_process_leaves_nothing_running_and_a_complete_db(tmp_path: Path, when: str) -> None:
    args = ["--runners", "2", "--rounds", "1"] if when == "keep-serving" else ["--runners", "2"]
    if when == "keep-serving":
        args.append("--keep-serving")
    run = Running(tmp_path, *args)
    tree: Set[int] = set()

    def record_tree() -> None:
        try:
            tree.update(c.pid for c in psutil.Process(run.process.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    acknowledged = 0
    started = time.monotonic()
    if when == "3s-after-start":  # the acceptance: whatever the run is doing 3 s after the start

        def three_seconds_passed() -> bool:
            record_tree()
            return time.monotonic() - started >= 3

        wait_until(three_seconds_passed, 10, "3 s")
    else:
        ready = "serving until Ctrl+C" if when == "keep-serving" else "store server: "

        def under_way() -> bool:
            record_tree()
            assert run.process.poll() is None, run.stdout[-20:]
            url = _store_url(run)
            return bool(run.line_with(ready)) and url is not None and (_total_rollouts(url) or 0) >= 10

        wait_until(under_way, 90, "the run to be under way")
        acknowledged = _total_rollouts(_store_url(run) or "") or 0
        record_tree()
    os.kill(run.process.pid, signal.SIGTERM)
    code = run.finish(timeout=30)
    if when == "keep-serving":  # the job had finished: SIGTERM (like Ctrl+C) ends the serving
        assert code == 0 and run.stderr == "", run.stderr[-3000:]
    else:
        assert code == 143, run.stderr[-3000:]
        assert run.stderr.strip() == "Interrupted: SIGTERM stopped the run before it finished (exit 143).", run.stderr
        assert not any("Trained in" in line for line in run.stdout)
    wait_until(lambda: not _alive(tree), 5, f"the quickstart's processes {_alive(tree)} to stop")

    db = tmp_path / DB
    if not db.exists():  # stopped before the store created it: nothing was acknowledged
        assert acknowledged == 0
        return
    assert not (tmp_path / (DB + "-wal")).exists()
    (tmp_path / "copy").mkdir()
    shutil.copy(db, tmp_path / "copy" / DB)  # the file alone
    with sqlite3.connect(tmp_path / "copy" / DB) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM rollouts")]
    assert len(statuses) >= acknowledged
    assert not set(statuses) & set(UNFINISHED_STATUSES), statuses  # a later run never executes them


@pytest.mark.timeout(120)
def test_sigkill_of_the_main_process_leaves_no_process_and_a_complete_db(tmp_path: Path) -> None:
    """SIGKILL allows no clean-up in the quickstart itself: its runners and its store notice their owner is gone and
    stop -- the store the clean way, folding its write-ahead log into the ``.db``."""
    run = Running(tmp_path, "--runners", "2")
    tree: Set[int] = set()

    def under_way() -> bool:
        try:
            tree.update(c.pid for c in psutil.Process(run.process.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        assert run.process.poll() is None, run.stdout[-20:]
        url = _store_url(run)
        return url is not None and (_total_rollouts(url) or 0) >= 10

    wait_until(under_way, 90, "the run to be under way")
    acknowledged = _total_rollouts(_store_url(run) or "") or 0
    os.kill(run.process.pid, signal.SIGKILL)
    assert run.finish(timeout=30) == -signal.SIGKILL
    wait_until(lambda: not _alive(tree), 5, f"the quickstart's processes {_alive(tree)} to stop")
    assert not (tmp_path / (DB + "-wal")).exists()
    (tmp_path / "copy").mkdir()
    shutil.copy(tmp_path / DB, tmp_path / "copy" / DB)
    with sqlite3.connect(tmp_path / "copy" / DB) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0] >= acknowledged


@pytest.mark.timeout(120)
def test_ctrl_c_in_a_terminal_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """A terminal's Ctrl+C reaches the whole foreground process group (the runners too): no traceback wall, one
    line, exit 130, never "Trained in"; the run's unfinished rollouts are cancelled."""
    run = Running(tmp_path, "--runners", "2", new_session=True)

    def under_way() -> bool:
        assert run.process.poll() is None, run.stdout[-20:]
        url = _store_url(run)
        return url is not None and (_total_rollouts(url) or 0) >= 10

    wait_until(under_way, 90, "the run to be under way")
    os.killpg(run.process.pid, signal.SIGINT)
    code = run.finish(timeout=30)
    assert code == 130, run.stderr[-3000:]
    assert run.stderr == "Interrupted: Ctrl+C stopped the run before it finished (exit 130).\n"
    assert not any("Trained in" in line or "Best prompt" in line for line in run.stdout)
    with sqlite3.connect(tmp_path / DB) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM rollouts")]
    assert statuses and not set(statuses) & set(UNFINISHED_STATUSES), statuses


@pytest.mark.timeout(120)
def test_a_port_held_by_another_store_fails_with_one_line_and_sends_it_nothing(tmp_path: Path) -> None:
    port = pick_free_port()
    other_db = tmp_path / "other.db"
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", str(other_db), "--port", str(port)]
    other = subprocess.Popen(cmd, cwd=tmp_path, env=quickstart_env(), stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _total_rollouts(f"http://127.0.0.1:{port}") == 0, 60, "the other store")
        (tmp_path / "x").mkdir()
        result = run_quickstart(tmp_path, "--db", "x/port.db", "--port", str(port), "--runners", "2")
        assert _total_rollouts(f"http://127.0.0.1:{port}") == 0  # nothing went to the other store
    finally:
        other.terminate()
        other.wait(30)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("rollouthub quickstart: error: the store server could not start:")
    assert f"Cannot bind 127.0.0.1:{port}: address already in use" in result.stderr
    assert "Trained in" not in result.stdout and "Data:" not in result.stdout
    with sqlite3.connect(other_db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0] == 0
